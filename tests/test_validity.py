"""Benchmark validity (perbench.metrics.analysis.validity): predictors compared on the same bootstrap replicates,
the consensus pairs of the rubric benchmark, and simulations of the Δτ interval's error rates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perbench.data.records import CONSENSUS
from perbench.metrics.analysis import analyze
from perbench.metrics.analysis.base import Cell, stratum
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.selection import selection
from perbench.metrics.analysis.validity import validity
from perbench.metrics.correlation import batched_kendall_tau_b, kendall_tau_b

DOWN = "best_of_n:rubric_satisfaction"
GROUP = "rubrics|policy|seed0"


def crossed(
    rng: np.random.Generator,
    truths: dict[str, np.ndarray],
    quality: np.ndarray,
    *,
    users: int = 12,
    prompts: int = 6,
    signal: float = 1.0,
) -> list[Cell]:
    """Systems m00.. with one Bernoulli cell per (user, prompt) for each predictor (success probability rising with
    its true system value) and a continuous downstream cell (rising with ``quality``); users and prompts have
    effects shared by every system."""
    uu, pp = (a.ravel() for a in np.meshgrid(np.arange(users), np.arange(prompts), indexing="ij"))
    ue, pe = rng.normal(0, 0.5, users), rng.normal(0, 0.5, prompts)
    out: list[Cell] = []

    def add(m: str, metric: str, values: np.ndarray) -> None:
        out.extend(Cell(GROUP, m, metric, f"u{a}", f"p{b}", float(v)) for a, b, v in zip(uu, pp, values, strict=True))

    for i in range(len(quality)):
        m = f"m{i:02d}"
        for metric, t in truths.items():
            p = 1 / (1 + np.exp(-(signal * t[i] + ue[uu] + pe[pp])))
            add(m, metric, (rng.random(uu.size) < p).astype(float))
        add(m, DOWN, 0.2 * quality[i] + 0.3 * ue[uu] + 0.3 * pe[pp] + rng.normal(0, 0.5, uu.size))
    return out


def _validity(cells: list[Cell], n_boot: int = 200, seed: int = 0) -> dict[str, Any]:
    est = Estimates(cells, None, None, "", n_boot, seed, 0.95, None)
    return validity(est, selection(est)[0], ["rm_acc_consensus", "rm_acc_pers_only"])


def _difference(v: dict[str, Any]) -> dict[str, Any]:
    [entry] = v["by_downstream"][DOWN]["differences"]
    return dict(entry)


def test_difference_is_computed_on_the_same_replicate_and_the_same_systems() -> None:
    rng = np.random.default_rng(1)
    q = rng.normal(0, 1, 10)
    cells = crossed(rng, {"rm_acc_pers_only": q, "rm_acc_consensus": q + rng.normal(0, 1.5, 10)}, q)
    est = Estimates(cells, None, None, "", 300, 3, 0.95, None)
    v = validity(est, selection(est)[0])
    e = v["by_downstream"][DOWN]["differences"][0]
    assert {e["a"], e["b"]} == {"rm_acc_pers_only", "rm_acc_consensus"} and e["n_systems"] == 10
    # by hand: both τ on the same replicate's system values, then the interval of the difference
    methods = sorted({c.method for c in cells})
    reps = {k: np.stack([est.value(m, k).reps for m in methods], axis=1) for k in (e["a"], e["b"], DOWN)}  # type: ignore[union-attr]
    points = {k: [est.value(m, k).point for m in methods] for k in (e["a"], e["b"], DOWN)}  # type: ignore[union-attr]
    delta = batched_kendall_tau_b(reps[e["a"]], reps[DOWN]) - batched_kendall_tau_b(reps[e["b"]], reps[DOWN])
    t = e["kendall_tau_b"]
    want = kendall_tau_b(points[e["a"]], points[DOWN]) - kendall_tau_b(points[e["b"]], points[DOWN])  # type: ignore[operator]
    assert t["delta"] == pytest.approx(want) and t["delta"] >= 0  # a is the predictor with the higher τ-b
    lo, hi = np.quantile(delta[np.isfinite(delta)], [0.025, 0.975])
    h = max(t["delta"] - lo, hi - t["delta"])  # the percentile interval made symmetric about the estimate
    assert t["ci"] == pytest.approx([max(-2.0, t["delta"] - h), min(2.0, t["delta"] + h)])
    # the per-predictor values are the selection's own (one number, one CI)
    sel = {(p["upstream"], p["downstream"]): p for p in selection(est)[0]["pairs"]}
    for row in v["by_downstream"][DOWN]["predictors"]:
        assert row["kendall_tau_b"] == sel[(row["upstream"], DOWN)]["kendall_tau_b"]


def test_a_near_copy_of_a_predictor_has_a_narrow_difference_because_replicates_are_shared() -> None:
    rng = np.random.default_rng(2)
    q = rng.normal(0, 1, 12)
    cells = crossed(rng, {"rm_acc_pers_only": q}, q)
    # the consensus predictor: the same cells, one system's cells flipped on one user (a small real difference)
    copy = [
        Cell(
            c.group,
            c.method,
            "rm_acc_consensus",
            c.user,
            c.prompt,
            1 - c.value if (c.method, c.user) == ("m00", "u0") else c.value,
        )
        for c in cells
        if c.metric == "rm_acc_pers_only"
    ]
    t = _difference(_validity(cells + copy))["kendall_tau_b"]
    assert t["ci"] is not None and t["ci"][1] - t["ci"][0] <= 0.2  # independent draws would give about ±0.5
    same = [
        Cell(c.group, c.method, "rm_acc_consensus", c.user, c.prompt, c.value)
        for c in cells
        if c.metric == "rm_acc_pers_only"
    ]
    e = _difference(_validity(cells + same))
    assert e["kendall_tau_b"]["decision"] == "identical" and e["kendall_tau_b"]["delta"] == 0.0
    assert "rank the systems the same way" in e["text"]


def test_partial_coverage_compares_on_the_shared_systems_and_says_so() -> None:
    rng = np.random.default_rng(3)
    q = rng.normal(0, 1, 8)
    cells = crossed(rng, {"rm_acc_pers_only": q, "rm_acc_consensus": q + rng.normal(0, 1, 8)}, q)
    cells = [c for c in cells if not (c.metric == "rm_acc_consensus" and c.method in ("m00", "m01"))]
    e = _difference(_validity(cells, n_boot=100))
    assert e["n_systems"] == 6 and e["partial"] and "on the 6 systems both cover" in e["text"]


def test_verdict_uses_simultaneous_intervals_and_names_the_leader() -> None:
    rng = np.random.default_rng(4)
    q = rng.normal(0, 1, 16)
    truths = {"rm_acc_pers_only": q, "rm_acc_consensus": rng.normal(0, 1, 16), "rm_acc_all": rng.normal(0, 1, 16)}
    a = analyze(crossed(rng, truths, q), n_boot=200, seed=0)
    v = a["validity"]["by_downstream"][DOWN]["verdict"]
    assert v["leader"] == "rm_acc_pers_only" and v["critical_value"] is not None and v["critical_value"] > 1.96
    comps = {c["b"]: c for c in v["comparisons"]}
    for c in comps.values():  # a simultaneous interval: Δ̂ ± c·se*, centred on the estimate
        assert (c["ci"][0] + c["ci"][1]) / 2 == pytest.approx(c["delta"])
        assert c["ci_marginal"][0] <= c["delta"] <= c["ci_marginal"][1]
    assert v["decision"] == ("best" if all(c["ci"][0] > 0 for c in comps.values()) else "undecided")
    assert v["text"].startswith("rm_acc_pers_only predicts best_of_n:rubric_satisfaction best")
    head = a["validity"]["by_downstream"][DOWN]["headline"]
    assert "rm_acc_pers_only" in head and "rm_acc_consensus" in head and "Δτ = +" in head
    assert a["validity"]["by_downstream"][DOWN]["published"][0].startswith("Ma et al.")
    assert [p["source"] for p in a["validity"]["published"]].count("Rezk et al.") == 1


def _rate(n: int, seed: int, **truth: Any) -> float:
    """The share of n simulated runs whose Δτ CI (pers_only vs consensus) excludes 0."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n):
        q = rng.normal(0, 1, 16)
        eta = rng.normal(0, 1, 16)
        truths = {
            "rm_acc_pers_only": q + truth["a_noise"] * eta,
            "rm_acc_consensus": q + truth["b_noise"] * (eta if truth["same"] else rng.normal(0, 1, 16)),
        }
        t = _difference(_validity(crossed(rng, truths, q), n_boot=200, seed=int(rng.integers(2**31))))["kendall_tau_b"]
        hits += t["decision"] in ("a", "b")
    return hits / n


def test_simulation_a_better_predictor_is_detected_at_the_stated_rate() -> None:
    # 16 systems, 12 users × 6 prompts: the consensus predictor carries no information about the systems' quality
    # (true τ ≈ 0), personalization-only accuracy ranks them by it; docs/architecture.md states the rate (≥ 80%)
    assert _rate(40, seed=0, a_noise=0.0, b_noise=10.0, same=False) >= 0.8


def test_simulation_equal_predictors_are_called_different_at_most_5_percent_of_the_time() -> None:
    # both predictors measure the same true system values (Δτ = 0) through independent cells
    assert _rate(60, seed=1, a_noise=1.0, b_noise=1.0, same=True) <= 0.05


def test_another_benchmark_is_its_own_bootstrap_stratum() -> None:
    assert stratum("rubrics", "rm_acc_on_general") == "rubrics>general" and stratum("rubrics", "pa") == "rubrics"
    rows = [Cell(GROUP, "m", "rm_acc_seen", f"u{i}", "p0", 1.0) for i in range(6)]
    rows += [Cell(GROUP, "m", "rm_acc_on_general", f"u{i}", "p0", 0.0) for i in range(6)]  # the same ids, other people
    est = Estimates(rows, None, None, "", 20, 0, 0.95, None)
    assert np.unique(est.boot.cell_of_row).size == 12  # no (user, prompt) cell is shared across the two benchmarks


def test_consensus_pairs_every_user_agrees_and_no_rubric_separates_them() -> None:
    from perbench.data.rubrics.aspects import ASPECTS, satisfaction
    from perbench.data.rubrics.benchmark import load_rubrics

    bench = load_rubrics()
    pairs = bench.pair_sets[CONSENSUS]
    report = bench.meta["pair_sets"][CONSENSUS]
    assert report["rubric_consensus_in_pool"]["every_user_prefers"] == 0  # the rubrics conflict by design
    assert report["distinct_pairs"] >= 40 and report["pairs"] == len(pairs) == report["distinct_pairs"] * len(
        bench.users
    )
    test_prompts = {p.prompt for p in bench.test_pairs()}
    train_texts = {y for p in bench.train_pairs() for y in (p.chosen, p.rejected)}
    by_pair: dict[tuple[str, str, str], set[str]] = {}
    for p in pairs:
        by_pair.setdefault((str(p.prompt), p.chosen, p.rejected), set()).add(p.user_id)
        assert p.split == "test" and p.prompt in test_prompts and p.meta["rejected_prompt_id"] != p.meta["prompt_id"]
        assert p.rejected not in train_texts  # both answers are test-prompt candidates
        for aspect, spec in ASPECTS.items():  # the same verdict on every aspect …
            assert spec.check(p.chosen) == spec.check(p.rejected), aspect
    for u in bench.users.values():  # … so no user's rubric separates them
        assert u.rubric is not None
        for _, chosen, rejected in by_pair:
            assert satisfaction(chosen, u.rubric) == satisfaction(rejected, u.rubric)
    assert all(users == set(bench.users) for users in by_pair.values())  # every user gets every pair
    assert not {p.pair_id for p in pairs} & {p.pair_id for p in bench.pairs}
    assert bench.summary()["pair_sets"][CONSENSUS]["distinct_pairs"] == report["distinct_pairs"]
    again = load_rubrics()
    assert [p.pair_id for p in again.pair_sets[CONSENSUS]] == [p.pair_id for p in pairs]
    none = load_rubrics(consensus_per_prompt=0)
    assert CONSENSUS not in none.pair_sets and none.fingerprint() != bench.fingerprint()
    with pytest.raises(ValueError, match="consensus_per_prompt"):
        load_rubrics(consensus_per_prompt=-1)


def test_predictors_on_disjoint_systems_are_named_not_compared() -> None:
    rng = np.random.default_rng(5)
    q = rng.normal(0, 1, 10)
    cells = crossed(rng, {"rm_acc_pers_only": q, "rm_acc_consensus": q}, q, users=6, prompts=4)
    firsts, lasts = {f"m{i:02d}" for i in range(5)}, {f"m{i:02d}" for i in range(5, 10)}
    cells = [
        c
        for c in cells
        if not (c.metric == "rm_acc_consensus" and c.method in lasts)
        and not (c.metric == "rm_acc_pers_only" and c.method in firsts)
    ]
    v = _validity(cells, n_boot=50)["by_downstream"][DOWN]
    [e] = v["differences"]
    assert e["n_systems"] == 0 and e["na"] and "need 5" in e["text"]
    assert len(v["verdict"]["order"]) == 2 and "fewer than 5 systems have both" in v["verdict"]["text"]


def test_every_grid_system_is_a_predictor_system_and_reference_lines_are_left_out() -> None:
    rng = np.random.default_rng(6)
    q = rng.normal(0, 1, 12)
    truths = {"rm_acc_pers_only": q, "rm_acc_consensus": q + rng.normal(0, 1, 12)}
    # systems of a grid (one method's variants), two registered baselines and an oracle among them
    names = {
        "m00": "random",
        "m01": "length",
        "m02": "icl_judge_oracle",
        "m03": "mpu",
        "m04": "mpu(train_fraction=0.25)",
        "m05": "mpu(train_fraction=0.5)",
    }
    cells = [
        Cell(c.group, names.get(c.method, c.method), c.metric, c.user, c.prompt, c.value)
        for c in crossed(rng, truths, q, users=8, prompts=4)
    ]
    a = analyze(cells, n_boot=100, seed=0)
    v = a["validity"]
    assert v["reference_lines"] == ["icl_judge_oracle", "length", "random"] and "left out" in v["systems"]
    entry = v["by_downstream"][DOWN]
    assert {r["n_systems"] for r in entry["predictors"]} == {9} and entry["differences"][0]["n_systems"] == 9
    # the selection reads the same 9 deployable systems (one answer), and says which reference lines it left out
    sel = {(p["upstream"], p["downstream"]): p for p in a["selection"]["pairs"]}
    assert sel[("rm_acc_pers_only", DOWN)]["n_systems"] == 9
    assert "left out" in a["selection"]["systems"] and "icl_judge_oracle" in a["selection"]["systems"]
    est = Estimates(cells, None, None, "", 100, 0, 0.95, None)
    deployable = sorted(
        set(names.values()) - {"random", "length", "icl_judge_oracle"} | {f"m{i:02d}" for i in range(6, 12)}
    )
    own = {p["upstream"]: p for p in selection(est, deployable)[0]["pairs"] if p["downstream"] == DOWN}
    for row in entry["predictors"]:
        assert row["kendall_tau_b"] == own[row["upstream"]]["kendall_tau_b"]
    # without roles (a direct call) every method is a system
    assert validity(est, selection(est)[0])["reference_lines"] == []
