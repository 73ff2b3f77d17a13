"""The set for the best and the verdict's decision rule (perbench.metrics.analysis.best_set), by simulation with
known truth: coverage of the true best, the family-wise error of the gate against the random pick, the rate of
deploying a wrong system, and the power at the size the leader-identification plan asks for.

Each simulated run is a crossed users × prompts design put through the same two-way bootstrap the analysis draws
(users and prompts resampled independently, vectorised over replicates) and the rule's own functions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis.best_set import (
    CODES,
    Comparisons,
    critical_values,
    decide,
    gate_critical_value,
    one_sided_critical_value,
    pair_variance_ratio,
    stability,
)
from perbench.metrics.analysis.components import joint_components

LEVEL = 0.95


def simulate(
    theta: list[float], users: int, prompts: int, rng: np.random.Generator, n_boot: int = 300, null: bool = True,
    deployable: list[bool] | None = None,
) -> tuple[Comparisons, np.ndarray]:  # fmt: skip
    """One run: y[s, u, p] = θ_s + user, prompt, system × user, system × prompt and residual effects; the last
    system is the random pick when ``null``. Returns the rule's Comparisons and the cell values."""
    n = len(theta)
    y = (
        np.asarray(theta)[:, None, None]
        + 0.10 * rng.standard_normal((1, users, 1))
        + 0.10 * rng.standard_normal((1, 1, prompts))
        + 0.04 * rng.standard_normal((n, users, 1))
        + 0.04 * rng.standard_normal((n, 1, prompts))
        + 0.15 * rng.standard_normal((n, users, prompts))
    )
    point = y.mean(axis=(1, 2))
    cu = rng.multinomial(users, np.full(users, 1 / users), size=n_boot).astype(float)
    cp = rng.multinomial(prompts, np.full(prompts, 1 / prompts), size=n_boot).astype(float)
    reps = np.einsum("bu,sup,bp->bs", cu, y, cp) / (users * prompts)
    delta = point[:, None] - point[None, :]
    rd = reps[:, :, None] - reps[:, None, :]
    boot_se = rd.std(axis=0, ddof=1)
    u_lab = [f"u{u}" for u in range(users) for _ in range(prompts)]
    p_lab = [f"p{p}" for _ in range(users) for p in range(prompts)]
    ratio = pair_variance_ratio(joint_components(u_lab, p_lab, y.reshape(n, -1).T))
    lo, hi = np.quantile(rd, [(1 - (2 * LEVEL - 1)) / 2, (1 + (2 * LEVEL - 1)) / 2], axis=0)
    tost = np.stack([lo - delta, hi - delta], axis=-1)
    dep = np.array(deployable if deployable is not None else [True] * (n - 1) + [not null])
    c = Comparisons(
        [f"s{i}" for i in range(n)], dep, n - 1 if null else None, delta, rd, boot_se, boot_se * np.sqrt(ratio),
        tost, np.eye(n, dtype=bool), np.ones((n, n), dtype=bool),
    )  # fmt: skip
    return c, y


def rule(c: Comparisons, margin: float) -> tuple[str, int, np.ndarray]:
    d = critical_values(c, LEVEL)
    got = decide(c, d, gate_critical_value(c, LEVEL), margin, [i for i in range(c.n) if c.deployable[i]])
    return CODES[int(got.code[0])], int(got.pick[0]), got.members[0]


def test_one_sided_critical_value_is_the_normal_quantile_for_one_comparison_and_grows_with_k() -> None:
    z = np.random.default_rng(0).standard_normal((20000, 8))
    one = one_sided_critical_value(z[:, :1], 0.95)
    eight = one_sided_critical_value(z, 0.95)
    assert one == pytest.approx(1.645, abs=0.04)
    assert eight is not None and eight == pytest.approx(2.49, abs=0.06)  # the max of 8 independent normals
    assert one_sided_critical_value(np.full((5, 2), np.nan), 0.95) is None


@pytest.mark.parametrize("theta", [[0.5] * 6, [0.56, 0.55, 0.52, 0.5, 0.45, 0.5]])
def test_the_set_holds_the_true_best_at_least_95_percent_of_the_time(theta: list[float]) -> None:
    """Coverage of the true best (all equal: the least favourable case, every system is a true best)."""
    rng = np.random.default_rng(1)
    n, covered = 300, 0
    best = int(np.argmax(theta))
    for _ in range(n):
        c, _ = simulate(theta, 16, 10, rng)
        covered += bool(rule(c, 0.02)[2][best])
    assert covered / n >= 0.95 - 2 * np.sqrt(0.05 * 0.95 / n)


def test_the_gate_against_the_random_pick_spends_its_five_percent() -> None:
    """Under the global null (every system = the random pick) the method-of-moments gate claims a system beats
    the random pick in about 5 % of runs (≤ 5 % + MC error), more often than the bootstrap-variance gate, which
    spends about a fifth of its level."""
    rng = np.random.default_rng(2)
    n, fwer, fwer_boot = 400, 0, 0
    for _ in range(n):
        c, _ = simulate([0.5] * 7, 16, 10, rng)
        crit = gate_critical_value(c, LEVEL)
        assert crit is not None
        k = np.flatnonzero(c.deployable)
        fwer += bool((c.delta[k, -1] - crit * c.gate_se[k, -1] > 0).any())
        fwer_boot += bool((c.delta[k, -1] - crit * c.boot_se[k, -1] > 0).any())
    mc = 2 * np.sqrt(0.05 * 0.95 / n)
    assert fwer / n <= 0.05 + mc
    assert fwer / n >= 0.05 - mc and fwer > fwer_boot


@pytest.mark.parametrize(
    "theta, deployable",
    [
        ([0.53, 0.51, 0.5, 0.5, 0.45], [True, True, True, True, False]),  # the best leads by less than the margin
        ([0.53, 0.54, 0.5, 0.45, 0.45], [True, False, True, True, False]),  # a baseline (index 1) is the best
    ],
)
def test_a_wrong_system_is_deployed_at_most_5_percent_of_the_time(theta: list[float], deployable: list[bool]) -> None:
    rng = np.random.default_rng(3)
    n, wrong, margin = 300, 0, 0.03
    best = int(np.argmax(theta))
    for _ in range(n):
        c, _ = simulate(theta, 24, 12, rng, deployable=deployable)
        code, pick, _ = rule(c, margin)
        wrong += code == "separable" and pick != best
    assert wrong / n <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n)


def test_a_leader_two_margins_ahead_is_found_at_the_planned_size() -> None:
    """The leader-identification plan (perbench plan's headline) sizes a lead of 2 × margin over every other
    system from a pilot run; runs of that size with that truth deploy the leader in at least 80 % (− MC error)."""
    from perbench.metrics.analysis.estimates import Estimates
    from perbench.metrics.analysis.leader_plan import identify

    rng = np.random.default_rng(4)
    margin = 0.02
    theta0 = [0.5] * 5
    _, y = simulate(theta0, 24, 12, rng)
    names = ["s0", "s1", "s2", "s3", "random_pick"]
    cells: list[dict[str, Any]] = [
        {"group": "b|p|seed0", "method": names[s], "metric": "best_of_n:rubric_satisfaction", "user": f"u{u}",
         "prompt": f"p{p}", "value": float(y[s, u, p])}
        for s in range(5) for u in range(24) for p in range(12)
    ]  # fmt: skip
    est = Estimates(cells, None, None, "", 0, 0, LEVEL, None)
    plan = identify(est, "best_of_n:rubric_satisfaction", "s0", names[1:], margin=margin, effect=2 * margin)
    assert plan is not None and plan["size"] is not None and not plan["behind"]
    users, prompts = plan["size"]["users"], plan["size"]["prompts"]
    assert users * prompts > 24 * 12  # the pilot is too small for this lead
    theta = [0.5 + 2 * margin, 0.5, 0.5, 0.5, 0.5]
    n, found = 200, 0
    for _ in range(n):
        c, _ = simulate(theta, users, prompts, rng, n_boot=300)
        code, pick, _ = rule(c, margin)
        found += code == "separable" and pick == 0
    assert found / n >= 0.8 - 2 * np.sqrt(0.8 * 0.2 / n)


def test_stability_counts_the_outcomes_of_the_rule_on_every_replicate() -> None:
    rng = np.random.default_rng(5)
    c, _ = simulate([0.56, 0.5, 0.5, 0.45], 16, 10, rng)
    d = critical_values(c, LEVEL)
    gate = gate_critical_value(c, LEVEL)
    st: dict[str, Any] = stability(c, d, gate, 0.02, [0, 1, 2])
    outs = st["outcomes"]
    assert st["replicates"] == 300 and sum(outs.values()) == pytest.approx(1.0)  # type: ignore[union-attr]
    again = decide(c, d, gate, 0.02, [0, 1, 2], c.reps)
    assert outs.get("separable", 0.0) == pytest.approx(float(np.mean(again.code == CODES.index("separable"))))
    assert set(st["picks"]) <= {"s0", "s1", "s2"}  # type: ignore[arg-type]
    assert stability(c, d, gate, 0.02, [0], "too_little_data")["outcomes"] == {"too_little_data": 1.0}
