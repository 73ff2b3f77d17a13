"""The report section "Which benchmark should you trust for this deployment" (``analysis["validity"]``): per
downstream metric, the predictors side by side, the verdict with its uncertainty, the published values for
context, the pairwise differences and how the predictors agree with each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perbench.report.extract import _d, _l, main_downstream
from perbench.report.fmt import badge, esc, na_span, num
from perbench.report.sections import _corr, _mhead, _table_raw

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
            _mhead(str(p.get("upstream")))
            + f'<br><span class="muted">{esc(descriptions.get(str(p.get("upstream")), ""))}</span>',
            num(p.get("n_systems"), pct=False),
            *(_corr(p.get(k)) for k, _, _ in _COEFS),
        ]
        for p in map(_d, _l(entry.get("predictors")))
    ]
    return _table_raw(["predictor", "systems", *(esc(n) for _, n, _ in _COEFS)], rows, "sel")


def _differences(entry: Mapping[str, Any]) -> str:
    rows = []
    for e in map(_d, _l(entry.get("differences"))):
        t = _d(e.get("kendall_tau_b"))
        decision = _DECISIONS.get(str(t.get("decision")), "no CI") if not e.get("na") else "n/a"
        on = ' <span class="ci">(shared systems)</span>' if e.get("partial") else ""
        rows.append(
            [
                _mhead(str(e.get("a"))),
                _mhead(str(e.get("b"))),
                num(e.get("n_systems"), pct=False) + on,
                *(_delta(e.get(k)) if not e.get("na") else na_span(e.get("na")) for k, _, _ in _COEFS),
                esc(decision),
            ]
        )
    head = ["a (higher τ-b)", "b", "systems", *(esc(d) for _, _, d in _COEFS), "τ-b decision"]
    return _table_raw(head, rows, "sel")


def _agreement(v: Mapping[str, Any]) -> str:
    rows = []
    for e in map(_d, _l(v.get("agreement"))):
        pub = "; ".join(str(x) for x in _l(e.get("published")))
        rows.append(
            [
                _mhead(str(e.get("a"))),
                _mhead(str(e.get("b"))),
                num(e.get("n_systems"), pct=False),
                _corr({"value": e.get("kendall_tau_b"), "ci": e.get("ci")}),
                esc(pub),
            ]
        )
    if not rows:
        return ""
    return (
        "<details><summary>How the predictors rank the systems relative to each other (τ-b)</summary>"
        + _table_raw(["a", "b", "systems", "τ-b", "published"], rows, "sel")
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
        f"deployment. Systems: {esc(v.get('systems', 'every system of the run'))}. "
        f"CIs: {esc(v.get('intervals', ''))}.</p>"
    )

    def block(d: str) -> str:
        e = _d(by[d])
        verdict = _d(e.get("verdict"))
        kind = "best" if verdict.get("decision") == "best" else "undecided"
        out = [f"<h3>{_mhead(d)} {badge(str(verdict.get('decision', 'none')), kind)}</h3>"]
        out.append(f"<p>{esc(verdict.get('text', ''))}</p>")
        if e.get("headline"):
            out.append(f"<p><strong>{esc(e['headline'])}</strong></p>")
        out.append(_predictor_table(e, descriptions))
        pub = [str(x) for x in _l(e.get("published"))]
        if pub:
            out.append(
                '<p class="muted">Published, for context (other RMs, data and judges): ' + esc("; ".join(pub)) + "</p>"
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
