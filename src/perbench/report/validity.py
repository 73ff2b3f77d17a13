"""The report section "Which benchmark should you trust for this deployment" (``analysis["validity"]``): per
downstream metric, the predictors side by side, the verdict with its uncertainty, the published values for
context, the pairwise differences and how the predictors agree with each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import escape

from perbench.report.extract import _d, _l, main_downstream
from perbench.report.fmt import badge, metric_head, na_span, num, table
from perbench.report.sections import _corr

_COEFS = (("kendall_tau_b", "τ-b", "Δτ"), ("spearman", "ρ", "Δρ"), ("ndcg", "NDCG", "ΔNDCG"))
_DECISIONS = {"a": "a better", "b": "b better", "identical": "identical", "cannot tell": "cannot tell"}


def _delta(e: Any) -> str:
    e = _d(e)
    v, ci = e.get("delta"), _l(e.get("ci"))
    if not isinstance(v, int | float):
        return na_span(e.get("na") or "undefined")
    out = f"{float(v):+.2f}"
    if len(ci) == 2 and all(isinstance(c, int | float) for c in ci):
        out += f' <span class="ci">[{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]</span>'
    return out


def _predictor_table(entry: Mapping[str, Any], descriptions: Mapping[str, Any]) -> str:
    rows = [
        [
            metric_head(str(p.get("upstream")))
            + f'<br><span class="muted">{escape(descriptions.get(str(p.get("upstream")), ""))}</span>',
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
        on = ' <span class="ci">(shared systems)</span>' if e.get("partial") else ""
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
    if not rows:
        return ""
    return (
        "<details><summary>How the predictors rank the systems relative to each other (τ-b)</summary>"
        + table(["a", "b", "systems", "τ-b", "published"], rows, "sel")
        + "</details>"
    )


def validity_section(analysis: Mapping[str, Any] | None) -> str:
    a = _d(analysis)
    v = _d(a.get("validity"))
    by = _d(v.get("by_downstream"))
    if not by:
        return ""
    main = [d for d in main_downstream(a, 3) if d in by] or list(by)[:1]
    descriptions = _d(v.get("descriptions"))
    parts = ['<section id="validity"><h2>Which benchmark should you trust for this deployment</h2>']
    parts.append(
        '<p class="muted">Every system is scored on several upstream pair sets (the predictors); the one whose '
        "ranking of the systems agrees best with a downstream ranking is the benchmark to trust for that "
        f"deployment. Systems: {escape(v.get('systems', 'every system of the run'))}. "
        f"CIs: {escape(v.get('intervals', ''))}.</p>"
    )

    def block(d: str) -> str:
        e = _d(by[d])
        verdict = _d(e.get("verdict"))
        kind = "best" if verdict.get("decision") == "best" else "undecided"
        out = [f"<h3>{metric_head(d)} {badge(str(verdict.get('decision', 'none')), kind)}</h3>"]
        out.append(f"<p>{escape(verdict.get('text', ''))}</p>")
        if e.get("headline"):
            out.append(f"<p><strong>{escape(e['headline'])}</strong></p>")
        out.append(_predictor_table(e, descriptions))
        pub = [str(x) for x in _l(e.get("published"))]
        if pub:
            out.append(
                '<p class="muted">Published, for context (other RMs, data and judges): '
                + str(escape("; ".join(pub)))
                + "</p>"
            )
        out.append(
            f"<details><summary>pairwise differences ({len(_l(e.get('differences')))})</summary>"
            + _differences(e)
            + "</details>"
        )
        return "".join(out)

    parts += [block(d) for d in main]
    rest = [d for d in by if d not in main]
    if rest:
        parts.append(
            f"<details><summary>the other {len(rest)} downstream metrics</summary>"
            + "".join(block(d) for d in rest)
            + "</details>"
        )
    parts.append(_agreement(v))
    return "".join(parts) + "</section>"
