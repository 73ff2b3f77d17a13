"""The verdict's upstream part: the pre-specified predictor's τ-b against the verdict metric, whether its
ranking agrees on the leader, and the best of all predictors only as a selected maximum."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perbench.metrics.analysis.base import is_downstream, same_value
from perbench.metrics.analysis.roles import DEPLOYABLE
from perbench.metrics.analysis.verdict_phrasing import Phrasing, names


class UpstreamPart(Phrasing):
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
            held = " on prompts held out from the outcome (cross-fitted over 2 folds)" if best.get("held_out") else ""
            out.append(
                f"The highest of the {best['k']} predictors here, {best['upstream']}, has τ-b {best['value']:+.2f}"
                f"{held}; as the maximum of {best['k']} it is selected after the fact{adj}."
            )
        res["max_of_k"] = best or None
        return out
