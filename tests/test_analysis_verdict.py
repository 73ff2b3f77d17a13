"""The verdict's wording (perbench.metrics.analysis.verdict): every sentence matches the numbers it states."""

import re
from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from tests.crossed import crossed_cells

ARGS = "args:rubric_satisfaction"
G = "rubrics|smollm2|seed0"


def _cells(method: str, users: range, value: Any, prompts: int = 8, metric: str = ARGS) -> list[dict[str, Any]]:
    """One row per (user, prompt); ``value(u, p)`` or a constant; a little prompt-level noise keeps CIs open."""
    rng = np.random.default_rng(abs(hash((method, users.start, users.stop))) % 2**32)
    out = []
    for u in users:
        for p in range(prompts):
            v = value(u, p) if callable(value) else value
            v = float(np.clip(v + rng.normal(0, 0.05), 0, 1))
            out.append({"group": G, "method": method, "metric": metric, "user": f"u{u}", "prompt": f"p{p}", "value": v})
    return out


def test_a_partial_coverage_comparison_is_worded_on_the_shared_cells() -> None:
    """B has cells for 10 of A's 20 users. By mean over its own cells B leads (55 % vs A's 50 %), but on the 80
    cells both cover A scores 70 % and separates clearly: the verdict must say so on those cells, never that
    the interval "includes 0"."""
    a = _cells("mpu", range(20), lambda u, p: 0.7 if u < 10 else 0.3)
    b = _cells("pref", range(10), 0.55)
    res = analyze(a + b, n_boot=300, seed=0)
    r = res["ranking"][ARGS]
    assert r["order"] == ["pref", "mpu"]
    c = r["vs_runner_up"]
    assert c["partial"] and c["cells"] == 80 and c["reversed"] and c["ci"][1] < 0
    text = res["verdict"]["text"]
    assert "includes 0" not in text
    assert "On the 80 cells both cover mpu scores higher" in text
    assert r["decision"] == "undecided" and r["contenders"] == ["mpu"]
    # the same shared-cell wording when the shared cells separate in the leader's favour
    sep = analyze(_cells("mpu", range(20), 0.8) + _cells("pref", range(10), 0.4), n_boot=300, seed=0)
    v = sep["verdict"]
    assert v["deploy"] == "mpu" and "on the 80 cells both cover" in v["text"] and "includes 0" not in v["text"]


def test_includes_0_only_when_the_interval_does() -> None:
    rng = np.random.default_rng(1)
    cells = crossed_cells({"mpu": 0.52, "pref": 0.5}, rng, 12, 8, metric=ARGS, group=G)
    v = analyze(cells, n_boot=300, seed=0)["verdict"]
    assert v["decision"] == "undecided"
    assert "includes 0" not in v["text"]  # the set for the best speaks of bounds, not of intervals holding 0
    m = re.search(r"mpu − pref = [+-][\d.]+, simultaneous lower bound (-?[+-]?[\d.]+)", v["text"])
    assert m is not None and float(m.group(1)) <= 0
    # the bound in the text is the one in the ranking (values outside [0, 1]: metric units, 3 decimals)
    low = analyze(cells, n_boot=300, seed=0)["ranking"][ARGS]["vs_runner_up"]["lower_simultaneous"]
    assert float(m.group(1)) == round(low, 3)


def test_undecided_verdict_names_contenders_and_the_planner_sentence() -> None:
    rng = np.random.default_rng(2)
    cells = crossed_cells({"mpu": 0.53, "pref": 0.5, "lore": 0.2}, rng, 12, 8, metric=ARGS, group=G)
    res = analyze(cells, n_boot=300, seed=0)
    v = res["verdict"]
    assert v["decision"] == "undecided" and v["contenders"] == ["pref"] and v["tied"] == ["mpu", "pref"]
    assert "The data cannot yet decide" in v["text"] and "other 1" not in v["text"]
    assert "2 systems could be the best (mpu and pref" in v["text"]
    assert "lore is out of the set (another system is shown better)" in v["text"]
    assert "Identifying mpu as the best on " in v["text"] and "each of the other 2 systems and baselines" in v["text"]
    assert " prompts × " in v["text"]
    assert v["plan"] and v["plan"][0].startswith("to tell mpu from pref")
    plans = res["power"][ARGS]
    assert [p["b"] for p in plans] == ["pref", "lore"] and plans[0]["separate"]["cells"] > 12 * 8


def test_the_verdict_never_deploys_without_resampling() -> None:
    """One method on 4 users × 2 prompts: with no bootstrap replicates, or too few users and prompts to resample
    both, the verdict is "too little data" and deploys nothing."""
    cells = [
        {"group": G, "method": "mpu", "metric": ARGS, "user": f"u{u}", "prompt": f"p{p}", "value": float(u % 2)}
        for u in range(4)
        for p in range(2)
    ]
    for n_boot in (0, 20):
        v = analyze(cells, n_boot=n_boot)["verdict"]
        assert v["decision"] == "too_little_data" and v["deploy"] is None and v["pick"] is None
        assert v["text"].startswith("Too little data to deploy") and "Deploy" not in v["text"]
    # enough users and prompts, but one method and nothing to compare it with: nothing is shown either
    many = [
        {**c, "user": f"{c['user']}-{k}", "prompt": f"{c['prompt']}-{j}"}
        for c in cells
        for k in range(3)
        for j in range(3)
    ]
    v = analyze(many, n_boot=100)["verdict"]
    assert v["decision"] == "too_little_data" and v["deploy"] is None and "nothing to be compared" not in v["text"]
    assert "no other system or baseline to be compared with" in v["text"]


def test_adaptive_rounds_say_why_collection_stopped() -> None:
    rng = np.random.default_rng(3)
    cells = crossed_cells({"mpu": 0.8, "pref": 0.5}, rng, 12, 8, metric=ARGS, group=G)
    adaptive = {ARGS: {"rounds": 3, "stopped": "budget", "cells": 96, "budget": "400 generations"}}
    v = analyze(cells, n_boot=100, adaptive=adaptive)["verdict"]
    assert v["adaptive"] == adaptive[ARGS]
    assert (
        f"Data collection for {ARGS} stopped after 3 adaptive rounds (96 cells): the budget (400 generations)"
        in (v["text"])
    )
    sep = analyze(cells, n_boot=100, adaptive={ARGS: {**adaptive[ARGS], "stopped": "separable", "rounds": 1}})
    assert "after 1 adaptive round (96 cells): the top was separable." in sep["verdict"]["text"]


def test_agrees_only_when_the_upstream_metric_puts_the_leader_alone_first() -> None:
    cells: list[dict[str, Any]] = []
    # downstream order mpu > pref > lore > vpl > pal; rm_acc_seen puts pref first, then mpu (5 systems: the fewest
    # a rank coefficient is reported over)
    sys5 = [("mpu", 0.8, 0.7), ("pref", 0.6, 0.75), ("lore", 0.4, 0.5), ("vpl", 0.2, 0.3), ("pal", 0.1, 0.2)]
    for m, down, up in sys5:
        cells += _cells(m, range(12), down)
        cells += _cells(m, range(12), up, metric="rm_acc_seen")
    v = analyze(cells, n_boot=100)["verdict"]
    assert v["upstream_metric"] == "rm_acc_seen" and v["agrees"] is False
    assert "disagrees: it puts pref first" in v["text"] and "rm_acc_seen agrees" not in v["text"]
    # a joint first place is neither agreement nor disagreement
    tied = [dict(c) for c in cells]
    for c in tied:
        if c["metric"] == "rm_acc_seen" and c["method"] in ("mpu", "pref"):
            c["value"] = 0.75
    v = analyze(tied, n_boot=100)["verdict"]
    assert v["agrees"] is None and "puts mpu and pref jointly first" in v["text"]


def test_a_proportion_at_1_never_prints_a_zero_width_ci() -> None:
    rows = [
        {"group": G, "method": m, "metric": ARGS, "user": f"u{u}", "prompt": f"p{p}", "value": v}
        for m, v in (("mpu", 1.0), ("pref", 0.0))
        for u in range(6)
        for p in range(5)
    ]
    res = analyze(rows, n_boot=100)
    v = res["verdict"]
    lo, hi = v["ci"]
    assert hi == 1.0 and lo < 1.0 and v["value"] == 1.0
    assert "Clopper" in v["ci_note"] and "30 cells" in v["ci_note"]
    assert "[100.0, 100.0]" not in v["text"] and res["table"]["mpu"][ARGS]["ci"] == v["ci"]
    assert "+100.0 pts on every cell (no variation in the resamples)" in v["text"]
    assert res["table"]["pref"][ARGS]["ci"][0] == 0.0 and res["table"]["pref"][ARGS]["ci"][1] > 0


def test_the_printed_verdict_names_the_decision_and_the_chance_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perbench.runner.summary import print_verdict

    cells: list[dict[str, Any]] = []
    for m, q in [("mpu", 0.8), ("pref", 0.6), ("lore", 0.4), ("vpl", 0.3), ("pal_b", 0.2), ("random", 0.5)]:
        cells += _cells(m, range(12), q) + _cells(m, range(12), q, metric="rm_acc_seen")
    monkeypatch.setenv("PERBENCH_QUIET", "0")
    print_verdict(analyze(cells, n_boot=100))
    out = capsys.readouterr().out
    assert "Verdict: Deploy mpu" in out
    assert f"Decision on {ARGS}: separable; deploy: mpu; reference lines: random" in out
    assert re.search(r"rm_acc_seen → args:rubric_satisfaction: NDCG 1\.00 \(chance 0\.\d\d\), RBO 1\.00", out)


def test_an_upstream_tau_outside_its_own_ci_is_noted_in_the_verdict() -> None:
    from types import SimpleNamespace

    from perbench.metrics.analysis.verdict import Verdict

    est = SimpleNamespace(
        methods_with=lambda u: ["mpu", "pref"], point_of=lambda m, u: {"mpu": 0.7, "pref": 0.6}[m], upstream=[]
    )
    roles = {"mpu": "deployable", "pref": "deployable"}
    v = Verdict(est, roles, {"value": 0.05, "source": "test"}, None, None)  # type: ignore[arg-type]
    # as the validity table carries the selection's coefficient entry: its note on a value outside the CI
    note = "the value lies outside its percentile CI: a coefficient of noisy means is biased toward 0 in the resamples"

    def valid(tau: float, note: str | None) -> dict[str, Any]:
        coef = {"value": tau, "ci": [-0.04, 0.66], "note": note}
        row = {"upstream": "rm_acc_seen", "n_systems": 2, "kendall_tau_b": coef}
        return {"by_downstream": {ARGS: {"predictors": [row]}}}

    text = " ".join(v.upstream(ARGS, "mpu", valid(0.73, note), "rm_acc_seen", {}))
    assert "τ-b +0.73, 95% CI [-0.04, +0.66]; the value lies outside its percentile CI" in text
    inside = " ".join(v.upstream(ARGS, "mpu", valid(0.5, None), "rm_acc_seen", {}))
    assert "outside" not in inside


def test_the_best_predictor_carries_its_coefficients_note_to_the_verdict() -> None:
    from types import SimpleNamespace

    from perbench.metrics.analysis.selection import _best_predictor

    note = "the value lies outside its percentile CI: a coefficient of noisy means is biased toward 0 in the resamples"
    pairs = [
        {
            "upstream": "rm_acc_seen",
            "downstream": ARGS,
            "kendall_tau_b": {"value": 0.73, "ci": [-0.04, 0.66], "note": note},
        },
        {"upstream": "pa", "downstream": ARGS, "kendall_tau_b": {"value": 0.2, "ci": [-0.3, 0.5], "note": None}},
    ]
    bp = _best_predictor(SimpleNamespace(n_boot=0, level=0.95), pairs, {}, ARGS)  # type: ignore[arg-type]
    assert bp["upstream"] == "rm_acc_seen" and bp["note"] == note
