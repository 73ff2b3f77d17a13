"""The power planner (perbench.metrics.analysis.power): variance components by the method of moments, and sizes
that reach the power they promise under the verdict's own decision rule."""

import json
from pathlib import Path

import numpy as np
import pytest

from perbench.metrics.analysis import plan_sizes
from perbench.metrics.analysis.power import Components, plan_comparison, power_separate, variance_components
from perbench.metrics.analysis.ranking import ranking
from tests.crossed import METRIC, crossed_cells, estimates


def test_variance_components_recover_the_crossed_design() -> None:
    rng = np.random.default_rng(0)
    u, p = 80, 60
    a, b = rng.normal(0, 0.3, u), rng.normal(0, 0.2, p)
    y = 0.1 + a[:, None] + b[None, :] + rng.normal(0, 0.5, (u, p))
    drop = rng.random((u, p)) < 0.2  # unbalanced: a fifth of the cells missing
    users = [f"u{i}" for i in range(u) for j in range(p) if not drop[i, j]]
    prompts = [f"p{j}" for i in range(u) for j in range(p) if not drop[i, j]]
    c = variance_components(users, prompts, y[~drop].tolist())
    assert c.crossed and c.users == u and c.prompts == p
    assert c.user == pytest.approx(0.09, rel=0.35) and c.prompt == pytest.approx(0.04, rel=0.4)
    assert c.residual == pytest.approx(0.25, rel=0.1)
    # prompts nested in users (each user's own prompts): the prompt part is residual
    nested = variance_components([f"u{i}" for i in range(40) for _ in range(5)], [f"q{k}" for k in range(200)],
                                 (np.repeat(rng.normal(0, 0.3, 40), 5) + rng.normal(0, 0.5, 200)).tolist())  # fmt: skip
    assert not nested.crossed and nested.prompt == 0.0 and nested.residual == pytest.approx(0.25, rel=0.3)


def test_power_grows_with_users_and_prompts() -> None:
    c = Components(0.005, 0.005, 0.08, 20, 15, 300, True)
    powers = [power_separate(c, 20 * s, 15 * s, 0.05, 1.96) for s in (1, 2, 4, 8)]
    assert powers == sorted(powers) and powers[0] < 0.5 < powers[-1]


def test_the_planned_size_reaches_the_promised_power() -> None:
    """From a pilot run's cells, plan the users × prompts that separate two methods at a chosen effect with 80 %
    power; then simulate runs of that size from the same truth and apply the verdict's rule: they separate the
    methods in 80 % ± 10 % of runs."""
    means = {"a": 0.58, "b": 0.5}
    rng = np.random.default_rng(1)
    pilot = estimates(crossed_cells(means, rng, users=30, prompts=20), n_boot=0)
    e = plan_comparison(pilot, METRIC, "a", "b", effect=0.08, margin=0.05, crit=None)
    assert e is not None and e["separate"] is not None
    users, prompts = e["separate"]["users"], e["separate"]["prompts"]
    separated, n = 0, 200
    for s in range(n):
        cells = crossed_cells(means, rng, users=users, prompts=prompts)
        r = ranking(estimates(cells, seed=s), METRIC, {"a": "deployable", "b": "deployable"}, 0.05)
        separated += r["decision"] == "separable" and r["order"][0] == "a"
    assert 0.7 <= separated / n <= 0.9


def test_plan_sizes_reads_effects_in_points_and_names_the_sizes() -> None:
    rng = np.random.default_rng(2)
    cells = crossed_cells({"mpu": 0.62, "pref": 0.6}, rng, 12, 10, noise_sd=0.1)
    for c in cells:
        c["value"] = float(np.clip(c["value"], 0, 1))  # a proportion: effects are in points
    got = plan_sizes(cells, effect=5, points=True)
    assert got["proportion"] and got["leader"] == "mpu" and got["margin"] == 0.05
    [p] = got["plans"]
    assert p["effect"] == pytest.approx(0.05) and p["effect_source"] == "chosen"
    assert "at an effect of +5.0 pts" in p["text"]
    bigger = plan_sizes(cells, effect=2, points=True)["plans"][0]["separate"]
    assert bigger["cells"] > (p["separate"] or {"cells": 0})["cells"]


def test_perbench_plan_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.cli import main

    rng = np.random.default_rng(3)
    cells = crossed_cells(
        {"mpu": 0.7, "pref": 0.55, "random": 0.5}, rng, 12, 10, metric="best_of_n:rubric_satisfaction"
    )
    for c in cells:
        c["value"] = float(np.clip(c["value"], 0, 1))
    run = tmp_path / "run"
    run.mkdir()
    (run / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    assert main(["plan", str(run), "--effect", "5"]) == 0
    out = capsys.readouterr().out
    assert "the plan uses best_of_n:rubric_satisfaction" in out
    assert "best_of_n:rubric_satisfaction, leader mpu (2 deployable methods)" in out  # random is a baseline
    assert "mpu − pref: observed" in out and "at an effect of +5.0 pts" in out and "random" not in out
    assert main(["plan", str(run), "--metric", "args:nope"]) == 2
    assert "has no args:nope cells" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing")]) == 2
    assert "cells.jsonl does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", str(run), "--power", "1.5"])


def test_identical_methods_have_nothing_to_plan_from() -> None:
    rng = np.random.default_rng(4)
    cells = crossed_cells({"mpu": 0.6}, rng, 8, 6)
    cells += [{**c, "method": "mpu_avg"} for c in cells]
    [p] = plan_sizes(cells)["plans"]
    assert p["constant"] and p["separate"] is None and p["equivalence"] is None
    assert p["text"] == "mpu − mpu_avg is +0.000 on every cell both cover: no variation to plan from"
