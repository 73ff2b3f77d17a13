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


def validate_named(
    name: str, loader: Callable[..., Benchmark], source: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Load ``source`` with ``loader`` (the registry's ``name``) and ``params``, run the checks every run makes."""
    report = blank_report(source, f"benchmark {name}", (params or {}).get("on_error", "raise"))
    try:
        bench = loader(source, **dict(params or {}))
        notes = check_benchmark(bench, needs_train=False)
    except (PerbenchError, OSError, ValueError) as e:
        report["fatal"] = report["first_error"] = str(e)
        return report
    meta = bench.meta
    report.update(
        rows_read=int(meta.get("rows_read", 0)),
        rows_with_errors=int(meta.get("rows_with_errors", 0)),
        **benchmark_counts(bench),
        notes=notes,
        warnings=data_warnings(bench, None),
        split_policy=meta.get("split_policy"),
        seen_policy=meta.get("seen_policy"),
        user_policy=meta.get("users"),
        references=len(bench.references),
        weighting=bench.weighting,
        pair_sets={n: len(ps) for n, ps in bench.pair_sets.items()},
        lists=len({(p.user_id, p.meta.get("list_id")) for p in bench.pairs if p.meta.get("list_id") is not None}),
        ok=True,
    )
    return report
