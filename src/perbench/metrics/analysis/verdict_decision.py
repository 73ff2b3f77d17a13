"""The decision parts of the verdict: the headroom, the test against the null, the decision among the systems
that pass it, the tie-break among equivalent systems, the reference lines and the adaptive stop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.ranking import EQUIVALENT, SEPARABLE, TOO_LITTLE
from perbench.metrics.analysis.roles import ORACLE_PICK, RANDOM_PICK
from perbench.metrics.analysis.verdict_phrasing import Phrasing, names

STOPPED = {
    "separable": "the top was separable",
    "equivalent": "equivalence within the margin was established",
    "budget": "the budget ({budget}) was spent",
}


class DecisionParts(Phrasing):
    def headroom(self, metric: str, lead: str | None) -> str:
        r = self.room
        if not r or not r.get("oracle") or not r.get("headroom"):
            return ""
        o, rp, h = r["oracle"], r["random_pick"], r["headroom"]
        if h.get("value") is None:
            return ""
        text = (
            f"Headroom on {metric}: the oracle pick ({o['by']}) scores {self.pct(metric, o['value'])} and a random "
            f"pick from the same pool {self.pct(metric, rp['value'])}, so re-ranking this pool can gain at most "
            f"{self.with_ci(metric, h)}."
        )
        s = (r.get("systems") or {}).get(lead) if lead else None
        if s and s.get("gain", {}).get("value") is not None:
            share = self.share_text(s.get("share"))
            text += f" The leader, {lead}, gains {self.with_ci(metric, s['gain'])} over a random pick" + (
                f": {share}." if share else "."
            )
        return text

    def null_test(self, metric: str, deployable: Sequence[str], qualified: Sequence[str]) -> str:
        r = self.room
        if not r:
            return ""
        k = len(deployable)
        below = [m for m in deployable if m not in qualified]
        level = f"one-sided, simultaneous {100 * self.est.level:g}% over the {k} deployable system{'s' * (k != 1)}"
        if not qualified:
            unused = (r.get("headroom") or {}).get("value")
            left = f"; the {self.pct(metric, unused, True).lstrip('+')} of headroom goes unused" if unused else ""
            return (
                f"No deployable system beats a random pick from the same pool ({level}): none is recommended for "
                f"{metric.partition(':')[0]} on this evidence{left}."
            )
        text = f"{len(qualified)} of {k} deployable systems beat the random pick ({level}): {names(qualified)}"
        if below:
            text += f"; the other {len(below)} ({names(below)}) are no better than a random pick from the same pool"
        return text + "."

    def decision(self, metric: str, rank: Mapping[str, Any], val: str, thin_plan: str) -> str:
        lead, comps = rank["order"][0], {c["b"]: c for c in rank["comparisons"]}
        same = rank["identical"]
        twins = (
            f" {names(same)} {'scores' if len(same) == 1 else 'score'} identically to {lead} on every cell: the "
            "same choice."
            if same
            else ""
        )
        k = len(rank["order"]) - 1
        pool = " that beat the random pick" if self.room else ""
        family = f"simultaneous {100 * self.est.level:g}% CIs over the {k} comparison{'s' * (k != 1)} with the leader"
        decision = rank["decision"]
        if decision == TOO_LITTLE:
            return (
                f"Too little data to deploy or to call systems equivalent on {metric}: {rank.get('reason')}. "
                f"{lead} leads ({val}).{thin_plan}"
            )
        if decision == SEPARABLE:
            if k == 0:
                only = "the only system that beats the random pick" if self.room else "the only deployable system"
                caveat = " (the others are no better than chance, not shown worse than it)" if self.room else ""
                return f"Deploy {lead} ({val}): it is {only} with {metric}{caveat}."
            runner = rank["vs_runner_up"]
            among = "among the systems that beat the random pick it beats every other" if self.room else (
                "it beats every other deployable reward model"
            )  # fmt: skip
            return (
                f"Deploy {lead} ({val}): {among}, the {family} all excluding 0; "
                f"runner-up {runner['b']} ({self.sim(metric, runner)}).{twins}"
            )
        eq = [m for m in rank["equivalent"] if m not in same]
        worse = [c["b"] for c in rank["comparisons"] if c["status"] == "excluded"]
        rest = ""
        if worse:
            who = f"{names(worse)} {'is' if len(worse) == 1 else 'are'}"
            rest = f" {who} worse ({family} exclude 0)."
        lvl = f"{100 * rank['equivalence_level']:g}%"
        if decision == EQUIVALENT:
            if not eq:
                return (
                    f"{names([lead, *same])} are identical on {metric} ({val}): each scores the same on every "
                    f"cell, so either is the same choice.{rest}"
                )
            return (
                f"{len(eq) + 1} systems{pool} are practically equivalent on {metric} ({names([lead, *eq])}): each "
                f"difference to {lead} has its {lvl} CI inside {self.margin_text(metric)} (two one-sided tests; "
                f"marginal per comparison); leader {lead}: {val}.{twins}{rest}"
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
                gap += f"; its {lvl} CI is not inside {self.margin_text(metric)}"
        n_c = len(rank["contenders"])
        also = ""
        if eq:
            also = f" {names(eq)} {'is' if len(eq) == 1 else 'are'} practically equivalent to {lead}."
        return (
            f"The data cannot yet decide on {metric}: {lead} leads ({val}), but {n_c} system{'s' * (n_c != 1)} "
            f"({names(rank['contenders'])}) {'is' if n_c == 1 else 'are'} neither separated from it ({family}) "
            f"nor within the {self.margin_text(metric)} equivalence margin; {gap}.{twins}{also}{rest}"
        )

    def tie_break(self, candidates: Sequence[str]) -> tuple[str | None, str]:
        """Among interchangeable systems, the one a team can act on: the least data, then the cheapest to fit, then
        user-agnostic; (pick, why) — (None, "") without a choice to make."""
        if len(candidates) < 2:
            return None, ""

        def info(m: str) -> Mapping[str, Any]:
            return self.systems.get(m) or {}

        def key(m: str) -> tuple[float, float, int, str]:
            i = info(m)
            frac = float(i.get("train_fraction") or 1.0)
            cost = float(i.get("fit_cost", 0.0) or 0.0)
            return (frac, cost, 0 if i.get("user_agnostic") else 1, m)

        ranked = sorted(candidates, key=key)
        pick = ranked[0]
        i = info(pick)
        why = []
        fracs = {float(info(m).get("train_fraction") or 1.0) for m in candidates}
        if len(fracs) > 1:
            why.append(f"it needs the least data ({100 * float(i.get('train_fraction') or 1.0):g}% of the train pairs)")
        costs = {float(info(m).get("fit_cost", 0.0) or 0.0) for m in candidates}
        if len(costs) > 1 and not why:
            why.append("it is the cheapest to fit")
        if i.get("user_agnostic") and not why:
            why.append("it is user-agnostic (one reward for every user)")
        if not why:
            why.append("first by name (the candidates need the same data and cost)")
        return pick, "; ".join(why)

    def references(self, metric: str, rank: Mapping[str, Any]) -> str:
        refs = []
        for m in rank["reference_lines"]:
            v = self.est.point_of(m, metric)
            if v is None:
                continue
            role = {RANDOM_PICK: "null", ORACLE_PICK: "ceiling"}.get(m, self.roles.get(m, "baseline"))
            refs.append(f"{m} {self.est.fmt(metric, v)} ({role})")
        if not refs:
            return ""
        shown = ", ".join(refs[:6]) + (f" and {len(refs) - 6} more" if len(refs) > 6 else "")
        return f"Reference lines, never recommended: {shown}."

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
