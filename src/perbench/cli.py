"""``perbench`` command line: run, list, validate, build, report, compare, plan.

Every error a user can act on (a :class:`~perbench.errors.PerbenchError`, or an OS error naming a file) is one
line on stderr, ``perbench: error: …``, and exit code 2; ``--debug`` (before or after the command) shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perbench.cli_export import add_export, export_cmd
from perbench.errors import ConfigError, PerbenchError


def _add_run(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common], help="run a config end to end (no CONFIG: the embedded default)")
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
    p.add_argument("--run-name", help="the run's folder inside --out-dir (one plain name)")
    p.add_argument("--executor", help="how the run's units are computed: local | ray (`perbench list executors`)")
    p.add_argument(
        "--ray-address",
        help="with --executor ray: join this Ray cluster (auto | HOST:PORT) instead of starting a local one",
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow hub_rm models with trust_remote_code: true to run their own Python files (listed first)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key (value parsed as YAML), repeatable",
    )


def _run(args: argparse.Namespace) -> int:
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
        "executor",
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
    _announce_remote_code(cfg.methods)
    result = run(cfg)
    _print_summary(result.results)
    return 0


def _ray_connected() -> bool:
    """Whether this process already holds a Ray connection (a Python caller's own ``ray.init``)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def _announce_remote_code(methods: list[Any]) -> None:
    """Before a run starts, name the Python files each permitted ``trust_remote_code`` model will run."""
    for m in methods:
        if m.params.get("trust_remote_code") is True and m.params.get("model"):
            from perbench.models.loader import ModelSpec, describe_remote_code

            print(
                f"[perbench] {m.label()}: {describe_remote_code(ModelSpec.parse(str(m.params['model'])))}",
                file=sys.stderr,
            )


def _config_path(name: str) -> str:
    """A YAML path, or the name of an embedded config (``default``, ``all_methods``)."""
    if Path(name).exists():
        return name
    from importlib import resources

    from perbench.config import MissingConfigError

    configs = resources.files("perbench") / "configs"
    embedded = configs / f"{name.removesuffix('.yaml')}.yaml"
    if embedded.is_file():
        return str(embedded)
    known = sorted(p.name.removesuffix(".yaml") for p in configs.iterdir() if p.name.endswith(".yaml"))
    raise MissingConfigError(f"config {name!r} is neither a file nor an embedded config (embedded: {', '.join(known)})")


def _accuracy_text(entry: dict[str, Any]) -> str:
    acc = entry.get("accuracy")
    if isinstance(acc, int | float) and math.isfinite(acc):
        return f"{100 * acc:.1f}"
    return "n/a" if entry.get("not_applicable") else "–"


def _print_summary(results: dict[str, Any]) -> None:
    """The run's headline numbers on stdout. It runs after results.json is written, so it reads every field as
    optional: a method that is not applicable (no train pairs, an evaluation-only benchmark) shows its reason."""
    from perbench.report.extract import _d, rl_summary
    from perbench.report.fmt import ci_text, num
    from perbench.runner.results import print_headroom, print_validity

    benches = [(str(_d(results.get("benchmark")).get("name", "benchmark")), _d(results.get("benchmark")))]
    benches += [(str(n), _d(b)) for n, b in _d(results.get("upstream_benchmarks")).items()]
    for name, bench in benches:  # every benchmark the run loaded says what it skipped
        counts = _d(_d(bench.get("skipped")).get("counts"))
        if counts:
            units = _d(_d(bench.get("skipped")).get("units"))
            reasons = ", ".join(f"{r}: {n} {units.get(r, 'pair')}(s)" for r, n in counts.items())
            print(f"Skipped while loading {name}: {reasons}")
    print("\nRM accuracy (seen / unseen):")
    for label, r in _d(results.get("upstream")).items():
        r = _d(r)
        if "rm_accuracy" not in r:
            print(f"  {label:<28} not applicable: {r.get('not_applicable') or 'no accuracy computed'}")
            continue
        acc = _d(r.get("rm_accuracy"))
        print(f"  {label:<28} {' / '.join(_accuracy_text(_d(acc.get(g))) for g in ('seen', 'unseen'))}")
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


def _list(args: argparse.Namespace) -> int:
    from perbench import registry

    kinds = {
        "benchmarks": registry.benchmarks,
        "methods": registry.reward_models,
        "decoders": registry.decoders,
        "metrics": registry.metrics,
        "executors": registry.executors,
    }
    if args.kind and args.kind not in kinds:
        import difflib

        close = difflib.get_close_matches(args.kind, list(kinds), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"list: unknown kind {args.kind!r}.{hint} Choose from {', '.join(kinds)}")
    chosen = [args.kind] if args.kind else list(kinds)
    with _offline_unless_set() if args.sizes else contextlib.nullcontext():
        for kind in chosen:
            print(f"{kind}:")
            for e in kinds[kind]:
                extra = _size(e.name) if kind == "benchmarks" and args.sizes else ""
                print(f"  {e.name:<22} {e.help}{extra}")
    if args.sizes and "benchmarks" in chosen:
        print(
            "  (sizes: each benchmark whole, at its own defaults; a run loads what its config selects, e.g. the "
            "default run's `max_train_prompts: 24` of 48 keeps fewer train pairs: its `benchmark …: N pairs` "
            "line says how many)"
        )
    return 0


@contextlib.contextmanager
def _offline_unless_set() -> Iterator[None]:
    """HF_HUB_OFFLINE=1 while sizing benchmarks (no waiting on network retries), unless the user set it."""
    if "HF_HUB_OFFLINE" in os.environ:
        yield
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        os.environ.pop("HF_HUB_OFFLINE", None)


def _size(name: str) -> str:
    """`` [N pairs, M users]`` of a built-in benchmark, or why it was not loaded."""
    from perbench import registry

    loader = registry.benchmarks.get(name)
    params = inspect.signature(loader).parameters.values()
    required = [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        return f"  [needs a path: {', '.join(required)}]"
    try:
        b = loader()
    except Exception as ex:  # e.g. a hub dataset while offline: the listing goes on
        first = (str(ex).strip().splitlines() or [""])[0][:100]
        return f"  [not loaded: {type(ex).__name__}{': ' + first if first else ''}]"
    return f"  [{len(b.pairs)} pairs, {len(b.users)} users]"


#: ``perbench validate`` flag -> loader option, for the options a user gave
_VALIDATE_FLAGS = {
    "map": "mapping",
    "on_error": "on_error",
    "dedup": "dedup",
    "unseen_users": "unseen_users",
    "unseen_fraction": "unseen_fraction",
    "test_fraction": "test_fraction",
    "default_user": "default_user",
    "max_chars": "max_chars",
    "max_pairs": "max_pairs",
    "max_prompts": "max_prompts",
    "seed": "seed",
    "format": "fmt",
    "split": "split",
}


def _validate(args: argparse.Namespace) -> int:
    """``perbench validate``: the file as a run would load it; with ``--config``, checked as that run checks it."""
    from perbench.data.loaders import format_validation, validate_file
    from perbench.runner import preflight

    if args.benchmark:
        return _validate_named(args)
    source, options, cfg = _validate_options(args)
    takes = inspect.signature(validate_file).parameters
    any_keyword = any(p.kind is p.VAR_KEYWORD for p in takes.values())
    unsupported = [] if any_keyword else sorted(k for k in options if k not in takes)
    if unsupported:
        raise ConfigError(f"validate: this version's loader has no option {unsupported[0]!r}")
    report = validate_file(source, **options) if cfg is None else preflight.validate_for_run(cfg, source, options)
    print(format_validation(report))
    return 0 if report.get("ok") else 1


def _validate_named(args: argparse.Namespace) -> int:
    """``perbench validate --benchmark NAME FILE [--param k=v ...]``: a registered benchmark's own loader."""
    import yaml

    from perbench import registry
    from perbench.data.loaders import format_validation
    from perbench.data.validate_named import validate_named

    if not args.file:
        raise ConfigError(f"validate --benchmark {args.benchmark}: give the data FILE (or folder)")
    loader = registry.benchmarks.get(args.benchmark)
    params: dict[str, Any] = {}
    for item in args.param or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"validate --param: expected KEY=VALUE, got {item!r}")
        params[key.strip()] = yaml.safe_load(value)
    if args.on_error is not None:
        params["on_error"] = args.on_error
    report = validate_named(args.benchmark, loader, str(args.file), params)
    print(format_validation(report))
    return 0 if report.get("ok") else 1


def _validate_options(args: argparse.Namespace) -> tuple[str, dict[str, Any], Any]:
    """-> (the file, the loader options, the run config or None): a run config's ``file`` benchmark params, then
    the flags given."""
    options: dict[str, Any] = {}
    source = args.file
    cfg = None
    if args.config:
        from perbench.config import RunConfig

        cfg = RunConfig.from_yaml(_config_path(args.config))
        if cfg.benchmark.name != "file":
            raise ConfigError(
                f"{args.config}: benchmark is {cfg.benchmark.name!r}; validate --config reads the options of a "
                "`file` benchmark (benchmark: {name: file, source: ..., mapping: ...})"
            )
        options = dict(cfg.benchmark.params)
        config_source = options.pop("source", None)
        source = source or config_source
    if not source:
        raise ConfigError("validate: give the data FILE, or --config RUN.yaml whose `file` benchmark has a source")
    for flag, option in _VALIDATE_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            options[option] = value
    return str(source), options, cfg


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return v


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _non_negative(text: str) -> float:
    v = _finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return v


def _probability(text: str) -> float:
    v = _finite(text)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return v


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_validate(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "validate",
        parents=[common],
        help="check a preference data file as a run would load it; errors name file, line and field",
    )
    p.add_argument("file", nargs="?", help="the data file (default: the source of --config's file benchmark)")
    p.add_argument("--config", metavar="RUN.yaml", help="take the loader options from this run config's benchmark")
    p.add_argument("--benchmark", metavar="NAME", help="load FILE with this registered loader (perbench list)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a parameter of --benchmark's loader")
    p.add_argument("--map", help="field mapping, e.g. user_id=ground_truth_persona,prompt=question")
    p.add_argument("--on-error", choices=["raise", "skip"], help="bad rows: stop at the first, or count and skip")
    p.add_argument("--no-dedup", dest="dedup", action="store_const", const=False, help="keep duplicate pairs")
    p.add_argument("--unseen-fraction", type=_fraction, help="share of users held out as unseen")
    p.add_argument("--unseen-users", type=_names, metavar="A,B", help="users held out as unseen")
    p.add_argument("--test-fraction", type=_fraction, help="seeded per-user test share (no split field)")
    p.add_argument("--default-user", help="the one user of a file without a user field")
    p.add_argument("--max-chars", type=int, help="texts longer than this are cut (and counted)")
    p.add_argument("--max-pairs", type=int, help="keep a seeded choice of this many pairs (mirrors together)")
    p.add_argument("--max-prompts", type=int, help="keep the pairs of a seeded choice of this many prompts")
    p.add_argument("--seed", type=int, help="seed of the unseen-user and test splits")
    p.add_argument("--format", help="json | jsonl | csv | parquet | hub (default: from the file name)")
    p.add_argument("--split", help="split of a hub dataset")


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


def _report(args: argparse.Namespace) -> int:
    """Re-render each run's report; with several run directories, also their combined comparison."""
    from perbench.report.html import render_run_dir

    for d in args.run_dirs:
        print(render_run_dir(d))
    if len(args.run_dirs) > 1:
        return _write_comparison(args.run_dirs, args.out, args.metric, args.n_boot, args.seed)
    return 0


def _compare(args: argparse.Namespace) -> int:
    return _write_comparison(args.run_dirs, args.out, args.metric, args.n_boot, args.seed, summary=True)


def _write_comparison(
    run_dirs: list[str], out: str | None, metric: str | None, n_boot: int | None, seed: int, summary: bool = False
) -> int:
    """Pool the runs into one report; ``summary``: print which benchmark to trust, pooled, before its path."""
    from perbench.config import MAX_BOOTSTRAP
    from perbench.report.compare import compare_runs

    if n_boot is not None and not 0 <= n_boot <= MAX_BOOTSTRAP:
        raise ConfigError(f"--n-boot {n_boot}: bootstrap resamples are an integer in [0, {MAX_BOOTSTRAP}]")
    if not 0 <= seed < 2**32:
        raise ConfigError(f"--seed {seed}: the bootstrap seed is an integer in [0, {2**32 - 1}]")
    out_dir = Path(out) if out else Path(run_dirs[0]).resolve().parent / "compare"
    path = compare_runs(run_dirs, out_dir, metric=metric, n_boot=n_boot, seed=seed)
    if summary:
        from perbench.runner.results import print_validity

        print_validity(json.loads((out_dir / "analysis.json").read_text(encoding="utf-8"))["analysis"])
    print(path)
    return 0


def _add_compare_options(p: Any) -> None:
    p.add_argument("--out", help="output folder of the comparison (default: compare/ beside the first run)")
    p.add_argument("--metric", help="downstream metric of the verdict, e.g. args:rubric_satisfaction")
    p.add_argument("--n-boot", type=int, help="bootstrap resamples (default: the runs' `bootstrap` setting)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")


def _plan(args: argparse.Namespace) -> int:
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
            run_margin=config.get("equivalence_margin"),
        )
    except ValueError as e:
        raise ConfigError(f"plan: {e}") from None
    print(_plan_text(got, run_dir))
    return 0


def _plan_text(got: dict[str, Any], run_dir: Path) -> str:
    """One table: each comparison's observed difference and the prompts × users that separate it (or show it
    beats the random pick) and that establish equivalence; then the size of the whole decision."""
    metric, plans = got["metric"], got["plans"]
    if got["leader"] is None:
        return f"{run_dir}: no deployable method has {metric} cells: nothing to plan."
    unit = 100 if got["proportion"] else 1
    pts = " pts" if unit == 100 else ""
    lines = [*got["notes"], f"{run_dir}: {metric}, leader {got['leader']} ({len(got['order'])} deployable methods)"]
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

    from perbench.report.labels import short_labels

    names = short_labels([str(x) for p in plans for x in (p["a"], p["b"])])  # mpu@25% = mpu(train_fraction=0.25)
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
    d = got.get("decision")
    if d:
        lines.append(f"  {d['text']}.")
    return "\n".join(lines)


def _user_error(e: BaseException) -> bool:
    """An error the user can act on: printed as one line. Anything else is a bug: its traceback is shown."""
    if isinstance(e, PerbenchError):
        return True
    if isinstance(e, OSError):
        return e.filename is not None or isinstance(e, FileNotFoundError)
    return False


def _one_line(e: BaseException) -> str:
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error"
    )
    common.add_argument(
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars or log lines (perbench's and transformers', datasets', gguf's): PERBENCH_QUIET=1",
    )
    parser = argparse.ArgumentParser(
        prog="perbench", description="Which personalized reward model should I deploy?", parents=[common]
    )
    from perbench import __version__

    parser.add_argument("--version", action="version", version=f"perbench {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_run(sub, common)
    add_export(sub, common)
    p = sub.add_parser(
        "list", parents=[common], help="list registered benchmarks, methods, decoders, metrics, executors"
    )
    p.add_argument("kind", nargs="?")
    p.add_argument("--sizes", action="store_true", help="load built-in benchmarks to show their size (offline)")
    _add_validate(sub, common)
    p = sub.add_parser("build", parents=[common], help="build a benchmark: rubrics | pref-lamp")
    p.add_argument("what", choices=["rubrics", "pref-lamp"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out")
    p.add_argument("--policy", default="smollm2", help="(rubrics) the policy that writes the candidate pool")
    p.add_argument("--limit", type=int, help="(rubrics) only the first N prompts")
    p.add_argument("--lamp-dir", help="(pref-lamp) folder with LaMP-5 files")
    p.add_argument("--layout", default="auto", choices=["auto", "user", "time"])
    p.add_argument("--negative-pool", default="other_users", choices=["other_users", "same_profile", "both"])
    p = sub.add_parser(
        "report", parents=[common], help="re-render report.html of run directories (several: also a comparison)"
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_compare_options(p)
    p = sub.add_parser(
        "compare", parents=[common], help="pool several runs' cells: one analysis, report.html, leaderboard.md"
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    _add_compare_options(p)
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="users × prompts needed to separate the leader from each method, or establish equivalence",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--metric", help="the metric to plan for (default: the run's verdict metric)")
    p.add_argument(
        "--effect", type=_finite, help="the difference to detect: points for a proportion (5 = 5 pts), else units"
    )
    p.add_argument(
        "--margin", type=_non_negative, help="equivalence margin, in the same units as --effect (default: the run's)"
    )
    p.add_argument("--power", type=_probability, default=0.8, help="target power (default 0.8)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    handlers = {
        "run": _run,
        "list": _list,
        "validate": _validate,
        "build": _build,
        "report": _report,
        "compare": _compare,
        "plan": _plan,
        "export": export_cmd,
    }
    if getattr(args, "quiet", False):
        os.environ["PERBENCH_QUIET"] = "1"
    from perbench.progress import quiet_third_party

    quiet_third_party()
    try:
        return handlers[args.cmd](args)
    except Exception as e:
        if getattr(args, "debug", False) or not _user_error(e):
            raise
        print(f"perbench: error: {_one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
