"""The self-contained HTML report (verdict first; inline CSS; plots as data-URI PNGs) and the files beside it.

``write_report(results, run_dir / "report.html")`` also writes ``leaderboard.md`` and ``plots/*.png|svg`` next to
the page, reading ``cells.jsonl`` and ``samples.jsonl`` from the same folder when they exist. Every section is
optional: a missing piece of data drops its section (or shows n/a), it never raises. Everything from data is
escaped.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.io import atomic_write_text, refuse_links, writing_inside
from perbench.report import board, details, extract, plots, sections, signal, validity, verdict
from perbench.report.costs import trade_off_section
from perbench.report.extract import _d
from perbench.report.fmt import is_missing

if TYPE_CHECKING:
    from perbench.runner.rundir import RunData
from perbench.report.generations import generations_section
from perbench.report.labels import report_labels
from perbench.report.leaderboard import render_markdown
from perbench.report.picks import picks_section
from perbench.report.plots import Plot

PLOTS_DIR = "plots"


def css() -> str:
    try:
        return (resources.files("perbench.report") / "report.css").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):  # an install without package data: plain but readable
        return "body{font-family:sans-serif;max-width:1200px;margin:2rem auto}table{border-collapse:collapse}"


def figure(p: Plot | None) -> str:
    """A figure of the page (templates/figure.html.j2): its PNG inline, the SVG file named."""
    if p is None:
        return ""
    from perbench.report.templating import render

    data = base64.b64encode(p.png).decode("ascii")
    return str(render("figure.html.j2", title=p.title, data=data, name=p.name, folder=PLOTS_DIR))


def _quality(analysis: Mapping[str, Any]) -> str:
    metric = str(_d(analysis.get("verdict")).get("metric") or "")
    return metric.partition(":")[2] or "rubric_satisfaction"


def build_plots(
    analysis: Mapping[str, Any] | None,
    results: Mapping[str, Any] | None = None,
    cells: Sequence[Mapping[str, Any]] | None = None,
    all_pairs: bool = True,
) -> dict[str, Plot]:
    """Every figure of a report, keyed by role (``scatter``, ``fewshot``, ``bon``, ``per_user``, ``win_gain``,
    ``scatter:METRIC``: one file per downstream metric, a panel for each upstream metric with a defined τ-b).
    A figure that fails to draw is left out."""
    a = _d(analysis)
    r = _d(results)
    out: dict[str, Plot] = {}

    def add(key: str, make: Any) -> None:
        try:
            p = make()
        except (ValueError, TypeError, KeyError, IndexError, OverflowError):
            return
        if p is not None:
            out[key] = p

    pairs = [_d(p) for p in extract._l(_d(a.get("selection")).get("pairs"))]
    ups, downs = extract.main_upstream(a, 3), extract.main_downstream(a, 3)
    table = _d(a.get("table"))
    names = system_names(a, r)
    add("scatter", lambda: plots.scatter_grid(pairs, ups, downs, "scatter_main", table=table, names=names))
    if all_pairs:
        all_ups, all_downs = extract.metrics_of(a)
        for d in all_downs:
            have = [
                u
                for u in all_ups
                if any(p.get("upstream") == u and p.get("downstream") == d and _has_tau(p) for p in pairs)
            ]
            if have:
                add(
                    f"scatter:{d}",
                    lambda d=d, have=have: plots.scatter_grid(pairs, have, [d], f"scatter__{d}", False, names=names),
                )
    add("fewshot", lambda: plots.fewshot_plot(extract.fewshot_curves(a, r), names))
    add("bon", lambda: plots.bon_plot(extract.bon_curves(r), names))
    add("rl", lambda: plots.rl_plot(extract.rl_histories(r)))
    verdict_metric = _d(a.get("verdict")).get("metric")
    dist_metrics = ["rm_acc"] + ([str(verdict_metric)] if verdict_metric else [])
    dists = extract.per_user_values(cells, dist_metrics) if cells else {}
    add("per_user", lambda: plots.per_user_plot(dists or extract.per_user_from_fairness(a), names))
    q = _quality(a)
    rows = extract.win_gain_rows(r, q) or extract.win_gain_from_analysis(a, q)
    add(
        "win_gain",
        lambda: plots.win_gain_plot(
            [(x["label"], x["win"], x["gain"]) for x in rows], q, [x.get("null") for x in rows], names=names
        ),
    )
    add("poles", lambda: signal.pole_heatmap(r, names=names))
    return out


#: what a run's results hold that no figure reads (they differ between a run and its rerun)
_NOT_PLOTTED = ("created", "timing_s", "work", "provenance", "plan", "batching")


def memo_plots(
    analysis: Mapping[str, Any], results: Mapping[str, Any], cells: Sequence[Mapping[str, Any]] | None
) -> dict[str, Plot]:
    """:func:`build_plots` (every figure), kept in the shared cache under the digest of what the figures read (the
    results but their timings, work counters and provenance; the cells, by results.json's digest of cells.jsonl)
    and the code: a rerun's report draws nothing that the first run drew."""
    import hashlib
    import json

    from perbench.memo import derived_store, memo_key

    shown = {k: v for k, v in results.items() if k not in _NOT_PLOTTED}
    record = _d(results.get("cells"))
    cells_digest = (
        record.get("sha256")
        or hashlib.sha256(json.dumps(list(cells or []), sort_keys=True, default=str).encode()).hexdigest()
    )
    key = memo_key("plots", shown, cells_digest, bool(cells))
    store = derived_store()
    if store is None:
        return build_plots(analysis, results, cells)
    try:
        got = store.get_json(key)
        if isinstance(got, list):
            try:
                return {
                    str(p["role"]): Plot(
                        str(p["name"]),
                        str(p["title"]),
                        base64.b64decode(p["png"]),
                        base64.b64decode(p["svg"]),
                        bool(p["in_page"]),
                    )
                    for p in got
                }
            except (KeyError, TypeError, ValueError):
                pass  # a value of another shape: drawn again and replaced
        figs = build_plots(analysis, results, cells)
        store.put_json(
            key,
            [
                {
                    "role": role,
                    "name": p.name,
                    "title": p.title,
                    "png": base64.b64encode(p.png).decode("ascii"),
                    "svg": base64.b64encode(p.svg).decode("ascii"),
                    "in_page": p.in_page,
                }
                for role, p in figs.items()
            ],
        )
        return figs
    finally:
        store.close()


def system_names(analysis: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Compact labels of every system and decoder the report names (``report.labels``)."""
    labels = [*_d(analysis.get("table")), *_d(_d(results).get("upstream")), *_d(_d(results).get("downstream"))]
    return report_labels(_d(results), labels)


def _has_tau(pair: Mapping[str, Any]) -> bool:
    """A pair worth its own scatter file: at least two systems and a defined τ-b (the rest are n/a in the table)."""
    return len(plots._points(pair)) > 1 and not is_missing(_d(pair.get("kendall_tau_b")).get("value"))


def _toc(items: Sequence[tuple[str, str]]) -> str:
    from perbench.report.templating import render

    return str(render("toc.html.j2", items=items))


def _page(title: str, body: Sequence[str]) -> str:
    """The page (templates/page.html.j2) around the sections' HTML."""
    from markupsafe import Markup

    from perbench.report.templating import render

    return str(render("page.html.j2", title=title, css=Markup(css()), body=[Markup(b) for b in body if b]))


def _shared_sections(
    a: Mapping[str, Any],
    figs: Mapping[str, Plot],
    results: Mapping[str, Any],
    cells_present: bool,
    leaderboards: str,
) -> str:
    """The sections a run's report and a comparison share (templates/shared.html.j2)."""
    from markupsafe import Markup

    from perbench.report.templating import render

    names = system_names(a, results)
    per_user = figure(figs.get("per_user"))
    if per_user:
        source = "cells.jsonl" if cells_present else "the analysis's per-user accuracies"
        per_user = str(render("per_user_note.html.j2", figure=Markup(per_user), source=source))
    q = _quality(a)
    rows = extract.win_gain_rows(results, q) or extract.win_gain_from_analysis(a, q)
    rl = figure(figs.get("rl"))
    parts = {
        "leaderboards": leaderboards,
        "power": verdict.power_section(a, names),
        "methods": board.method_pages(a, names),
        "paired": sections.paired_section(a, names),
        "selection": sections.selection_section(a, figure(figs.get("scatter"))),
        "validity": validity.validity_section(a),
        "signal": signal.signal_section(results, figure(figs.get("poles")), names),
        "fewshot": figure(figs.get("fewshot")),
        "bon": figure(figs.get("bon")),
        "rl": rl,
        "rl_table": details.rl_table(results) if rl else "",
        "users": sections.fairness_section(a, per_user, names),
        "wins": sections.win_gain_section(rows, q, figure(figs.get("win_gain")), names),
    }
    return str(render("shared.html.j2", **{k: Markup(v) for k, v in parts.items()}))


def render(
    results: Mapping[str, Any],
    *,
    cells: Sequence[Mapping[str, Any]] | None = None,
    samples: Sequence[Mapping[str, Any]] | None = None,
    figures: Mapping[str, Plot] | None = None,
    notes: list[str] | None = None,
) -> str:
    """One run's report page. ``figures`` defaults to :func:`build_plots` of the in-page figures."""
    a = _d(results.get("analysis"))
    figs = figures if figures is not None else build_plots(a, results, cells, all_pairs=False)
    bench = str(_d(results.get("benchmark")).get("name", "run"))
    body = [details.header(results)]
    body.append(
        _toc(
            [
                ("leaderboard", "Leaderboard"),
                ("methods", "Method table"),
                ("selection", "Selection"),
                ("validity", "Which benchmark"),
                ("users", "Per user"),
                ("generations", "Generations"),
                ("details", "Run detail"),
                ("provenance", "Provenance"),
            ]
        )
    )
    from markupsafe import Markup

    from perbench.report.templating import render as render_template

    names = system_names(a, results)
    full = sections.leaderboard(a, f"Leaderboard — {bench}, all columns", names)
    glance = board.glance(a, names, f"Leaderboard — {bench}", full)
    picks = picks_section(samples, a, names)
    run_detail = "".join(
        [
            details.upstream_section(results, names),
            details.fewshot_table(results, names),
            details.policy_accuracy_section(results, names),
            details.downstream_section(results, names),
        ]
    )
    parts = {
        "verdict": verdict.verdict_box(a, names),
        "trade_offs": trade_off_section(a, names),
        "shared": _shared_sections(a, figs, results, bool(cells), glance),
        "picks": picks,
        "generations": generations_section(samples, picks=bool(picks)),
        "run_detail": run_detail,
        "skipped": details.skipped_section(results),
        "provenance": details.provenance_section(results, notes),
        "notes": sections.analysis_notes(a),
    }
    body.append(str(render_template("run.html.j2", **{k: Markup(v) for k, v in parts.items()})))
    return _page(f"perbench — {bench}", body)


def write_outputs(html: str, markdown: str, figs: Mapping[str, Plot], out_dir: Path, name: str = "report.html") -> Path:
    """report.html (or ``name``), leaderboard.md and plots/ in ``out_dir``; a link among them is refused."""
    with writing_inside(out_dir):
        for target in (out_dir / PLOTS_DIR, out_dir / "leaderboard.md", out_dir / name):
            refuse_links(target)  # before the first write: a refused link leaves the folder as it was
        out_dir.mkdir(parents=True, exist_ok=True)
        plots.save_plots(list(figs.values()), out_dir / PLOTS_DIR)
        atomic_write_text(out_dir / "leaderboard.md", markdown)
        path = out_dir / name
        atomic_write_text(path, html)
    return path


def write_report(results: Mapping[str, Any], path: str | Path, run: RunData | None = None) -> Path:
    """report.html at ``path``, with leaderboard.md and plots/ beside it: cells, samples and notes of ``run`` (as
    the run-directory reader checked them), else read from its folder (a run's own, just written)."""
    from perbench.runner.rundir import read_jsonl

    path = Path(path)
    notes: list[str] = [] if run is None else list(run.notes)
    cells = read_jsonl(path.parent / "cells.jsonl", notes) if run is None else run.cells
    samples = read_jsonl(path.parent / "samples.jsonl", notes) if run is None else run.samples
    a = _d(results.get("analysis"))
    figs = memo_plots(a, results, cells)
    html = render(results, cells=cells, samples=samples, figures=figs, notes=notes)
    bench = str(_d(results.get("benchmark")).get("name", "run"))
    md = render_markdown(a, f"perbench — {bench}")
    return write_outputs(html, md, figs, path.parent, path.name)


def render_run_dir(run_dir: str | Path) -> Path:
    """Re-render a run directory's report from its results.json (and cells / samples)."""
    from perbench.runner.rundir import load_run

    run = load_run(run_dir)
    return write_report(run.results, run.path / "report.html", run)
