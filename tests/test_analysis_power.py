"""The power planner (perbench.metrics.analysis.power): variance components by the method of moments, and sizes
that reach the power they promise under the verdict's own decision rule."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import analyze, plan_sizes
from perbench.metrics.analysis.power import (
    Components,
    joint_components,
    plan_comparison,
    power_separate,
    variance_components,
    variances,
)
from perbench.metrics.analysis.ranking import ranking
from perbench.stats.bootstrap import TwoWayBootstrap
from tests.crossed import METRIC, crossed_cells, estimates

ROLES = {"a": "deployable", "b": "deployable", "c": "deployable", "random_pick": "baseline"}


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
    methods in at least 80 % − 10 % of runs (the row plans a two-sided test at the bootstrap's width, more
    conservative than the verdict's one-sided set for the best with method-of-moments standard errors)."""
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
    assert separated / n >= 0.7


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


def _plan_run(tmp_path: Path, means: dict[str, float]) -> Path:
    """A run directory with the crossed cells of ``means`` on Best-of-N rubric satisfaction (12 users × 10
    prompts, values in [0, 1])."""
    cells = crossed_cells(means, np.random.default_rng(3), 12, 10, metric="best_of_n:rubric_satisfaction")
    for c in cells:
        c["value"] = float(np.clip(c["value"], 0, 1))
    run = tmp_path / "run"
    run.mkdir()
    (run / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    return run


def test_perbench_plan_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``perbench plan RUN_DIR`` prints one table (a row per comparison, the random pick's rows one-sided) and the
    whole decision's size."""
    from perbench.cli import main

    run = _plan_run(tmp_path, {"mpu": 0.7, "pref": 0.55, "random": 0.5, "random_pick": 0.52})
    (run / "results.json").write_text(json.dumps({"analysis": {"roles": {"random_pick": "baseline"}}}))
    assert main(["plan", str(run), "--effect", "5"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "the plan uses best_of_n:rubric_satisfaction" in out
    assert "best_of_n:rubric_satisfaction, leader mpu (2 deployable methods)" in out  # random is a baseline
    assert "now 10 prompts × 12 users; sizes are prompts × users for 80% power" in out
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["comparison"])
    assert "to separate" in lines[head] and "to establish equivalence (±5 pts)" in lines[head]
    rows = {line.split("  +")[0].strip(): line for line in lines[head + 1 : head + 4]}
    assert set(rows) == {"mpu − pref", "mpu − random_pick (one-sided)", "pref − random_pick (one-sided)"}
    assert all(" × " in r or "now (" in r for r in rows.values())
    assert "random " not in out.replace("random pick", "")  # the baseline `random` is in no comparison
    assert lines[head + 4].strip().startswith("The whole decision (mpu separated from the other system; 2 systems")
    assert "at an effect of +5.0 pts on every comparison" in lines[head + 4] and "for 80% power" in lines[head + 4]
    assert "object store" not in out  # not a Ray run
    store = {"largest": "features:test", "largest_mb": 1.133, "per_node_mb": 2.3}
    results = {"analysis": {"roles": {"random_pick": "baseline"}}, "plan": {"object_store": store}}
    results["work"] = {"remote": {"result_mb": {"features:test": 1.11, "fit:mpu": 0.01}}}
    (run / "results.json").write_text(json.dumps(results))
    assert main(["plan", str(run), "--effect", "5"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  object store (Ray): estimated 1.133 MB for the largest unit result (features:test), 2.3 MB per node; "
        "measured 1.11 MB (features:test), 1.12 MB in all"
    )
    assert main(["plan", str(run), "--metric", "args:nope"]) == 2
    assert "has no args:nope cells" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing")]) == 2
    assert "missing: not a run directory (no such folder)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", str(run), "--power", "1.5"])


def test_perbench_plan_plans_the_runs_own_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The headline is leader identification, at the margin the run's verdict used (``analysis.margins``), for
    the leader ahead of every other system by ``--effect``; an effect ≤ 0 is one located CLI error (exit 2)."""
    from perbench.cli import main

    run = _plan_run(tmp_path, {"mpu": 0.7, "pref": 0.55, "length": 0.6, "random_pick": 0.52})
    analysis = {
        "roles": {"random_pick": "baseline", "length": "baseline"},
        "verdict": {"metric": "best_of_n:rubric_satisfaction"},
        "margins": {"best_of_n:rubric_satisfaction": {"value": 0.0284}},
    }
    (run / "results.json").write_text(json.dumps({"analysis": analysis, "config": {"equivalence_margin": 0.2}}))
    assert main(["plan", str(run), "--effect", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  Identifying mpu as the best on best_of_n:rubric_satisfaction (shown better than")
    assert "each of the other 3 systems and baselines" in lines[1]
    assert "at a lead of at least +5.0 pts over every other system" in lines[1]
    assert any("to establish equivalence (±2.84 pts)" in line for line in lines)  # the verdict's margin
    for bad in ("-1", "0"):
        with pytest.raises(SystemExit) as e:
            main(["plan", str(run), "--effect", bad])
        assert e.value.code == 2
        assert f"argument --effect: expected a number > 0, got '{bad}'" in capsys.readouterr().err


def test_identical_methods_have_nothing_to_plan_from() -> None:
    rng = np.random.default_rng(4)
    cells = crossed_cells({"mpu": 0.6}, rng, 8, 6)
    cells += [{**c, "method": "mpu_avg"} for c in cells]
    [p] = plan_sizes(cells)["plans"]
    assert p["constant"] and p["separate"] is None and p["equivalence"] is None
    assert p["text"] == "mpu − mpu_avg is +0.000 on every cell both cover: no variation to plan from"


@pytest.mark.parametrize(("users", "prompts", "sd"), [(32, 16, (0.0, 0.0, 1.0)), (12, 8, (0.3, 0.3, 1.0))])
def test_the_bootstrap_variance_is_the_one_the_planner_assumes(users: int, prompts: int, sd: tuple[float, ...]) -> None:
    """The two-way bootstrap's variance of a mean over U × P crossed cells, averaged over datasets, is
    k_u·σ²_u/U + k_p·σ²_p/P + k_e·σ²_e/(U·P) with k_e = k_u + k_p + k_u·k_p ≈ 2.8 at 32 × 16 (not 2, which made the
    planner promise power it did not deliver)."""
    rng = np.random.default_rng(users)
    su, sp, se = sd
    c = Components(su**2, sp**2, se**2, users, prompts, users * prompts, True)
    _, predicted = variances(c, users, prompts)
    two = su**2 / users + sp**2 / prompts + 2 * se**2 / (users * prompts)  # the former assumption
    names_u = [f"u{i}" for i in range(users) for _ in range(prompts)]
    names_p = [f"p{j}" for _ in range(users) for j in range(prompts)]
    measured = []
    for k in range(40):
        y = rng.normal(0, su, (users, 1)) + rng.normal(0, sp, (1, prompts)) + rng.normal(0, se, (users, prompts))
        _, reps = TwoWayBootstrap(names_u, names_p, n_boot=800, seed=k).means(y.ravel(), [np.arange(y.size)])
        measured.append(float(np.var(reps[:, 0], ddof=1)))
    assert np.mean(measured) == pytest.approx(predicted, rel=0.06)
    if su == 0:
        assert np.mean(measured) > 1.25 * two


def test_joint_components_give_each_comparison_and_their_covariances() -> None:
    """Two comparisons against one null share its noise: the covariance of (a − r) and (b − r) is r's own
    components, the diagonal that of each difference (and what :func:`variance_components` gives)."""
    rng = np.random.default_rng(5)
    u, p = 60, 40

    def method() -> np.ndarray:
        return rng.normal(0, 0.2, (u, 1)) + rng.normal(0, 0.1, (1, p)) + rng.normal(0, 0.3, (u, p))

    a, b, r = method(), method(), method()
    y = np.stack([(a - r).ravel(), (b - r).ravel()], axis=1)
    users = [f"u{i}" for i in range(u) for _ in range(p)]
    prompts = [f"p{j}" for _ in range(u) for j in range(p)]
    j = joint_components(users, prompts, y)
    assert j.crossed and j.users == u and j.prompts == p
    single = variance_components(users, prompts, y[:, 0].tolist())
    assert j.user[0, 0] == pytest.approx(single.user) and j.residual[0, 0] == pytest.approx(single.residual)
    assert j.residual[0, 1] == pytest.approx(0.09, rel=0.1) and j.residual[0, 0] == pytest.approx(0.18, rel=0.1)
    assert j.user[0, 1] == pytest.approx(0.04, rel=0.5) and j.prompt[0, 1] == pytest.approx(0.01, rel=0.6)
    # a comparison missing some cells: its covariances come from the cells both have
    y[:300, 1] = np.nan
    assert joint_components(users, prompts, y).residual[0, 1] == pytest.approx(0.09, rel=0.15)


def _exact_pilot(means: dict[str, float], rng: np.random.Generator, **kw: Any) -> list[dict[str, Any]]:
    """A large pilot whose observed method means are the truth exactly (each method shifted by a constant, which
    leaves every variance component as it was)."""
    cells = crossed_cells(means, rng, users=60, prompts=40, **kw)
    for m, mu in means.items():
        rows = [c for c in cells if c["method"] == m]
        shift = mu - float(np.mean([c["value"] for c in rows]))
        for c in rows:
            c["value"] += shift
    return cells


def test_leader_identification_delivers_the_power_it_plans() -> None:
    """The planner's headline sizes the verdict's own question: the set for the best shrinking to a, shown better
    than b, c and the random pick together (one-sided, simultaneous). Runs of that size simulated from the same
    truth and put through the analysis's own bootstrap and rule deploy a in 80 % ± 7 % of runs."""
    means = {"a": 0.60, "b": 0.55, "c": 0.55, "random_pick": 0.50}
    kw: dict[str, Any] = {"noise_sd": 0.1, "method_user_sd": 0.01, "method_prompt_sd": 0.01}
    rng = np.random.default_rng(0)
    got = plan_sizes(_exact_pilot(means, rng, **kw), roles=ROLES, equivalence_margin=0)
    d = got["decision"]
    assert d["question"] == "leader identification" and d["comparisons"] == 3 and d["limited_by"]["b"] in "bc"
    size = d["size"]
    assert size is not None and d["text"].startswith("Identifying a as the best")
    decided, n = 0, 200
    for s in range(n):
        cells = crossed_cells(means, rng, users=size["users"], prompts=size["prompts"], **kw)
        r = ranking(estimates(cells, n_boot=300, seed=s), METRIC, ROLES, 0.0)
        decided += r["decision"] == "separable" and r["best"] == "a"
    assert 0.73 <= decided / n <= 0.87
    # the per-comparison rows' whole decision is kept beside it
    assert got["whole_decision"]["comparisons"] == {"leader": 2, "random_pick": 3}


def test_equivalence_decides_what_no_separation_can() -> None:
    """Two systems equal in truth: no size separates them, but showing them equivalent within the margin decides the
    comparison; without a margin the whole decision is out of reach, and the sentence says so."""
    means = {"a": 0.60, "b": 0.60, "random_pick": 0.50}
    rng = np.random.default_rng(2)
    cells = _exact_pilot(means, rng, noise_sd=0.1, method_user_sd=0.01, method_prompt_sd=0.01)
    with_margin = plan_sizes(cells, roles={**ROLES, "b": "deployable"}, equivalence_margin=0.05)["whole_decision"]
    assert with_margin["size"] is not None
    assert with_margin["tests"][0]["succeeds_by"] == "separation or equivalence"
    none = plan_sizes(cells, roles=ROLES, equivalence_margin=0)["whole_decision"]
    assert none["size"] is None and "no practical size reaches 80% power" in none["text"]
    # identifying a leader among equals: no size does it at the observed differences, a chosen lead is sized
    ident = plan_sizes(cells, roles={**ROLES, "b": "deployable"}, equivalence_margin=0.05)["decision"]
    assert ident["size"] is None and "scores at or above" in ident["text"] and "--effect X" in ident["text"]
    lead = plan_sizes(cells, roles={**ROLES, "b": "deployable"}, effect=0.05)["decision"]
    assert lead["size"] is not None and [t["effect"] for t in lead["tests"]] == [0.05, pytest.approx(0.1)]


def test_the_analysis_plans_each_system_against_the_random_pick() -> None:
    rng = np.random.default_rng(6)
    means = {"a": 0.72, "b": 0.60, "c": 0.47, "random_pick": 0.52}
    res = analyze(crossed_cells(means, rng, 12, 10), roles=ROLES, n_boot=200)
    rows = res["power"][METRIC]
    assert [(p["a"], p["b"], p["family"]) for p in rows] == [
        ("a", "b", "leader"), ("a", "c", "leader"),
        ("a", "random_pick", "random_pick"), ("b", "random_pick", "random_pick"), ("c", "random_pick", "random_pick"),
    ]  # fmt: skip
    c_row = rows[-1]
    assert c_row["one_sided"] and c_row["equivalence"] is None and c_row["separate"] is None
    assert c_row["text"].startswith("c is not above the random pick")
    d = res["power_decision"][METRIC]
    assert d["question"] == "leader identification" and [t["b"] for t in d["tests"]] == ["b", "c", "random_pick"]
    assert d["text"].startswith(f"Identifying a as the best on {METRIC}")
