"""The report's "Where the signal is lost" section: per system, curated accuracy → on-policy accuracy → share of
the Best-of-N headroom; which rubric poles its reward follows (a systems × poles heat map); the users for whom it
collapses and the prompts it hacks. Everything is read from results.json (``analysis.headroom``,
``analysis.table`` and each pooled system's ``downstream[…].diagnosis``); a missing piece drops its part."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import escape

from perbench.report.extract import _d, _l
from perbench.report.fmt import is_missing, na_span, num, span
from perbench.report.labels import name_cell, short
from perbench.report.plots import Plot

CURATED, PAIRS, LISTWISE = "rm_acc_all", "onpolicy_acc", "onpolicy_bok_acc@"
#: a heat-map cell needs this many pools in which the pole's satisfaction varies
MIN_CELLS = 10


def diagnoses(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each pooled system's diagnosis, keyed by the system (the reward model's label)."""
    out: dict[str, dict[str, Any]] = {}
    for d in _d(results.get("downstream")).values():
        d = _d(d)
        diag = _d(d.get("diagnosis"))
        if diag and not diag.get("na") and d.get("guide"):
            out[str(d["guide"])] = diag
    return out


def _value(tab: Mapping[str, Any], m: str, metric: str) -> str:
    e = _d(_d(tab.get(m)).get(metric))
    return "–" if is_missing(e.get("value")) else num(e["value"])


def chain_rows(
    analysis: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Curated accuracy → on-policy pair accuracy → on-policy best-of-k → gain over the random pick → share of the
    headroom, one row per system of the verdict metric's headroom entry (best first)."""
    a = _d(analysis)
    metric = str(_d(a.get("verdict")).get("metric") or "")
    room = _d(_d(a.get("headroom")).get(metric))
    systems = _d(room.get("systems"))
    if not systems:
        return [], []
    tab = _d(a.get("table"))
    listwise = next((k for m in tab.values() for k in _d(m) if str(k).startswith(LISTWISE)), None)
    head = ["system", "curated pairs", "on-policy pairs (chance 50)"]
    if listwise:
        k = int(listwise.rpartition("@")[2])
        head.append(f"on-policy best-of-{k} (chance {100 / k:.0f})")
    head += ["gain over random pick (pts)", "share of headroom", "beats random pick"]
    rows = []
    order = sorted(systems, key=lambda m: -(_d(systems[m]).get("value") or float("-inf")))
    for m in order:
        s = _d(systems[m])
        g, sh = _d(s.get("gain")), _d(s.get("share"))
        row = [name_cell(m, names or {}), _value(tab, m, CURATED), _value(tab, m, PAIRS)]
        if listwise:
            row.append(_value(tab, m, listwise))
        gci = _l(g.get("ci"))
        row.append("–" if is_missing(g.get("value")) else num(g["value"], signed=True) + (
            " " + span("ci", f"[{num(gci[0], signed=True)}, {num(gci[1], signed=True)}]")
            if len(gci) == 2 else ""))  # fmt: skip
        sci = _l(sh.get("ci"))
        ends = " " + span("ci", f"[{100 * sci[0]:.0f}, {100 * sci[1]:.0f}]") if len(sci) == 2 else ""
        if is_missing(sh.get("value")):
            row.append(na_span(sh.get("na") or "no share for this system"))  # the reason on hover
        else:
            row.append(f"{100 * float(sh['value']):.0f}%{ends}")
        role = str(s.get("role") or "deployable")
        row.append(("yes" if s.get("beats_random") else "no") + ("" if role == "deployable" else f" ({escape(role)})"))
        rows.append(row)
    return head, rows


def pole_heatmap(results: Mapping[str, Any], limit: int = 20, names: Mapping[str, str] | None = None) -> Plot | None:
    """Systems × rubric poles: the mean within-pool Spearman ρ of each system's reward with each pole's
    satisfaction, over the cells whose user wants it (blank: fewer than :data:`MIN_CELLS` pools where it varies)."""
    diag = diagnoses(results)
    poles = sorted({p for d in diag.values() for p in _d(d.get("poles"))})
    if not diag or not poles:
        return None
    import numpy as np

    from perbench.report.plots import _margins, _render, _style

    systems = list(diag)[:limit]
    mat = np.full((len(systems), len(poles)), np.nan)
    for i, s in enumerate(systems):
        for j, p in enumerate(poles):
            e = _d(_d(diag[s].get("poles")).get(p))
            v = e.get("rho")
            if isinstance(v, int | float) and not is_missing(v) and int(e.get("cells") or 0) >= MIN_CELLS:
                mat[i, j] = float(v)
    if np.isnan(mat).all():
        return None
    with _style() as Figure:
        fig = Figure(figsize=(2.8 + max(1.5, 0.36 * len(poles)), 1.7 + max(0.8, 0.26 * len(systems))))
        ax = fig.subplots()
        _margins(fig, left=1.9, right=0.9, bottom=1.35, top=0.35)
        lim = max(0.2, float(np.nanmax(np.abs(mat))))
        im = ax.imshow(np.ma.masked_invalid(mat), cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(poles)), [p.replace("=", ": ") for p in poles], rotation=55, ha="right", fontsize=7)
        ax.set_yticks(range(len(systems)), [short(s, names or {}) for s in systems], fontsize=7)
        ax.grid(False)
        ax.set_title(
            f"Which poles does each reward follow? within-pool ρ(reward, pole met); blank: < {MIN_CELLS} pools vary",
            fontsize=8,
        )
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        cb.ax.tick_params(labelsize=6)
        return _render(fig, "pole_heatmap", "Systems × rubric poles: within-pool rank correlation")


def collapse_rows(
    results: Mapping[str, Any], shown: int = 4, names: Mapping[str, str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Per system: how many users it collapses on (flat, or worse than a scorer with no information), the first few,
    for how many the data show no signal, and the prompts it hacks (both tested against that null, Holm-adjusted)."""
    rows = []
    for s, d in diagnoses(results).items():
        users = [_d(u) for u in _l(d.get("collapsed_users"))]
        hacked = [_d(p) for p in _l(d.get("hacked_prompts"))]
        flat = sum(u.get("reason") == "flat" for u in users)
        who = ", ".join(f"{escape(u.get('user'))} ({escape(u.get('reason'))})" for u in users[:shown])
        more = f" and {len(users) - shown} more" if len(users) > shown else ""
        prompts = "; ".join(
            f"{escape(_prompt_text(p.get('prompt')))} (ρ {float(p.get('rho') or 0):+.2f})" for p in hacked[:2]
        )
        if len(hacked) > 2:
            prompts += f" and {len(hacked) - 2} more"
        silent = len(_l(d.get("users_without_signal")))
        tested = d.get("users_tested")
        silent_text = f"{silent} of {tested}" if isinstance(tested, int) else "–"
        rho = _d(d.get("rho_truth"))
        mean = "–" if is_missing(rho.get("mean")) else f"{float(rho['mean']):+.2f}"
        rows.append(
            [name_cell(s, names or {}), mean, f"{len(users)} ({flat} flat)", (who + more) or "none", silent_text,
             prompts or "none", f"{d.get('cells_constant_truth', '?')} of {d.get('cells', '?')}"]
        )  # fmt: skip
    head = ["system", "mean within-pool ρ(reward, truth)", "collapsed users", "which",
            "users with no evidence of signal", "hacked prompts",
            "pools with constant truth"]  # fmt: skip
    return head, rows


def _prompt_text(p: Any) -> str:
    """A prompt id (chat messages as JSON) as the user's words, shortened."""
    import json

    text = str(p)
    try:
        msgs = json.loads(text)
        if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict):
            text = str(msgs[-1].get("content", text))
    except ValueError:
        pass
    return text if len(text) <= 60 else text[:59] + "…"


def signal_section(results: Mapping[str, Any], heatmap_html: str = "", names: Mapping[str, str] | None = None) -> str:
    """The section's HTML ("" when the run has no pooled decoder with exact truth)."""
    a = _d(results.get("analysis"))
    head, rows = chain_rows(a, names)
    c_head, c_rows = collapse_rows(results, names=names)
    if not rows and not c_rows:
        return ""
    from markupsafe import Markup

    from perbench.report.templating import render

    rules = _d(next(iter(diagnoses(results).values()), {}).get("rules"))
    return str(
        render(
            "signal.html.j2",
            chain={"head": head, "rows": [[Markup(c) for c in r] for r in rows]},
            collapse={"head": c_head, "rows": [[Markup(c) for c in r] for r in c_rows]},
            heatmap=Markup(heatmap_html),
            rules=[(str(k), str(v)) for k, v in rules.items()],
        )
    )


def names_of(rows: Sequence[Sequence[str]]) -> list[str]:
    return [r[0] for r in rows]
