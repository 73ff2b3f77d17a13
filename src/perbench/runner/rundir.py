"""The one reader of a run directory: results.json, and cells.jsonl / samples.jsonl when present. ``perbench
report``, ``compare``, ``plan`` and the Python API (:func:`load_run`, :func:`perbench.runner.cells.read_cells`) all
read a run through it, with the same checks.

A damaged file is a located :class:`~perbench.data.rows.DataError` (``FILE:LINE: problem``), never a traceback:
not a regular file (a named pipe, ``/dev/zero``), not UTF-8, invalid or truncated JSON, results that are not an
object, a schema version this version does not know, a field the readers use with the wrong type or out of its
range (``config.bootstrap``, ``config.equivalence_margin``, ``analysis.roles``, …), a cell without its fields or
with a value that is not a finite number. results.json records the count and digest of the cells file the run
wrote (``results["cells"]``); a cells.jsonl that no longer matches (rows lost, edited), or a current-schema
results.json without that record, is refused, so a comparison never pools a part of a run as if it were the whole.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perbench.data.rows import DataError
from perbench.io import special_file
from perbench.runner.schema import check_results

#: the fields of a cell and their types (``value`` is checked as a finite number)
CELL_FIELDS: dict[str, type] = {"group": str, "method": str, "metric": str, "user": str, "prompt": str}


@dataclass
class RunData:
    """One run's results with its optional per-unit files; ``notes`` says what could not be checked."""

    path: Path
    results: dict[str, Any]
    cells: list[dict[str, Any]] | None = None
    samples: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)


def _read(path: Path) -> bytes:
    what = special_file(path)
    if what is not None:
        raise DataError(path, None, None, f"is {what}, not a file written by a run; point at the run's own file")
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(path, None, None, f"cannot read ({e.strerror or e})") from None


def _text(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(path, line, None, f"not UTF-8 text (byte 0x{raw[e.start]:02x}); the file is damaged") from None


def read_jsonl(path: Path, notes: list[str] | None = None) -> list[dict[str, Any]] | None:
    """The JSON objects of a .jsonl file (None if absent); a line that is not a JSON object is a located error."""
    if not path.exists() and not path.is_symlink():
        return None
    return _jsonl_rows(path, _text(path, _read(path)))


def _jsonl_rows(path: Path, text: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
            raise DataError(path, i, None, f"not JSON ({why}); the file is damaged (truncated?)") from None
        if not isinstance(row, dict):
            raise DataError(path, i, None, f"expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def check_cells(path: Path, rows: list[dict[str, Any]]) -> None:
    """Every cell has its fields with their types and a finite number as value (else a located error)."""
    for i, row in enumerate(rows, 1):
        for key, kind in CELL_FIELDS.items():
            if not isinstance(row.get(key), kind):
                got = "missing" if key not in row else f"expected a string, got {type(row[key]).__name__}"
                raise DataError(path, i, key, got)
        v = row.get("value")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise DataError(path, i, "value", f"expected a finite number, got {json.dumps(v)[:40]}")
        for key, what in (("rl_seed", "training"), ("fit_seed", "fit")):
            s = row.get(key)
            if s is not None and (isinstance(s, bool) or not isinstance(s, int)):
                raise DataError(path, i, key, f"expected an integer {what} seed, got {json.dumps(s)[:40]}")


def load_run(run_dir: str | Path, *, need_cells: bool = False) -> RunData:
    """A run directory's files, checked (see the module docstring). results.json is required; cells.jsonl
    (``need_cells``: required too) and samples.jsonl are optional."""
    path = Path(run_dir)
    res_path = path / "results.json"
    if not path.is_dir():
        raise DataError(path, None, None, "not a run directory (no such folder)")
    if not res_path.exists():
        raise DataError(res_path, None, None, f"does not exist (is {path} a run directory?)")
    text = _text(res_path, _read(res_path))
    try:
        results = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(res_path, e.lineno, None, f"not JSON ({e.msg}, column {e.colno}); truncated?") from None
    except (ValueError, RecursionError) as e:
        raise DataError(res_path, None, None, f"not JSON ({type(e).__name__})") from None
    if not isinstance(results, dict):
        raise DataError(res_path, None, None, f"expected a JSON object, got {type(results).__name__}")
    notes: list[str] = []
    current = check_results(res_path, results, notes)
    cells_path = path / "cells.jsonl"
    cells = None
    if cells_path.exists() or cells_path.is_symlink():
        raw = _read(cells_path)
        cells = _jsonl_rows(cells_path, _text(cells_path, raw))
        check_cells(cells_path, cells)
        _check_record(cells_path, raw, len(cells), results.get("cells"), notes, current)
    elif need_cells:
        raise DataError(cells_path, None, None, f"does not exist: {path} holds no cells (rerun it with this version)")
    samples = read_jsonl(path / "samples.jsonl")
    return RunData(path, results, cells, samples, notes)


def read_cells_file(path: Path) -> list[dict[str, Any]]:
    """The cells of ``path``: as :func:`load_run` reads them when a results.json lies beside it (the count and
    digest checked), else with every row's fields and finite value checked."""
    if path.name == "cells.jsonl" and (path.parent / "results.json").exists():
        return load_run(path.parent, need_cells=True).cells or []
    if not path.exists() and not path.is_symlink():
        raise DataError(path, None, None, "does not exist")
    rows = _jsonl_rows(path, _text(path, _read(path)))
    check_cells(path, rows)
    return rows


def run_roles(results: dict[str, Any]) -> dict[str, str]:
    """Each method's role as a run recorded it: the analysis's ``roles``, or (results written before roles
    existed) ``baseline`` for the upstream entries marked as baselines."""
    analysis = results.get("analysis")
    roles = analysis.get("roles") if isinstance(analysis, dict) else None
    if isinstance(roles, dict):
        return {str(m): str(r) for m, r in roles.items()}
    upstream = results.get("upstream")
    if not isinstance(upstream, dict):
        return {}
    return {str(m): "baseline" for m, u in upstream.items() if isinstance(u, dict) and u.get("baseline")}


def _check_record(path: Path, raw: bytes, count: int, record: Any, notes: list[str], current: bool) -> None:
    """The cells file against the count and digest results.json recorded when the run wrote it (a results.json of
    the current schema always records them: without the record, nothing vouches for the file)."""
    if not isinstance(record, dict) or "sha256" not in record:
        if current:
            raise DataError(
                path,
                None,
                None,
                "results.json (of the current schema) has no record of this file's count and digest (its `cells` "
                "entry was removed or damaged), so the file cannot be checked; restore results.json or rerun",
            )
        notes.append(f"{path.name}: results.json records no digest of it (written by an older version): not checked")
        return
    want = record.get("count")
    if want != count:
        raise DataError(
            path,
            None,
            None,
            f"holds {count} cell row(s) but results.json records {want}: the file lost or gained rows since the run "
            "wrote it; restore it or rerun the run",
        )
    if hashlib.sha256(raw).hexdigest() != record.get("sha256"):
        raise DataError(
            path, None, None, "differs from the cells the run wrote (its digest in results.json); restore it or rerun"
        )
