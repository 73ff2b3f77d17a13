"""``perbench build``: the rubric pool, or Pref-LaMP from the LaMP-5 files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perbench.errors import ConfigError


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("build", parents=[common], help="build a benchmark: rubrics | pref-lamp")
    p.add_argument("what", choices=["rubrics", "pref-lamp"], help="the benchmark to build")
    p.add_argument("--seed", type=int, default=0, help="the seed of every sampled choice (default 0)")
    p.add_argument(
        "--out",
        help="where to write it (rubrics: the pool file, default the package's data; pref-lamp: a folder, default "
        "pref_lamp)",
    )
    p.add_argument("--policy", default="smollm2", help="(rubrics) the policy that writes the candidate pool")
    p.add_argument("--limit", type=int, help="(rubrics) only the first N prompts")
    p.add_argument(
        "--size",
        default="default",
        choices=["default", "large"],
        help="(rubrics) large: the base responses of the large edition's 48 extra prompts (pool_more.jsonl)",
    )
    p.add_argument("--lamp-dir", help="(pref-lamp) folder with LaMP-5 files")
    p.add_argument(
        "--layout",
        default="auto",
        choices=["auto", "user", "time"],
        help="(pref-lamp) which LaMP-5 layout the files have: user, time or auto (detected)",
    )
    p.add_argument(
        "--negative-pool",
        default="other_users",
        choices=["other_users", "same_profile", "both"],
        help="(pref-lamp) where the rejected responses are mined (default other_users)",
    )


def command(args: argparse.Namespace) -> int:
    if args.what == "rubrics":
        from perbench.builders.rubric_pool import build_pool

        path = build_pool(
            out=Path(args.out) if args.out else None,
            seed=args.seed,
            policy=args.policy,
            limit=args.limit,
            size=args.size,
        )
        print(f"wrote {path}")
        return 0
    return _build_pref_lamp(args)


def _build_pref_lamp(args: argparse.Namespace) -> int:
    """Build Pref-LaMP, print the Table-1 similarity comparison, store pairs + table in --out."""
    from perbench.builders.pref_lamp import format_table1, load_pref_lamp
    from perbench.io import atomic_write_json, atomic_write_jsonl

    if not args.lamp_dir:
        raise ConfigError("build pref-lamp needs --lamp-dir DIR (a folder with the LaMP-5 files)")
    bench = load_pref_lamp(args.lamp_dir, layout=args.layout, negative_pool=args.negative_pool, seed=args.seed)
    table = bench.meta.get("table1", {})
    print(format_table1(table))
    out = Path(args.out or "pref_lamp")
    atomic_write_jsonl(
        out / "pairs.jsonl",
        [
            {
                "pair_id": p.pair_id,
                "user_id": p.user_id,
                "prompt": p.prompt,
                "chosen": p.chosen,
                "rejected": p.rejected,
                "split": p.split,
                "seen": bench.users[p.user_id].seen,
                **dict(p.meta),
            }
            for p in bench.pairs
        ],
    )
    atomic_write_json(out / "table1.json", table)
    print(f"wrote {out / 'pairs.jsonl'} ({len(bench.pairs)} pairs) and {out / 'table1.json'}")
    return 0
