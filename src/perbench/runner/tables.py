"""A run's cells and samples as Parquet (zstd) beside their JSONL: the same rows, typed columns, a fraction of the
size and of the read time. JSONL stays the record the run's digest covers; ``results.json["cells"]["parquet"]``
records the Parquet file's own sha256, so a reader that prefers Parquet checks it as strictly.

Cells have a fixed schema (:data:`CELL_SCHEMA`). Samples hold rows of many kinds: a column is the union of every
row's field of that name, typed by pyarrow; a field whose values no one Arrow type holds (a number in one kind and
a string in another) is stored as JSON text and named in the file's metadata (``perbench.json_columns``), which
:func:`read_parquet_frame` decodes."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from perbench.io import atomic_write_bytes

CELLS_PARQUET = "cells.parquet"
SAMPLES_PARQUET = "samples.parquet"
_JSON_COLUMNS = b"perbench.json_columns"


def _pa() -> Any:
    import pyarrow as pa

    return pa


def cells_table(rows: list[dict[str, Any]]) -> Any:
    pa = _pa()
    schema = pa.schema(
        [
            ("group", pa.string()),
            ("method", pa.string()),
            ("metric", pa.string()),
            ("user", pa.string()),
            ("prompt", pa.string()),
            ("value", pa.float64()),
            ("rl_seed", pa.int64()),
            ("fit_seed", pa.int64()),
        ]
    )
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.table(cols, schema=schema)


def samples_table(rows: list[dict[str, Any]]) -> Any:
    pa = _pa()
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    arrays, as_json = {}, []
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            arrays[name] = pa.array([None if v is None else json.dumps(v, sort_keys=True) for v in values], pa.string())
            as_json.append(name)
    table = pa.table(arrays) if arrays else pa.table({"kind": pa.array([], pa.string())})
    return table.replace_schema_metadata({_JSON_COLUMNS: json.dumps(as_json).encode()})


def parquet_bytes(table: Any) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def write_samples_parquet(path: Path, rows: list[dict[str, Any]], text: str | None = None) -> None:
    """``path`` from ``rows``; with ``text`` (their JSONL), the Parquet bytes are memoized by its digest, so a rerun
    that writes the same samples reads them back (:func:`perbench.memo.memo_bytes`)."""
    if text is None:
        atomic_write_bytes(path, parquet_bytes(samples_table(rows)))
        return
    from perbench.memo import memo_bytes

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    atomic_write_bytes(path, memo_bytes("samples_parquet", digest, lambda: parquet_bytes(samples_table(rows))))


def parquet_record(raw: bytes) -> dict[str, Any]:
    return {"file": CELLS_PARQUET, "sha256": hashlib.sha256(raw).hexdigest()}


def read_parquet_frame(path: Path) -> Any:
    """The Parquet file as a pandas frame, JSON-text columns decoded, missing values as None."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    as_json = json.loads(meta.get(_JSON_COLUMNS, b"[]"))
    frame = table.to_pandas()
    for name in as_json:
        frame[name] = [None if v is None else json.loads(v) for v in frame[name]]
    return frame
