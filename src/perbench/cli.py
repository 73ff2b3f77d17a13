"""``perbench`` command line: run, list, validate, build, report, compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a config end to end (no CONFIG: the embedded default)")
    p.add_argument("config", nargs="?", help="YAML run config")
    p.add_argument("--benchmark", help="benchmark name (see `perbench list benchmarks`)")
    p.add_argument("--policy", help="policy model: smollm2 | HF id | folder | .gguf | tiny-random")
    p.add_argument("--rm-backbone", help="RM backbone (same forms as --policy)")
    p.add_argument("--methods", help="comma-separated reward models")
    p.add_argument("--decoders", help="comma-separated decoders")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--max-test-prompts", type=int)
    p.add_argument("--shots", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--device")
    p.add_argument("--dtype")
    p.add_argument("--out-dir")
    p.add_argument("--run-name")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key (value parsed as YAML), repeatable",
    )


def _run(args: argparse.Namespace) -> int:
    from perbench import registry
    from perbench.config import Component, RunConfig, parse_set
    from perbench.runner.run import run

    cfg = RunConfig.from_yaml(_config_path(args.config)) if args.config else RunConfig.default()
    changes: dict[str, Any] = {}
    if args.benchmark:
        entry = registry.benchmarks.entry(args.benchmark)
        changes["benchmark"] = Component(args.benchmark).to_dict()
        for k in ("rm_backbone", "policy"):  # the benchmark's defaults, unless given explicitly
            if k in entry.defaults:
                changes[k] = entry.defaults[k]
    for flag in (
        "policy",
        "rm_backbone",
        "max_new_tokens",
        "max_test_prompts",
        "shots",
        "seed",
        "device",
        "dtype",
        "out_dir",
        "run_name",
    ):
        if getattr(args, flag) is not None:
            changes[flag] = getattr(args, flag)
    if args.methods:
        changes["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.decoders:
        changes["decoders"] = [d.strip() for d in args.decoders.split(",") if d.strip()]
    changes.update(parse_set(args.set))
    cfg = cfg.override(**changes)
    result = run(cfg)
    _print_summary(result.results)
    return 0


def _config_path(name: str) -> str:
    """A YAML path, or the name of an embedded config (``default``, ``all_methods``)."""
    if Path(name).exists():
        return name
    from importlib import resources

    embedded = resources.files("perbench") / "configs" / f"{name.removesuffix('.yaml')}.yaml"
    if embedded.is_file():
        return str(embedded)
    raise FileNotFoundError(f"config {name!r} is neither a file nor an embedded config")


def _print_summary(results: dict[str, Any]) -> None:
    print("\nRM accuracy (seen / unseen):")
    for label, r in results["upstream"].items():
        acc = r["rm_accuracy"]
        s = " / ".join(f"{100 * acc[g]['accuracy']:.1f}" if g in acc else "–" for g in ("seen", "unseen"))
        print(f"  {label:<28} {s}")
    if results["downstream"]:
        print("Downstream rubric satisfaction / ROUGE-L:")
        for label, d in results["downstream"].items():
            rs = d.get("rubric_satisfaction", {}).get("mean")
            rl = d.get("rougeL", {}).get("mean")
            print(
                f"  {label:<40} {'' if rs is None else f'{100 * rs:.1f}'} / {'' if rl is None else f'{100 * rl:.1f}'}"
            )


def _list(args: argparse.Namespace) -> int:
    from perbench import registry

    kinds = {
        "benchmarks": registry.benchmarks,
        "methods": registry.reward_models,
        "decoders": registry.decoders,
        "metrics": registry.metrics,
        "executors": registry.executors,
    }
    chosen = [args.kind] if args.kind else list(kinds)
    for kind in chosen:
        if kind not in kinds:
            raise SystemExit(f"unknown kind {kind!r}; choose from {', '.join(kinds)}")
        print(f"{kind}:")
        for e in kinds[kind]:
            extra = ""
            if kind == "benchmarks" and args.sizes:
                try:
                    b = registry.benchmarks.get(e.name)()
                    extra = f"  [{len(b.pairs)} pairs, {len(b.users)} users]"
                except Exception as ex:  # a benchmark that needs a path cannot be sized without one
                    extra = f"  [not loaded: {type(ex).__name__}]"
            print(f"  {e.name:<22} {e.help}{extra}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from perbench.data.loaders import format_validation, validate_file

    report = validate_file(args.file, mapping=args.map)
    print(format_validation(report))
    return 0 if report.get("ok") else 1


def _build(args: argparse.Namespace) -> int:
    if args.what == "rubrics":
        from perbench.data.rubrics.build import build_pool

        path = build_pool(
            out=Path(args.out) if args.out else None, seed=args.seed, policy=args.policy, limit=args.limit
        )
        print(f"wrote {path}")
        return 0
    return _build_pref_lamp(args)


def _build_pref_lamp(args: argparse.Namespace) -> int:
    """Build Pref-LaMP, print the Table-1 similarity comparison, store pairs + table in --out."""
    from perbench.data.benchmarks.pref_lamp import format_table1, load_pref_lamp
    from perbench.io import atomic_write_json, atomic_write_jsonl

    if not args.lamp_dir:
        raise ValueError("build pref-lamp needs --lamp-dir DIR (a folder with the LaMP-5 files)")
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


def _report(args: argparse.Namespace) -> int:
    """Re-render each run's report; with several run directories, also their combined comparison."""
    from perbench.report.html import render_run_dir

    for d in args.run_dirs:
        print(render_run_dir(d))
    if len(args.run_dirs) > 1:
        return _write_comparison(args.run_dirs, args.out, args.metric, args.n_boot, args.seed)
    return 0


def _compare(args: argparse.Namespace) -> int:
    return _write_comparison(args.run_dirs, args.out, args.metric, args.n_boot, args.seed)


def _write_comparison(run_dirs: list[str], out: str | None, metric: str | None, n_boot: int | None, seed: int) -> int:
    from perbench.report.compare import compare_runs

    out_dir = Path(out) if out else Path(run_dirs[0]).resolve().parent / "compare"
    path = compare_runs(run_dirs, out_dir, metric=metric, n_boot=n_boot, seed=seed)
    print(path)
    return 0


def _add_compare_options(p: Any) -> None:
    p.add_argument("--out", help="output folder of the comparison (default: compare/ beside the first run)")
    p.add_argument("--metric", help="downstream metric of the verdict, e.g. args:rubric_satisfaction")
    p.add_argument("--n-boot", type=int, help="bootstrap resamples (default: the runs' `bootstrap` setting)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perbench", description="Which personalized reward model should I deploy?")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_run(sub)
    p = sub.add_parser("list", help="list registered benchmarks, methods, decoders, metrics, executors")
    p.add_argument("kind", nargs="?")
    p.add_argument("--sizes", action="store_true", help="load built-in benchmarks to show their size")
    p = sub.add_parser("validate", help="check a preference data file; errors name file, line and field")
    p.add_argument("file")
    p.add_argument("--map", help="field mapping, e.g. user_id=ground_truth_persona,prompt=question")
    p = sub.add_parser("build", help="build a benchmark: rubrics | pref-lamp")
    p.add_argument("what", choices=["rubrics", "pref-lamp"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out")
    p.add_argument("--policy", default="smollm2", help="(rubrics) the policy that writes the candidate pool")
    p.add_argument("--limit", type=int, help="(rubrics) only the first N prompts")
    p.add_argument("--lamp-dir", help="(pref-lamp) folder with LaMP-5 files")
    p.add_argument("--layout", default="auto", choices=["auto", "user", "time"])
    p.add_argument("--negative-pool", default="other_users", choices=["other_users", "same_profile", "both"])
    p = sub.add_parser("report", help="re-render report.html of run directories (several: also a comparison)")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_compare_options(p)
    p = sub.add_parser("compare", help="pool several runs' cells: one analysis, report.html, leaderboard.md")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_compare_options(p)
    args = parser.parse_args(argv)
    handlers = {
        "run": _run,
        "list": _list,
        "validate": _validate,
        "build": _build,
        "report": _report,
        "compare": _compare,
    }
    try:
        return handlers[args.cmd](args)
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"perbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
