"""``perbench list``: the registered benchmarks, methods, decoders, metrics and executors."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
from collections.abc import Iterator
from typing import Any

from perbench.errors import ConfigError


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "list", parents=[common], help="list registered benchmarks, methods, decoders, metrics, executors"
    )
    p.add_argument("kind", nargs="?", help="what to list: benchmarks, methods, decoders, … (default: everything)")
    p.add_argument("--sizes", action="store_true", help="load built-in benchmarks to show their size (offline)")


def command(args: argparse.Namespace) -> int:
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
    with offline_unless_set() if args.sizes else contextlib.nullcontext():
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
def offline_unless_set() -> Iterator[None]:
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
