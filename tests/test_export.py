"""A fitted system carried out of a run: ``perbench export`` + ``perbench.load_rm`` score every test pair exactly as
the run did, adapt a new user, and serve as TRL's ``reward_funcs`` inside a GRPO step; the run's cells and samples
as data frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import perbench
from perbench.cli import main
from perbench.config import RunConfig
from perbench.errors import ConfigError
from perbench.report.frames import CELL_COLUMNS
from tests.fixtures_export import mpu_export, run_dir, tiny_pool  # noqa: F401 - fixtures

SYSTEMS = ["global_bt", "mpu", "mpu(train_fraction=0.5)", "pref", "length", "random"]


def _pair_scores(run_dir: Path) -> dict[str, dict[str, tuple[float, float]]]:  # noqa: F811
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "pair_score":
            out.setdefault(r["method"], {})[r["pair_id"]] = (r["score_chosen"], r["score_rejected"])
    return out


@pytest.mark.parametrize("label", SYSTEMS)
def test_export_round_trip_scores_every_test_pair_as_the_run_did(run_dir: Path, tmp_path: Path, label: str) -> None:  # noqa: F811
    from perbench.data.isolation import seal
    from perbench.runner.run import seal_all
    from perbench.runner.state import load_benchmark

    out = tmp_path / "rm"
    assert main(["export", str(run_dir), "--system", label, "--out", str(out)]) == 0
    assert not list(run_dir.glob("units.sqlite-*"))  # the run's stores closed when the export ended
    manifest = json.loads((out / "perbench_rm.json").read_text())
    assert manifest["label"] == label and (out / "state.safetensors").is_file()
    text = json.dumps(manifest) + (out / "users.json").read_text() + (out / "shots.jsonl").read_text()
    assert "rubric" not in json.loads((out / "users.json").read_text())[0]  # the answer key never leaves
    assert "answer_key" not in text
    rm = perbench.load_rm(out)
    source = load_benchmark(RunConfig.from_yaml(run_dir / "config.yaml"))
    bench = seal_all(source, {})[0]  # the run's methods saw the sealed benchmark (opaque user and pair ids)
    to_source = bench.meta["source_user_ids"]  # opaque -> source
    # outside the run, users are the source's: in the manifest, users.json and shots.jsonl alike
    assert set(rm.seen_users) == set(source.seen_users)
    assert {u["user_id"] for u in json.loads((out / "users.json").read_text())} == set(source.users)
    assert "user-" not in (out / "shots.jsonl").read_text() + json.dumps(manifest["seen_users"])
    assert "dir" not in manifest["run"] and str(run_dir) not in json.dumps(manifest)  # no path of this machine
    if manifest["adapts_from_shots"]:  # the run's unseen users come adapted (stored, not recomputed)
        assert set(manifest["adapted_users"]) == {u for u in source.unseen_users if source.fewshot(u, 1)}
        assert all(rm.known(u) for u in manifest["adapted_users"])
    # samples.jsonl records pair ids keyed apart from those methods see: map them back
    method_id = {r: m for m, r in seal(source).recorded.items()}
    expected = {method_id[k]: v for k, v in _pair_scores(run_dir)[label].items()}
    n = 0
    for seen in (True, False):  # the run scored each group of test pairs in one call: so does this
        pairs = [_as_user(p, to_source[p.user_id]) for p in bench.test_pairs(seen=seen) if p.pair_id in expected]
        assert pairs
        chosen, rejected = rm.score_pairs(pairs)
        want = np.array([expected[p.pair_id] for p in pairs])
        # φ computed again in other batches than the run's: equal up to float32 rounding
        np.testing.assert_allclose(np.stack([chosen, rejected], 1), want, rtol=1e-5, atol=1e-5)
        n += len(pairs)
    assert n == len(expected)
    # the plain API: prompts, responses, users (the source's ids)
    p = pairs[0]
    got = rm.score([p.prompt if isinstance(p.prompt, str) else [vars(m) for m in p.prompt]], [p.chosen], p.user_id)
    assert got[0] == pytest.approx(want[0, 0], rel=1e-5, abs=1e-6)


def _as_user(p: Any, user: str) -> Any:
    from dataclasses import replace

    return replace(p, user_id=user)


def test_adapt_a_new_user_and_errors(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    from perbench.runner.state import load_benchmark

    out = tmp_path / "mpu"
    assert main(["export", str(run_dir), "--system", "mpu", "--out", str(out)]) == 0
    rm = perbench.load_rm(out)
    bench = load_benchmark(RunConfig.from_yaml(run_dir / "config.yaml"))
    seen = bench.seen_users[0]
    shots = [{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected} for p in bench.select(user=seen)[:6]]
    assert not rm.known("newcomer")
    with pytest.warns(UserWarning, match="'newcomer' is unknown"):
        before = rm.score([shots[0]["prompt"]], [shots[0]["chosen"]], "newcomer")
    rm.adapt("newcomer", shots)
    assert rm.known("newcomer")
    after = rm.score([shots[0]["prompt"]], [shots[0]["chosen"]], "newcomer")
    assert after[0] != before[0]  # own parameters now, not the fallback
    with pytest.raises(ValueError, match="missing rejected"):
        rm.adapt("x", [{"prompt": "p", "chosen": "c"}])
    # unknown system: a one-line error that names the close label; a folder that is not an export is refused
    assert main(["export", str(run_dir), "--system", "mpuu", "--out", str(tmp_path / "x")]) == 2
    assert "Did you mean 'mpu'" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["export", str(run_dir), "--system", "mpu", "--out", str(tmp_path / "busy")]) == 2
    assert "holds no perbench export" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="does not exist"):
        perbench.load_rm(tmp_path / "nothing")
    # a tampered manifest: a newer format is refused, a backbone of another fingerprint too
    manifest = json.loads((out / "perbench_rm.json").read_text())
    (out / "perbench_rm.json").write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(ConfigError, match="newer than this perbench reads"):
        perbench.load_rm(out)
    (out / "perbench_rm.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="has fingerprint"):
        perbench.load_rm(out, backbone="tiny-random:1")


def test_reward_func_runs_inside_a_trl_grpo_step(run_dir: Path, mpu_export: Path, tmp_path: Path) -> None:  # noqa: F811  # noqa: F811
    """The dataset's user_id column holds the ids the report and the cells name users by: each row gets its own
    user's reward; an id the system does not know warns."""
    pytest.importorskip("trl")
    import copy

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from perbench.models.loader import load_lm

    rm = perbench.load_rm(mpu_export)
    reward = rm.reward_func()
    calls: list[tuple[list[str], list[float]]] = []

    def counted(prompts: list[Any], completions: list[Any], **kw: Any) -> list[float]:
        got = reward(prompts, completions, **kw)
        calls.append((list(kw["user_id"]), got))
        return got

    counted.__name__ = reward.__name__
    cells = perbench.read_cells(run_dir)
    users = sorted(set(cells[cells.metric == "rm_acc_seen"].user))[:2]  # the ids the report shows
    assert all(rm.known(u) for u in users)
    source = [rm.source_id(u) for u in users]  # the ids of the benchmark's own files (the export's own names)
    assert set(source) <= set(rm.seen_users)
    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"Tip number {i} for sleeping well?"}], "user_id": u}
            for i, u in enumerate(users * 2)
        ]
    )
    policy = load_lm("tiny-random:3", device="cpu")
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to="none",
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=6,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=copy.deepcopy(policy.model),
        reward_funcs=counted,
        args=args,
        train_dataset=data,
        processing_class=policy.tokenizer,
    )
    trainer.train()
    assert calls and all(u in users for u, _ in calls for u in u)
    assert all(np.isfinite(v) for _, got in calls for v in got)
    # the callable scores exactly as score() does, the user taken from the column
    direct = rm.score(["Tip?"], ["Sleep early."], users[0])
    assert reward(
        [[{"role": "user", "content": "Tip?"}]],
        [[{"role": "assistant", "content": "Sleep early."}]],
        user_id=[users[0]],
    ) == [float(direct[0])]
    # each row its own user's reward: two users, one text, two scores, each as score() gives it alone
    two = reward(["Tip?", "Tip?"], ["Sleep early.", "Sleep early."], user_id=users)
    assert two == [float(v) for v in rm.score(["Tip?"] * 2, ["Sleep early."] * 2, source)] and two[0] != two[1]
    with pytest.warns(UserWarning, match="'nobody' is unknown"):
        reward(["Tip?"], ["Sleep early."], user_id=["nobody"])
    with pytest.raises(ValueError, match="no 'user_id' column"):
        reward(["Tip?"], ["Sleep early."], persona=["a"])


def test_cells_and_samples_as_data_frames(run_dir: Path) -> None:  # noqa: F811
    cells = perbench.read_cells(run_dir)
    lines = (run_dir / "cells.jsonl").read_text().splitlines()
    assert len(cells) == len(lines)
    assert list(cells.columns) == list(CELL_COLUMNS)
    acc = cells[cells.metric == "rm_acc_seen"].groupby("method").value.mean()
    results = json.loads((run_dir / "results.json").read_text())
    assert acc["mpu"] == pytest.approx(results["upstream"]["mpu"]["rm_accuracy"]["seen"]["accuracy"])
    assert set(cells.side) == {"upstream"} and cells.role.notna().all()
    assert set(cells[cells.method == "mpu(train_fraction=0.5)"].family) == {"mpu"}
    assert cells.prompt_text.str.len().min() > 0 and set(cells.benchmark) == {"rubrics"}
    scores = perbench.read_samples(run_dir, kind="pair_score")
    assert {"method", "pair_id", "user_id", "score_chosen", "score_rejected"} <= set(scores.columns)
    ds = perbench.read_samples(run_dir, kind="pair_score", as_dataset=True)
    assert len(ds) == len(scores)
    with pytest.raises(ConfigError, match="no rows of kind 'generation'"):
        perbench.read_samples(run_dir, kind="generation")


def test_load_rm_writes_nothing_outside_the_export(
    mpu_export: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unseen users' parameters come from the folder: loading writes nothing, anywhere. Scoring loads the
    backbone (load_lm keeps its model files in the cache's models/, as every use of it does) and keeps the features
    it computes in memory: no feature or unit store is written."""
    import hashlib

    cache = tmp_path / "cache"
    monkeypatch.setenv("PERBENCH_CACHE", str(cache))

    def tree() -> dict[str, str]:
        return {
            str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(mpu_export.rglob("*")) if f.is_file()
        }

    before = tree()
    rm = perbench.load_rm(mpu_export)
    assert not cache.exists() or not any(cache.rglob("*"))
    user = rm.manifest["adapted_users"][0]
    assert rm.known(user) and np.isfinite(rm.score(["Hi?"], ["Hello."], user)).all()
    assert {p.relative_to(cache).parts[0] for p in cache.rglob("*")} <= {"models"}
    assert tree() == before


def test_a_stored_phi_is_never_replaced_by_another_forward(tiny_lm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A token request also stores φ, but not over a φ already stored: another forward (other batch-mates, another
    packing) can differ in the last float bits, and a fit or score that read the stored φ must find it again."""
    from perbench.cache import Store, pack_arrays
    from perbench.models.chat import encode_pair
    from perbench.rewards.features import FeatureExtractor

    items = [("Hi?", "Hello there, friend."), ("Hi?", "Bye now."), ("Other?", "Yes, indeed it is.")]
    ext = FeatureExtractor(tiny_lm, Store(tmp_path / "f.sqlite"), batch_size=1)
    ids, n, _ = encode_pair(tiny_lm.tokenizer, *items[0], ext.max_length)
    # what an earlier forward stored for the first text (made visibly different from any forward of this one)
    earlier = ext.last(items[:1])[0] + 0.5
    ext.store.put_many_bytes({ext._key("last", ids, n): pack_arrays(last=earlier)})
    FeatureExtractor(tiny_lm, Store(tmp_path / "f.sqlite"), batch_size=8).tokens(items)
    again = FeatureExtractor(tiny_lm, Store(tmp_path / "f.sqlite"), batch_size=8).last(items)
    np.testing.assert_array_equal(again[0], earlier)  # kept, not replaced by the token forward's φ
    fresh = FeatureExtractor(tiny_lm, Store(tmp_path / "g.sqlite"), batch_size=8)
    np.testing.assert_allclose(again[1:], fresh.last(items[1:]), atol=1e-5)  # the others: filled by it
