"""Every pooled downstream number beside its null (a random pick from the same pool) and its ceiling (the oracle
pick), the verdict that follows from them, and the on-policy accuracy read from the same pool."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np
import pytest

from perbench.decoding.best_of_n import bon_expected
from perbench.metrics.analysis import analyze
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.headroom import headroom
from perbench.metrics.analysis.roles import method_roles
from perbench.metrics.onpolicy import best_of_k_accuracy, pair_accuracy, within_pool_spearman
from perbench.runner.pooled import Pooled

METRIC = "best_of_n:rubric_satisfaction"


def pool_cells(
    systems: dict[str, float],
    rng: np.random.Generator,
    users: int = 12,
    prompts: int = 10,
    N: int = 16,
    n: int = 4,
    extra: dict[str, dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Cells of a pooled Best-of-n: each prompt has one pool of N samples; each (user, prompt) cell its own truth
    of them (a prompt effect, a user × sample preference and noise, in [0, 1]). A system with skill s scores a sample
    s·truth + noise for the cell's user (s = 0: a user-agnostic random scorer). The reference lines are computed as
    the run computes them: the pool mean and the oracle's Best-of-n by the truth itself."""
    out: list[dict[str, Any]] = []

    def add(method: str, metric: str, u: int, p: int, v: float) -> None:
        out.append({"group": "g|pol|seed0", "method": method, "metric": metric, "user": f"u{u}", "prompt": f"p{p}",
                    "value": float(v)})  # fmt: skip

    base = rng.normal(0, 0.15, (prompts, N))
    taste = rng.normal(0, 1, (users, 3))
    feats = rng.normal(0, 1, (prompts, N, 3))
    for u, p in itertools.product(range(users), range(prompts)):
        q = np.clip(0.45 + base[p] + 0.12 * feats[p] @ taste[u] + rng.normal(0, 0.05, N), 0, 1)
        add("random_pick", METRIC, u, p, q.mean())
        add("oracle_pick", METRIC, u, p, bon_expected(q[None], q[None], n)[0])
        for m, skill in systems.items():
            s = skill * q + rng.normal(0, 0.1, N)
            add(m, METRIC, u, p, bon_expected(s[None], q[None], n)[0])
        for metric, by in (extra or {}).items():
            for m, v in by.items():
                add(m, metric, u, p, v + rng.normal(0, 0.05))
    return out


def _headroom(cells: list[dict[str, Any]], seed: int = 0, n_boot: int = 200) -> dict[str, Any]:
    est = Estimates(cells, None, None, "global_bt", n_boot, seed, 0.95, None)
    return headroom(est, method_roles(est.methods, est.pure_decoders))[METRIC]


def test_headroom_gain_and_share_are_the_paired_differences_of_the_cells() -> None:
    cells = pool_cells({"good": 3.0, "blind": 0.0}, np.random.default_rng(0))
    h = _headroom(cells)

    def mean(m: str) -> float:
        return float(np.mean([c["value"] for c in cells if c["method"] == m]))

    assert h["random_pick"]["value"] == pytest.approx(mean("random_pick"))
    assert h["oracle"]["value"] == pytest.approx(mean("oracle_pick"))
    assert h["oracle"]["by"] == "the exact rubric checkers"
    room = mean("oracle_pick") - mean("random_pick")
    assert h["headroom"]["value"] == pytest.approx(room) and h["headroom"]["ci"][0] > 0
    good = h["systems"]["good"]
    assert good["gain"]["value"] == pytest.approx(mean("good") - mean("random_pick"))
    assert good["share"]["value"] == pytest.approx((mean("good") - mean("random_pick")) / room)
    lo, hi = good["share"]["ci"]
    assert lo < good["share"]["value"] < hi and good["beats_random"]
    assert not h["systems"]["blind"]["beats_random"]
    assert set(h["systems"]) == {"good", "blind"}  # the reference lines are not systems of their own


def test_a_system_distributed_like_a_random_pick_is_called_no_better_than_one() -> None:
    """A user-agnostic random scorer re-ranking the pool (its Best-of-n is a random pick in expectation) is called
    "not shown better than a random pick" in at least 95 % of seeded runs, for each of three such systems at once (the
    test is simultaneous), while a system with real skill beside them is not (so the bound is not met by never
    calling anyone better)."""
    runs, no_better, good_beats = 60, {f"r{i}": 0 for i in range(3)}, 0
    for s in range(runs):
        h = _headroom(pool_cells({"r0": 0.0, "r1": 0.0, "r2": 0.0, "good": 3.0}, np.random.default_rng(100 + s)), s)
        for m in no_better:
            no_better[m] += not h["systems"][m]["beats_random"]
        good_beats += h["systems"]["good"]["beats_random"]
    assert all(k / runs >= 0.95 for k in no_better.values()), no_better
    assert good_beats / runs >= 0.9


def test_no_system_beating_the_random_pick_means_nothing_is_recommended_and_it_is_said_first() -> None:
    cells = pool_cells({"mpu": 0.0, "pref": 0.0}, np.random.default_rng(3))
    a = analyze(cells, verdict_metric=METRIC, n_boot=200)
    v = a["verdict"]
    assert v["decision"] == "no_better_than_random" and v["deploy"] is None and v["pick"] is None
    assert v["equivalent"] == [] and v["tied"] == [] and sorted(v["no_better_than_random"]) == ["mpu", "pref"]
    kinds = [p["kind"] for p in v["parts"]]
    assert kinds[:2] == ["headroom", "null"]
    assert v["parts"][1]["text"].startswith("No deployable system is shown better than a random pick from the same")
    assert "of headroom goes unused" in v["parts"][1]["text"]
    rank = a["ranking"][METRIC]
    assert rank["decision"] == "no_better_than_random" and rank["best"] is None and rank["equivalent"] == []


def test_the_equivalence_margin_is_a_fraction_of_the_headroom_unless_set() -> None:
    cells = pool_cells({"a": 3.0, "b": 3.0}, np.random.default_rng(4))
    a = analyze(cells, verdict_metric=METRIC, n_boot=200)
    room = a["headroom"][METRIC]["headroom"]["value"]
    assert a["margins"][METRIC]["value"] == pytest.approx(0.1 * room)
    assert a["ranking"][METRIC]["margin"] == pytest.approx(0.1 * room)
    assert a["verdict"]["margin_source"] == "0.1 × the headroom (oracle − random pick)"
    b = analyze(cells, verdict_metric=METRIC, n_boot=200, equivalence_fraction=0.25)
    assert b["margins"][METRIC]["value"] == pytest.approx(0.25 * room)
    c = analyze(cells, verdict_metric=METRIC, n_boot=200, equivalence_margin=0.03)
    assert c["margins"][METRIC] == {"value": 0.03, "source": "equivalence_margin", "fraction": None}
    with pytest.raises(ValueError, match="equivalence_fraction"):
        analyze(cells, verdict_metric=METRIC, n_boot=20, equivalence_fraction=0.0)


def test_equivalent_systems_get_a_tie_break_and_the_verdict_says_what_the_pick_trades_away() -> None:
    rng = np.random.default_rng(5)
    zs = {"zero_shot": 0.30}
    rouge = {"mpu": 0.20, "mpu(train_fraction=0.25)": 0.20, "zero_shot": 0.25}
    cells = pool_cells(
        {"mpu": 3.0, "mpu(train_fraction=0.25)": 3.0}, rng, users=16, prompts=12,
        extra={"zero_shot:rubric_satisfaction": zs, "best_of_n:rougeL": rouge},
    )  # fmt: skip
    for c in cells:  # zero-shot and ROUGE-L rows under their own metric names
        if c["method"] == "zero_shot":
            c["metric"] = "zero_shot:rubric_satisfaction" if "rubric" in c["metric"] else "zero_shot:rougeL"
    systems = {"mpu": {"train_fraction": 1.0}, "mpu(train_fraction=0.25)": {"train_fraction": 0.25}}
    v = analyze(cells, verdict_metric=METRIC, n_boot=200, equivalence_fraction=1.0, systems=systems)["verdict"]
    assert v["decision"] == "equivalent", v["text"]
    assert v["pick"] == "mpu(train_fraction=0.25)" and "least data (25% of the train pairs)" in v["tie_break"]
    lost = {t["metric"]: t for t in v["trade_offs"]}
    assert lost["best_of_n:rougeL"]["ci"][1] < 0
    assert "trades away ROUGE-L -" in v["text"]
    split = v["zero_shot_split"]
    assert split["total"]["value"] == pytest.approx(split["sampling"]["value"] + split["reranking"]["value"])


def test_too_few_users_and_prompts_give_too_little_data_not_equivalence() -> None:
    """4 users × 3 prompts (a third-party style file): CIs that cannot resample users and prompts never carry a
    "deploy" or an "equivalent", even with an absolute margin that every difference fits inside."""
    rng = np.random.default_rng(6)
    cells = pool_cells({"a": 3.0, "b": 3.0}, rng, users=4, prompts=3)
    a = analyze(cells, verdict_metric=METRIC, n_boot=200, equivalence_margin=1.0)
    v = a["verdict"]
    assert v["decision"] in ("too_little_data", "no_better_than_random") and v["deploy"] is None
    assert v["equivalent"] == []
    ranked = analyze(pool_cells({"a": 3.0, "b": 3.0}, rng, users=4, prompts=3), n_boot=200, equivalence_margin=1.0)
    rank = ranked["ranking"][METRIC]
    assert rank["best"] is None and rank["equivalent"] == []


def test_a_missing_verdict_metric_is_named_with_why_and_what_is_ranked_instead() -> None:
    cells = pool_cells({"a": 3.0, "b": 0.0}, np.random.default_rng(7))
    for c in cells:
        c["metric"] = "best_of_n:rougeL"
    v = analyze(cells, verdict_metric=METRIC, n_boot=50)["verdict"]
    assert v["metric"] == "best_of_n:rougeL"
    assert v["metric_note"] == (
        f"The configured verdict metric {METRIC} has no rows (no user of this benchmark has a checkable rubric), "
        "so the verdict ranks on best_of_n:rougeL instead."
    )


def test_verdict_lists_stay_compact() -> None:
    from perbench.metrics.analysis.verdict import names

    assert names(["a"]) == "a" and names(["a", "b"]) == "a and b"
    assert names(["a", "b", "c", "d"]) == "a, b, c and d"
    assert names([f"m{i}" for i in range(17)]) == "m0, m1, m2 and 14 more"


# ---------------------------------------------------------------------------------------------- the win-rate null


@pytest.mark.parametrize("n", [1, 4, 8])
def test_the_win_rate_of_a_random_scorer_is_n_over_n_plus_one(n: int) -> None:
    from perbench.decoding.best_of_n import bon_weights

    rng = np.random.default_rng(n)
    S = rng.normal(size=(20000, 16))
    Z = rng.normal(size=20000)
    assert Pooled._expected_win(bon_weights(S, n), S, Z).mean() == pytest.approx(n / (n + 1), abs=0.006)


# ---------------------------------------------------------------------------------------------- on-policy accuracy


def _brute_force(S: np.ndarray, Q: np.ndarray, k: int, half: bool) -> tuple[list[float], list[float]]:
    pairs, lists = [], []
    for s, q in zip(S, Q, strict=True):
        idx = [i for i in range(len(s)) if not (np.isnan(s[i]) or np.isnan(q[i]))]
        n = hits = 0.0
        for i, j in itertools.combinations(idx, 2):
            if q[i] != q[j]:
                n += 1
                hits += (0.5 if half else 0.0) if s[i] == s[j] else float((s[i] > s[j]) == (q[i] > q[j]))
        pairs.append(hits / n if n else np.nan)
        tot = won = 0.0
        for sub in itertools.combinations(idx, k):
            qs = [q[i] for i in sub]
            if qs.count(max(qs)) > 1:
                continue
            tot += 1
            best = sub[qs.index(max(qs))]
            tops = [i for i in sub if s[i] == max(s[j] for j in sub)]
            if best in tops:
                won += 1.0 if len(tops) == 1 else (1 / len(tops) if half else 0.0)
        lists.append(won / tot if tot else np.nan)
    return pairs, lists


@pytest.mark.parametrize("tie_policy", ["strict", "half"])
def test_onpolicy_pair_and_best_of_k_accuracy_count_every_pair_and_subset(tie_policy: str) -> None:
    rng = np.random.default_rng(8)
    S = rng.integers(0, 4, (8, 7)).astype(float)  # integer scores and truths: ties on both sides
    Q = rng.integers(0, 3, (8, 7)).astype(float)
    S[0, 2], Q[1, 3] = np.nan, np.nan
    Q[2] = 1.0  # a constant pool: no informative pair, no subset
    pairs, lists = _brute_force(S, Q, 3, tie_policy == "half")
    got_p, got_k = pair_accuracy(S, Q, tie_policy), best_of_k_accuracy(S, Q, 3, tie_policy)
    np.testing.assert_allclose(got_p.value, pairs, equal_nan=True)
    np.testing.assert_allclose(got_k.value, lists, equal_nan=True)
    assert np.isnan(got_p.value[2]) and got_p.count[2] == 0 and got_p.excluded[2] == 21


def test_onpolicy_accuracy_of_a_random_scorer_is_at_chance_and_of_the_truth_is_one() -> None:
    rng = np.random.default_rng(9)
    Q = rng.normal(size=(3000, 12))
    S = rng.normal(size=(3000, 12))
    assert pair_accuracy(S, Q).value.mean() == pytest.approx(0.5, abs=0.01)
    assert best_of_k_accuracy(S, Q, 4).value.mean() == pytest.approx(0.25, abs=0.01)
    assert pair_accuracy(Q, Q).value.min() == 1.0 and best_of_k_accuracy(2 * Q + 1, Q, 4).value.min() == 1.0
    assert within_pool_spearman(Q, Q) == pytest.approx(np.ones(3000))


# ---------------------------------------------------------------------------------------------- the labels stay out


def _reachable_types(roots: list[Any], limit: int = 200_000) -> set[str]:
    """The qualified type names of every object reachable from ``roots`` through attributes, dataclass fields and
    containers (torch modules and arrays are leaves: weights hold no labels)."""
    import dataclasses
    import types

    seen: set[int] = set()
    names: set[str] = set()
    stack = list(roots)
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), types.ModuleType, type)):
            continue
        seen.add(id(obj))
        names.add(f"{type(obj).__module__}.{type(obj).__qualname__}")
        if type(obj).__module__.startswith(("torch", "numpy", "transformers", "tokenizers", "sqlite3")):
            continue
        if isinstance(obj, dict):
            stack += list(obj.keys()) + list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack += list(obj)
        else:
            if dataclasses.is_dataclass(obj):
                stack += [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
            stack += list(getattr(obj, "__dict__", {}).values())
            stack += [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ()) if isinstance(s, str)]
    return names


#: where the pool's exact labels live during a run: the evaluation side only
EVALUATION = (
    "perbench.runner.state.RunState",
    "perbench.runner.pooled.Pooled",
    "perbench.runner.scoring.Scoring",
    "perbench.runner.units.Units",
    "perbench.runner.stores.Stores",
)


def test_a_method_cannot_reach_the_pools_labels_through_what_it_is_given(tmp_path: Any) -> None:
    """The on-policy labels (each pool sample's exact satisfaction) are computed inside evaluation: a reward model
    that walks everything its fit, adapt and score receive (and itself) reaches none of the objects that hold them.
    A runner that handed the run state to methods (e.g. in ``RMContext.extra``) fails this test."""
    from collections.abc import Sequence

    from perbench.api import run
    from perbench.config import RunConfig
    from perbench.data.records import PreferencePair
    from perbench.registry import reward_models
    from perbench.rewards.base import RewardModel, RMContext, ScoreItem

    class Snoop(RewardModel):
        seen: ClassVar[set[str]] = set()
        scored = 0

        def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
            Snoop.seen |= _reachable_types([self, list(pairs), ctx])

        def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
            Snoop.seen |= _reachable_types([self, user_id, list(shots)])

        def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
            Snoop.seen |= _reachable_types([self, list(items)])
            Snoop.scored += len(items)
            return np.arange(len(items), dtype=np.float64) % 3

    reward_models.register("snoop", Snoop)
    try:
        spec = {
            "benchmark": {"name": "rubrics", "max_train_prompts": 2}, "policy": "tiny-random",
            "rm_backbone": "tiny-random", "methods": ["snoop"], "baselines": [], "bootstrap": 20,
            "decoders": ["zero_shot", {"name": "best_of_n", "n": 2, "pool": 4}], "max_new_tokens": 8,
            "max_test_prompts": 2, "max_pool_prompts": 2, "shot_curve": [1], "bertscore": False,
            "out_dir": str(tmp_path), "device": "cpu",
        }  # fmt: skip
        cfg = RunConfig.from_dict(spec)
        res = run(cfg).results
    finally:
        reward_models._entries.pop("snoop", None)
    assert Snoop.scored > 0 and "diagnosis" in res["downstream"]["best_of_n(n=2,pool=4)[snoop]"]  # pool scored
    assert "perbench.rewards.base.RMContext" in Snoop.seen  # the walk does reach what the method is given
    assert not Snoop.seen & set(EVALUATION), Snoop.seen & set(EVALUATION)


def test_the_report_shows_where_the_signal_is_lost() -> None:
    from perbench.report.html import build_plots
    from perbench.report.signal import signal_section

    cells = pool_cells({"mpu": 3.0, "pref": 0.0}, np.random.default_rng(10))
    cells += [{**c, "metric": "onpolicy_acc", "value": 0.6} for c in cells if c["method"] in ("mpu", "pref")]
    analysis = analyze(cells, verdict_metric=METRIC, n_boot=50)
    poles = {"format=bulleted": {"rho": 0.3, "cells": 40}, "length=concise": {"rho": -0.2, "cells": 3}}
    diag = {"poles": poles, "collapsed_users": [{"user": "u3", "reason": "blind"}], "hacked_prompts": [],
            "rho_truth": {"mean": 0.1}, "cells": 120, "cells_constant_truth": 7, "rules": {"blind": "…"}}  # fmt: skip
    results = {"analysis": analysis, "downstream": {"best_of_n[mpu]": {"guide": "mpu", "diagnosis": diag}}}
    html = signal_section(results)
    assert "Where the signal is lost" in html and "on-policy pairs (chance 50)" in html
    assert "<td>mpu</td><td>–</td><td>60.0</td>" in html  # curated (absent here) → on-policy → gain, share
    assert "u3 (blind)" in html and "7 of 120" in html
    assert "poles" in build_plots(analysis, results)
    assert signal_section({"analysis": {}}) == ""  # no pooled decoder: no section
