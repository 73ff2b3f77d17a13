"""``perbench run``: a config end to end, then its headline numbers on stdout."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from perbench.cli.shared import config_path, size_or_auto
from perbench.errors import ConfigError

EXAMPLES = """examples:
  perbench run                                   the default run (the bundled model, rubric users)
  perbench run my.yaml                           a config file (see `perbench validate --config my.yaml`)
  perbench run --benchmark prism --methods global_bt,mpu --decoders zero_shot,args
  perbench run --policy tiny-random --rm-backbone tiny-random --max-test-prompts 4   a quick smoke run
  perbench run my.yaml --set bootstrap=200 --set 'shot_curve=[1, 5]'                  any config key
  perbench run my.yaml --device cuda --batch-size auto --executor ray --ray-address auto
"""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run",
        parents=[common],
        help="run a config end to end (no CONFIG: the embedded default)",
        description="Run a config end to end: fit the reward models, measure them upstream and downstream, and\n"
        "write results.json, cells, samples, leaderboard.md and report.html in the run directory.\n"
        "Every flag overrides the config key of the same name (the config file's, else the default's).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="YAML run config, or an embedded config's name (default, all_methods, …)")
    what = p.add_argument_group("what to compare")
    what.add_argument("--benchmark", help="benchmark name (see `perbench list benchmarks`); its default models too")
    what.add_argument("--policy", help="policy model: smollm2 | HF id | folder | .gguf | tiny-random")
    what.add_argument("--rm-backbone", help="RM backbone (same forms as --policy)")
    what.add_argument("--methods", help="comma-separated reward models (see `perbench list methods`)")
    what.add_argument("--decoders", help="comma-separated decoders (see `perbench list decoders`)")
    size = p.add_argument_group("how much")
    size.add_argument("--max-new-tokens", type=int, metavar="N", help="tokens each generation may add")
    size.add_argument("--max-test-prompts", type=int, metavar="N", help="test prompts evaluated downstream")
    size.add_argument("--shots", type=int, metavar="N", help="pairs each unseen user is adapted from")
    size.add_argument("--seed", type=int, help="the run's seed (splits, fits, sampling)")
    size.add_argument(
        "--batch-size",
        type=size_or_auto,
        metavar="N|auto",
        help="generation batch size, or auto (8 on a CPU, what the GPU's free memory holds on CUDA); halves on "
        "out-of-memory (config: batch_size)",
    )
    size.add_argument(
        "--feature-batch-size",
        type=size_or_auto,
        metavar="N|auto",
        help="texts per scoring forward, or auto (16 on a CPU, what the GPU's free memory holds on CUDA) "
        "(config: feature_batch_size)",
    )
    where = p.add_argument_group("where it runs")
    where.add_argument("--device", help="auto | cpu | cuda | cuda:N | mps (default: auto, cuda when present)")
    where.add_argument("--dtype", help="auto | float32 | bfloat16 | float16 (auto: bf16 on CUDA, else float32)")
    where.add_argument("--unit-device", help="where the units compute, if not --device (Ray workers: cuda)")
    where.add_argument("--unit-dtype", help="the units' dtype, if not --dtype (auto: bf16 on CUDA, else float32)")
    where.add_argument("--executor", help="how the run's units are computed: local | ray (`perbench list executors`)")
    where.add_argument(
        "--ray-address",
        help="with --executor ray: join this Ray cluster (auto | HOST:PORT) instead of starting a local one",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out-dir", metavar="DIR", help="the folder run directories are made in (default: runs)")
    out.add_argument("--run-name", help="the run's folder inside --out-dir (one plain name; default: a config hash)")
    other = p.add_argument_group("other")
    other.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow hub_rm models with trust_remote_code: true to run their own Python files (listed first)",
    )
    other.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key (value parsed as YAML), repeatable; applied after the flags above",
    )


def command(args: argparse.Namespace) -> int:
    """``perbench run``; ``--trust-remote-code`` grants its permission for this run only."""
    if not args.trust_remote_code:
        return _run_config(args)
    from perbench.rewards.hub_rm import allow_remote_code, remote_code_allowed

    before = remote_code_allowed()
    allow_remote_code()
    try:
        return _run_config(args)
    finally:
        allow_remote_code(before)


def _run_config(args: argparse.Namespace) -> int:
    from perbench import registry
    from perbench.api import run
    from perbench.config import Component, RunConfig, parse_set

    cfg = RunConfig.from_yaml(config_path(args.config)) if args.config else RunConfig.default()
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
        "unit_device",
        "unit_dtype",
        "out_dir",
        "run_name",
        "executor",
        "batch_size",
        "feature_batch_size",
    ):
        if getattr(args, flag) is not None:
            changes[flag] = getattr(args, flag)
    if args.methods:
        changes["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.decoders:
        changes["decoders"] = [d.strip() for d in args.decoders.split(",") if d.strip()]
    changes.update(parse_set(args.set))
    cfg = cfg.override("command line", **changes)
    if args.ray_address:
        if cfg.executor != "ray":
            raise ConfigError("--ray-address needs --executor ray")
        import os

        os.environ["RAY_ADDRESS"] = args.ray_address  # where ray.init connects (Ray's own convention)
    if cfg.executor == "ray" and not _ray_connected():
        from perbench.runner import cluster

        if not cluster.supervised():  # the run in a child that this process watches (``cluster.supervise``)
            cluster.precheck(args.ray_address)  # a wrong address is reported here, before any child starts
            return cluster.supervise(args.argv)
    announce_remote_code(cfg.methods)
    result = run(cfg)
    _print_summary(result.results)
    return 0


def _ray_connected() -> bool:
    """Whether this process already holds a Ray connection (a Python caller's own ``ray.init``)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def announce_remote_code(methods: list[Any]) -> None:
    """Before a run starts, name the Python files each permitted ``trust_remote_code`` model will run."""
    for m in methods:
        if m.params.get("trust_remote_code") is True and m.params.get("model"):
            from perbench.models.loader import ModelSpec, describe_remote_code

            print(
                f"[perbench] {m.label()}: {describe_remote_code(ModelSpec.parse(str(m.params['model'])))}",
                file=sys.stderr,
            )


def _accuracy_text(entry: dict[str, Any]) -> str:
    acc = entry.get("accuracy")
    if isinstance(acc, int | float) and math.isfinite(acc):
        return f"{100 * acc:.1f}"
    return "n/a" if entry.get("not_applicable") else "–"


def _print_summary(results: dict[str, Any]) -> None:
    """The run's headline numbers on stdout. It runs after results.json is written, so it reads every field as
    optional: a method that is not applicable (no train pairs, an evaluation-only benchmark) shows its reason."""
    from perbench.metrics.rm_accuracy import invalid_pairs
    from perbench.report.extract import _d, rl_summary
    from perbench.report.fmt import ci_text, num
    from perbench.runner.summary import print_headroom, print_validity

    benches = [(str(_d(results.get("benchmark")).get("name", "benchmark")), _d(results.get("benchmark")))]
    benches += [(str(n), _d(b)) for n, b in _d(results.get("upstream_benchmarks")).items()]
    for name, bench in benches:  # every benchmark the run loaded says what it skipped
        counts = _d(_d(bench.get("skipped")).get("counts"))
        if counts:
            units = _d(_d(bench.get("skipped")).get("units"))
            reasons = ", ".join(f"{r}: {n} {units.get(r, 'pair')}(s)" for r, n in counts.items())
            print(f"Skipped while loading {name}: {reasons}")
    invalid = invalid_pairs(_d(results.get("upstream")))
    print("\nRM accuracy (seen / unseen):")
    for label, r in _d(results.get("upstream")).items():
        r = _d(r)
        if "rm_accuracy" not in r:
            print(f"  {label:<28} not applicable: {r.get('not_applicable') or 'no accuracy computed'}")
            continue
        acc = _d(r.get("rm_accuracy"))
        bad = invalid.get(label)
        flag = f"  ({bad} pairs with an invalid (NaN) score: counted wrong, never a candidate)" if bad else ""
        print(f"  {label:<28} {' / '.join(_accuracy_text(_d(acc.get(g))) for g in ('seen', 'unseen'))}{flag}")
    downstream = _d(results.get("downstream"))
    if downstream:
        # rows may cover different cells (an rl row: its trained users only); a paired gain compares like with like
        print(
            "Downstream rubric satisfaction / ROUGE-L (generations; paired rubric gain vs zero_shot on the same cells):"
        )
        for label, d in downstream.items():
            d = _d(d)
            rs = _d(d.get("rubric_satisfaction")).get("mean")
            rl = _d(d.get("rougeL")).get("mean")
            gain = _d(_d(_d(d.get("vs")).get("zero_shot")).get("rubric_satisfaction"))
            line = f"  {label:<40} {num(rs)} / {num(rl)}  ({d.get('n', 0)})"
            if gain.get("delta") is not None:
                line += f"  {num(gain['delta'], signed=True)} {ci_text(gain.get('ci'), signed=True)} on {gain.get('n')}"
            print(line)
    print_headroom(_d(results.get("analysis")))
    rows = rl_summary(results)
    if rows:
        design = results.get("rl", {}).get("design", {})
        print(
            f"RL fine-tuning ({str(design.get('algorithm', '')).upper()}, {len(design.get('seeds') or [])} seed(s)): "
            "reward gain (sd) / KL (nats) / rubric gain vs base greedy, sampled / vs placebo / vs KL-matched "
            "(pts, 95% CI over cells and seeds):"
        )
        for r in rows:
            reward = "–" if r["reward_gain"] is None else f"{r['reward_gain']:+.2f}"
            kl = "–" if r["kl"] is None else f"{r['kl']:.3g}"
            parts = [
                f"{num(g.get('delta'), signed=True)} {ci_text(g.get('ci'), signed=True)}".strip()
                for g in (r["greedy"], r["sampled"], r["vs_placebo"], r["vs_kl_matched"])
            ]
            print(f"  {r['label']:<24} {reward} / {kl} / {parts[0]}, {parts[1]} / {parts[2]} / {parts[3]}")
    print_validity(_d(results.get("analysis")))
