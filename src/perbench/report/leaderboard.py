"""``leaderboard.md``: the verdict and the leaderboard as Markdown, from ``results["analysis"]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perbench.report.extract import _d, _l, main_downstream, main_upstream
from perbench.report.fmt import ci_text, is_missing, is_pct_metric, metric_label, num
from perbench.report.sections import own_decoding
from perbench.report.verdict import mark


def _md(text: Any) -> str:
    """Markdown-safe cell text: no table breaks, no raw HTML."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return s.replace("<", "&lt;").replace(">", "&gt;")


def _cell(entry: Any, metric: str, reasons: list[str]) -> str:
    """``value [lo, hi]``, or ``n/a[k]`` where reason k is listed under the table."""
    e = _d(entry)
    if is_missing(e.get("value")):
        why = str(e.get("na") or "not measured for this method")
        if why not in reasons:
            reasons.append(why)
        return f"n/a[{reasons.index(why) + 1}]"
    pct = is_pct_metric(metric)
    c = ci_text(e.get("ci"), pct)
    return num(e["value"], pct) + (f" {c}" if c else "")


def leaderboard_table(analysis: Mapping[str, Any], title: str = "Leaderboard") -> list[str]:
    tab = _d(analysis.get("table"))
    ranking = _d(analysis.get("ranking"))
    cols = list(dict.fromkeys([*main_downstream(analysis, 3), *main_upstream(analysis, 3)]))
    if not tab or not cols:
        return []
    order = [str(m) for m in _l(_d(ranking.get(cols[0])).get("order"))]
    methods = [m for m in order if m in tab] + [m for m in _l(analysis.get("methods")) or list(tab) if m not in order]
    lines = [f"## {_md(title)}", "", "| # | method | " + " | ".join(_md(metric_label(c)) for c in cols) + " |"]
    lines.append("|---|---|" + "---|" * len(cols))
    reasons: list[str] = []
    one_fit = set(_l(_d(analysis.get("fit_seeds")).get("single_seed")))
    for i, m in enumerate(methods, 1):
        cells = []
        for c in cols:
            r = _d(ranking.get(c))
            own = own_decoding(tab, m, c)
            if own is not None:
                cells.append(_cell(_d(tab.get(m)).get(own), own, reasons) + " (reference)")
                continue
            text = _cell(_d(tab.get(m)).get(c), c, reasons)
            got = mark(r, m)
            if got is not None:
                text += " **best**" if got[0] == "best" else f" ({got[0]})"
            elif m in _l(r.get("reference_lines")):
                text += " (reference)"
            cells.append(text)
        rank = str(i) if m in order else "–"
        shown = _md(m) + (" (1 fit of a stochastic method)" if m in one_fit else "")
        lines.append(f"| {rank} | {shown} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"[{k}] {_md(why)}  " for k, why in enumerate(reasons, 1)]
    if reasons:
        lines.append("")
    for c in cols:
        r = _d(ranking.get(c))
        if r.get("best"):
            lines.append(f"- {_md(metric_label(c))}: best **{_md(r['best'])}**")
        elif r.get("decision") == "equivalent":
            top = [*_l(r.get("order"))[:1], *_l(r.get("equivalent"))]
            lines.append(f"- {_md(metric_label(c))}: practically equivalent: {_md(', '.join(str(t) for t in top))}")
        elif _l(r.get("tied")):
            lines.append(f"- {_md(metric_label(c))}: tied: {_md(', '.join(str(t) for t in r['tied']))}")
    lines.append("")
    return lines


def _tau_md(entry: Any) -> str:
    t = _d(entry)
    val, ci = t.get("value"), _l(t.get("ci"))
    shown = "n/a" if not isinstance(val, int | float) or is_missing(val) else f"{float(val):+.2f}"
    c = f" [{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]" if len(ci) == 2 and not any(map(is_missing, ci)) else ""
    return shown + c


def render_markdown(
    analysis: Mapping[str, Any] | None, title: str, per_benchmark: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """The verdict paragraph, the leaderboard(s) and the main τ-b table."""
    a = _d(analysis)
    lines = [f"# {_md(title)}", ""]
    v = _d(a.get("verdict"))
    verdict = v.get("text")
    lines += ["**Verdict.** " + (_md(verdict) if verdict else "n/a (no selection analysis in these results)"), ""]
    if v.get("decision"):
        lines += [f"Decision on {_md(metric_label(str(v.get('metric'))))}: **{_md(v['decision'])}**", ""]
    if not a:
        return "\n".join(lines)
    if per_benchmark and len(per_benchmark) > 1:
        for bench, sub in per_benchmark.items():
            lines += leaderboard_table(sub, f"Leaderboard: {bench}")
        lines += leaderboard_table(a, "Leaderboard: all benchmarks pooled")
    else:
        lines += leaderboard_table(a)
    pairs = [_d(p) for p in _l(_d(a.get("selection")).get("pairs"))]
    downs = set(main_downstream(a, 3))
    pairs = [p for p in pairs if p.get("downstream") in downs]
    if pairs:
        fams = any(p.get("across_methods") for p in pairs)
        extra = " τ-b across methods (families) |" if fams else ""
        lines += [
            "## Upstream → downstream (Kendall τ-b, 95% CI)",
            "",
            "| upstream | downstream | systems | τ-b |" + extra,
        ]
        lines.append("|---|---|---|---|" + "---|" * fams)
        for p in pairs:
            fam = _d(p.get("across_methods"))
            tail = (
                f" {_tau_md(fam.get('kendall_tau_b'))} ({num(fam.get('n_families'), pct=False)}) |" if fam else " n/a |"
            )
            lines.append(
                f"| {_md(metric_label(str(p.get('upstream'))))} | {_md(metric_label(str(p.get('downstream'))))} | "
                f"{num(p.get('n_systems'), pct=False)} | {_tau_md(p.get('kendall_tau_b'))} |" + (tail if fams else "")
            )
        lines.append("")
    lines.append("Values in %, 95% CIs from a two-way (users × prompts) bootstrap; n/a = not applicable.")
    return "\n".join(lines) + "\n"
