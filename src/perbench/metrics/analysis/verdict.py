"""The verdict: what to deploy, against what null, at what level, and what the choice trades away.

Every sentence is read off the numbers it states, and says its level (simultaneous or marginal):

1. **Headroom first** (pooled decoders, :mod:`.headroom`): what the oracle pick gains over a random pick from the same
   pool, and the share of it the leader captures.
2. **Against the null**: only deployable systems that beat the random pick (one-sided, simultaneous over the systems)
   are ranked; when none does, the verdict says so and recommends nothing.
3. **The decision among them** (:mod:`.ranking`): deploy (simultaneous CIs separate the leader), practically
   equivalent (TOST within a margin stated in points: a fraction of the headroom by default), undecided (with the
   users × prompts that would decide), or too little data (CIs that could not resample users and prompts).
   Among equivalent systems a tie-break a team can act on picks one: least data, cheapest to fit, user-agnostic.
4. **What the choice costs**: the pick against zero-shot decoding on every other quality of the same decoder, the
   difference to zero-shot split into what sampling alone gives (random pick − greedy) and what the reward model
   adds (pick − random pick), and its reward-hacking win rate beside the win rate of a scorer with no information.
5. **Upstream**: the pre-specified predictor's τ-b (``verdict_predictor``, default ``rm_acc_all``), and the best of
   all predictors only as a maximum, with an interval adjusted for having been selected.

Lists of systems are compact (a few names, then "and N more").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import DEFAULT_VERDICT_METRIC, ZERO_SHOT, f_, is_downstream, same_value
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.power import plan
from perbench.metrics.analysis.ranking import EQUIVALENT, NO_BETTER, SEPARABLE, TOO_LITTLE, ranking
from perbench.metrics.analysis.roles import DEPLOYABLE, ORACLE_PICK, RANDOM_PICK

STOPPED = {
    "separable": "the top was separable",
    "equivalent": "equivalence within the margin was established",
    "budget": "the budget ({budget}) was spent",
}
#: the upstream metric the verdict reads when the config names none: RM accuracy on every test pair
DEFAULT_PREDICTOR = "rm_acc_all"
_QUALITY_NAMES = {
    "rubric_satisfaction": "rubric satisfaction",
    "personal_reward": "the simulated user's exact reward",
    "rouge1": "ROUGE-1",
    "rougeL": "ROUGE-L",
    "bertscore_f1": "BERTScore-F1",
    "judge_score": "judge score",
}
#: why a configured verdict metric can be missing, by its quality
_MISSING = {
    "rubric_satisfaction": "no user of this benchmark has a checkable rubric",
    "judge_score": "the run has no judge, or no user has answer-key aspects for it",
    "personal_reward": "the benchmark names no reward models that define its users' reward (PersonalLLM)",
    "rouge1": "no user has a reference text",
    "rougeL": "no user has a reference text",
    "bertscore_f1": "no user has a reference text, or BERTScore is off",
}


def names(xs: Sequence[str], most: int = 3) -> str:
    """``a``, ``a and b``, ``a, b and c``, or ``a, b, c and N more``: never a long list in a sentence."""
    xs = list(xs)
    if len(xs) > most + 1:
        return ", ".join(xs[:most]) + f" and {len(xs) - most} more"
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


class Verdict:
    def __init__(
        self,
        est: Estimates,
        roles: Mapping[str, str],
        margin: Mapping[str, Any],
        room: Mapping[str, Any] | None,
        systems: Mapping[str, Mapping[str, Any]] | None,
    ) -> None:
        self.est, self.roles, self.room = est, roles, room
        self.margin = float(margin["value"])
        self.margin_source = str(margin["source"])
        self.systems = systems or {}

    # ------------------------------------------------------------------ formatting
    def pct(self, metric: str, x: float, delta: bool = False) -> str:
        return self.est.fmt(metric, x, delta)

    def with_ci(self, metric: str, e: Mapping[str, Any] | None, delta: bool = True, label: str | None = None) -> str:
        if not e or e.get("value") is None:
            return "n/a"
        return f"{self.pct(metric, e['value'], delta)} ({self.est.fmt_ci(metric, e.get('ci'), label)})"

    def share_text(self, s: Mapping[str, Any] | None) -> str:
        if not s or s.get("value") is None:
            return ""
        ci = s.get("ci")
        inner = f", 95% CI [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci else ""
        return f"{100 * s['value']:.0f}% of the headroom{inner}"

    def sim(self, metric: str, c: Mapping[str, Any]) -> str:
        e = self.est
        text = f"{c['a']} − {c['b']} = {e.fmt(metric, c['delta'], True)}"
        if c["ci"] is not None and c["ci"][0] == c["ci"][1]:
            text += " on every cell (no variation in the resamples)"
        else:
            text += ", " + e.fmt_ci(metric, c["ci"], f"simultaneous {100 * e.level:g}% CI")
        return text + (f", on the {c['cells']} cells both cover" if c["partial"] else "")

    def margin_text(self, metric: str) -> str:
        shown = "±" + self.est.fmt(metric, self.margin, True).lstrip("+")
        return f"{shown}, the margin: {self.margin_source}"

    # ------------------------------------------------------------------ the parts
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

    def trade_offs(self, metric: str, pick: str) -> tuple[list[dict[str, Any]], str]:
        """The pick against zero-shot decoding on every other quality of its decoder (marginal 95% CIs)."""
        fam = metric.partition(":")[0]
        rows: list[dict[str, Any]] = []
        for k in self.est.downstream:
            dec, _, q = k.partition(":")
            if dec != fam or k == metric or q in ("rm_win",) or q.startswith("bon_gain"):
                continue
            zs = self.est.zero_shot_metric(k)
            d = None if zs is None else self.est.delta(pick, k, ZERO_SHOT, zs)
            if d is None:
                continue
            ci = self.est.ci(d)
            rows.append({"metric": k, "delta": f_(d.point), "ci": None if ci is None else list(ci)})
        lost = [r for r in rows if r["ci"] is not None and r["ci"][1] < 0]
        won = [r for r in rows if r["ci"] is not None and r["ci"][0] > 0]

        def say(r: Mapping[str, Any]) -> str:
            q = _QUALITY_NAMES.get(r["metric"].partition(":")[2], r["metric"])
            return f"{q} {self.pct(r['metric'], r['delta'], True)} ({self.est.fmt_ci(r['metric'], r['ci'])})"

        parts = []
        if lost:
            parts.append(f"Against zero-shot decoding, {pick} trades away " + ", ".join(say(r) for r in lost))
        if won:
            parts.append(("and gains " if lost else f"Against zero-shot decoding, {pick} gains ") + ", ".join(
                say(r) for r in won
            ))  # fmt: skip
        text = (" ".join(parts) + " (marginal CIs).") if parts else ""
        return rows, text

    def zero_shot_split(self, metric: str, pick: str) -> tuple[dict[str, Any] | None, str]:
        zs = self.est.zero_shot_metric(metric)
        d = None if zs is None else self.est.delta(pick, metric, ZERO_SHOT, zs)
        if d is None or zs is None:
            return None, ""
        ci = self.est.ci(d)
        total = {"value": f_(d.point), "ci": None if ci is None else list(ci)}
        on = f", on the {d.cells} cells both cover" if d.partial else ""
        how = "does not reliably beat"
        if ci is not None and ci[0] > 0:
            how = "beats"
        elif ci is not None and ci[1] < 0:
            how = "is worse than"
        head = f"{pick} {how} zero-shot decoding ({zs}: {self.with_ci(metric, total)}{on})"
        r = self.room
        sys = (r.get("systems") or {}).get(pick) if r else None
        if not r or not sys or not r.get("sampling_term"):
            return {"total": total}, head + ", marginal CI."
        out = {"total": total, "sampling": r["sampling_term"], "reranking": sys.get("gain")}
        return out, (
            f"{head}, marginal CIs: of that, sampling alone (random pick − greedy) gives "
            f"{self.with_ci(metric, r['sampling_term'])} and re-ranking by {pick} adds "
            f"{self.with_ci(metric, sys.get('gain'))}."
        )

    def win_rate(self, metric: str, pick: str) -> tuple[dict[str, Any] | None, str]:
        fam = metric.partition(":")[0]
        k = f"{fam}:rm_win"
        mine, null = self.est.value(pick, k), self.est.value(RANDOM_PICK, k)
        if mine is None or null is None:
            return None, ""
        d = self.est.delta(pick, k, RANDOM_PICK, k)
        ci = None if d is None else self.est.ci(d)
        out = {"value": f_(mine.point), "null": f_(null.point), "excess": None if d is None else f_(d.point),
               "ci": None if ci is None else list(ci)}  # fmt: skip
        excess = "" if d is None else f": {self.pct(k, d.point, True)} beyond it ({self.est.fmt_ci(k, ci)})"
        return out, (
            f"Reward hacking: {pick}'s own reward prefers its pick to the zero-shot output in "
            f"{self.pct(k, mine.point)} of cells, where a scorer with no information gets "
            f"{self.pct(k, null.point)} (n/(n+1)){excess}."
        )

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

    def upstream(
        self,
        metric: str,
        lead: str,
        valid: Mapping[str, Any] | None,
        predictor: str,
        res: dict[str, Any],
        explicit: bool = True,
    ) -> list[str]:
        by = ((valid or {}).get("by_downstream") or {}).get(metric) or {}
        rows = {r["upstream"]: r for r in by.get("predictors") or []}
        if not is_downstream(metric):
            return []
        note = ""
        if predictor not in rows:
            if not rows:
                return [f"No upstream metric has a defined rank correlation with {metric} over the deployable systems."]
            if explicit:
                return [f"The pre-specified predictor {predictor} has no rows in this run; see the validity section."]
            # the validity section's choice (the first predictor present), so both quote the same one
            fallback = (by.get("prespecified") or {}).get("upstream") or next(iter(rows))
            note = f" ({predictor}, the default, is not in this run: the first upstream metric present is read)"
            predictor = fallback
        row = rows[predictor]
        t = row.get("kendall_tau_b") or {}
        res.update(upstream_metric=predictor, upstream_tau=t.get("value"), upstream_tau_ci=t.get("ci"))
        if t.get("value") is None:
            return [f"{predictor} (pre-specified): {t.get('na') or 'no τ-b'}."]
        tci = t.get("ci")
        tau = f"τ-b {t['value']:+.2f}" + (f", 95% CI [{tci[0]:+.2f}, {tci[1]:+.2f}]" if tci else ", no CI")
        if t.get("note"):
            tau += f"; {t['note']}"
        ups = {
            m: x
            for m in self.est.methods_with(predictor)
            if self.roles.get(m) == DEPLOYABLE and (x := self.est.point_of(m, predictor)) is not None
        }
        out = [f"Upstream, {predictor} (the predictor fixed before the run{note}) ranks the {row['n_systems']} "
               f"deployable systems against {metric} with {tau}."]  # fmt: skip
        if ups and lead in ups:
            top_value = max(ups.values())
            top = sorted(m for m, v in ups.items() if same_value(v, top_value))
            agrees = top == [lead] if len(top) == 1 or lead not in top else None
            res["agrees"] = agrees
            if agrees:
                out.append(f"The upstream ranking by {predictor} agrees: it also puts {lead} first.")
            elif agrees is False:
                out.append(f"The upstream ranking by {predictor} disagrees: it puts {names(top)} first.")
            else:
                out.append(f"The upstream ranking by {predictor} puts {names(top)} jointly first.")
        if tci is not None and tci[0] <= 0:
            out.append(f"{predictor} does not reliably predict {metric} (its CI includes 0).")
        best = (by.get("verdict") or {}).get("max_of_k") or {}
        if best.get("upstream") and best["upstream"] != predictor and best.get("value") is not None:
            ci = best.get("ci")
            adj = f", simultaneous 95% interval [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""
            out.append(
                f"The highest of the {best['k']} predictors here, {best['upstream']}, has τ-b {best['value']:+.2f}; "
                f"as the maximum of {best['k']} it is selected after the fact{adj}."
            )
        res["max_of_k"] = best or None
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


def _thin_plan() -> str:
    """What a claim needs at the least, for a verdict on too little data (the planner's size for the whole decision
    follows the verdict: ``analyze`` adds it)."""
    from perbench.metrics.bootstrap import MIN_LEVELS

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
        "parts": [],
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
    if rank["decision"] == NO_BETTER:
        res.update(decision=NO_BETTER)
    else:
        res.update(
            deploy=rank["best"],
            runner_up=(rank["vs_runner_up"] or {}).get("b"),
            tied=rank["tied"],
            decision=rank["decision"],
            equivalent=rank["equivalent"],
            contenders=rank["contenders"],
            identical=rank["identical"],
            critical_value=rank["critical_value"],
        )
        plans = plan(est, metric, lead, rank["order"][1:], margin=res["margin"], crit=rank["critical_value"])
        thin = _thin_plan() if rank["decision"] == TOO_LITTLE else ""
        parts.append(("decision", v.decision(metric, rank, val, thin)))
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
