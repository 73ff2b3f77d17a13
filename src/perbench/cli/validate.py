"""``perbench validate``: a preference data file as a run would load it."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from perbench.cli.shared import config_path, fraction, names
from perbench.errors import ConfigError


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
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
    p.add_argument("--unseen-fraction", type=fraction, help="share of users held out as unseen")
    p.add_argument("--unseen-users", type=names, metavar="A,B", help="users held out as unseen")
    p.add_argument("--test-fraction", type=fraction, help="seeded per-user test share (no split field)")
    p.add_argument("--default-user", help="the one user of a file without a user field")
    p.add_argument("--max-chars", type=int, help="texts longer than this are cut (and counted)")
    p.add_argument("--max-pairs", type=int, help="keep a seeded choice of this many pairs (mirrors together)")
    p.add_argument("--max-prompts", type=int, help="keep the pairs of a seeded choice of this many prompts")
    p.add_argument("--seed", type=int, help="seed of the unseen-user and test splits")
    p.add_argument("--format", help="json | jsonl | csv | parquet | hub (default: from the file name)")
    p.add_argument("--split", help="split of a hub dataset")


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


def command(args: argparse.Namespace) -> int:
    """``perbench validate``: the file as a run would load it; with ``--config``, checked as that run checks it."""
    from perbench.data.loaders import format_validation, validate_file
    from perbench.runner import preflight

    if args.benchmark:
        return _validate_named(args)
    if args.config:
        from perbench.config import RunConfig

        run_cfg = RunConfig.from_yaml(config_path(args.config))
        if run_cfg.benchmark.name != "file":
            return _validate_named_run(args, run_cfg)
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
    """``perbench validate --benchmark NAME [FILE] [--param k=v ...]``: a registered benchmark's own loader."""
    import yaml

    from perbench import registry
    from perbench.data.loaders import format_validation
    from perbench.data.validate_named import validate_named

    loader = registry.benchmarks.get(args.benchmark)
    params: dict[str, Any] = {}
    for item in args.param or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"validate --param: expected KEY=VALUE, got {item!r}")
        params[key.strip()] = yaml.safe_load(value)
    if args.on_error is not None:
        params["on_error"] = args.on_error
    # no FILE: the loader's own source (a hub id), as a run without ``source`` reads it
    report = validate_named(args.benchmark, loader, str(args.file) if args.file else None, params)
    print(format_validation(report))
    return 0 if report.get("ok") else 1


def _validate_named_run(args: argparse.Namespace, cfg: Any) -> int:
    """``perbench validate --config RUN.yaml`` for a named benchmark: its loader with the config's parameters (FILE,
    when given, in place of its source), then the checks the run makes before any model loads."""
    from perbench import registry
    from perbench.data.checks import check_benchmark
    from perbench.data.loaders import format_validation
    from perbench.data.validate_named import validate_named
    from perbench.runner import preflight
    from perbench.runner.state import needs_models

    name = cfg.benchmark.name
    loader = registry.benchmarks.get(name)
    params = dict(cfg.benchmark.params)
    if args.on_error is not None:
        params["on_error"] = args.on_error
    if args.file:
        first = next(iter(inspect.signature(loader).parameters), None)
        if first is not None:
            params.pop(first, None)
    needs_train = any(registry.reward_models.get(m.name).needs_train_pairs for m in cfg.methods)
    preflight.check_config(cfg)

    def checks(bench: Any) -> list[str]:
        preflight.check_setup(cfg)
        notes = check_benchmark(bench, needs_train=needs_train)
        if needs_models(cfg):
            preflight.check_models(cfg, bench)
        return notes

    report = validate_named(name, loader, str(args.file) if args.file else None, params, checks=checks)
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

        cfg = RunConfig.from_yaml(config_path(args.config))
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
