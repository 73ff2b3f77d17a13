"""Report sections read from ``results["analysis"]``: leaderboard, method table, selection, fairness (the verdict
box is in :mod:`perbench.report.verdict`).

Each function returns HTML ("" when its data is absent); "best" is only ever what the analysis's ranking says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from perbench.report.extract import _d, _l, main_downstream, main_upstream
from perbench.report.fmt import (
    badge,
    is_missing,
    is_pct_metric,
    metric_head,
    na_span,
    num,
    quality_label,
    table,
    value_ci,
)
from perbench.report.labels import name_cell
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
        out += f' <span class="ci">± {num(sd, is_pct_metric(metric))} sd</span>'
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
    from perbench.report.labels import name_cell

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
                cells.append(cell_html(_d(tab.get(m)).get(own), own) + ' <span class="ci">(reference)</span>')
                continue
            html = cell_html(_d(tab.get(m)).get(c), c)
            got = mark(r, m)
            if got is not None:
                html += " " + badge(*got)
            elif m in _l(r.get("reference_lines")):
                html += ' <span class="ci">(reference)</span>'
            cells.append(html)
        rows.append(cells)
    head = ["#", "method", *(metric_head(c) for c in cols)]
    notes = []
    for c in cols:
        r = _d(ranking.get(c))
        if not r:
            continue
        vs = _d(r.get("vs_runner_up"))
        extra = ""
        if vs:
            on = f" on the {num(vs.get('cells'), pct=False)} cells both cover" if vs.get("partial") else ""
            extra = (
                f" (vs runner-up {escape(vs.get('b'))}: "
                f"{value_ci(vs.get('delta'), vs.get('ci'), is_pct_metric(c), signed=True)} simultaneous{on})"
            )
        if r.get("best"):
            notes.append(f"<li>{metric_head(c)}: best <b>{escape(r['best'])}</b>{extra}</li>")
        elif r.get("decision") == "equivalent":
            top = [*_l(r.get("order"))[:1], *_l(r.get("equivalent"))]
            eq = ", ".join(str(t) for t in top)
            notes.append(f"<li>{metric_head(c)}: practically equivalent: {escape(eq)}</li>")
        elif _l(r.get("tied")):
            notes.append(
                f"<li>{metric_head(c)}: tied: {escape(', '.join(str(t) for t in r['tied']))} (undecided){extra}</li>"
            )
    return (
        f"<h3>{escape(title)}</h3>"
        + table(head, rows, "lb")
        + (f'<ul class="small">{"".join(notes)}</ul>' if notes else "")
        + '<p class="muted">Ordered by the first column; baselines and oracles are reference lines, never ranked or '
        'recommended. "best" only where the method is the one deployable system in the simultaneous 95% set of '
        "systems that could be the best (multiple comparisons with the best over the deployable systems and the "
        'baselines, max-statistic two-way bootstrap) and is shown better than every baseline; "equivalent" where '
        'every pair in the set has its 90% CI inside the equivalence margin; "tied" where neither holds yet.</p>'
    )


def _corr(e: Any) -> str:
    """A correlation with two decimals, its CI and (NDCG, RBO) its chance value, or n/a with the reason."""
    e = _d(e)
    v, ci = e.get("value"), _l(e.get("ci"))
    if is_missing(v):
        return na_span(e.get("na") or "undefined (too few systems, or a constant ranking)")
    out = f"{float(v):+.2f}"
    if len(ci) == 2 and not any(is_missing(c) for c in ci):
        out += f' <span class="ci">[{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]</span>'
    if isinstance(e.get("chance"), int | float):
        out += f' <span class="ci">(chance {float(e["chance"]):.2f})</span>'
    if e.get("note"):
        out += f' <span class="na" title="{escape(e["note"])}">*</span>'
    return out


def selection_section(analysis: Mapping[str, Any] | None, scatter_html: str = "") -> str:
    a = _d(analysis)
    sel = _d(a.get("selection"))
    pairs = [_d(p) for p in _l(sel.get("pairs"))]
    preds = _d(sel.get("best_predictor"))
    if not pairs and not preds:
        return ""
    parts = ["<h2>Does the upstream ranking predict the downstream one?</h2>"]
    main = set(main_downstream(a, 3))
    texts = {d: str(_d(p).get("text")) for d, p in preds.items() if _d(p).get("text")}
    first = [t for d, t in texts.items() if d in main] or list(texts.values())[:3]
    others = [t for t in texts.values() if t not in first]
    if first:
        parts.append('<ul class="predictors">' + "".join(f"<li>{escape(t)}</li>" for t in first) + "</ul>")
    if others:
        parts.append(
            f"<details><summary>best predictor of the other {len(others)} downstream metrics</summary>"
            '<ul class="predictors">' + "".join(f"<li>{escape(t)}</li>" for t in others) + "</ul></details>"
        )
    head = ["upstream", "downstream", "systems", *(escape(n) for _, n in CORRELATIONS)]
    families = any(p.get("across_methods") for p in pairs)
    if families:
        head.append(
            Markup('<span title="one point per method family: its variants averaged">τ-b across methods</span>')
        )

    def row(p: Mapping[str, Any]) -> list[str]:
        cells = [
            metric_head(str(p.get("upstream"))),
            metric_head(str(p.get("downstream"))),
            num(p.get("n_systems"), pct=False),
        ] + [_corr(p.get(k)) for k, _ in CORRELATIONS]
        if families:
            fam = _d(p.get("across_methods"))
            cells.append(
                _corr(fam.get("kendall_tau_b")) + f' <span class="ci">({num(fam.get("n_families"), pct=False)})</span>'
                if fam
                else na_span("each method is one system")
            )
        return cells

    main_up = set(main_upstream(a, 3))
    shown = [p for p in pairs if p.get("downstream") in main and p.get("upstream") in main_up] or pairs[:12]
    parts.append(table(head, [row(p) for p in shown], "sel lb2"))
    rest = [p for p in pairs if p not in shown]
    if rest:
        parts.append(
            f"<details><summary>all {len(pairs)} upstream → downstream pairs</summary>"
            + table(head, [row(p) for p in pairs], "sel lb2")
            + "</details>"
        )
    systems = sel.get("systems") or "A system is a (setting, method) with both metrics."
    parts.append(
        f'<p class="muted">{escape(systems)} 95% CIs re-draw users and prompts jointly, every method on the same draw. '
        "NDCG and RBO compare the two rankings' heads; their chance value is the expectation under a random "
        "ranking of the same systems (far above 0 for a few systems)."
        + (
            " Variants of one method (one family: the label up to its first parenthesis) are not independent "
            "systems; the last column counts each family once, its variants averaged (number of families in "
            "parentheses)."
            if families
            else ""
        )
        + "</p>"
    )
    parts.append(scatter_html)
    return "".join(parts)


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
            on = f' <span class="ci">(on the {num(p.get("cells"), pct=False)} cells both cover)</span>'
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
    return (
        "<details><summary>Paired differences (points, same users and prompts)</summary>"
        + table(["metric", "a", "b (reference)", "a − b"], rows)
        + "</details>"
    )


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
    head = ["method", "worst-decile user acc.", "minority-user acc.", "minority users", "gain over global RM"]
    return (
        "<h2>Per user: who is served, who is left behind</h2>"
        + (table(head, rows) if rows else "")
        + '<p class="muted">Minority users: those on whom the global (user-agnostic) RM scores below 50% on their '
        "own train pairs (few-shot pairs for unseen users), i.e. whose preferences oppose the majority's; their "
        "accuracies are measured on test pairs, never on the pairs that selected them.</p>" + plot_html
    )


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
    head = ["decoder[RM]", "win rate %", "null %", "gain (points)"]
    return (
        "<h2>Win rate next to ground-truth gain</h2>"
        + '<div class="row2"><div>'
        + table(head, body)
        + f'<p class="muted">Win rate: how often the RM prefers its own guided output to the zero-shot one. Gain: '
        f"the paired ground-truth difference to zero-shot in {escape(quality_label(quality))} (points). Null: the win "
        "rate of a scorer with no information under that decoder (n/(n+1) for Best-of-n, whose pick is the best of n "
        "draws; 50% for one guided output). A win rate far above its null with no real gain means the RM prefers its "
        "output for reasons the user does not share.</p></div>" + plot_html + "</div>"
    )


def analysis_notes(analysis: Mapping[str, Any] | None) -> str:
    a = _d(analysis)
    if not a:
        return ""
    notes = [escape(n) for n in _l(a.get("notes"))]
    res = a.get("resampling")
    head = f"<p class='muted'>Resampling: {escape(res)}</p>" if res else ""
    return head + (f'<ul class="small muted">{"".join(f"<li>{n}</li>" for n in notes)}</ul>' if notes else "")
