"""``perbench report``: re-render each run's report; with several runs, also their comparison."""

from __future__ import annotations

import argparse
from typing import Any

from perbench.cli.compare import add_compare_options, write_comparison


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "report", parents=[common], help="re-render report.html of run directories (several: also a comparison)"
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (several: one comparison)")
    add_compare_options(p)


def command(args: argparse.Namespace) -> int:
    """Re-render each run's report; with several run directories, also their combined comparison."""
    from perbench.report.html import render_run_dir

    for d in args.run_dirs:
        print(render_run_dir(d))
    if len(args.run_dirs) > 1:
        return write_comparison(
            args.run_dirs, args.out, args.metric, args.n_boot, args.seed, margin=args.equivalence_margin
        )
    return 0
