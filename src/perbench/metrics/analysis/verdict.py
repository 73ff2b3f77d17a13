"""The verdict: one paragraph that says what to deploy, or why the data cannot say yet and what would decide it.

Every sentence is read off the numbers it states: the decision and the sets come from the ranking
(:mod:`perbench.metrics.analysis.ranking`); a difference is worded on the cells both methods cover; "includes 0"
is said only of an interval that does; "agrees" only when the upstream metric puts the leader alone first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import DEFAULT_VERDICT_METRIC, ZERO_SHOT, f_, is_downstream, same_value
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.power import plan
from perbench.metrics.analysis.ranking import EQUIVALENT, SEPARABLE, ranking
from perbench.metrics.analysis.roles import DEPLOYABLE

STOPPED = {
    "separable": "the top was separable",
    "equivalent": "equivalence within the margin was established",
    "budget": "the budget ({budget}) was spent",
}


def _names(xs: Sequence[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + f" and {xs[-1]}"


def choose_metric(est: Estimates, requested: str | None) -> tuple[str | None, list[str]]:
    notes: list[str] = []
    down = [k for k in est.downstream if k in est.present]
    metric = (
        requested if requested is not None else (DEFAULT_VERDICT_METRIC if DEFAULT_VERDICT_METRIC in down else None)
    )
    if metric is None or metric not in est.present:
        fallback = down[0] if down else next((k for k in est.upstream if k in est.present), None)
        if requested is not None or metric is not None:
            notes.append(f"{metric or requested} has no rows; the verdict uses {fallback} instead.")
        elif fallback is not None:
            notes.append(f"No verdict metric was set; the verdict uses {fallback}.")
        metric = fallback
    return metric, notes


class Verdict:
    def __init__(self, est: Estimates, roles: Mapping[str, str], margin: float) -> None:
        self.est, self.roles, self.margin = est, roles, margin

    def sim(self, metric: str, c: Mapping[str, Any]) -> str:
        e = self.est
        text = f"{c['a']} − {c['b']} = {e.fmt(metric, c['delta'], True)}"
        if c["ci"] is not None and c["ci"][0] == c["ci"][1]:
            text += " on every cell (no variation in the resamples)"
        else:
            text += ", " + e.fmt_ci(metric, c["ci"], f"simultaneous {100 * e.level:g}% CI")
        return text + (f", on the {c['cells']} cells both cover" if c["partial"] else "")

    def margin_text(self, metric: str) -> str:
        return "±" + self.est.fmt(metric, self.margin, True).lstrip("+")

    def decision_text(self, metric: str, rank: Mapping[str, Any], val: str) -> str:
        lead, comps = rank["order"][0], {c["b"]: c for c in rank["comparisons"]}
        same = rank["identical"]
        twins = (
            f" {_names(same)} {'scores' if len(same) == 1 else 'score'} identically to {lead} on every cell: the "
            "same choice."
            if same
            else ""
        )
        k = len(rank["order"]) - 1
        family = f"simultaneous {100 * self.est.level:g}% CIs over the {k} comparison{'s' * (k != 1)} with the leader"
        if rank["decision"] == SEPARABLE:
            if k == 0:
                return f"Deploy {lead} ({val}); it is the only deployable reward model with {metric}."
            runner = rank["vs_runner_up"]
            return (
                f"Deploy {lead} ({val}): it beats every other deployable reward model, the {family} all excluding "
                f"0; runner-up {runner['b']} ({self.sim(metric, runner)}).{twins}"
            )
        eq = [m for m in rank["equivalent"] if m not in same]
        worse = [c["b"] for c in rank["comparisons"] if c["status"] == "excluded"]
        rest = f" The other {len(worse)} are worse ({family} exclude 0)." if worse else ""
        if rank["decision"] == EQUIVALENT:
            if not eq:
                return (
                    f"{_names([lead, *same])} are identical on {metric} ({val}): each scores the same on every "
                    f"cell, so either is the same choice.{rest}"
                )
            lvl = f"{100 * rank['equivalence_level']:g}%"
            return (
                f"{_names([lead, *eq])} are practically equivalent on {metric}: each difference to {lead} has its "
                f"{lvl} CI inside {self.margin_text(metric)} (two one-sided tests), so any of them is a sound "
                f"choice (leader {lead}: {val}).{twins}{rest}"
            )
        if self.est.n_boot < 2:
            return (
                f"{lead} leads on {metric} ({val}), but without bootstrap replicates (n_boot={self.est.n_boot}) no "
                "method can be called best or equivalent."
            )
        first = comps[rank["contenders"][0]]
        if first["delta"] is None or first["ci"] is None:
            gap = f"{lead} vs {first['b']}: {first['ci_note'] or 'no CI'}"
        elif first["reversed"]:
            gap = (
                f"on the {first['cells']} cells both cover {first['b']} scores higher ({self.sim(metric, first)}), "
                f"although {lead} has the higher mean over all its cells"
            )
        else:
            gap = f"{self.sim(metric, first)}, which includes 0"
            if first["tost_ci"] is not None and self.margin > 0:
                gap += f"; its {100 * rank['equivalence_level']:g}% CI is not inside {self.margin_text(metric)}"
        who = _names(rank["contenders"])
        verb = "is" if len(rank["contenders"]) == 1 else "are"
        also = ""
        if eq:
            also = f" {_names(eq)} {'is' if len(eq) == 1 else 'are'} practically equivalent to {lead}."
        return (
            f"The data cannot yet decide on {metric}: {lead} leads ({val}), but {who} {verb} neither separated from "
            f"it ({family}) nor within the {self.margin_text(metric)} equivalence margin; {gap}.{twins}{also}{rest}"
        )

    def references(self, metric: str, rank: Mapping[str, Any]) -> str:
        refs = []
        for m in rank["reference_lines"]:
            v = self.est.point_of(m, metric)
            if v is not None:
                refs.append(f"{m} {self.est.fmt(metric, v)} ({self.roles.get(m, 'baseline')})")
        return f"Reference lines, never recommended: {', '.join(refs)}." if refs else ""

    def zero_shot(self, metric: str, lead: str) -> str:
        zs = self.est.zero_shot_metric(metric)
        d = None if zs is None else self.est.delta(lead, metric, ZERO_SHOT, zs)
        if d is None:
            return ""
        ci = self.est.ci(d)
        how = "does not reliably beat"
        if ci is not None and ci[0] > 0:
            how = "beats"
        elif ci is not None and ci[1] < 0:
            how = "is worse than"
        on = f", on the {d.cells} cells both cover" if d.partial else ""
        return (
            f"{lead} {how} zero-shot decoding ({zs}: {self.est.fmt(metric, d.point, True)}, "
            f"{self.est.fmt_ci(metric, ci)}{on})."
        )

    def upstream(self, metric: str, lead: str, bp: Mapping[str, Any] | None, res: dict[str, Any]) -> list[str]:
        if bp is None or bp["upstream"] is None:
            return (
                [f"No upstream metric has a defined rank correlation with {metric}."] if is_downstream(metric) else []
            )
        u = bp["upstream"]
        res.update(upstream_metric=u, upstream_tau=bp["kendall_tau_b"], upstream_tau_ci=bp["ci"])
        ups = {
            m: x
            for m in self.est.methods_with(u)
            if self.roles.get(m) == DEPLOYABLE and (x := self.est.point_of(m, u)) is not None
        }
        out = []
        tci = bp["ci"]
        tau = f"tau-b {bp['kendall_tau_b']:.2f}" + (f", CI [{tci[0]:.2f}, {tci[1]:.2f}]" if tci else "")
        if bp.get("note"):  # the selection's own remark on this coefficient (a value outside its CI)
            tau += f"; {bp['note']}"
        if ups and lead in ups:
            top_value = max(ups.values())
            top = sorted(m for m, v in ups.items() if same_value(v, top_value))
            agrees = top == [lead] if len(top) == 1 or lead not in top else None
            res["agrees"] = agrees
            if agrees:
                out.append(f"The upstream ranking by {u} agrees: it also puts {lead} first ({tau}).")
            elif agrees is False:
                out.append(f"The upstream ranking by {u} disagrees: it puts {_names(top)} first ({tau}).")
            else:
                out.append(f"The upstream ranking by {u} puts {_names(top)} jointly first ({tau}).")
        if tci is not None and tci[0] <= 0:
            out.append(f"Even {u}, the best upstream predictor, does not reliably predict {metric}.")
        return out

    def adaptive(self, metric: str, info: Mapping[str, Any] | None) -> str:
        if not info:
            return ""
        why = STOPPED.get(str(info.get("stopped")), f"it stopped ({info.get('stopped')})")
        why = why.format(budget=info.get("budget", "?"))
        rounds = int(info.get("rounds", 0))
        return (
            f"Data collection for {metric} stopped after {rounds} adaptive round{'s' * (rounds != 1)} "
            f"({info.get('cells', '?')} cells): {why}."
        )


def verdict(
    est: Estimates,
    requested: str | None,
    selection: Mapping[str, Any],
    rankings: Mapping[str, Any],
    roles: Mapping[str, str],
    margin: float,
    adaptive: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The verdict dict and the planner's entries (leader − each other deployable method) of its metric."""
    metric, notes = choose_metric(est, requested)
    res: dict[str, Any] = {
        "metric": metric, "deploy": None, "runner_up": None, "tied": [], "value": None, "ci": None,
        "resampled": None, "ci_note": None, "decision": None, "equivalent": [], "contenders": [],
        "identical": [], "margin": margin, "critical_value": None, "reference_lines": [], "adaptive": None,
        "plan": [],
        "upstream_metric": None, "upstream_tau": None, "upstream_tau_ci": None, "agrees": None,
    }  # fmt: skip
    if metric is None:
        return {**res, "text": "No metric has any rows: nothing to decide."}, []
    rank = rankings.get(metric) or ranking(est, metric, roles, margin)
    v = Verdict(est, roles, margin)
    info = (adaptive or {}).get(metric)
    res["adaptive"] = dict(info) if info else None
    res["reference_lines"] = list(rank["reference_lines"])
    if not rank["order"]:
        parts = [
            *notes,
            f"No deployable reward model has {metric} rows: nothing to decide.",
            v.references(metric, rank),
        ]
        return {**res, "text": " ".join(p for p in parts if p)}, []
    lead = rank["order"][0]
    e = est.value(lead, metric)
    assert e is not None
    entry = est.ci_entry(e, metric)
    res.update(
        deploy=rank["best"],
        runner_up=(rank["vs_runner_up"] or {}).get("b"),
        tied=rank["tied"],
        value=f_(e.point),
        decision=rank["decision"],
        equivalent=rank["equivalent"],
        contenders=rank["contenders"],
        identical=rank["identical"],
        critical_value=rank["critical_value"],
        **entry,
    )
    val = f"{metric} {est.fmt(metric, e.point)}, {est.fmt_ci(metric, entry['ci'])}"
    parts = [*notes, v.decision_text(metric, rank, val)]
    plans = plan(est, metric, lead, rank["order"][1:], margin=margin, crit=rank["critical_value"])
    res["plan"] = [p["text"] for p in plans if p["b"] in rank["contenders"]][:3]
    if res["plan"]:
        parts.append(" ".join(f"{t[0].upper()}{t[1:]}." for t in res["plan"]))
    parts.append(v.adaptive(metric, info))
    parts.append(v.references(metric, rank))
    parts.append(v.zero_shot(metric, lead))
    bp = selection["best_predictor"].get(metric) if is_downstream(metric) else None
    parts += v.upstream(metric, lead, bp, res)
    if res["ci_note"]:
        parts.append(f"About {lead}'s CI: {res['ci_note']}.")
    res["text"] = " ".join(p for p in parts if p)
    return res, plans
