"""The performance suite: every speed ratio the project claims, measured side by side, written to a report.

    python bench/suite.py [--quick] [--out docs/benchmarks.md] [--device cpu|cuda] [--dtype bfloat16]
                          [--only guided,methods,...]

Each piece (guided decoding, method fitting, policy accuracy, RM pair scoring, the Ray executor) runs in its
own Python process, so its peak resident memory is its own and a failing piece cannot take the others down.
Inside a piece, the variants being compared run in turn over several rounds and their medians are compared.
The report (default ``docs/benchmarks.md``) gets a header (machine, versions, date), the goals table and
one section per piece; everything below the marker line of an existing report (results of separate full
runs) is kept as it is. ``--quick`` runs every piece at smoke-test sizes (one round) and, unless ``--out``
is given, writes its report to a temporary file rather than over the docs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, Goal, Section, Settings, fmt_s, machine_facts, peak_rss_mb, table

PIECES = {
    "guided": ("perf_guided", "Guided decoding vs greedy, and batched ARGS vs the reference loop"),
    "methods": ("perf_methods", "Training many methods on shared features"),
    "policy_accuracy": ("perf_policy_accuracy", "Policy accuracy vs one forward per response"),
    "rm_scoring": ("perf_rm_scoring", "RM pair scoring"),
    "sampling": ("perf_sampling", "Sampling a Best-of-N pool, and the user bootstrap"),
    "ray": ("perf_ray", "Ray executor vs local"),
}
MARKER = "<!-- bench/suite.py writes everything above this line; everything below it is kept as it is. -->"
SUITE_BUDGET_S = 20 * 60
DEFAULT_RUN_MEMORY_GOAL_GB = 4.0


def choose_threads(asked: int | None) -> tuple[int, str]:
    """Every core granted, unless asked otherwise or the machine is already busy: on a CPU shared with other
    work, one thread per process is faster and far steadier than threads that wait on descheduled peers."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if asked:
        return asked, "--threads"
    if os.environ.get("PERBENCH_THREADS"):
        return int(os.environ["PERBENCH_THREADS"]), "PERBENCH_THREADS"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if cores > 1 and load >= 0.5:
        return 1, f"chosen: the machine was busy at the start, load {load:.1f} on {cores} cores"
    return cores, "chosen: every core granted, the machine idle at the start"


def run_piece(name: str, settings: Settings, out: Path) -> None:
    """In the child process: run one piece and write its :class:`Section` as JSON."""
    import importlib

    os.environ.setdefault("PERBENCH_QUIET", "1")
    t = time.perf_counter()
    module = importlib.import_module(PIECES[name][0])
    try:
        sec: Section = module.run(settings)
    except Exception:
        sec = Section(name, PIECES[name][1], body=["The piece failed:", "", "```", traceback.format_exc(), "```"])
        sec.goals.append(Goal(f"{name} piece", "runs", "failed (see its section)", False))
    sec.wall_s = time.perf_counter() - t
    sec.peak_rss_mb = peak_rss_mb()
    out.write_text(json.dumps(sec.to_dict()))


def spawn(name: str, settings: Settings, tmp: Path) -> Section:
    out = tmp / f"{name}.json"
    cmd = [sys.executable, __file__, "--piece", name, "--json", str(out), "--device", settings.device]
    cmd += ["--dtype", settings.dtype] if settings.dtype else []
    cmd += ["--quick"] if settings.quick else []
    print(f"[bench] {name} …", flush=True)
    t = time.perf_counter()
    scratch = tmp / f"{name}-scratch"  # the piece's temporary files go here and are removed with the run's folder
    scratch.mkdir()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "TMPDIR": str(scratch)})
    if proc.returncode != 0 or not out.exists():
        sec = Section(name, PIECES[name][1], body=[f"The piece's process exited with status {proc.returncode}."])
        sec.goals.append(Goal(f"{name} piece", "runs", f"exit status {proc.returncode}", False))
        sec.wall_s = time.perf_counter() - t
        return sec
    sec = Section.from_dict(json.loads(out.read_text()))
    print(f"[bench] {name} done in {fmt_s(sec.wall_s)}", flush=True)
    return sec


def kept_part(path: Path) -> str:
    """Everything below the marker of an existing report (the whole old report when it has no marker)."""
    if not path.exists():
        return ""
    text = path.read_text()
    if MARKER in text:
        return text.split(MARKER, 1)[1].lstrip("\n")
    return text


def default_run_memory(kept: str) -> tuple[float | None, str]:
    """The default run's peak memory as reported in the kept part of the report (it is measured separately)."""
    m = re.search(r"peak resident memory \| \*\*([\d.]+) GB\*\*", kept)
    return (float(m.group(1)), m.group(0)) if m else (None, "")


def render(sections: list[Section], settings: Settings, facts: dict[str, str], total_s: float, kept: str) -> str:
    goals = [g for s in sections for g in s.goals]
    mem_gb, _ = default_run_memory(kept)
    wall = re.search(r"wall time, empty cache \| \*\*(\d+) min (\d+) s\*\*", kept)
    if wall:
        minutes = int(wall.group(1)) + int(wall.group(2)) / 60
        goals.append(
            Goal(
                "wall time of the default run (`make run`), empty cache",
                "≤ 10 min",
                f"{wall.group(1)} min {wall.group(2)} s, read from the default-run section below (not re-run here)",
                minutes <= 10,
            )
        )
    if mem_gb is not None:
        goals.append(
            Goal(
                "peak memory of the default run (`make run`)",
                f"≤ {DEFAULT_RUN_MEMORY_GOAL_GB:g} GB",
                f"{mem_gb:.2f} GB, read from the default-run section below (a separate run; not re-run here)",
                mem_gb <= DEFAULT_RUN_MEMORY_GOAL_GB,
            )
        )
    goals.append(
        Goal(
            "`make bench` wall time on this machine",
            f"≤ {SUITE_BUDGET_S // 60} min",
            fmt_s(total_s),
            total_s <= SUITE_BUDGET_S,
        )
    )
    verdict = {True: "met", False: "**not met**", None: "—"}
    lines = [
        "# Benchmarks: speed and memory",
        "",
        f"Written by `make bench` (`bench/suite.py{' --quick' if settings.quick else ''}`) on "
        f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}. Every ratio below was measured side by side in "
        "this one run: the variants compared run in turn over several rounds and their medians are compared, "
        "so load on the machine hits them alike. Absolute times move with that load; the ratios are what to "
        "compare. Each piece runs in its own process (its peak memory is its own).",
    ]
    if settings.quick:
        lines += ["", "**Quick mode**: smoke-test sizes and one round; the figures are not the suite's results."]
    lines += ["", *table(["", ""], [[k, v] for k, v in facts.items()], "ll"), "", "## Goals", ""]
    lines += table(
        ["goal", "target", "measured", "met"],
        [[g.goal, g.target, g.measured + (f" ({g.note})" if g.note else ""), verdict[g.met]] for g in goals],
        "llll",
    )
    for s in sections:
        lines += ["", f"## {s.title}", "", *s.body]
    rows = [[s.title, f"{s.peak_rss_mb / 1024:.2f} GB", fmt_s(s.wall_s)] for s in sections]
    lines += ["", "## Peak memory and time of each piece", ""]
    lines += table(["piece", "peak resident memory", "wall time"], rows)
    lines += [
        "",
        "Peak resident memory of each piece's process (`getrusage`), models and data included. The default "
        "run's own peak is the figure in the default-run section below"
        + (f" ({mem_gb:.2f} GB)" if mem_gb is not None else "")
        + f". The whole suite took {fmt_s(total_s)}.",
        "",
        MARKER,
        "",
    ]
    return "\n".join(lines) + kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke-test sizes, one round")
    ap.add_argument("--out", help="report to write (default docs/benchmarks.md; --quick: a temporary file)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--threads", type=int, help="torch threads in every piece (default: see choose_threads)")
    ap.add_argument("--figures", help="also write every piece's raw figures to this JSON file")
    ap.add_argument("--only", help=f"comma-separated pieces ({', '.join(PIECES)})")
    ap.add_argument("--piece", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    settings = Settings(device=args.device, dtype=args.dtype, quick=args.quick, rounds=1 if args.quick else 3)
    if args.piece:
        run_piece(args.piece, settings, Path(args.json))
        return 0
    names = [n.strip() for n in args.only.split(",")] if args.only else list(PIECES)
    unknown = sorted(set(names) - set(PIECES))
    if unknown:
        ap.error(f"unknown pieces {unknown}; known: {', '.join(PIECES)}")
    if args.out:
        out = Path(args.out)
    elif args.quick or args.only:
        out = Path(tempfile.mkdtemp(prefix="perbench-bench-")) / "benchmarks.md"
    else:
        out = ROOT / "docs" / "benchmarks.md"
    threads, why = choose_threads(args.threads)
    os.environ["PERBENCH_THREADS"] = str(threads)
    from perbench.device import set_threads

    set_threads()
    facts = machine_facts(settings)
    facts["torch threads"] = f"{threads} ({why})"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="perbench-bench-") as tmp:
        sections = [spawn(n, settings, Path(tmp)) for n in names]
    total = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(sections, settings, facts, total, kept_part(out)))
    if args.figures:
        Path(args.figures).write_text(json.dumps({sec.key: sec.figures for sec in sections}, indent=1))
    print(f"[bench] {len(sections)} piece(s) in {fmt_s(total)}; report: {out}")
    for s in sections:
        for g in s.goals:
            print(f"  {'met' if g.met else 'NOT MET' if g.met is False else '-':>7}  {g.goal}: {g.measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
