"""``perbench validate --benchmark NAME FILE``: a named benchmark's own loader on a file, reported like the generic
loader's validation (:func:`perbench.data.loaders.validate_file`), so every registered benchmark can be checked
before a run: OK exactly when a run with these parameters would load it; otherwise the located error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from perbench.data.checks import check_benchmark, data_warnings
from perbench.data.loaders import benchmark_counts, blank_report
from perbench.data.records import Benchmark
from perbench.errors import PerbenchError


def user_summary(bench: Benchmark) -> str:
    """The users as counts: how many, seen and unseen, and how many have test pairs."""
    tested = len({p.user_id for p in bench.pairs if p.split == "test"})
    return (
        f"{len(bench.users)} user(s): {len(bench.seen_users)} seen, {len(bench.unseen_users)} unseen; "
        f"{tested} with test pairs"
    )


def validate_named(
    name: str,
    loader: Callable[..., Benchmark],
    source: str | None,
    params: Mapping[str, Any] | None = None,
    *,
    checks: Callable[[Benchmark], list[str]] | None = None,
) -> dict[str, Any]:
    """Load ``source`` (None: the loader's own default, e.g. a hub id) with ``loader`` (the registry's ``name``) and
    ``params``, and run the checks every run makes (``checks``: a run config's own pre-run checks instead)."""
    report = blank_report(str(source or (params or {}).get("source") or name), f"benchmark {name}",
                          (params or {}).get("on_error", "raise"))  # fmt: skip
    try:
        bench = loader(**dict(params or {})) if source is None else loader(source, **dict(params or {}))
        notes = checks(bench) if checks is not None else check_benchmark(bench, needs_train=False)
    except (PerbenchError, OSError, ValueError, TypeError) as e:
        report["fatal"] = report["first_error"] = str(e)
        return report
    meta = bench.meta
    report.update(
        rows_read=int(meta.get("rows_read", 0)),
        rows_with_errors=int(meta.get("rows_with_errors", 0)),
        **benchmark_counts(bench),
        notes=notes,
        warnings=data_warnings(bench, None),
        split_policy=meta.get("split_policy") or "the benchmark's own",
        seen_policy=meta.get("seen_policy") or "the benchmark's own",
        user_policy=f"{meta['users']} -- {user_summary(bench)}" if meta.get("users") else user_summary(bench),
        references=len(bench.references),
        weighting=bench.weighting,
        pair_sets={n: len(ps) for n, ps in bench.pair_sets.items()},
        lists=len({(p.user_id, p.meta.get("list_id")) for p in bench.pairs if p.meta.get("list_id") is not None}),
        ok=True,
    )
    return report
