"""Report sections read from ``results["analysis"]``: leaderboard, method table, selection, fairness (the verdict
box is in :mod:`perbench.report.verdict`).

Each function returns HTML ("" when its data is absent); "best" is only ever what the analysis's ranking says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from perbench.report.extract import _d, _l, main_downstream, main_upstream
from perbench.report.fmt import (
    badge,
    is_missing,
    is_pct_metric,
    metric_head,
    na_span,
    num,
    quality_label,
    span,
    value_ci,
)
from perbench.report.labels import name_cell, short
from perbench.report.templating import render
from perbench.report.verdict import mark

CORRELATIONS = (
    ("kendall_tau_b", "Kendall τ-b"),
    ("weighted_tau", "weighted τ"),
    ("spearman", "Spearman ρ"),
    ("pearson", "Pearson r"),
    ("ndcg", "NDCG"),
    ("rbo", "RBO"),
)


def cell_html(entry: Any, metric: str) -> str:
    """``value [lo, hi] ± sd`` of a table entry, or n/a with the reason on hover."""
    e = _d(entry)
    if is_missing(e.get("value")):
        return na_span(e.get("na") if entry is not None else "not measured for this method")
    out = value_ci(e["value"], e.get("ci"), is_pct_metric(metric))
    sd = e.get("sd_seeds")
    if not is_missing(sd):
        out += " " + span("ci", f"± {num(sd, is_pct_metric(metric))} sd")
    return out


def own_decoding(tab: Mapping[str, Any], method: str, metric: str) -> str | None:
    """For a pure decoder such as ``zero_shot``, the metric ``METHOD:QUALITY`` standing in for ``D:QUALITY``."""
    if ":" not in metric or not is_missing(_d(_d(tab.get(method)).get(metric)).get("value")):
        return None
    own = f"{method}:{metric.partition(':')[2]}"
    return own if own != metric and not is_missing(_d(_d(tab.get(method)).get(own)).get("value")) else None


def leaderboard(
    analysis: Mapping[str, Any] | None, title: str = "Leaderboard", names: Mapping[str, str] | None = None
) -> str:
    """Methods (baselines included) in the verdict metric's ranking order, headline metrics with CIs (``names``:
    compact labels)."""
    a = _d(analysis)
    tab = _d(a.get("table"))
    if not tab:
        return ""
    ranking = _d(a.get("ranking"))
    cols = [*main_downstream(a, 3), *main_upstream(a, 3)]
    cols = list(dict.fromkeys(c for c in cols if c in ranking or any(c in _d(r) for r in tab.values())))
    if not cols:
        return ""
    order = [str(m) for m in _l(_d(ranking.get(cols[0])).get("order"))]
    methods = [m for m in order if m in tab] + [m for m in _l(a.get("methods")) or list(tab) if m not in order]
    rows = []
    for i, m in enumerate(methods, 1):
        cells = [str(i) if m in order else "–", name_cell(m, names or {})]
        for c in cols:
            r = _d(ranking.get(c))
            own = own_decoding(tab, m, c)
            if own is not None:  # a decoder without an RM (zero-shot): its own value, as the reference
                cells.append(cell_html(_d(tab.get(m)).get(own), own) + " " + span("ci", "(reference)"))
                continue
            html = cell_html(_d(tab.get(m)).get(c), c)
            got = mark(r, m)
            if got is not None:
                html += " " + badge(*got)
            elif m in _l(r.get("reference_lines")):
                html += " " + span("ci", "(reference)")
            cells.append(html)
        rows.append(cells)
    head = ["#", "method", *(metric_head(c) for c in cols)]
    nm = names or {}
    notes: list[tuple[Markup, str, str]] = []
    for c in cols:
        r = _d(ranking.get(c))
        if not r:
            continue
        vs = _d(r.get("vs_runner_up"))
        extra = Markup("")
        if vs:
            on = f" on the {num(vs.get('cells'), pct=False)} cells both cover" if vs.get("partial") else ""
            delta = Markup(value_ci(vs.get("delta"), vs.get("ci"), is_pct_metric(c), signed=True))
            extra = Markup(" (vs runner-up {}: {} simultaneous{})").format(short(vs.get("b"), nm), delta, on)
        if r.get("best"):
            notes.append((metric_head(c), Markup("best <b>{}</b>").format(short(r["best"], nm)), extra))
        elif r.get("decision") == "equivalent":
            top = [*_l(r.get("order"))[:1], *_l(r.get("equivalent"))]
            notes.append((metric_head(c), "practically equivalent: " + ", ".join(short(t, nm) for t in top), ""))
        elif _l(r.get("tied")):
            tied = ", ".join(short(t, nm) for t in r["tied"])
            notes.append((metric_head(c), f"tied: {tied} (undecided)", extra))
    rows = [[Markup(c) for c in r] for r in rows]
    return str(render("leaderboard.html.j2", title=title, head=head, rows=rows, notes=notes))


def _corr(e: Any) -> str:
    """A correlation with two decimals, its CI and (NDCG, RBO) its chance value, or n/a with the reason."""
    e = _d(e)
    v, ci = e.get("value"), _l(e.get("ci"))
    if is_missing(v):
        return na_span(e.get("na") or "undefined (too few systems, or a constant ranking)")
    out = f"{float(v):+.2f}"
    if len(ci) == 2 and not any(is_missing(c) for c in ci):
        out += " " + span("ci", f"[{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]")
    if isinstance(e.get("chance"), int | float):
        out += " " + span("ci", f"(chance {float(e['chance']):.2f})")
    if e.get("note"):
        out += " " + span("na", "*", str(e["note"]))
    return out


def selection_section(analysis: Mapping[str, Any] | None, scatter_html: str = "") -> str:
    a = _d(analysis)
    sel = _d(a.get("selection"))
    pairs = [_d(p) for p in _l(sel.get("pairs"))]
    preds = _d(sel.get("best_predictor"))
    if not pairs and not preds:
        return ""
    main = set(main_downstream(a, 3))
    texts = {d: str(_d(p).get("text")) for d, p in preds.items() if _d(p).get("text")}
    first = [t for d, t in texts.items() if d in main] or list(texts.values())[:3]
    others = [t for t in texts.values() if t not in first]
    head: list[Any] = ["upstream", "downstream", "systems", *(n for _, n in CORRELATIONS)]
    families = any(p.get("across_methods") for p in pairs)
    if families:
        why = "one point per method family: its variants averaged"
        head.append(Markup(span("", "τ-b across methods", why)))

    def row(p: Mapping[str, Any]) -> list[Markup]:
        cells = [
            metric_head(str(p.get("upstream"))),
            metric_head(str(p.get("downstream"))),
            num(p.get("n_systems"), pct=False),
        ] + [_corr(p.get(k)) for k, _ in CORRELATIONS]
        if families:
            fam = _d(p.get("across_methods"))
            n = num(fam.get("n_families"), pct=False)
            cells.append(
                _corr(fam.get("kendall_tau_b")) + " " + span("ci", f"({n})")
                if fam
                else na_span("each method is one system")
            )
        return [Markup(c) for c in cells]

    main_up = set(main_upstream(a, 3))
    shown = [p for p in pairs if p.get("downstream") in main and p.get("upstream") in main_up] or pairs[:12]
    rest = [p for p in pairs if p not in shown]
    return str(
        render(
            "selection.html.j2",
            first=first,
            others=others,
            head=head,
            shown=[row(p) for p in shown],
            all_rows=[row(p) for p in pairs] if rest else [],
            systems=str(sel.get("systems") or "A system is a (setting, method) with both metrics."),
            families=families,
            scatter=Markup(scatter_html),
        )
    )


def paired_section(analysis: Mapping[str, Any] | None, names: Mapping[str, str] | None = None) -> str:
    a = _d(analysis)
    paired = _d(a.get("paired"))
    metrics = [m for m in [*main_downstream(a, 3), *main_upstream(a, 3)] if _l(paired.get(m))]
    if not metrics:
        return ""
    rows = []
    for metric in metrics:
        for p in _l(paired[metric]):
            p = _d(p)
            excl = badge("CI excludes 0", "best") if p.get("excludes_zero") else ""
            on = " " + span("ci", f"(on the {num(p.get('cells'), pct=False)} cells both cover)")
            rows.append(
                [
                    metric_head(metric),
                    name_cell(p.get("a"), names or {}),
                    name_cell(p.get("b"), names or {}),
                    value_ci(p.get("delta"), p.get("ci"), is_pct_metric(metric), signed=True)
                    + (on if p.get("partial") else "")
                    + " "
                    + excl,
                ]
            )
    return str(render("user_sections.html.j2", kind="paired", rows=[[Markup(c) for c in r] for r in rows]))


def fairness_section(
    analysis: Mapping[str, Any] | None, plot_html: str = "", names: Mapping[str, str] | None = None
) -> str:
    fair = _d(_d(analysis).get("fairness"))
    if not fair and not plot_html:
        return ""
    rows = []
    for m, f in fair.items():
        f = _d(f)
        if f.get("na") and is_missing(f.get("worst_decile_acc")):
            rows.append([name_cell(m, names or {}), na_span(f["na"]), na_span(f["na"]), "", na_span(f["na"])])
            continue
        gain = _d(f.get("gain_over_reference"))
        rows.append(
            [
                name_cell(m, names or {}),
                value_ci(f.get("worst_decile_acc"), None, na="no per-user accuracy"),
                value_ci(f.get("minority_acc"), None, na=f.get("minority_na") or "no minority users"),
                num(f.get("minority_users"), pct=False),
                value_ci(gain.get("value"), gain.get("ci"), signed=True, na="this is the reference, or no overlap"),
            ]
        )
    rows = [[Markup(c) for c in r] for r in rows]
    return str(render("user_sections.html.j2", kind="fairness", rows=rows, plot=Markup(plot_html)))


def win_gain_section(
    rows: Sequence[Mapping[str, Any]], quality: str, plot_html: str = "", names: Mapping[str, str] | None = None
) -> str:
    if not rows:
        return ""
    body = []
    for r in rows:
        mark = badge("real gain", "best") if r.get("excludes_zero") and (r.get("gain") or 0) > 0 else ""
        body.append(
            [
                name_cell(r.get("label"), names or {}),
                value_ci(r.get("win"), r.get("win_ci"), na="no win rate"),
                num(r.get("null")) if not is_missing(r.get("null")) else "50.0",
                value_ci(r.get("gain"), r.get("gain_ci"), signed=True, na="no zero-shot reference on these targets")
                + " "
                + mark,
            ]
        )
    cells = [[Markup(c) for c in r] for r in body]
    said = quality_label(quality)
    return str(render("user_sections.html.j2", kind="wins", rows=cells, quality=said, plot=Markup(plot_html)))


def analysis_notes(analysis: Mapping[str, Any] | None) -> str:
    a = _d(analysis)
    if not a:
        return ""
    notes = [str(n) for n in _l(a.get("notes"))]
    res = str(a.get("resampling") or "")
    return str(render("user_sections.html.j2", kind="notes", notes=notes, resampling=res))
