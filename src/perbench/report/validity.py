"""The report section "Which benchmark should you trust for this deployment" (``analysis["validity"]``): per
downstream metric, the predictors side by side, the verdict with its uncertainty, the published values for
context, the pairwise differences and how the predictors agree with each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from perbench.report.extract import _d, _l, main_downstream
from perbench.report.fmt import badge, metric_head, na_span, num, span, table
from perbench.report.sections import _corr
from perbench.report.templating import render

_COEFS = (("kendall_tau_b", "τ-b", "Δτ"), ("spearman", "ρ", "Δρ"), ("ndcg", "NDCG", "ΔNDCG"))
_DECISIONS = {"a": "a better", "b": "b better", "identical": "identical", "cannot tell": "cannot tell"}


def _delta(e: Any) -> str:
    e = _d(e)
    v, ci = e.get("delta"), _l(e.get("ci"))
    if not isinstance(v, int | float):
        return na_span(e.get("na") or "undefined")
    out = f"{float(v):+.2f}"
    if len(ci) == 2 and all(isinstance(c, int | float) for c in ci):
        out += " " + span("ci", f"[{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]")
    return out


def _predictor_table(entry: Mapping[str, Any], descriptions: Mapping[str, Any]) -> str:
    rows = [
        [
            f"{metric_head(str(p.get('upstream')))}<br>{span('muted', descriptions.get(str(p.get('upstream')), ''))}",
            num(p.get("n_systems"), pct=False),
            *(_corr(p.get(k)) for k, _, _ in _COEFS),
        ]
        for p in map(_d, _l(entry.get("predictors")))
    ]
    return table(["predictor", "systems", *(escape(n) for _, n, _ in _COEFS)], rows, "sel")


def _differences(entry: Mapping[str, Any]) -> str:
    rows = []
    for e in map(_d, _l(entry.get("differences"))):
        t = _d(e.get("kendall_tau_b"))
        decision = _DECISIONS.get(str(t.get("decision")), "no CI") if not e.get("na") else "n/a"
        on = " " + span("ci", "(shared systems)") if e.get("partial") else ""
        rows.append(
            [
                metric_head(str(e.get("a"))),
                metric_head(str(e.get("b"))),
                num(e.get("n_systems"), pct=False) + on,
                *(_delta(e.get(k)) if not e.get("na") else na_span(e.get("na")) for k, _, _ in _COEFS),
                escape(decision),
            ]
        )
    head = ["a (higher τ-b)", "b", "systems", *(escape(d) for _, _, d in _COEFS), "τ-b decision"]
    return table(head, rows, "sel")


def _agreement(v: Mapping[str, Any]) -> str:
    rows = []
    for e in map(_d, _l(v.get("agreement"))):
        pub = "; ".join(str(x) for x in _l(e.get("published")))
        rows.append(
            [
                metric_head(str(e.get("a"))),
                metric_head(str(e.get("b"))),
                num(e.get("n_systems"), pct=False),
                _corr({"value": e.get("kendall_tau_b"), "ci": e.get("ci")}),
                escape(pub),
            ]
        )
    return table(["a", "b", "systems", "τ-b", "published"], rows, "sel") if rows else ""


def validity_section(analysis: Mapping[str, Any] | None) -> str:
    a = _d(analysis)
    v = _d(a.get("validity"))
    by = _d(v.get("by_downstream"))
    if not by:
        return ""
    main = [d for d in main_downstream(a, 3) if d in by] or list(by)[:1]
    descriptions = _d(v.get("descriptions"))

    def block(d: str) -> dict[str, Any]:
        e = _d(by[d])
        verdict = _d(e.get("verdict"))
        kind = "best" if verdict.get("decision") == "best" else "undecided"
        return {
            "metric": metric_head(d),
            "badge": Markup(badge(str(verdict.get("decision", "none")), kind)),
            "text": str(verdict.get("text", "")),
            "headline": str(e.get("headline") or ""),
            "predictors": Markup(_predictor_table(e, descriptions)),
            "published": [str(x) for x in _l(e.get("published"))],
            "n_differences": len(_l(e.get("differences"))),
            "differences": Markup(_differences(e)),
        }

    return str(
        render(
            "validity.html.j2",
            systems=str(v.get("systems", "every system of the run")),
            intervals=str(v.get("intervals", "")),
            main=[block(d) for d in main],
            rest=[block(d) for d in by if d not in main],
            agreement=Markup(_agreement(v)),
        )
    )
