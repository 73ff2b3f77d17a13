"""``perbench plan``: the users × prompts that would separate the leader from each method (and, for a Ray run, the
object store its units needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perbench.cli.shared import non_negative, positive, probability
from perbench.errors import ConfigError


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="users × prompts needed to separate the leader from each method, or establish equivalence",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run directory")
    p.add_argument("--metric", help="the metric to plan for (default: the run's verdict metric)")
    p.add_argument(
        "--effect",
        type=positive,
        help="the leader's lead over every other system to plan for (> 0): points for a proportion (5 = 5 pts), "
        "else units (default: the observed differences)",
    )
    p.add_argument(
        "--margin", type=non_negative, help="equivalence margin, in the same units as --effect (default: the run's)"
    )
    p.add_argument("--power", type=probability, default=0.8, help="target power (default 0.8)")


def command(args: argparse.Namespace) -> int:
    """``perbench plan RUN_DIR``: the users × prompts that would separate the leader from each other deployable
    method (at ``--effect``, or the observed differences) or establish equivalence, from the run's cells."""
    from perbench.metrics.analysis import plan_sizes
    from perbench.runner.rundir import load_run, run_roles

    run_dir = Path(args.run_dir)
    run = load_run(run_dir, need_cells=True)  # the checks of report and compare
    cells, results = run.cells or [], run.results
    for note in run.notes:
        print(f"note: {note}", file=sys.stderr)
    analysis = results.get("analysis") or {}
    config = results.get("config") or {}
    metric = args.metric or (analysis.get("verdict") or {}).get("metric") or config.get("verdict_metric")
    if args.metric and not any(c["metric"] == args.metric for c in cells):
        known = sorted({str(c["metric"]) for c in cells})
        cells_path = run_dir / "cells.jsonl"
        raise ConfigError(f"plan: {cells_path} has no {args.metric} cells; its metrics: {', '.join(known)}")
    crit = ((analysis.get("ranking") or {}).get(metric) or {}).get("critical_value") if metric else None
    try:
        got = plan_sizes(
            cells,
            metric=metric,
            effect=args.effect,
            equivalence_margin=args.margin,
            roles=run_roles(results),
            critical_value=crit,
            power=args.power,
            points=True,
            run_margin=_run_margin(analysis, metric, config),
        )
    except ValueError as e:
        raise ConfigError(f"plan: {e}") from None
    print(_plan_text(got, run_dir, results))
    store = _object_store_text(results, run_dir / "results.json")
    if store:
        print(store)
    return 0


def _run_margin(analysis: dict[str, Any], metric: str | None, config: dict[str, Any]) -> float | None:
    """The margin the run's verdict used on ``metric`` (``analysis.margins``: 0.1 × the headroom unless
    ``equivalence_margin`` is set), else the config's."""
    got = ((analysis.get("margins") or {}).get(metric) or {}).get("value") if metric else None
    if isinstance(got, int | float):
        return float(got)
    v = config.get("equivalence_margin")
    return None if v is None else float(v)


def _object_store_text(results: dict[str, Any], path: Path) -> str:
    """A Ray run's object store: what its plan estimated before it ran, and what its units' results measured
    (results grow with the texts: a larger run of the same grid needs proportionally more). A record without
    its fields (hand-edited, or partial) is named in a note on stderr, and its line left out."""
    est = (results.get("plan") or {}).get("object_store") if isinstance(results.get("plan"), dict) else None
    if est is None:
        return ""
    fields = {"largest_mb": (int, float), "per_node_mb": (int, float), "largest": (str,)}
    bad = [f for f, kinds in fields.items() if not isinstance(est, dict) or not _is(est.get(f), kinds)]
    if bad:
        print(
            f"note: {path}: plan.object_store: no valid {', '.join(bad)} (a partial or edited record): "
            "its estimate is not shown",
            file=sys.stderr,
        )
        return ""
    line = (
        f"  object store (Ray): estimated {est['largest_mb']:g} MB for the largest unit result ({est['largest']}), "
        f"{est['per_node_mb']:g} MB per node"
    )
    work = results.get("work")
    remote = work.get("remote") if isinstance(work, dict) else None
    got = remote.get("result_mb") if isinstance(remote, dict) else None
    made = {str(k): v for k, v in got.items() if _is(v, (int, float))} if isinstance(got, dict) else {}
    if made:
        big = max(made, key=made.__getitem__)
        line += f"; measured {made[big]:g} MB ({big}), {sum(made.values()):.3g} MB in all"
    return line


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def _plan_text(got: dict[str, Any], run_dir: Path, results: dict[str, Any] | None = None) -> str:
    """One table: each comparison's observed difference and the prompts × users that separate it (or show it
    beats the random pick) and that establish equivalence; then the size of the whole decision."""
    metric, plans = got["metric"], got["plans"]
    if got["leader"] is None:
        return f"{run_dir}: no deployable method has {metric} cells: nothing to plan."
    unit = 100 if got["proportion"] else 1
    pts = " pts" if unit == 100 else ""
    lines = [*got["notes"], f"{run_dir}: {metric}, leader {got['leader']} ({len(got['order'])} deployable methods)"]
    d = got.get("decision")
    if d:
        lines.append(f"  {d['text']}.")
        lines.append("  Per comparison:")
    if not plans:
        lines.append("  no other deployable method shares 2 or more cells with the leader: nothing to compare.")
        return "\n".join(lines)
    c = plans[0]["components"]
    per = "" if c["crossed"] else " per user"
    now_p = c["prompts"] if c["crossed"] else max(1, c["prompts"] // max(1, c["users"]))
    power = f"{100 * plans[0]['power']:.0f}%"
    lines.append(f"  now {now_p} prompts{per} × {c['users']} users; sizes are prompts{per} × users for {power} power")

    def size(s: Any) -> str:
        if not s:
            return "> 1e8 cells"
        return f"now ({100 * s['power_now']:.0f}%)" if s["scale"] <= 1 else f"{s['prompts']} × {s['users']}"

    from perbench.report.labels import report_labels

    # compact labels from results.json's systems.members: mpu@25% = mpu(train_fraction=0.25)
    names = report_labels(results or {}, [str(x) for p in plans for x in (p["a"], p["b"])])
    margin = f"{unit * got['margin']:g}{pts}"
    head = ["comparison", "observed", "to separate", f"to establish equivalence (±{margin})"]
    rows = []
    for p in plans:
        one = p.get("one_sided", False)
        name = f"{names[p['a']]} − {names[p['b']]}" + (" (one-sided)" if one else "")
        if p["constant"]:
            sep = eq = "identical" if p["observed"] == 0 else "constant"
        else:
            sep = "—" if one and p["effect"] <= 0 else "—" if p["effect"] == 0 else size(p["separate"])
            inside = not one and p["margin"] > 0 and abs(p["observed"]) < p["margin"]
            eq = size(p["equivalence"]) if inside else "—"
        rows.append([name, f"{unit * p['observed']:+.2f}{pts}", sep, eq])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        lines.append("  " + "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())
    w = got.get("whole_decision")
    if w:
        lines.append(f"  {w['text']}.")
    return "\n".join(lines)
