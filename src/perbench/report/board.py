"""The report's leaderboard at a glance and its method table in pages, both with compact system labels.

The leaderboard's first columns answer the question: the verdict metric with its CI (and the decision's badge),
the share of the headroom (oracle − random pick) the system captures with its CI, and RM accuracy on seen and
unseen users. The random pick and the oracle pick stand in it as reference lines (never ranked). Every other
column is one click away (the full leaderboard, behind a toggle). The method table lists systems as rows and
metrics as columns, a few metrics per page, so every system is visible at any page width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from perbench.report.extract import _d, _l, main_downstream, metrics_of
from perbench.report.fmt import badge, is_missing, is_pct_metric, metric_head, na_span, span, value_ci
from perbench.report.labels import legend_rows, name_cell
from perbench.report.sections import own_decoding
from perbench.report.templating import render
from perbench.report.verdict import mark

RANDOM_PICK, ORACLE_PICK = "random_pick", "oracle_pick"
#: metrics per page of the method table
PAGE = 4
UPSTREAM_FIRST = ("rm_acc_seen", "rm_acc_unseen")


def _entry(tab: Mapping[str, Any], m: str, metric: str) -> str:
    e = _d(_d(tab.get(m)).get(metric))
    if not e:
        return na_span("not measured for this system")
    return value_ci(e.get("value"), e.get("ci"), is_pct_metric(metric), na=e.get("na"))


def glance(analysis: Mapping[str, Any] | None, names: Mapping[str, str], title: str, more: str = "") -> str:
    """The at-a-glance leaderboard (module docstring); ``more``: the full leaderboard, shown behind a toggle."""
    a = _d(analysis)
    tab = _d(a.get("table"))
    if not tab:
        return ""
    downs = main_downstream(a, 1)
    metric = downs[0] if downs else ""
    ranking = _d(_d(a.get("ranking")).get(metric))
    room = _d(_d(a.get("headroom")).get(metric))
    systems = _d(room.get("systems"))
    ups = [u for u in UPSTREAM_FIRST if u in metrics_of(a)[0]]
    order = [str(m) for m in _l(ranking.get("order")) if m in tab]
    roles = _d(a.get("roles"))
    refs = [m for m in tab if m not in order and m not in (RANDOM_PICK, ORACLE_PICK)]

    def value(m: str) -> float:
        v = _d(_d(tab.get(m)).get(metric)).get("value")
        return -float(v) if isinstance(v, int | float) else float("inf")

    # unranked deployable systems first (by the verdict metric), then the reference lines
    refs.sort(key=lambda m: (roles.get(m, "deployable") != "deployable", value(m)))
    pct = is_pct_metric(metric)
    head = ["#", "system"]
    if metric:
        head.append(metric_head(metric))
    if room:
        why = "(system − random pick) / (oracle − random pick), 95% CI"
        head.append(Markup(span("", "share of headroom", why)))
    head += [metric_head(u) for u in ups]

    one_fit = set(_l(_d(a.get("fit_seeds")).get("single_seed")))
    one_fit_note = " " + span(
        "note", "1 fit", "one fit of a stochastic method: its CI leaves out the variance between fits"
    )

    def row(m: str, rank: str, note: str = "") -> list[str]:
        cells = [rank, name_cell(m, names) + (one_fit_note if m in one_fit else "") + note]
        own = own_decoding(tab, m, metric) if metric else None
        if own is not None:  # a decoder without an RM (zero-shot): its own value, as the reference
            cells.append(_entry(tab, m, own))
        elif metric:
            html = _entry(tab, m, metric)
            got = mark(ranking, m)
            if got is not None:
                html += " " + badge(*got)
            cells.append(html)
        if room:
            s = _d(_d(systems.get(m)).get("share"))
            if s:
                cells.append(value_ci(s.get("value"), s.get("ci"), True, na=s.get("na")))
            else:
                cells.append(na_span("a reference line, or no Best-of-N cells"))
        cells += [_entry(tab, m, u) for u in ups]
        return cells

    rows = [row(m, str(i)) for i, m in enumerate(order, 1)]
    ref = " " + span("ci", "(reference)")
    for m in refs:
        unranked = roles.get(m, "deployable") == "deployable" and m in systems
        note = span("note", "not ranked: not shown better than a random pick") if unranked else ref
        if roles.get(m) == "invalid":
            bad = _d(a.get("invalid_scores")).get(m)
            note = span("note", f"never a candidate: {bad} pairs with an invalid (NaN) score")
        rows.append(row(m, "–", note))
    for m, what in ((ORACLE_PICK, "oracle pick"), (RANDOM_PICK, "random pick")):
        e = _d(room.get("oracle" if m == ORACLE_PICK else "random_pick"))
        if not e:
            continue
        cells = ["–", span("", what, m) + ref]
        cells.append(value_ci(e.get("value"), e.get("ci"), pct))
        if room:
            cells.append("100%" if m == ORACLE_PICK else "0%")
        cells += ["" for _ in ups]
        rows.append(cells)
    h = _d(room.get("headroom"))
    glance = {
        "title": title,
        "head": head,
        "rows": [[Markup(c) for c in r] for r in rows],
        "headroom": Markup(value_ci(h.get("value"), h.get("ci"), pct)) if h else "",
        "pct": pct,
        "legend": legend_rows(names, tab),
        "more": Markup(more),
    }
    return str(render("board.html.j2", glance=glance, pages=[]))


def method_pages(analysis: Mapping[str, Any] | None, names: Mapping[str, str]) -> str:
    """Systems (rows) × metrics (columns), :data:`PAGE` metrics per table, upstream pages then downstream ones."""
    a = _d(analysis)
    tab = _d(a.get("table"))
    if not tab:
        return ""
    methods = [m for m in _l(a.get("methods")) if m in tab] or list(tab)
    ups, downs = metrics_of(a)
    pages: list[dict[str, Any]] = []
    for side, metrics in (("upstream", ups), ("downstream", downs)):
        for start in range(0, len(metrics), PAGE):
            chunk = metrics[start : start + PAGE]
            have = [m for m in methods if any(not is_missing(_d(_d(tab.get(m)).get(c)).get("value")) for c in chunk)]
            if have:
                rows = [[Markup(name_cell(m, names)), *(Markup(_entry(tab, m, c)) for c in chunk)] for m in have]
                pages.append({"side": side, "head": ["system", *(metric_head(c) for c in chunk)], "rows": rows})
    return str(render("board.html.j2", glance=None, pages=pages)) if pages else ""
