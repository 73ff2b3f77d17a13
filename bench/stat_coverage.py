"""Coverage of the selection's rank-coefficient intervals by a seeded double bootstrap (not a speed benchmark).

    python bench/stat_coverage.py [--designs N] [--outer 120] [--inner 200] [--coef kendall_tau_b]

For each synthetic design (``tests/coverage.py``: systems scored upstream on nested pairs and downstream on crossed
users × prompts) it prints the full-sample coefficient, its position among its own replicates, whether the analysis
flags it as biased, and the share of outer draws whose 95 % interval holds it, per candidate method: percentile,
basic, bias-corrected (BC) and the analysis's own (the percentile interval made symmetric about the estimate).
The table goes to stdout as markdown; docs/architecture.md records a run of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.coverage import Design, double_bootstrap, simulate

METHODS = ("percentile", "basic", "bias-corrected", "analysis")


def designs(n: int) -> list[Design]:
    rng = np.random.default_rng(2024)
    out = []
    for _ in range(n):
        out.append(
            Design(
                systems=int(rng.choice([6, 10, 18])),
                users=int(rng.choice([12, 20, 32])),
                prompts=int(rng.choice([8, 12, 16])),
                spread_x=float(rng.choice([0.02, 0.05, 0.1])),
                spread_y=float(rng.choice([0.01, 0.02, 0.05])),
                rho=float(rng.choice([0.5, 0.8, 0.95])),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", type=int, default=24)
    ap.add_argument("--outer", type=int, default=120)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--coef", default="kendall_tau_b")
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    print(f"| S × U × P | {args.coef} | position | flagged | " + " | ".join(METHODS) + " |")
    print("|---|---:|---:|---|" + "---:|" * len(METHODS))
    for i, d in enumerate(designs(args.designs)):
        x, y = simulate(d, np.random.default_rng(i))
        c = double_bootstrap(x, y, name=args.coef, n_outer=args.outer, n_inner=args.inner, seed=i)
        rows.append(c)
        cov = " | ".join(f"{100 * c.coverage[m]:.0f}" for m in METHODS)
        flag = "yes" if c.flagged else ""
        print(f"| {d.systems} × {d.users} × {d.prompts} | {c.value:+.2f} | {c.position:.2f} | {flag} | {cov} |")
        sys.stdout.flush()
    for label, keep in (("unflagged", False), ("flagged", True)):
        sel = [c for c in rows if c.flagged == keep]
        if sel:
            parts = []
            for m in METHODS:
                v = np.array([c.coverage[m] for c in sel])
                held = f"{np.mean(v >= 0.9):.0%}"
                parts.append(f"{m} mean {100 * v.mean():.0f}, min {100 * v.min():.0f}, ≥ 90 % in {held}")
            print(f"\n{label} ({len(sel)} designs): " + "; ".join(parts))
    print(f"\n{len(rows)} designs, {args.outer} outer × {args.inner} inner draws, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
