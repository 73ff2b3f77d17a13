"""Ranking and decision (perbench.metrics.analysis.ranking): simultaneous intervals, equivalence, exact ties,
reference lines. The simulations are seeded and take a few seconds each."""

from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from perbench.metrics.analysis.base import order_by_value
from perbench.metrics.analysis.ranking import ranking, simultaneous, tost_level
from tests.crossed import METRIC, crossed_cells, estimates

ARGS = "args:rubric_satisfaction"


def _deployable(*names: str) -> dict[str, str]:
    return {m: "deployable" for m in names}


def test_the_set_for_the_best_holds_the_true_best_at_the_stated_level() -> None:
    """Through the whole analysis (two-way bootstrap, method-of-moments standard errors): the true best is in
    the set for the best in at least 93 % of simulated runs (stated level 95 %), and the leader's lower bounds
    hold for the true best's family."""
    rng = np.random.default_rng(0)
    means = {"m0": 0.6, "m1": 0.58, "m2": 0.5, "m3": 0.45}
    covered, n = 0, 150
    for s in range(n):
        r = ranking(estimates(crossed_cells(means, rng), seed=s), METRIC, _deployable(*means), 0.05)
        covered += "m0" in r["best_set"]["members"]
        assert r["tied"] == r["best_set"]["deployable"]
    assert covered / n >= 0.93


def test_simultaneous_critical_value_exceeds_the_single_comparison_one() -> None:
    rng = np.random.default_rng(1)
    reps = [rng.normal(0, 1, 4000) for _ in range(5)]
    one, _ = simultaneous([0.0], reps[:1], 0.95)
    five, bounds = simultaneous([0.0] * 5, reps, 0.95)
    assert one == pytest.approx(1.96, abs=0.08)
    assert five is not None and one is not None and five > one + 0.3  # Bonferroni for 5 would be 2.58
    assert all(lo < 0 < hi for lo, hi in bounds)
    # a difference that never varies gets [Δ, Δ] and no critical value of its own
    crit, [(lo, hi)] = simultaneous([0.2], [np.full(100, 0.1) + np.full(100, 0.1)], 0.95)
    assert crit is None and lo == hi == 0.2


def test_no_method_is_deployed_when_all_are_equal() -> None:
    """'Deploy X' is said in at most 5 % of simulated runs where every method has the same true value."""
    from perbench.metrics.analysis.verdict import verdict

    rng = np.random.default_rng(2)
    means = {f"m{i}": 0.5 for i in range(4)}
    deployed, n = 0, 200
    for s in range(n):
        est = estimates(crossed_cells(means, rng), seed=s)
        rank = ranking(est, METRIC, _deployable(*means), 0.05)
        v, _ = verdict(est, METRIC, {METRIC: rank}, _deployable(*means), {METRIC: {"value": 0.05, "source": "test"}})
        deployed += v["text"].startswith("Deploy") or v["deploy"] is not None
    assert deployed / n <= 0.05


def test_equivalence_is_rarely_claimed_when_the_true_difference_is_the_margin() -> None:
    """Two one-sided tests: with the true difference exactly ε, 'practically equivalent' in at most 5 % of runs
    (3.5 % over 1200 runs of this design); the same design claims it in most runs when the true difference is 0,
    so the bound is not met by never claiming anything."""

    def rate(means: dict[str, float], n: int, seed: int) -> float:
        rng = np.random.default_rng(seed)
        claimed = 0
        for s in range(n):
            r = ranking(estimates(crossed_cells(means, rng, 40, 30), seed=s), METRIC, _deployable(*means), 0.05)
            claimed += r["decision"] == "equivalent"
        return claimed / n

    assert rate({"m0": 0.55, "m1": 0.5}, 400, 3) <= 0.05
    assert rate({"m0": 0.5, "m1": 0.5}, 60, 4) >= 0.5


def test_equivalence_is_established_when_the_difference_is_far_inside_the_margin() -> None:
    rng = np.random.default_rng(4)
    means = {"m0": 0.5, "m1": 0.5, "m2": 0.3}
    r = ranking(estimates(crossed_cells(means, rng, 40, 30, noise_sd=0.1)), METRIC, _deployable(*means), 0.05)
    assert r["decision"] == "equivalent" and r["best"] is None
    assert r["equivalent"] == [m for m in ("m0", "m1") if m != r["order"][0]]
    assert r["contenders"] == [] and r["tied"] == r["order"][:2] and r["best_set"]["members"] == r["order"][:2]
    c = next(c for c in r["comparisons"] if c["b"] in r["equivalent"])
    assert c["tost_ci"][0] > -0.05 and c["tost_ci"][1] < 0.05 and r["equivalence_level"] == pytest.approx(0.9)
    assert next(c for c in r["comparisons"] if c["b"] == "m2")["status"] == "excluded"
    # margin 0: never equivalent, so the near-twins stay undecided
    r0 = ranking(estimates(crossed_cells(means, rng, 40, 30, noise_sd=0.1)), METRIC, _deployable(*means), 0.0)
    assert r0["decision"] == "undecided" and r0["equivalent"] == [] and len(r0["contenders"]) == 1
    assert tost_level(0.95) == pytest.approx(0.90)


def test_an_exact_tie_is_never_broken_by_rounding_or_config_order() -> None:
    """Two methods with the same multiset of values in different cells have the same mean, computed in two
    row orders (0.6000000000000001 vs 0.6 in floats): the tie is ordered by name, whatever order they came in."""
    assert (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1  # the rounding this test is about
    assert order_by_value({"zeta": (0.1 + 0.2 + 0.3) / 3, "alpha": (0.3 + 0.2 + 0.1) / 3}) == ["alpha", "zeta"]
    g = "b|p|seed0"
    vals = [0.1, 0.2, 0.3] * 4

    def rows(method: str, shift: int) -> list[dict[str, Any]]:
        out = []
        for i in range(12):
            v = vals[(i + shift) % 12]
            out.append({"group": g, "method": method, "metric": ARGS, "user": f"u{i}", "prompt": "p0", "value": v})
        return out

    for first, second in (("zeta", "alpha"), ("alpha", "zeta")):
        cells = rows(first, 0) + rows(second, 1)
        res = analyze(cells, n_boot=100, seed=0)
        r = res["ranking"][ARGS]
        assert r["order"] == ["alpha", "zeta"]  # by name, not by float rounding or by which came first
        assert r["best"] is None and r["decision"] != "separable"
        assert (
            res["table"]["alpha"][ARGS]["value"] == res["table"]["zeta"][ARGS]["value"]
            or abs(res["table"]["alpha"][ARGS]["value"] - res["table"]["zeta"][ARGS]["value"]) < 1e-15
        )
        assert r["vs_runner_up"]["delta"] == 0.0  # exactly, not ±1e-17
        assert not res["verdict"]["text"].startswith("Deploy")


@pytest.mark.parametrize("role_of", ["registry", "explicit"])
def test_baselines_and_oracles_are_reference_lines_never_recommended(role_of: str) -> None:
    """The oracle and the length baseline score far above the RMs: the verdict must still deploy an RM (or none),
    never list them as tied, and show them as reference lines."""
    rng = np.random.default_rng(5)
    means = {"icl_judge_oracle": 0.95, "length": 0.9, "mpu": 0.6, "global_bt": 0.5}
    names = {"icl_judge_oracle": "judge_told_the_key", "length": "longest"} if role_of == "explicit" else {}
    cells = [
        {**c, "method": names.get(c["method"], c["method"])}
        for c in crossed_cells(means, rng, metric=ARGS, group="rubrics|p|seed0")
    ]
    roles = {"judge_told_the_key": "oracle", "longest": "baseline"} if role_of == "explicit" else None
    res = analyze(cells, n_boot=200, seed=0, roles=roles)
    oracle, baseline = names.get("icl_judge_oracle", "icl_judge_oracle"), names.get("length", "length")
    r = res["ranking"][ARGS]
    assert r["order"] == ["mpu", "global_bt"] and r["reference_lines"] == [oracle, baseline]
    assert res["roles"][oracle] == "oracle" and res["roles"][baseline] == "baseline"
    v = res["verdict"]
    # the baseline scores above every RM: it is in the set for the best (the oracle never is), said first
    assert v["decision"] == "baseline" and v["deploy"] is None and r["best_set"]["reference"] == [baseline]
    words = "picking the longest sample" if role_of == "registry" else f"the baseline {baseline}"
    assert v["text"].startswith(f"No reward model is shown better than {words} on {ARGS}")
    assert f"mpu − {baseline} = " in v["text"] and "95% CI [" in v["text"]
    for ref in (oracle, baseline):
        assert ref not in v["tied"] and ref not in v["contenders"] and ref not in v["equivalent"]
        assert ref not in r["tied"] and ref not in r["contenders"]
    assert f"Reference lines, never recommended: {oracle} " in v["text"] and "(oracle)" in v["text"]
    # below the RMs the baseline is a bound the pick must clear, printed with its simultaneous bound
    low = [c for c in cells if c["method"] != baseline] + [
        {**c, "value": c["value"] - 0.5} for c in cells if c["method"] == baseline
    ]
    v = analyze(low, n_boot=200, seed=0, roles=roles)["verdict"]
    assert v["deploy"] == "mpu" and v["text"].startswith("Deploy mpu")
    assert f"shown better than every baseline ({baseline}: mpu − {baseline} = " in v["text"]
    assert "simultaneous lower bound" in v["text"] and f"mpu − {baseline} = " in v["text"] and "95% CI [" in v["text"]
    # a run of reference lines only has nothing to deploy
    only = analyze([c for c in cells if c["method"] in (oracle, baseline)], n_boot=50, roles=roles)
    assert only["verdict"]["deploy"] is None and "No deployable reward model" in only["verdict"]["text"]


def test_bad_roles_and_margins_are_errors() -> None:
    rng = np.random.default_rng(6)
    cells = crossed_cells({"a": 0.5}, rng, 5, 5)
    with pytest.raises(ValueError, match="role of 'a'"):
        analyze(cells, n_boot=10, roles={"a": "champion"})
    with pytest.raises(ValueError, match="equivalence_margin"):
        analyze(cells, n_boot=10, equivalence_margin=-0.1)
