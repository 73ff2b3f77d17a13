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
from perbench.api import run
from perbench.cli import main
from perbench.config import RunConfig
from perbench.errors import ConfigError
from perbench.report.frames import CELL_COLUMNS
from tests.test_end_to_end import tiny_pool  # noqa: F401 - the session fixture

SYSTEMS = ["global_bt", "mpu", "mpu(train_fraction=0.5)", "pref", "length", "random"]


@pytest.fixture(scope="module")
def run_dir(tiny_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("export-run")
    cfg = RunConfig.from_dict(
        {
            "benchmark": {"name": "rubrics", "pool": str(tiny_pool)},
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "methods": ["global_bt", "mpu", "pref"],
            "systems": {"train_fraction": [0.5, 1.0]},
            "decoders": [],
            "bootstrap": 20,
            "shot_curve": [1],
            "out_dir": str(out),
            "device": "cpu",
        }
    )
    return run(cfg).run_dir


def _pair_scores(run_dir: Path) -> dict[str, dict[str, tuple[float, float]]]:
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "pair_score":
            out.setdefault(r["method"], {})[r["pair_id"]] = (r["score_chosen"], r["score_rejected"])
    return out


@pytest.mark.parametrize("label", SYSTEMS)
def test_export_round_trip_scores_every_test_pair_as_the_run_did(run_dir: Path, tmp_path: Path, label: str) -> None:
    from perbench.data.isolation import seal
    from perbench.runner.run import seal_all
    from perbench.runner.state import load_benchmark

    out = tmp_path / "rm"
    assert main(["export", str(run_dir), "--system", label, "--out", str(out)]) == 0
    manifest = json.loads((out / "perbench_rm.json").read_text())
    assert manifest["label"] == label and (out / "state.safetensors").is_file()
    text = json.dumps(manifest) + (out / "users.json").read_text() + (out / "shots.jsonl").read_text()
    assert "rubric" not in json.loads((out / "users.json").read_text())[0]  # the answer key never leaves
    assert "answer_key" not in text
    rm = perbench.load_rm(out)
    source = load_benchmark(RunConfig.from_yaml(run_dir / "config.yaml"))
    bench = seal_all(source, {})[0]  # the run's methods saw the sealed benchmark (opaque user and pair ids)
    # samples.jsonl records pair ids keyed apart from those methods see: map them back
    method_id = {r: m for m, r in seal(source).recorded.items()}
    expected = {method_id[k]: v for k, v in _pair_scores(run_dir)[label].items()}
    n = 0
    for seen in (True, False):  # the run scored each group of test pairs in one call: so does this
        pairs = [p for p in bench.test_pairs(seen=seen) if p.pair_id in expected]
        assert pairs
        chosen, rejected = rm.score_pairs(pairs)
        want = np.array([expected[p.pair_id] for p in pairs])
        np.testing.assert_array_equal(np.stack([chosen, rejected], 1), want)
        n += len(pairs)
    assert n == len(expected)
    # the plain API: prompts, responses, users (one row alone: equal up to float32 rounding of another batch)
    p = pairs[0]
    got = rm.score([p.prompt if isinstance(p.prompt, str) else [vars(m) for m in p.prompt]], [p.chosen], p.user_id)
    assert got[0] == pytest.approx(want[0, 0], rel=1e-5, abs=1e-6)
    # a deployment names its users as its own data does: the source id scores as the run's opaque one
    by_source = bench.meta["source_user_ids"]  # opaque -> source
    assert set(rm.seen_users) == set(source.seen_users)
    got_source = rm.score([p.prompt if isinstance(p.prompt, str) else [vars(m) for m in p.prompt]], [p.chosen],
                          by_source[p.user_id])  # fmt: skip
    assert got_source[0] == got[0]


def test_adapt_a_new_user_and_errors(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.runner.state import load_benchmark

    out = tmp_path / "mpu"
    assert main(["export", str(run_dir), "--system", "mpu", "--out", str(out)]) == 0
    rm = perbench.load_rm(out)
    bench = load_benchmark(RunConfig.from_yaml(run_dir / "config.yaml"))
    seen = bench.seen_users[0]
    shots = [{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected} for p in bench.select(user=seen)[:6]]
    assert not rm.known("newcomer")
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


def test_reward_func_runs_inside_a_trl_grpo_step(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    import copy

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from perbench.models.loader import load_lm

    out = tmp_path / "mpu"
    assert main(["export", str(run_dir), "--system", "mpu", "--out", str(out)]) == 0
    rm = perbench.load_rm(out)
    reward = rm.reward_func()
    calls: list[tuple[list[str], list[float]]] = []

    def counted(prompts: list[Any], completions: list[Any], **kw: Any) -> list[float]:
        got = reward(prompts, completions, **kw)
        calls.append((list(kw["user_id"]), got))
        return got

    counted.__name__ = reward.__name__
    users = rm.seen_users[:2]
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
    with pytest.raises(ValueError, match="no 'user_id' column"):
        reward(["Tip?"], ["Sleep early."], persona=["a"])


def test_cells_and_samples_as_data_frames(run_dir: Path) -> None:
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
