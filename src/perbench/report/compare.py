"""``perbench compare RUN_DIR…``: pool the cells of several runs, analyse them once, write one report.

Methods × benchmarks × policies × seeds are pooled as the papers pool across model scales; each benchmark also
gets its own leaderboard (an analysis of its cells alone) when there are several.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perbench.config import MAX_BOOTSTRAP
from perbench.errors import ConfigError
from perbench.report import details, sections, verdict
from perbench.report.extract import _d
from perbench.report.fmt import num
from perbench.runner.rundir import RunData, load_run, run_roles


def benchmark_of(group: str) -> str:
    return str(group).split("|", 1)[0]


def _setting(runs: Sequence[RunData], key: str, default: Any) -> Any:
    for r in runs:
        v = _d(r.results.get("config")).get(key)
        if v is not None:
            return v
    return default


def _one_setting(runs: Sequence[RunData], key: str, fix: str) -> None:
    """``key`` of every run's config is the same (unset counts as the default): pooling runs that differ would
    decide under one run's value (whichever came first), so they are refused, naming each run's value and ``fix``."""
    values = {str(r.path): _d(r.results.get("config")).get(key) for r in runs}
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
        said = ", ".join(f"{p}/results.json: config.{key}: {'unset' if v is None else v}" for p, v in values.items())
        raise ConfigError(f"the runs differ in {key} ({said}); {fix}")


def analyze_runs(
    runs: Sequence[RunData],
    metric: str | None = None,
    n_boot: int | None = None,
    seed: int = 0,
    equivalence_margin: float | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The pooled analysis of every run's cells, and one analysis per benchmark when there are several. Runs
    whose tie rules differ are refused (their cells count a tie differently); so are runs whose equivalence
    margins (or fractions) differ, unless ``equivalence_margin`` gives the one to use."""
    from perbench.metrics.analysis import analyze

    missing = [str(r.path) for r in runs if not r.cells]
    if missing:
        raise ConfigError(f"no cells.jsonl (or it is empty) in: {', '.join(missing)}; rerun them with this version")
    _one_setting(runs, "tie_policy", "their cells count a tie differently: rerun one of them with the other's rule")
    if equivalence_margin is None:
        fix = "a comparison would take one run's: pass --equivalence-margin to decide under one stated margin"
        _one_setting(runs, "equivalence_margin", fix)
        _one_setting(runs, "equivalence_fraction", fix)
    owner: dict[str, int] = {}
    for k, r in enumerate(runs):
        for g in sorted({str(c.get("group")) for c in r.cells or []}):
            if g in owner:
                raise ConfigError(
                    f"{runs[owner[g]].path} and {r.path} both hold group {g!r} (same setting and seed): "
                    "pooling them would count its cells twice"
                )
            owner[g] = k
    cells = [c for r in runs for c in r.cells or []]
    boot = int(n_boot if n_boot is not None else _setting(runs, "bootstrap", 1000))
    kw: dict[str, Any] = {
        "verdict_metric": metric or _setting(runs, "verdict_metric", None),
        "reference_method": _setting(runs, "reference_method", "global_bt"),
        "n_boot": boot,
        "seed": seed,
        "equivalence_margin": (
            equivalence_margin if equivalence_margin is not None else _setting(runs, "equivalence_margin", None)
        ),
        "equivalence_fraction": _setting(runs, "equivalence_fraction", None),
        "verdict_predictor": _setting(runs, "verdict_predictor", None),
        "roles": pooled_roles(runs),
        "systems": {
            m: dict(info)
            for r in runs
            for m, info in ((((r.results or {}).get("systems") or {}).get("members")) or {}).items()
            if isinstance(info, dict)
        },
    }
    try:
        pooled = analyze(cells, **kw)
    except ValueError as e:  # a hand-edited role or margin in a results.json
        raise ConfigError(f"compare: {e}") from None
    benches = sorted({benchmark_of(str(c.get("group", ""))) for c in cells})
    per: dict[str, dict[str, Any]] = {}
    if len(benches) > 1:
        for b in benches:
            per[b] = analyze([c for c in cells if benchmark_of(str(c.get("group", ""))) == b], **kw)
    return pooled, per


def pooled_roles(runs: Sequence[RunData]) -> dict[str, str]:
    """Each method's role as the runs recorded it; where runs disagree, a reference line (baseline, oracle,
    decoder) wins over deployable, so nothing one run calls a reference line is ever recommended."""
    out: dict[str, str] = {}
    for r in runs:
        for m, role in run_roles(r.results).items():
            if out.get(m, "deployable") == "deployable":
                out[m] = role
    return out


def runs_table(runs: Sequence[RunData], out_dir: Path) -> list[dict[str, str]]:
    """One row per pooled run: its report (relative to the comparison's folder where it can be), benchmark, policy,
    groups, config, creation time and cells."""
    rows = []
    for r in runs:
        res = r.results
        models = _d(_d(res.get("provenance")).get("models"))
        report = r.path / "report.html"
        try:
            rel = Path(report).resolve().relative_to(out_dir.resolve().parent)
            href = "../" + rel.as_posix()
        except ValueError:
            href = report.resolve().as_uri()
        rows.append(
            {
                "href": href,
                "name": r.path.name,
                "benchmark": str(_d(res.get("benchmark")).get("name", "?")),
                "policy": str(_d(models.get("policy")).get("name", "?")),
                "groups": ", ".join(sorted({str(c.get("group")) for c in r.cells or []})),
                "config": str(res.get("config_hash", "?")),
                "created": str(res.get("created", "")),
                "cells": num(len(r.cells or []), pct=False),
            }
        )
    return rows


def render_comparison(
    runs: Sequence[RunData],
    analysis: Mapping[str, Any],
    per_benchmark: Mapping[str, Mapping[str, Any]],
    figures: Mapping[str, Any],
    out_dir: Path,
) -> str:
    from perbench.report.html import _page, _shared_sections, _toc

    boards = "".join(sections.leaderboard(a, f"Leaderboard — {b}") for b, a in per_benchmark.items())
    pooled_title = (
        "Leaderboard — all runs pooled"
        if per_benchmark
        else "Leaderboard — " + ", ".join(sorted({str(_d(r.results.get("benchmark")).get("name", "?")) for r in runs}))
    )
    boards += sections.leaderboard(analysis, pooled_title)
    from markupsafe import Markup

    from perbench.report.templating import render

    body = [
        str(render("compare.html.j2", kind="title", n=len(runs))),
        _toc(
            [
                ("leaderboard", "Leaderboard"),
                ("methods", "Method table"),
                ("selection", "Selection"),
                ("validity", "Which benchmark"),
                ("users", "Per user"),
                ("runs", "Runs"),
            ]
        ),
        verdict.verdict_box(analysis),
    ]
    cells_present = any(r.cells for r in runs)
    # every run's systems.members (and the first run's seed and shots): the compact labels of the pooled systems
    members = {k: v for r in runs for k, v in _d(_d(r.results.get("systems")).get("members")).items()}
    labels = {"systems": {"members": members}, "config": _d(runs[0].results.get("config")) if runs else {}}
    body.append(_shared_sections(analysis, figures, labels, cells_present, boards))
    notes = [n for r in runs for n in r.notes]
    prov = details.provenance_section(runs[0].results, notes) if len(runs) == 1 else ""
    body.append(
        str(
            render(
                "compare.html.j2",
                kind="runs",
                runs=runs_table(runs, out_dir),
                provenance=Markup(prov),
                notes=Markup(sections.analysis_notes(analysis)),
            )
        )
    )
    return _page("perbench compare", body)


#: files only a run writes: a folder holding one is a run directory, which a comparison never writes into
RUN_MARKERS = ("results.json", "cells.jsonl", "units.sqlite")


def refuse_run_dir(out_dir: Path, runs: Sequence[Path]) -> None:
    """A comparison's folder is never a run directory, nor inside one (its report.html, leaderboard.md and plots/
    would replace the run's own)."""
    inside = {p.resolve() for p in runs}
    for p in (out_dir, *out_dir.parents):
        marker = next((m for m in RUN_MARKERS if (p / m).exists()), None) if p.is_dir() else None
        if p.resolve() in inside or marker is not None:
            why = f"it holds {marker}" if marker else "it is one of the runs compared"
            where = "is" if p == out_dir else f"is inside {p}, which is"
            raise ConfigError(
                f"--out {out_dir}: {where} a run directory ({why}); a comparison never writes into a run: name "
                "another folder"
            )


def compare_runs(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    metric: str | None = None,
    n_boot: int | None = None,
    seed: int = 0,
    equivalence_margin: float | None = None,
) -> Path:
    """Analyse the pooled cells of ``run_dirs``; write report.html, leaderboard.md, analysis.json and plots/
    (``equivalence_margin``: the margin of every decision, where the runs' own differ)."""
    from perbench.io import atomic_write_text, writing_inside
    from perbench.report.html import build_plots, write_outputs
    from perbench.report.leaderboard import render_markdown

    if not run_dirs:
        raise ConfigError("compare needs at least one run directory")
    if n_boot is not None and not 0 <= n_boot <= MAX_BOOTSTRAP:
        raise ConfigError(f"n_boot {n_boot}: bootstrap resamples are an integer in [0, {MAX_BOOTSTRAP}]")
    out_dir = Path(out)
    for p in (out_dir, *out_dir.parents):
        if p.is_symlink() and not p.exists():
            raise ConfigError(
                f"--out {out}: {p} is a link to {os.readlink(p)}, which does not exist; name a folder for the "
                "comparison (or create the link's target)"
            )
    blocked = next((p for p in (out_dir, *out_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise ConfigError(f"--out {out}: {blocked} is a file, not a folder; name a folder for the comparison")
    runs = [load_run(d) for d in run_dirs]
    refuse_run_dir(out_dir, [r.path for r in runs])
    analysis, per = analyze_runs(runs, metric, n_boot, seed, equivalence_margin)
    cells = [c for r in runs for c in r.cells or []]
    figs = build_plots(analysis, None, cells)
    html = render_comparison(runs, analysis, per, figs, out_dir)
    md = render_markdown(analysis, f"perbench compare — {len(runs)} runs", per)
    path = write_outputs(html, md, figs, out_dir)
    with writing_inside(out_dir):
        atomic_write_text(
            out_dir / "analysis.json",
            json.dumps({"runs": [str(r.path) for r in runs], "analysis": analysis, "per_benchmark": per}, indent=1),
        )
    return path
