"""What the verdict's choice costs: the pick against zero-shot decoding on the other qualities of its decoder and on
the length of its answers (words), each difference to zero-shot split into sampling and re-ranking, and its
reward-hacking win rate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import ZERO_SHOT, Est, f_, is_descriptive
from perbench.metrics.analysis.roles import RANDOM_PICK
from perbench.metrics.analysis.verdict_phrasing import Phrasing

_QUALITY_NAMES = {
    "rubric_satisfaction": "rubric satisfaction",
    "personal_reward": "the simulated user's exact reward",
    "rouge1": "ROUGE-1",
    "rougeL": "ROUGE-L",
    "bertscore_f1": "BERTScore-F1",
    "judge_score": "judge score",
}


class CostParts(Phrasing):
    def _part(self, d: Est | None) -> dict[str, Any] | None:
        if d is None:
            return None
        ci = self.est.ci(d)
        return {"value": f_(d.point), "ci": None if ci is None else list(ci), "cells": d.cells, "partial": d.partial}

    def trade_offs(self, metric: str, pick: str) -> tuple[list[dict[str, Any]], str]:
        """The pick against zero-shot decoding on every other quality of its decoder (marginal 95% CIs), each
        difference split, where the decoder has a random pick from the same pool, into ``sampling`` (random pick −
        zero-shot: what drawing from the policy does, whichever RM re-ranks) and ``reranking`` (pick − random pick:
        what the reward model does); the sentence charges the reward model with its part only."""
        fam = metric.partition(":")[0]
        rows: list[dict[str, Any]] = []
        for k in [*self.est.downstream, *self.est.descriptive]:
            dec, _, q = k.partition(":")
            if dec != fam or k == metric or q in ("rm_win",) or q.startswith("bon_gain"):
                continue
            zs = self.est.zero_shot_metric(k)
            d = None if zs is None else self.est.delta(pick, k, ZERO_SHOT, zs)
            if d is None or zs is None:
                continue
            ci = self.est.ci(d)
            row: dict[str, Any] = {"metric": k, "delta": f_(d.point), "ci": None if ci is None else list(ci)}
            rand = self.est.value(RANDOM_PICK, k)
            row["sampling"] = None if rand is None else self._part(self.est.delta(RANDOM_PICK, k, ZERO_SHOT, zs))
            row["reranking"] = None if rand is None else self._part(self.est.delta(pick, k, RANDOM_PICK, k))
            rows.append(row)
        quality = [r for r in rows if not is_descriptive(r["metric"])]
        split = [r for r in quality if r["reranking"] is not None and r["reranking"]["value"] is not None]
        whole = [r for r in quality if r not in split]
        length = [r for r in rows if is_descriptive(r["metric"])]
        texts = (self._reranking_text(pick, split), self._total_text(pick, whole), self._length_text(pick, length))
        return rows, " ".join(t for t in texts if t)

    def _say(self, k: str, value: float, ci: Sequence[float] | None) -> str:
        q = _QUALITY_NAMES.get(k.partition(":")[2], k)
        return f"{q} {self.pct(k, value, True)} ({self.est.fmt_ci(k, ci)})"

    def _reranking_text(self, pick: str, rows: Sequence[Mapping[str, Any]]) -> str:
        """What re-ranking by the pick changes on the other qualities (the RM's part of each trade-off)."""
        if not rows:
            return ""
        part = [(r["metric"], r["reranking"]) for r in rows]
        lost = [(k, p) for k, p in part if p["ci"] is not None and p["ci"][1] < 0]
        won = [(k, p) for k, p in part if p["ci"] is not None and p["ci"][0] > 0]
        rest = [(k, p) for k, p in part if (k, p) not in lost and (k, p) not in won]

        def say(xs: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
            return ", ".join(self._say(k, p["value"], p["ci"]) for k, p in xs)

        head = f"Re-ranking by {pick} (its pick − a random pick from the same pool, marginal CIs)"
        bits = []
        if lost:
            bits.append("trades away " + say(lost))
        if won:
            bits.append("gains " + say(won))
        if rest:
            bits.append(("and " if bits else "") + "changes no other quality reliably: " + say(rest))
        sampled = [
            (r["metric"], r["sampling"])
            for r in rows
            if r.get("sampling") and r["sampling"]["ci"] is not None and (r["sampling"]["ci"][1] < 0 or
                                                                         r["sampling"]["ci"][0] > 0)
        ]  # fmt: skip
        tail = (
            "; the rest of each difference to zero-shot decoding comes from sampling from the policy (a random pick "
            "from the pool − zero-shot), whichever reward model re-ranks"
            if sampled
            else ""
        )
        return f"{head} {'; '.join(bits)}{tail}."

    def _total_text(self, pick: str, rows: Sequence[Mapping[str, Any]]) -> str:
        """The pick against zero-shot decoding where the decoder has no random pick to split the difference by."""
        lost = [r for r in rows if r["ci"] is not None and r["ci"][1] < 0]
        won = [r for r in rows if r["ci"] is not None and r["ci"][0] > 0]
        parts = []
        if lost:
            parts.append(f"Against zero-shot decoding, {pick} trades away " + ", ".join(
                self._say(r["metric"], r["delta"], r["ci"]) for r in lost
            ))  # fmt: skip
        if won:
            parts.append(("and gains " if lost else f"Against zero-shot decoding, {pick} gains ") + ", ".join(
                self._say(r["metric"], r["delta"], r["ci"]) for r in won
            ))  # fmt: skip
        return (" ".join(parts) + " (marginal CIs).") if parts else ""

    def _length_text(self, pick: str, rows: Sequence[Mapping[str, Any]]) -> str:
        """How the pick changes the length of the answers (words) against zero-shot decoding: where the decoder has
        a random pick, re-ranking's part (the reward model's) with sampling's beside it, else the whole difference.
        Length is neither won nor lost: it is said, never counted as a trade-off."""
        out = []
        for r in rows:
            k, rr, sa = r["metric"], r.get("reranking"), r.get("sampling")

            def how(p: Mapping[str, Any], k: str = k) -> str:
                ci, said = p.get("ci"), self.with_ci(k, p)
                if ci is not None and ci[0] > 0:
                    return f"lengthens answers by {said}"
                if ci is not None and ci[1] < 0:
                    return f"shortens answers by {said}"
                return f"does not reliably change answer length ({said})"

            if rr and rr.get("value") is not None:
                text = f"Length: re-ranking by {pick} {how(rr)} against a random pick from the same pool"
                if sa and sa.get("value") is not None:
                    sampled = "sampling from the policy (a random pick − zero-shot), whichever reward model re-ranks,"
                    text += f"; {sampled} {how(sa)}"
                out.append(text + ".")
            elif r.get("delta") is not None:
                out.append(f"Length: against zero-shot decoding, {pick} {how({'value': r['delta'], 'ci': r['ci']})}.")
        return " ".join(out)

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
