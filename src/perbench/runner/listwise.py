"""Upstream listwise metrics of one reward model on one pair set: best-of-k accuracy on lists with several rejected
responses, RewardBench 2's Ties score and paraphrase consistency (:mod:`perbench.metrics.listwise`), as cells (the
predictors of benchmark validity) and as a summary for results.json.

Cell metrics: on the run's benchmark ``rm_bok_acc`` (one row per list), ``rm_ties`` (one row per Ties prompt id)
and ``rm_consistency`` (one row per preference asked under several phrasings); on an ``upstream_benchmarks`` entry
NAME the same with the suffixes ``rm_acc_on_NAME@bok``, ``@ties`` and ``@consistency`` (bootstrapped in NAME's
stratum). A pair set without lists, Ties rows or paraphrases gets none of them: no row, nothing averaged in.

Published metrics under their published names, computed by their authors' rules whatever the run's tie policy:
``rewardbench2`` (per subset best-of-4 with RewardBench 2's tie rule -- a tie at the top scores 1/#max -- the Ties
composite, and their unweighted mean) and ``rmgap`` (Pair, BoN, Consistency per domain and their macro ``Avg``,
:mod:`perbench.metrics.rmgap`). ``rewardbench2_ties`` is the Ties composite with its parts; ``ties`` in an
``rm_accuracy`` entry stays the count of tied pairs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perbench.data.records import PreferencePair, prompt_key
from perbench.metrics.listwise import best_of_k_lists, consistency_values, paraphrase_units, ties_prompt_scores
from perbench.metrics.rmgap import rmgap_metrics
from perbench.runner.cells import Cells

BOK, TIES, CONSISTENCY = "rm_bok_acc", "rm_ties", "rm_consistency"


@dataclass(frozen=True)
class ListNames:
    bok: str = BOK
    ties: str = TIES
    consistency: str = CONSISTENCY

    @classmethod
    def external(cls, name: str) -> ListNames:
        base = f"rm_acc_on_{name}"
        return cls(f"{base}@bok", f"{base}@ties", f"{base}@consistency")


def listwise(
    cells: Cells,
    method: str,
    pairs: Sequence[PreferencePair],
    scores: dict[str, np.ndarray],
    outcome: np.ndarray,
    *,
    judge: bool,
    tie: str,
    names: ListNames | None = None,
) -> dict[str, Any]:
    """Record the listwise cells of ``pairs`` (scored ``scores``, per-pair ``outcome``) and summarise them."""
    names = names or ListNames()
    out: dict[str, Any] = {}
    got = best_of_k_lists(
        pairs, scores["chosen"], scores["rejected"], tie=tie, judge_outcomes=outcome if judge else None
    )
    if got:
        for v in got:
            p = pairs[v.first]
            cells.add(method, names.bok, p.user_id, prompt_key(p.prompt), v.value)
        out["best_of_k"] = {
            "accuracy": float(np.mean([v.value for v in got])),
            "lists": len(got),
            "list_sizes": {str(k): n for k, n in sorted(Counter(v.size for v in got).items())},
            "rule": "chosen strictly above every other response of its list (tie rule: " + tie + ")",
            "metric": names.bok,
        }
    if any(p.meta.get("ties_kind") for p in pairs):
        if judge:
            out["rewardbench2_ties"] = {"na": "not applicable: a pairwise judge gives no score per response"}
        else:
            per, summary = ties_prompt_scores(pairs, scores["chosen"], scores["rejected"])
            for index, value in per.values():
                p = pairs[index]
                cells.add(method, names.ties, p.user_id, prompt_key(p.prompt), value)
            out["rewardbench2_ties"] = {**summary, "rule": "RewardBench 2 Ties composite", "metric": names.ties}
    rb2_lists = (
        got
        if tie == "half"
        else best_of_k_lists(
            pairs, scores["chosen"], scores["rejected"], tie="half", judge_outcomes=outcome if judge else None
        )
    )
    subsets = _by_subset(pairs, rb2_lists, out.get("rewardbench2_ties", {}).get("score"))
    if subsets:
        out["rewardbench2"] = subsets
    if any(p.meta.get("response_order") is not None for p in pairs):
        out["rmgap"] = (
            {"na": "not applicable: a pairwise judge gives no score per response (RMGAP ranks the four responses)"}
            if judge
            else rmgap_metrics(pairs, scores["chosen"], scores["rejected"])
        )
    units = paraphrase_units(pairs)
    if units:
        values = consistency_values(units, outcome)
        for u, v in zip(units, values, strict=True):
            p = pairs[u[0]]
            cells.add(method, names.consistency, p.user_id, prompt_key(p.prompt), float(v))
        out["paraphrase_consistency"] = {
            "consistency": float(np.mean(values)),
            "units": len(units),
            "phrasings": {str(k): n for k, n in sorted(Counter(len(u) for u in units).items())},
            "rule": "a preference survives when it is scored right under every phrasing of its prompt",
            "metric": names.consistency,
        }
    return out


def _by_subset(pairs: Sequence[PreferencePair], lists: Sequence[Any], ties: float | None) -> dict[str, Any]:
    """Per ``meta["subset"]`` (RewardBench 2's domains): best-of-4 accuracy under RewardBench 2's tie rule, the Ties
    score for Ties, and their unweighted mean (RewardBench 2's headline reads it so: every domain counts alike)."""
    per: dict[str, list[float]] = {}
    for v in lists:
        subset = pairs[v.first].meta.get("subset")
        if subset is not None and pairs[v.first].meta.get("response_order") is None:  # RMGAP's domains: its own
            per.setdefault(str(subset), []).append(v.value)
    if not per:
        return {}
    out: dict[str, Any] = {s: float(np.mean(vs)) for s, vs in sorted(per.items())}
    if ties is not None:
        out["Ties"] = ties
    out["mean_over_subsets"] = float(np.mean(list(out.values())))
    out["rule"] = "RewardBench 2's: a list scores 1/#max when its chosen response ties for the top, else 0"
    return out


Scored = tuple[Sequence[PreferencePair], dict[str, np.ndarray]]


def record_listwise(
    cells: Cells, method: str, own: Scored | None, extra: dict[str, Scored], *, judge: bool, tie: str
) -> dict[str, dict[str, Any]]:
    """The listwise summaries of a method, by the ``rm_accuracy`` entry they join: ``all`` for the run's test pairs
    (with the ``paraphrased`` pair set's pairs, whose originals they are), ``on_NAME`` for each other benchmark."""
    from perbench.runner.state import outcomes

    def run(pairs: Sequence[PreferencePair], scores: dict[str, np.ndarray], names: ListNames) -> dict[str, Any]:
        return listwise(cells, method, pairs, scores, outcomes(scores, judge, tie), judge=judge, tie=tie, names=names)

    out: dict[str, dict[str, Any]] = {}
    if own is not None:
        pairs, scores = list(own[0]), dict(own[1])
        if "rm_acc_paraphrased" in extra:
            more, more_scores = extra["rm_acc_paraphrased"]
            pairs += list(more)
            scores = {k: np.concatenate([scores[k], more_scores[k]]) for k in ("chosen", "rejected")}
        got = run(pairs, scores, ListNames())
        if got:
            out["all"] = got
    for metric, (ext_pairs, ext_scores) in extra.items():
        if metric.startswith("rm_acc_on_"):
            got = run(ext_pairs, ext_scores, ListNames.external(metric[len("rm_acc_on_") :]))
            if got:
                out[metric.removeprefix("rm_acc_")] = got
    return out
