"""Selection (perbench.metrics.analysis.selection): systems, chance values, independence from method order."""

from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from perbench.metrics.correlation import batched_ndcg, batched_rbo, ndcg, ndcg_chance, rbo, rbo_chance

ARGS = "args:rubric_satisfaction"


def _rows(group: str, method: str, metric: str, value: float, users: int = 8, prompts: int = 6) -> list[dict[str, Any]]:
    rng = np.random.default_rng(abs(hash((group, method, metric))) % 2**32)
    return [
        {
            "group": group,
            "method": method,
            "metric": metric,
            "user": f"u{u}",
            "prompt": f"p{p}" if ":" in metric else f"q{u}_{p}",
            "value": float(np.clip(value + rng.normal(0, 0.05), 0, 1)),
        }
        for u in range(users)
        for p in range(prompts)
    ]


def _systems(group: str, spec: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    out = []
    for m, (up, down) in spec.items():
        out += _rows(group, m, "rm_acc_seen", up) + _rows(group, m, ARGS, down)
    return out


def test_chance_values_are_the_expectation_under_a_random_ranking() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=6)
    draws = np.array([rng.permutation(6) for _ in range(4000)], dtype=np.float64)
    ys = np.tile(y, (len(draws), 1))
    assert np.mean(batched_ndcg(draws, ys)) == pytest.approx(ndcg_chance(y), abs=0.01)
    assert np.mean(batched_rbo(draws, ys)) == pytest.approx(rbo_chance(6), abs=0.01)
    assert rbo_chance(2) is None and ndcg_chance([1.0, 1.0, 1.0]) is None


def test_ndcg_and_rbo_average_over_tied_orders() -> None:
    # upstream ties B and C: the mean of the two orders, whichever is listed first
    d2, d3 = 1 / np.log2(3), 1 / np.log2(4)
    want = (1 + 0.5 * (d2 + d3) / 2) / (1 + 0.5 * d2)  # gains A 1, B 0, C 0.5
    assert ndcg([2.0, 1.0, 1.0], [3.0, 1.0, 2.0]) == pytest.approx(want)
    assert ndcg([1.0, 1.0, 2.0], [2.0, 1.0, 3.0]) == pytest.approx(want)  # same systems, listed in reverse
    assert rbo([2.0, 1.0, 1.0], [3.0, 2.0, 1.0]) == pytest.approx(rbo([2.0, 1.0, 1.0], [3.0, 1.0, 2.0]))


def test_selection_does_not_depend_on_the_order_methods_are_listed() -> None:
    spec = {"mpu": (0.7, 0.6), "mpu_avg": (0.7, 0.6), "pref": (0.65, 0.65), "lore": (0.55, 0.5), "vpl": (0.5, 0.4)}
    cells = _systems("b|p|seed0", spec)
    twin = [{**c, "method": "mpu_avg"} for c in cells if c["method"] == "mpu"]  # exactly tied systems
    cells = [c for c in cells if c["method"] != "mpu_avg"] + twin
    a = analyze(cells, n_boot=60, seed=0)
    b = analyze(list(reversed(cells)), n_boot=60, seed=0)
    pa, pb = a["selection"]["pairs"][0], b["selection"]["pairs"][0]
    for k in ("kendall_tau_b", "weighted_tau", "spearman", "ndcg", "rbo"):
        assert pa[k]["value"] == pytest.approx(pb[k]["value"], abs=1e-12), k
    assert pa["ndcg"]["chance"] is not None and pa["ndcg"]["chance"] < pa["ndcg"]["value"]
    assert pa["rbo"]["chance"] == pytest.approx(rbo_chance(5))
    assert [p[0] for p in pa["points"]] == sorted(spec)
    assert a["ranking"][ARGS]["order"] == b["ranking"][ARGS]["order"]


def test_seeds_are_averaged_into_one_system_and_say_so() -> None:
    spec = {"mpu": (0.7, 0.6), "pref": (0.65, 0.65), "lore": (0.55, 0.5)}
    cells = _systems("b|p|seed0", spec) + _systems("b|p|seed1", spec) + _systems("b|q|seed0", spec)
    sel = analyze(cells, n_boot=40)["selection"]
    pair = sel["pairs"][0]
    assert pair["n_systems"] == 6  # (2 settings) × 3 methods, not (3 groups) × 3
    assert "mean over the setting's seeds" in sel["systems"] and "not one system per seed" in sel["systems"]
    one = analyze(_systems("b|p|seed0", spec), n_boot=40)["selection"]
    assert one["systems"] == "A system is a (setting, method) with both metrics."


def test_variants_of_one_method_also_count_once_across_methods() -> None:
    # three variants per family: within a family the rankings agree perfectly, across families they are reversed
    spec: dict[str, tuple[float, float]] = {}
    for i, fam in enumerate(["a", "b", "c", "d", "e"]):
        for j, frac in enumerate(["(train_fraction=0.25)", "(train_fraction=0.5)", ""]):
            spec[fam + frac] = (0.5 + 0.1 * i + 0.02 * j, 0.9 - 0.1 * i + 0.02 * j)
    res = analyze(_systems("b|p|seed0", spec), upstream=["rm_acc_seen"], downstream=[ARGS], n_boot=200)
    pair = res["selection"]["pairs"][0]
    fam = pair["across_methods"]
    assert pair["n_systems"] == 15 and fam["n_families"] == 5 and fam["families"] == ["a", "b", "c", "d", "e"]
    assert fam["kendall_tau_b"]["value"] == pytest.approx(-1.0) and fam["spearman"]["value"] == pytest.approx(-1.0)
    assert fam["kendall_tau_b"]["ci"] is not None
    assert (
        pair["kendall_tau_b"]["value"] > fam["kendall_tau_b"]["value"]
    )  # the pooled one mixes in the within-family agreement
    # four families are too few to report a coefficient over (it says why)
    four = analyze(_systems("b|p|seed0", {k: v for k, v in spec.items() if not k.startswith("e")}), n_boot=50)
    fam4 = four["selection"]["pairs"][0]["across_methods"]
    assert fam4["kendall_tau_b"]["value"] is None and "4 method families (need 5" in fam4["kendall_tau_b"]["na"]
    # one system per family: nothing to cluster, so no second version
    plain = analyze(_systems("b|p|seed0", {"a": (0.5, 0.4), "b": (0.6, 0.5), "c": (0.7, 0.6)}), n_boot=50)
    assert all(p["across_methods"] is None for p in plain["selection"]["pairs"])


def _cells_of(x: np.ndarray, y: np.ndarray) -> list[dict[str, Any]]:
    """Cells of :func:`tests.coverage.simulate`'s systems: rm_acc_seen on each user's own pairs, a downstream
    metric on users × prompts."""
    g = "synth|policy|seed0"
    out: list[dict[str, Any]] = []
    for s in range(x.shape[0]):
        for u in range(x.shape[1]):
            out += [
                {"group": g, "method": f"s{s:02d}", "metric": "rm_acc_seen", "user": f"u{u}", "prompt": f"u{u}/{j}",
                 "value": float(x[s, u, j])}
                for j in range(x.shape[2])
            ]  # fmt: skip
            out += [
                {"group": g, "method": f"s{s:02d}", "metric": "best_of_n:quality", "user": f"u{u}", "prompt": f"p{p}",
                 "value": float(y[s, u, p])}
                for p in range(y.shape[2])
            ]  # fmt: skip
    return out


def test_rank_coefficient_intervals_hold_their_coverage_in_a_double_bootstrap() -> None:
    """A seeded double bootstrap (tests/coverage.py: the full-sample τ-b is the truth; each outer resample gets the
    analysis's own bootstrap and interval). Where the estimate sits mid-way in its replicates the analysis's
    interval covers the truth ≥ 90 % of the time (the basic and bias-corrected intervals do not); where it sits
    above 80 % of them (a coefficient of noisy means, pulled toward 0 in the resamples) the percentile interval
    fails badly, the analysis's interval much less, and the entry says it is biased. bench/stat_coverage.py
    runs 24 such designs (docs/architecture.md)."""
    from tests.coverage import Design, double_bootstrap, simulate

    mid = Design(systems=18, users=12, prompts=8, spread_x=0.02, spread_y=0.05)
    x, y = simulate(mid, np.random.default_rng(2))
    c = double_bootstrap(x, y, n_outer=100, n_inner=200, seed=2)
    assert not c.flagged and c.coverage["analysis"] >= 0.9
    assert c.coverage["basic"] < 0.9 and c.coverage["bias-corrected"] < 0.9

    biased = Design(systems=18, users=12, prompts=12, spread_x=0.05, spread_y=0.05)
    x, y = simulate(biased, np.random.default_rng(18))
    c = double_bootstrap(x, y, n_outer=100, n_inner=200, seed=18)
    assert c.flagged and c.position >= 0.8
    assert c.coverage["analysis"] >= c.coverage["percentile"] + 0.2
    # the analysis on the same data: the estimate inside its interval, the entry flagged as biased
    pair = analyze(_cells_of(x, y), n_boot=500, seed=0)["selection"]["pairs"][0]
    tau = pair["kendall_tau_b"]
    assert pair["n_systems"] == 18 and tau["value"] == pytest.approx(c.value, abs=1e-9)
    assert tau["ci"][0] <= tau["value"] <= tau["ci"][1] and tau["biased"] and tau["replicate_position"] >= 0.8
    assert tau["note"].startswith("biased: the estimate is above")
