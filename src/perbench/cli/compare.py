"""``perbench compare``: several runs' cells pooled into one analysis and report."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from perbench.errors import ConfigError


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compare", parents=[common], help="pool several runs' cells: one analysis, report.html, leaderboard.md"
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="the run directories to pool and compare")
    add_compare_options(p)


def command(args: argparse.Namespace) -> int:
    return write_comparison(
        args.run_dirs, args.out, args.metric, args.n_boot, args.seed, summary=True, margin=args.equivalence_margin
    )


def write_comparison(
    run_dirs: list[str],
    out: str | None,
    metric: str | None,
    n_boot: int | None,
    seed: int,
    summary: bool = False,
    margin: float | None = None,
) -> int:
    """Pool the runs into one report; ``summary``: print which benchmark to trust, pooled, before its path;
    ``margin``: the equivalence margin of every decision (``--equivalence-margin``)."""
    from perbench.config import MAX_BOOTSTRAP
    from perbench.report.compare import compare_runs

    if n_boot is not None and not 0 <= n_boot <= MAX_BOOTSTRAP:
        raise ConfigError(f"--n-boot {n_boot}: bootstrap resamples are an integer in [0, {MAX_BOOTSTRAP}]")
    if not 0 <= seed < 2**32:
        raise ConfigError(f"--seed {seed}: the bootstrap seed is an integer in [0, {2**32 - 1}]")
    if margin is not None and not (math.isfinite(margin) and margin >= 0):
        raise ConfigError(f"--equivalence-margin {margin}: a margin is a finite number >= 0 (0: never equivalent)")
    out_dir = Path(out) if out else Path(run_dirs[0]).resolve().parent / "compare"
    path = compare_runs(run_dirs, out_dir, metric=metric, n_boot=n_boot, seed=seed, equivalence_margin=margin)
    if summary:
        from perbench.runner.summary import print_validity

        print_validity(json.loads((out_dir / "analysis.json").read_text(encoding="utf-8"))["analysis"])
    print(path)
    return 0


def add_compare_options(p: Any) -> None:
    p.add_argument("--out", help="output folder of the comparison (default: compare/ beside the first run)")
    p.add_argument("--metric", help="downstream metric of the verdict, e.g. args:rubric_satisfaction")
    p.add_argument("--n-boot", type=int, help="bootstrap resamples (default: the runs' `bootstrap` setting)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--equivalence-margin",
        type=float,
        help="the equivalence margin of every decision, in the metric's units (needed when the runs' own differ)",
    )
