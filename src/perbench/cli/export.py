"""``perbench export RUN_DIR --system LABEL --out DIR``: a fitted system as a folder that ``perbench.load_rm`` reads."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "export",
        parents=[common],
        help="write one fitted system of a run as a self-contained folder (perbench.load_rm reads it)",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run directory (its units.sqlite holds the fits)")
    p.add_argument(
        "--system", required=True, metavar="LABEL", help="the system's label, e.g. mpu or 'lore(train_fraction=0.5)'"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write (created)")


def command(args: argparse.Namespace) -> int:
    from perbench.export.write import export_system

    out = export_system(args.run_dir, args.system, args.out)
    print(f"wrote {out} (load it with perbench.load_rm({str(out)!r}))")
    return 0
