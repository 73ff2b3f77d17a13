"""Every computation of a run is a unit of its plan: the assembly pass that follows the executor only reads
(``results.json`` ``work.assembly`` is empty), for every embedded config, each shrunk to tiny random models, a
handful of prompts and its first two methods so that it runs in seconds, and for what no embedded config has
(several policies). Were any forward pass, decode, fit, score, quality check or win rate left to the
assembly, it would run there and show in ``work.assembly`` (which counts model forwards and metric evaluations
as well as store writes); a run whose executor skips the generation units
shows that it does."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from perbench.api import run
from perbench.config import RunConfig
from tests.test_end_to_end import tiny_pool  # noqa: F401 - a fixture

EMBEDDED = sorted(
    p.name.removesuffix(".yaml")
    for p in (resources.files("perbench") / "configs").iterdir()
    if p.name.endswith(".yaml")
)

#: the tiny sizes every embedded config is shrunk to (models, prompts, users, lengths, bootstrap)
TINY = {
    "policy": "tiny-random",
    "rm_backbone": "tiny-random",
    "device": "cpu",
    "dtype": "auto",
    "max_new_tokens": 6,
    "max_test_prompts": 2,
    "max_gen_users": 2,
    "max_pool_prompts": 2,
    "bootstrap": 20,
    "shots": 2,
    "shot_curve": [1, 2],
}
#: what each decoder, method and rl: parameter becomes (the rest is kept)
DECODER_PARAMS = {"n": 2, "pool": 4, "k": 2}
METHOD_PARAMS = {"steps": 1, "model": "tiny-random"}
#: decoders of the tests beyond the embedded configs
SMALL = ["zero_shot", {"name": "args", "k": 2, "w": 1.0}, {"name": "best_of_n", "n": 2, "pool": 4}]
RL = {
    "max_users": 1,
    "max_train_prompts": 2,
    "steps": 1,
    "batch_size": 2,
    "num_generations": 2,
    "max_new_tokens": 6,
    "norm_samples": 2,
}


def _params(component: Any, table: dict[str, Any]) -> Any:
    if isinstance(component, str):
        return component
    return {k: table.get(k, v) if k != "name" else v for k, v in component.items()}


def _method(spec: Any) -> dict[str, Any]:
    """A method with METHOD_PARAMS for those of its parameters it has (given or defaulted: steps, model)."""
    import inspect

    from perbench import registry

    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    accepted = inspect.signature(registry.reward_models.get(spec["name"]).__init__).parameters
    return {**spec, **{k: v for k, v in METHOD_PARAMS.items() if k in accepted}}


def shrunk(name: str, pool: Path, out: Path) -> RunConfig:
    """Embedded config ``name`` on tiny random models and the tiny rubric pool, its parameters shrunk."""
    data = RunConfig.from_yaml(str(resources.files("perbench") / "configs" / f"{name}.yaml")).to_dict()
    bench = {"name": "rubrics", "pool": str(pool), "max_train_prompts": 3, "max_test_prompts": 2}
    data |= TINY | {"benchmark": bench, "out_dir": str(out)}
    # the first two methods (every method's upstream is the same unit, ``upstream:M``; test_methods covers each)
    data["methods"] = [_method(m) for m in data["methods"][:2]]
    kept = {m if isinstance(m, str) else m["name"] for m in data["methods"]}
    if data.get("guide_with"):
        data["guide_with"] = [m for m in data["guide_with"] if m in kept] or None
    data["decoders"] = [_params(d, DECODER_PARAMS) for d in data["decoders"]]
    if data.get("adaptive"):
        data["adaptive"] = {**data["adaptive"], "budget": 6, "round": 2}
    if data.get("rl"):
        data["rl"] = {**data["rl"], **RL}
        if "methods" in data["rl"]:
            data["rl"]["methods"] = [m for m in data["rl"]["methods"] if m in kept]
    return RunConfig.from_dict(data)


def _check(res: dict[str, Any]) -> None:
    assert res["work"]["assembly"] == {}, res["work"]["assembly"]
    # every unit of the plan ran in this run (a fresh cache), and the assembly found each one's results
    assert res["work"]["units"]["computed"] == sum(res["plan"]["units"].values())
    assert res["work"]["units"]["found_finished"] == 0


@pytest.mark.parametrize("name", [n for n in EMBEDDED if n != "default"])  # default: the test of a changed k
def test_assembly_computes_nothing(name: str, tiny_pool: Path, tmp_path: Path, own_cache: Path) -> None:  # noqa: F811
    cfg = shrunk(name, tiny_pool, tmp_path)
    res = run(cfg).results
    _check(res)
    assert res["work"]["computed"], "the plan computed nothing"
    if cfg.decoders:
        assert res["downstream"] and res["work"]["computed"]["generate"] > 0
    if cfg.rl is not None:
        assert res["rl"] and res["work"]["computed"]["rl"] > 0
        # the units made the forwards and the metric evaluations (the assembly none: _check); a rerun of the
        # finished config makes none at all, in its units phase or its assembly
        assert res["work"]["calls"]["forwards"] > 0 and res["work"]["calls"]["rubric"] > 0
        again = run(cfg).results
        assert again["work"]["units"]["computed"] == 0 and again["work"]["computed"] == {}
        assert again["work"]["assembly"] == {} and again["work"]["calls"] == {}, again["work"]
        assert again["rl"] == res["rl"]


def test_assembly_computes_nothing_with_policies(tiny_pool: Path, tmp_path: Path, own_cache: Path) -> None:  # noqa: F811
    """Policy accuracy under a second policy and the decoders under both are units too."""
    cfg = shrunk("decoders", tiny_pool, tmp_path).override(
        policies=["tiny-random", "tiny-random:1"], methods=["global_bt"], baselines=[], decoders=SMALL
    )
    res = run(cfg).results
    _check(res)
    assert res["upstream"]["global_bt"]["policy_accuracy_by_policy"]["tiny-random:1"]
    assert res["plan"]["units"]["upstream"] == 2  # global_bt, and its policy accuracy under tiny-random:1


def test_work_left_to_the_assembly_shows(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The counter can fail: with the generation units skipped, the assembly generates, and says so."""
    from perbench.runner.work import Work

    compute = Work._compute

    def skip_generations(self: Work, unit: Any, handles: Any) -> None:
        if unit.kind != "generate":
            compute(self, unit, handles)

    monkeypatch.setattr(Work, "_compute", skip_generations)
    cfg = shrunk("decoders", tiny_pool, tmp_path).override(methods=["global_bt"], baselines=[], decoders=SMALL)
    res = run(cfg).results
    assert res["work"]["assembly"]["generate"] > 0 and res["work"]["assembly"]["quality"] > 0


def test_changing_args_k_in_the_default_config_reruns_only_args(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default config (shrunk, ARGS added), then the same with ARGS's k changed, through ``perbench run``: the
    second run is a new folder, yet only the unit holding the ARGS generations (its adaptive rounds) runs, and the work
    counters it prints name only generations, their quality, win rates and the rounds."""
    import yaml

    from perbench.cli import main

    # the default config (shrunk), with ARGS on adaptive rounds as its comment says to add it
    cfg = shrunk("default", tiny_pool, tmp_path / "runs")
    cfg = RunConfig.from_dict(
        cfg.to_dict()
        | {
            "decoders": [*(d.to_dict() for d in cfg.decoders), {"name": "args", "k": 2, "w": 1.0}],
            "guide_with": [cfg.methods[1].name],
            "adaptive": {"budget": 6, "round": 2},
        }
    )
    args = next(d for d in cfg.decoders if d.name == "args")
    changed = cfg.to_dict() | {
        "decoders": [d.to_dict() if d is not args else {**d.to_dict(), "k": 3} for d in cfg.decoders]
    }
    paths = [tmp_path / "default.yaml", tmp_path / "changed.yaml"]
    for path, data in zip(paths, [cfg.to_dict(), changed], strict=True):
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("PERBENCH_QUIET", "0")
    assert main(["run", str(paths[0])]) == 0
    first = capsys.readouterr().out
    assert main(["run", str(paths[1])]) == 0
    second = capsys.readouterr().out
    units = int(first.split("[perbench] plan: ")[1].split(" units")[0])
    assert f"plan: {units} units, {units} computed (local), 0 found finished" in first
    assert f"plan: {units} units, 1 computed (local), {units - 1} found finished" in second
    work = second.split("[perbench] work: computed ")[1].split(";")[0]
    assert {part.split()[0] for part in work.split(", ")} <= {"adaptive", "generate", "quality", "win_rate"}
    assert "generate" in work and "work outside the plan" not in first + second
    for out in (first, second):
        res = json.loads(Path(out.split("[perbench] results: ")[1].split()[0]).read_text())
        assert res["work"]["assembly"] == {}
