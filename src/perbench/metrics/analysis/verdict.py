"""The verdict: what to deploy, against what null, at what level, and what the choice trades away.

Every sentence is read off the numbers it states, and says its level (simultaneous or marginal):

1. **Headroom first** (pooled decoders, :mod:`.headroom`): what the oracle pick gains over a random pick from the same
   pool, and the share of it the leader captures.
2. **Against the null**: only deployable systems that beat the random pick (one-sided, simultaneous over the systems)
   are ranked; when none does, the verdict says so ("not shown better than a random pick") and recommends nothing.
3. **The decision** (:mod:`.ranking`, :mod:`.best_set`): from the simultaneous confidence set for the best over
   the deployable systems and the baselines: deploy (the one deployable member, shown better than the random pick
   and every baseline, each bound stated), a baseline as good (said first: no reward model is shown better than
   it), practically equivalent (every pair of members inside a margin stated in points: a fraction of the
   headroom by default), undecided (the set named, with the users × prompts that would identify the leader), or
   too little data (no resampling, or CIs that could not resample users and prompts). Among equivalent systems a
   tie-break a team can act on picks one: least data, cheapest to fit, user-agnostic. Beside it, how often the
   rule gives each outcome and pick on the run's bootstrap replicates.
4. **What the choice costs**: the pick against zero-shot decoding on every other quality of the same decoder, the
   difference to zero-shot split into what sampling alone gives (random pick − greedy) and what the reward model
   adds (pick − random pick), and its reward-hacking win rate beside the win rate of a scorer with no information.
5. **Upstream**: the pre-specified predictor's τ-b (``verdict_predictor``, default ``rm_acc_all``), and the best of
   all predictors only as a maximum, with an interval adjusted for having been selected.

Lists of systems are compact (a few names, then "and N more"). The parts live beside this module:
:mod:`.verdict_phrasing` (the shared wording), :mod:`.verdict_decision` (1-3 and the tie-break),
:mod:`.verdict_costs` (4) and :mod:`.verdict_upstream` (5); this module chooses the metric and puts the parts
together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import DEFAULT_VERDICT_METRIC, f_, is_descriptive
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.power import plan
from perbench.metrics.analysis.ranking import BASELINE, EQUIVALENT, NO_BETTER, TOO_LITTLE, ranking
from perbench.metrics.analysis.verdict_costs import CostParts
from perbench.metrics.analysis.verdict_decision import STOPPED, DecisionParts
from perbench.metrics.analysis.verdict_phrasing import Phrasing, names
from perbench.metrics.analysis.verdict_upstream import UpstreamPart

__all__ = ["DEFAULT_PREDICTOR", "STOPPED", "Phrasing", "Verdict", "choose_metric", "names", "verdict"]

#: the upstream metric the verdict reads when the config names none: RM accuracy on every test pair
DEFAULT_PREDICTOR = "rm_acc_all"

#: why a configured verdict metric can be missing, by its quality
_MISSING = {
    "rubric_satisfaction": "no user of this benchmark has a checkable rubric",
    "judge_score": "the run has no judge, or no user has answer-key aspects for it",
    "personal_reward": "the benchmark names no reward models that define its users' reward (PersonalLLM)",
    "rouge1": "no user has a reference text",
    "rougeL": "no user has a reference text",
    "bertscore_f1": "no user has a reference text, or BERTScore is off",
}


def choose_metric(est: Estimates, requested: str | None) -> tuple[str | None, list[str]]:
    notes: list[str] = []
    down = [k for k in est.downstream if k in est.present]
    metric = (
        requested if requested is not None else (DEFAULT_VERDICT_METRIC if DEFAULT_VERDICT_METRIC in down else None)
    )
    if metric is None or metric not in est.present or is_descriptive(metric):
        fallback = down[0] if down else next((k for k in est.upstream if k in est.present), None)
        if metric is not None and is_descriptive(metric):
            notes.append(
                f"The configured verdict metric {metric} describes the answers (their length), it is no quality to "
                f"rank on, so the verdict ranks on {fallback} instead."
            )
        elif requested is not None or metric is not None:
            missing = metric or requested or ""
            why = _MISSING.get(missing.partition(":")[2], "the run has no rows of it")
            notes.append(
                f"The configured verdict metric {missing} has no rows ({why}), so the verdict ranks on "
                f"{fallback} instead."
            )
        elif fallback is not None:
            notes.append(f"No verdict metric was set; the verdict ranks on {fallback}.")
        metric = fallback
    return metric, notes


class Verdict(DecisionParts, CostParts, UpstreamPart):
    """Every part of the verdict on one metric, each a method that returns its sentence ("" when it has none)."""


def _thin_plan() -> str:
    """What a claim needs at the least, for a verdict on too little data (the planner's size for the whole decision
    follows the verdict: ``analyze`` adds it)."""
    from perbench.stats.bootstrap import MIN_LEVELS

    return f" At least {MIN_LEVELS} users and {MIN_LEVELS} prompts are needed for CIs that resample both."


def verdict(
    est: Estimates,
    requested: str | None,
    rankings: Mapping[str, Any],
    roles: Mapping[str, str],
    margins: Mapping[str, Mapping[str, Any]],
    adaptive: Mapping[str, Any] | None = None,
    room: Mapping[str, Any] | None = None,
    valid: Mapping[str, Any] | None = None,
    systems: Mapping[str, Mapping[str, Any]] | None = None,
    predictor: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The verdict dict and the planner's entries (leader − each other ranked system) of its metric."""
    metric, notes = choose_metric(est, requested)
    res: dict[str, Any] = {
        "metric": metric, "deploy": None, "pick": None, "tie_break": None, "runner_up": None, "tied": [],
        "value": None, "ci": None, "resampled": None, "ci_note": None, "decision": None, "equivalent": [],
        "contenders": [], "identical": [], "margin": None, "margin_source": None, "critical_value": None,
        "reference_lines": [], "adaptive": None, "plan": [], "qualified": None, "no_better_than_random": [],
        "headroom": None, "trade_offs": [], "zero_shot_split": None, "win_rate": None, "metric_note": None,
        "upstream_metric": None, "upstream_tau": None, "upstream_tau_ci": None, "agrees": None, "max_of_k": None,
        "best_set": None, "stability": None, "vs_references": [], "parts": [],
    }  # fmt: skip
    if metric is None:
        return {**res, "text": "No metric has any rows: nothing to decide."}, []
    res["metric_note"] = " ".join(notes) or None
    margin = margins.get(metric) or {"value": 0.05, "source": "the default"}
    res.update(margin=float(margin["value"]), margin_source=margin["source"])
    entry_room = (room or {}).get(metric)
    rank = rankings.get(metric) or ranking(est, metric, roles, float(margin["value"]))
    v = Verdict(est, roles, margin, entry_room, systems)
    info = (adaptive or {}).get(metric)
    res["adaptive"] = dict(info) if info else None
    res["reference_lines"] = list(rank["reference_lines"])
    below = list(rank.get("no_better_than_random") or [])
    deployable = [*rank["order"], *below]
    res["no_better_than_random"] = below
    parts: list[tuple[str, str]] = [("note", n) for n in notes]
    if not deployable:
        parts += [("decision", f"No deployable reward model has {metric} rows: nothing to decide."),
                  ("references", v.references(metric, rank))]  # fmt: skip
        return _finish(res, parts), []
    top = max(deployable, key=lambda m: (est.point_of(m, metric) or float("-inf"), m))
    lead = rank["order"][0] if rank["order"] else top
    if entry_room:
        res["qualified"] = list(rank["order"])
        res["headroom"] = {
            "random_pick": (entry_room.get("random_pick") or {}).get("value"),
            "oracle": (entry_room.get("oracle") or {}).get("value"),
            "headroom": (entry_room.get("headroom") or {}).get("value"),
            "headroom_ci": (entry_room.get("headroom") or {}).get("ci"),
            "leader": lead,
            "leader_gain": ((entry_room.get("systems") or {}).get(lead) or {}).get("gain"),
            "leader_share": ((entry_room.get("systems") or {}).get(lead) or {}).get("share"),
        }
        parts.append(("headroom", v.headroom(metric, lead)))
        parts.append(("null", v.null_test(metric, deployable, rank["order"])))
    e = est.value(lead, metric)
    assert e is not None
    entry = est.ci_entry(e, metric)
    res.update(value=f_(e.point), **entry)
    val = f"{est.fmt(metric, e.point)}, {est.fmt_ci(metric, entry['ci'])}"
    plans: list[dict[str, Any]] = []
    res.update(
        decision=rank["decision"],
        best_set=rank.get("best_set"),
        stability=rank.get("stability"),
        vs_references=rank.get("vs_references") or [],
        critical_value=rank["critical_value"],
    )
    if rank["decision"] != NO_BETTER:
        res.update(
            deploy=rank["best"],
            runner_up=rank.get("runner_up"),
            tied=rank["tied"],
            equivalent=rank["equivalent"],
            contenders=rank["contenders"],
            identical=rank["identical"],
        )
        plans = plan(est, metric, lead, rank["order"][1:], margin=res["margin"], crit=rank["critical_value"])
        thin = _thin_plan() if rank["decision"] == TOO_LITTLE else ""
        said = v.decision(metric, rank, val, thin)
        if rank["decision"] == BASELINE:  # a baseline as good as any reward model is said first
            parts.insert(len(notes), ("decision", said))
        else:
            parts.append(("decision", said))
        pick = rank["best"]
        if rank["decision"] == EQUIVALENT:
            pick, why = v.tie_break([lead, *rank["equivalent"]])
            pick = pick or lead
            if why:
                res["tie_break"] = why
                parts.append(("tie_break", f"Among them, choose {pick}: {why}."))
        res["pick"] = pick
        res["plan"] = [p["text"] for p in plans if p["b"] in rank["contenders"]][:1]
        if pick is not None:
            res["trade_offs"], text = v.trade_offs(metric, pick)
            parts.append(("trade_offs", text))
    parts.append(("stability", v.stability(metric, rank)))
    subject = res["pick"] or lead
    res["zero_shot_split"], text = v.zero_shot_split(metric, subject)
    parts.append(("zero_shot", text))
    res["win_rate"], text = v.win_rate(metric, subject)
    parts.append(("win_rate", text))
    parts.append(("adaptive", v.adaptive(metric, info)))
    parts.append(("references", v.references(metric, rank)))
    ups = v.upstream(metric, lead, valid, predictor or DEFAULT_PREDICTOR, res, explicit=predictor is not None)
    parts += [("upstream", t) for t in ups]
    if res["ci_note"]:
        parts.append(("ci_note", f"About {lead}'s CI: {res['ci_note']}."))
    return _finish(res, parts), plans


def _finish(res: dict[str, Any], parts: Sequence[tuple[str, str]]) -> dict[str, Any]:
    kept = [(k, t) for k, t in parts if t]
    res["parts"] = [{"kind": k, "text": t} for k, t in kept]
    res["text"] = " ".join(t for _, t in kept)
    return res
