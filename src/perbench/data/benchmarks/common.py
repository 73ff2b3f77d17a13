"""What the loaders of the listwise and 2026 benchmarks share: reading sources, a response field in any of the
upstream shapes, and finishing a :class:`~perbench.data.records.Benchmark` (dedup, users without pairs)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from perbench.data.reading import detect_format, read_rows
from perbench.data.records import Benchmark, PreferencePair, SkipReport, User, dedup_pairs
from perbench.data.rows import Row, check_text, parse_messages, type_name


def rows_of(source: str | Path, *, fmt: str | None, split: str | None, config: str | None = None) -> Iterator[Row]:
    """Every row of a local file or folder, or of a hub dataset (``split=None`` reads every split of a saved or hub
    dataset; the label then names the split)."""
    kind = fmt or detect_format(source)
    every = kind in ("hub", "hf_disk") and split is None
    for label, line, data in read_rows(source, fmt=kind, split="*" if every else split, config=config):
        yield Row(label, line, data)


def row_ref(row: Row) -> str:
    """A row's place that does not depend on where the file lies: ``split#line`` for a split of a saved or hub
    dataset, else the line (pair ids, and so cache keys, survive moving the file)."""
    split = row.label.rpartition("[")[2].rstrip("]") if row.label.endswith("]") else ""
    return f"{split}#{row.line}" if split else str(row.line)


def response_text(row: Row, path: str, value: Any) -> str:
    """A response as upstream files write it: a string, a ``{role, content}`` message, or a conversation whose last
    message is the response."""
    if isinstance(value, str):
        return check_text(row, path, value, allow_empty=True)
    if isinstance(value, Mapping):
        if value.get("content") is None:
            raise row.error(f"{path}.content", "missing")
        return check_text(row, f"{path}.content", value["content"], allow_empty=True)
    if isinstance(value, list | tuple):
        return parse_messages(row, path, value, allow_empty_last=True)[-1].content
    raise row.error(path, f"expected a string, a message or a list of messages, got {type_name(value)}")


def text_list(row: Row, path: str) -> list[str]:
    """A non-empty list of response texts (``chosen`` / ``rejected`` lists of RewardBench 2)."""
    values = row.seq(path)
    if not values:
        raise row.error(path, "empty list")
    return [response_text(row, f"{path}.{i}", v) for i, v in enumerate(values)]


def int_field(row: Row, path: str, *, minimum: int = 0) -> int:
    value = row.require(path)
    if isinstance(value, bool) or not isinstance(value, int):
        raise row.error(path, f"expected an integer, got {type_name(value)}")
    if value < minimum:
        raise row.error(path, f"expected an integer >= {minimum}, got {value}")
    return value


def finish(
    name: str,
    pairs: list[PreferencePair],
    users: dict[str, User],
    skipped: SkipReport,
    meta: dict[str, Any],
    **extra: Any,
) -> Benchmark:
    """Deduplicate (counted), drop users left without pairs (counted), and build the benchmark."""
    pairs = dedup_pairs(pairs, skipped)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(users) - kept):
        skipped.add("user_without_pairs", uid)
        del users[uid]
    return Benchmark(name, pairs, users, skipped=skipped, meta=meta, weighting="pair", **extra)
