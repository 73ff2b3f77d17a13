"""The decision parts of the verdict: the headroom, the test against the null, the decision among the systems
that pass it, the tie-break among equivalent systems, the reference lines and the adaptive stop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.ranking import (
    BASELINE,
    EQUIVALENT,
    NO_BETTER,
    SEPARABLE,
    TOO_LITTLE,
    UNDECIDED,
    tie_order,
)
from perbench.metrics.analysis.roles import ORACLE_PICK, RANDOM_PICK
from perbench.metrics.analysis.verdict_phrasing import Phrasing, names

#: how the verdict names a baseline that could be the best
BASELINE_WORDS = {RANDOM_PICK: "a random pick from the same pool", "length": "picking the longest sample",
                  "random": "a random scorer"}  # fmt: skip


def baseline_words(m: str) -> str:
    return BASELINE_WORDS.get(m.partition("(")[0], f"the baseline {m}")


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
            g = s["gain"]
            low = g.get("lower_simultaneous")
            # the leader was picked as the largest of k gains: its gain is quoted with the bound that allows for that
            bound = f"simultaneous lower bound {self.pct(metric, low, True)}" if low is not None else self.est.fmt_ci(
                metric, g.get("ci"))  # fmt: skip
            text += f" The leader, {lead}, gains {self.pct(metric, g['value'], True)} ({bound}) over a random pick" + (
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
                f"No deployable system is shown better than a random pick from the same pool ({level}): none is "
                f"recommended for {metric.partition(':')[0]} on this evidence{left}."
            )
        text = f"{len(qualified)} of {k} deployable systems beat the random pick ({level}): {names(qualified)}"
        if below:
            pool = "a random pick from the same pool"
            text += f"; the other {len(below)} ({names(below)}) are not shown better than {pool}"
        return text + "."

    def decision(self, metric: str, rank: Mapping[str, Any], val: str, thin_plan: str) -> str:
        lead, comps = rank["order"][0] if rank["order"] else rank["leader"], {c["b"]: c for c in rank["comparisons"]}
        same = rank["identical"]
        twins = (
            f" {names(same)} {'scores' if len(same) == 1 else 'score'} identically to {lead} on every cell: the "
            "same choice."
            if same
            else ""
        )
        bset = rank.get("best_set") or {}
        members = list(bset.get("members") or [])
        level = f"{100 * self.est.level:g}%"
        setw = f"the simultaneous {level} confidence set for the best (multiple comparisons with the best)"
        decision = rank["decision"]
        if decision == TOO_LITTLE:
            return (
                f"Too little data to deploy or to call systems equivalent on {metric}: {rank.get('reason')}. "
                f"{lead} leads ({val}).{thin_plan}"
            )
        if decision == SEPARABLE:
            refs = [c for c in rank.get("vs_references") or [] if c.get("lower_simultaneous") is not None]
            shown = "; ".join(f"{c['b']}: {self.paired(metric, c) if k == 0 else self.bound(metric, c)}"
                              for k, c in enumerate(refs))  # fmt: skip
            text = f"Deploy {lead} ({val}): it is the only deployable system in {setw}"
            if refs:
                text += f", and it is shown better than every baseline ({shown})"
            runner = rank.get("vs_runner_up")
            if runner and not runner.get("reference"):
                text += f"; runner-up {runner['b']} ({self.bound(metric, runner)})"
            return text + f".{twins}"
        in_set = f"{len(members)} system{'s' * (len(members) != 1)} could be the best ({names(members)}; {setw})"
        if decision == BASELINE:
            refs = [m for m in members if m in set(bset.get("reference") or [])]
            top = refs[0]
            c = comps.get(top)
            diff = f"; {self.paired(metric, c)}" if c else ""
            return f"No reward model is shown better than {baseline_words(top)} on {metric}: {in_set}{diff}.{twins}"
        eq = [m for m in rank["equivalent"] if m not in same]
        lvl = f"{100 * rank['equivalence_level']:g}%"
        best_ref = self.best_reference(metric, rank)
        if decision == EQUIVALENT:
            if not eq:
                return (
                    f"{names([lead, *same])} are identical on {metric} ({val}): each scores the same on every "
                    f"cell, so either is the same choice."
                )
            return (
                f"{in_set[0].upper()}{in_set[1:]}, and they are practically equivalent on {metric}: every pair's "
                f"{lvl} CI lies inside {self.margin_text(metric)} (two one-sided tests); leader {lead}: {val}.{twins}"
                f"{best_ref}"
            )
        if decision != UNDECIDED:
            return ""
        why = ""
        others = [m for m in members if m != lead and m not in same]
        out = [c["b"] for c in rank["comparisons"] if c["status"] == "excluded" and not c.get("reference")]
        rest = ""
        if out:
            rest = f" {names(out)} {'is' if len(out) == 1 else 'are'} out of the set (another system is shown better)."
        flipped = next((c for c in rank["comparisons"] if c.get("reversed")), None)
        if lead not in members and flipped is not None:
            why = (
                f" On the {flipped['cells']} cells both cover {flipped['b']} scores higher "
                f"({self.bound(metric, flipped)}), although {lead} has the higher mean over all its cells."
            )
        elif len([m for m in members if m not in same]) <= 1:
            base = [c for c in rank.get("vs_references") or [] if (c.get("lower_simultaneous") or 0) <= 0]
            weak = base[0] if base else None
            if weak is not None:
                why = f" {lead} is the only system left in the set but is not shown better than {weak['b']} " + (
                    f"({self.bound(metric, weak)}).")  # fmt: skip
            elif lead not in (rank.get("order") or []):
                why = f" {lead} is the only system left in the set but is not shown better than a random pick."
        elif others:
            first = comps[others[0]]
            why = f" {self.bound(metric, first)}"
            if first.get("tost_ci") is not None and self.margin > 0:
                why += f"; its {lvl} CI is not inside {self.margin_text(metric)}"
            why += "."
        text = f"The data cannot yet decide on {metric}: {in_set}; {lead} leads ({val}).{why}{twins}{rest}{best_ref}"
        return text

    def best_reference(self, metric: str, rank: Mapping[str, Any]) -> str:
        """The leader against the highest baseline, with the paired CI (" " + a sentence, or "")."""
        refs = [c for c in rank.get("vs_references") or [] if c.get("b") != RANDOM_PICK and c.get("delta") is not None]
        if not refs:
            return ""
        top = min(refs, key=lambda c: float(c["delta"]))
        return f" Against the best baseline, {top['b']}: {self.paired(metric, top)}."

    def bound(self, metric: str, c: Mapping[str, Any]) -> str:
        """a − b with its simultaneous lower bound (one-sided, over a's comparisons in the set for the best)."""
        e = self.est
        text = f"{c['a']} − {c['b']} = {e.fmt(metric, c['delta'], True)}"
        low, ci = c.get("lower_simultaneous"), c.get("ci")
        if ci is not None and ci[0] == ci[1]:
            text += " on every cell (no variation in the resamples)"
        elif low is not None:
            text += f", simultaneous lower bound {e.fmt(metric, low, True)}"
        return text + (f", on the {c['cells']} cells both cover" if c.get("partial") else "")

    def paired(self, metric: str, c: Mapping[str, Any]) -> str:
        """a − b with its paired (marginal) CI and its simultaneous lower bound."""
        e = self.est
        text = f"{c['a']} − {c['b']} = {e.fmt(metric, c['delta'], True)} ({e.fmt_ci(metric, c.get('ci_marginal'))}"
        low = c.get("lower_simultaneous")
        if low is not None:
            text += f"; simultaneous lower bound {e.fmt(metric, low, True)}"
        return text + ")"

    def stability(self, metric: str, rank: Mapping[str, Any]) -> str:
        st = rank.get("stability") or {}
        outs = st.get("outcomes") or {}
        if st.get("replicates", 0) < 2 or len(outs) < 1 or rank["decision"] == TOO_LITTLE:
            return ""
        picks = st.get("picks") or {}
        label = {SEPARABLE: "deploy", BASELINE: "a baseline as good", NO_BETTER: "none shown better than a random pick"}
        shown = ", ".join(f"{label.get(k, k)} {100 * v:.0f}%" for k, v in outs.items())
        text = f"Re-run on the {st['replicates']} bootstrap replicates of this run, the rule gives {shown}"
        if picks:
            text += "; picks " + ", ".join(f"{m} {100 * v:.0f}%" for m, v in list(picks.items())[:4])
        return text + "."

    def tie_break(self, candidates: Sequence[str]) -> tuple[str | None, str]:
        """Among interchangeable systems, the one a team can act on: the least data, then the cheapest to fit, then
        user-agnostic; (pick, why) — (None, "") without a choice to make."""
        if len(candidates) < 2:
            return None, ""

        def info(m: str) -> Mapping[str, Any]:
            return self.systems.get(m) or {}

        ranked = tie_order(candidates, self.systems)
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
