"""Fuzzing the generic loader: whatever the bytes, field types, nesting, encoding, byte-order mark, truncation or
field mapping, loading either succeeds or raises a :class:`~perbench.errors.PerbenchError` -- and
``validate_file`` says OK exactly when a load followed by the run's benchmark checks succeeds."""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perbench.data.checks import check_benchmark
from perbench.data.fields import CANONICAL_FIELDS
from perbench.data.loaders import load_benchmark_file, validate_file
from perbench.errors import PerbenchError

FUZZ = settings(
    max_examples=int(os.environ.get("PERBENCH_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

KEYS = st.sampled_from([*CANONICAL_FIELDS, "question", "history", "x.y", "", " user_id"])
TEXT = st.text(st.characters(), max_size=12) | st.sampled_from(
    ["", " ", "train", "test", "seen", "unseen", "1", "[1, 2]", '[{"text": "a"}]', "a\u2028b", "\ufeff"]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS | TEXT, inner, max_size=3),
    max_leaves=8,
)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", ""]), "content": TEXT})
FIELD_VALUES = JSON_VALUES | st.lists(MESSAGE, max_size=3)
ROWS = st.lists(st.dictionaries(KEYS, FIELD_VALUES, max_size=8), max_size=6)
ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "latin-1", "cp1252"])
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "on_error": st.sampled_from(["raise", "skip"]),
        "dedup": st.booleans(),
        "test_fraction": st.none() | st.floats(min_value=-0.5, max_value=1.5),
        "default_user": st.none() | TEXT,
        "max_chars": st.none() | st.integers(min_value=-1, max_value=20),
        "unseen_fraction": st.floats(min_value=0, max_value=0.99),
        "seed": st.integers(min_value=0, max_value=3),
    },
)


def _well_formed_row(i: int) -> dict[str, Any]:
    return {"user_id": f"u{i % 2}", "prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", "split": "test"}


def _encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace")  # a lone surrogate becomes '?' unless JSON escapes it


def _csv_text(rows: list[dict[str, Any]], header: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get(h, "") for h in header])
    return buf.getvalue()


def load_or_perbench_error(data: bytes, suffix: str, **options: Any) -> None:
    """Load ``data`` as a ``suffix`` file: success or a PerbenchError only; validate agrees with the outcome."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            bench = load_benchmark_file(path, **options)
            check_benchmark(bench, needs_train=False)
            loaded = True
        except PerbenchError:
            loaded = False
        report = validate_file(path, **options)
        assert report["ok"] is loaded, report


@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".jsonl", ".json", ".csv", ".tsv"]), bom=st.booleans())
def test_arbitrary_bytes(data: bytes, suffix: str, bom: bool) -> None:
    load_or_perbench_error((codecs.BOM_UTF8 if bom else b"") + data, suffix)


@FUZZ
@given(
    rows=ROWS,
    escape=st.booleans(),
    encoding=ENCODINGS,
    cut=st.none() | st.integers(min_value=0, max_value=400),
    options=OPTIONS,
)
def test_jsonl_with_random_field_types(
    rows: list[dict[str, Any]], escape: bool, encoding: str, cut: int | None, options: dict[str, Any]
) -> None:
    text = "".join(json.dumps(r, ensure_ascii=escape) + "\n" for r in [_well_formed_row(0), *rows])
    data = _encode(text, encoding)
    load_or_perbench_error(data if cut is None else data[:cut], ".jsonl", **options)


@FUZZ
@given(
    rows=ROWS,
    wrap=st.booleans(),
    depth=st.integers(min_value=0, max_value=3000),
    encoding=ENCODINGS,
    cut=st.none() | st.integers(min_value=0, max_value=400),
    options=OPTIONS,
)
def test_json_with_nesting_encodings_and_truncation(
    rows: list[dict[str, Any]], wrap: bool, depth: int, encoding: str, cut: int | None, options: dict[str, Any]
) -> None:
    body: Any = [_well_formed_row(1), *rows]
    if depth:
        body[0]["profile"] = "[" * depth + "]" * depth  # a CSV-style JSON list in a cell, nested deep
        body.append({"deep": json.loads("[" * min(depth, 500) + "]" * min(depth, 500))})
    text = json.dumps({"data": body} if wrap else body, ensure_ascii=False)
    if depth > 500:
        text = text[:-1] + ", " + "[" * depth + "]" * depth + "]" if text.endswith("]") else text
    data = _encode(text, encoding)
    load_or_perbench_error(data if cut is None else data[:cut], ".json", **options)


@FUZZ
@given(
    rows=st.lists(st.dictionaries(KEYS, TEXT | st.integers().map(str), max_size=8), max_size=6),
    header=st.lists(KEYS, min_size=1, max_size=8),
    encoding=ENCODINGS,
    cut=st.none() | st.integers(min_value=0, max_value=300),
    options=OPTIONS,
)
def test_csv_with_random_headers_cells_and_encodings(
    rows: list[dict[str, Any]], header: list[str], encoding: str, cut: int | None, options: dict[str, Any]
) -> None:
    data = _encode(_csv_text([_well_formed_row(2), *rows], header), encoding)
    load_or_perbench_error(data if cut is None else data[:cut], ".csv", **options)


@FUZZ
@given(
    mapping=st.lists(
        st.sampled_from(["=", ",", ".", " ", "_", "user_id", "prompt", "chosen", "split", "seen", "q", "0", "é"]),
        max_size=16,
    ).map("".join)
    | st.dictionaries(KEYS, TEXT, max_size=4),
    options=OPTIONS,
)
def test_mapping_strings_on_a_good_file(mapping: Any, options: dict[str, Any]) -> None:
    rows = [{**_well_formed_row(i), "q": f"alt {i}", "split": "train" if i % 2 else "test"} for i in range(4)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    load_or_perbench_error(text.encode(), ".jsonl", mapping=mapping, **options)


def test_the_well_formed_baseline_loads() -> None:
    """The fuzzers start from a row that loads; without this, 'success or PerbenchError' could be all errors."""
    rows = [_well_formed_row(i) for i in range(4)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ok.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert len(load_benchmark_file(path).pairs) == 4 and validate_file(path)["ok"]
