"""End to end through the CLI (``python -m perbench.cli run``, tiny random models): a population of systems with
pooled Best-of-N on every cell, and adaptive rounds for a per-cell decoder."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.api import run
from perbench.config import RunConfig
from tests.conftest import empty_cache
from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401 - the session fixture


def cli_run(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    path.write_text(yaml.safe_dump(cfg))
    done = subprocess.run(
        [sys.executable, "-m", "perbench.cli", "run", str(path)],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = Path(cfg["out_dir"]) / cfg["run_name"]
    res: dict[str, Any] = json.loads((out / "results.json").read_text())
    res["_cells"] = [json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines()]
    return res


def test_a_population_of_systems_gets_pooled_best_of_n_on_every_cell(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
) -> None:
    cfg = tiny_config(tiny_pool, tmp_path / "runs").to_dict() | {
        "methods": ["global_bt", "mpu"],
        "baselines": ["length"],
        "systems": {"train_fraction": [0.5, 1.0], "params": {"global_bt": {"l2": [0.01, 1.0]}}},
        "decoders": ["zero_shot", {"name": "best_of_n", "n": 2, "pool": 4}],
        "verdict_metric": "best_of_n:rubric_satisfaction",
        "max_new_tokens": 4,
        "bertscore": False,
        "shot_curve": [1],
        "run_name": "population",
    }
    res = cli_run(cfg, tmp_path / "population.yaml")
    labels = [
        "global_bt(l2=0.01,train_fraction=0.5)",
        "global_bt(l2=0.01)",
        "global_bt(l2=1.0,train_fraction=0.5)",
        "global_bt(l2=1.0)",
        "mpu(train_fraction=0.5)",
        "mpu",
        "length",
    ]
    members = res["systems"]["members"]
    assert list(members) == labels and list(res["upstream"]) == labels
    assert {m["family"] for m in members.values()} == {"global_bt", "mpu", "length"}
    assert members["mpu(train_fraction=0.5)"]["train_fraction"] == 0.5 and members["mpu"]["train_fraction"] == 1.0
    assert res["work"]["computed"]["fit"] == 7  # each train fraction and l2 is its own fit
    # the half-data fits see about half of the seen users' train pairs, each user keeping some
    half = res["upstream"]["mpu(train_fraction=0.5)"]["rm_accuracy"]["seen"]["n_pairs"]
    assert half == res["upstream"]["mpu"]["rm_accuracy"]["seen"]["n_pairs"]  # the same test pairs
    # Best-of-N: every system on every (user, test prompt) cell, from one pool per prompt
    bon = {c["method"]: set() for c in res["_cells"] if c["metric"] == "best_of_n:rubric_satisfaction"}
    for c in res["_cells"]:
        if c["metric"] == "best_of_n:rubric_satisfaction":
            bon[c["method"]].add((c["user"], c["prompt"]))
    users = res["benchmark"]["users_seen"] + res["benchmark"]["users_unseen"]
    prompts = {p for cells in bon.values() for _, p in cells}
    # every system and the pool's two reference lines (random pick, oracle pick) on the same cells
    assert set(bon) == {*labels, "random_pick", "oracle_pick"}
    assert all(cells == {(u, p) for u, p in bon["mpu"]} for cells in bon.values())
    assert len(bon["mpu"]) == users * len(prompts) and len(prompts) == res["benchmark"]["meta"]["prompts"]["test"]
    down = res["downstream"]
    assert all(down[f"best_of_n(n=2,pool=4)[{label}]"]["pool"]["prompts"] == len(prompts) for label in labels)
    assert res["work"]["computed"]["bon_samples"] == 4 * len(prompts)  # one pool of 4 per prompt, nothing more
    gains = Counter(c["metric"] for c in res["_cells"] if "bon_gain" in c["metric"])
    assert gains["best_of_n:bon_gain_rubric_satisfaction"] == len(labels) * users * len(prompts)
    pair = next(
        p
        for p in res["analysis"]["selection"]["pairs"]
        if p["upstream"] == "rm_acc_seen" and p["downstream"] == "best_of_n:rubric_satisfaction"
    )
    assert pair["n_systems"] == len(labels) - 1  # the deployable systems: the length baseline is a reference line
    again = cli_run(cfg, tmp_path / "population.yaml")  # a rerun computes nothing and says the same
    assert again["work"]["computed"] == {} and again["downstream"] == down


def test_adaptive_rounds_are_recorded_and_the_same_on_every_run(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = tiny_config(tiny_pool, tmp_path / "runs").to_dict() | {
        "methods": ["global_bt", "mpu"],
        "baselines": [],
        "systems": {"seed": [0, 1], "methods": ["mpu"]},
        "decoders": ["zero_shot", {"name": "args", "k": 2, "w": 1.0}],
        "guide_with": ["global_bt", "mpu", "mpu(seed=1)"],
        "adaptive": {"budget": 14, "round": 3},
        "max_test_prompts": 4,
        "max_gen_users": 4,
        "max_new_tokens": 4,
        "bertscore": False,
        "shot_curve": [1],
        "run_name": "adaptive",
    }
    res = cli_run(cfg, tmp_path / "adaptive.yaml")
    rec = res["adaptive"]["args(k=2,w=1.0)"]
    assert rec["metric"] == "args:rubric_satisfaction" and rec["budget"] == "14 generations"
    assert rec["eligible_cells"] == 16 and rec["stopped"] in ("separable", "equivalent", "budget") and rec["why"]
    rounds = rec["rounds"]
    assert rounds[0]["added"] == {f"args(k=2,w=1.0)[{m}]": 3 for m in ("global_bt", "mpu", "mpu(seed=1)")}
    assert sum(r["generations"] for r in rounds) == rec["generations"] <= 14
    for prev, r in itertools.pairwise(rounds):  # a round extends only the systems still in contention
        assert set(r["added"]) == set(prev["next"]) and r["cells"] <= 3 * r["round"]
    assert [r["stopped"] for r in rounds[:-1]] == [None] * (len(rounds) - 1) and rounds[-1]["stopped"]
    cells = Counter(c["method"] for c in res["_cells"] if c["metric"] == "args:rubric_satisfaction")
    assert dict(cells) == {label.split("[", 1)[1][:-1]: n for label, n in rec["cells"].items() if n}
    summary = rec["summary"]  # what the analysis is told
    assert (summary["rounds"], summary["stopped"], summary["budget"]) == (len(rounds), rec["stopped"], rec["budget"])
    assert summary["cells"] == len({(c["user"], c["prompt"]) for c in res["_cells"] if c["metric"].startswith("args:")})
    again = cli_run(cfg, tmp_path / "adaptive.yaml")  # rerun: nothing computed, the same rounds
    assert again["work"]["computed"] == {} and again["adaptive"] == res["adaptive"]
    # a new run directory over an empty cache decides its rounds anew: the same rounds
    monkeypatch.setenv("PERBENCH_CACHE", str(empty_cache(tmp_path / "second-cache")))
    other = run(RunConfig.from_dict(cfg | {"run_name": "adaptive-again"})).results
    assert other["work"]["computed"]["adaptive"] == len(rounds)
    assert untimed(other["adaptive"]) == untimed(res["adaptive"])


def untimed(adaptive: dict[str, Any]) -> dict[str, Any]:
    """The rounds without their wall time (the one thing a rerun measures anew)."""
    return {
        d: {**rec, "rounds": [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rec["rounds"]]}
        for d, rec in adaptive.items()
    }
