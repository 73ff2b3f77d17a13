"""Bad input, case by case: each file is a located error (file, line, field) or an exact counted skip, and
``validate_file`` agrees with what a run does (``load_benchmark_file`` + ``check_benchmark``, same options)."""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import json
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from perbench.data.benchmarks.persona import load_domain_styles, load_persona
from perbench.data.checks import check_benchmark
from perbench.data.loaders import format_validation, load_benchmark_file, validate_file
from perbench.data.policies import DEFAULT_MAX_CHARS
from perbench.data.records import Benchmark, PreferencePair, Prompt, SkipReport, prompt_text
from perbench.data.rows import SKIP_HINT, DataError
from perbench.errors import ConfigError, PerbenchError
from tests.fixtures_upstream import domain_rows_shared_responses, write_jsonl

Row = dict[str, Any]
BASE: list[Row] = [
    {"user_id": "u1", "prompt": "Pet?", "chosen": "A cat.", "rejected": "A dog."},
    {"user_id": "u1", "prompt": "Toy?", "chosen": "Yarn.", "rejected": "A ball."},
    {"user_id": "u2", "prompt": "Pet?", "chosen": "A dog.", "rejected": "A cat."},
]
SPLIT_ROWS: list[Row] = [
    {**BASE[0], "split": "train"},
    {**BASE[1], "split": "test"},
    {**BASE[2], "split": "train"},
    {"user_id": "u2", "prompt": "Toy?", "chosen": "A ball.", "rejected": "Yarn.", "split": "test"},
]
BIG = 5_000_000  # a 5 MB response


def rows_with(index: int, rows: Sequence[Row] = BASE, **change: Any) -> list[Row]:
    out = [dict(r) for r in rows]
    out[index].update(change)
    return out


def jsonl(rows: Sequence[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def jsonl_raw(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def csv_bytes(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def base_csv() -> bytes:
    return csv_bytes(list(BASE[0]), [list(r.values()) for r in BASE])


LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 123456\n"


@dataclass(frozen=True)
class Err:
    """The error a run stops with: ``DataError`` at (line, field) of ``path`` (default: the case's file)."""

    line: int | None
    field: str | None
    message: str
    kind: type[PerbenchError] = DataError
    path: str | None = None


@dataclass(frozen=True)
class Case:
    id: str
    name: str
    data: Callable[[], bytes]
    options: dict[str, Any] = field(default_factory=dict)
    error: Err | None = None
    skips: dict[str, int] = field(default_factory=dict)  # the exact skip counts (pairs unless noted)
    pairs: int | None = None
    needs_train: bool = False
    check: Callable[[Benchmark, dict[str, Any]], None] | None = None


def _merged(count: int) -> Callable[[Benchmark, dict[str, Any]], None]:
    def check(bench: Benchmark, report: dict[str, Any]) -> None:
        assert bench.meta["user_id_merges"]["count"] == count == report["user_id_merges"]["count"]
        assert any("written in several forms" in n for n in report["notes"])

    return check


def _users(*ids: str) -> Callable[[Benchmark, dict[str, Any]], None]:
    def check(bench: Benchmark, report: dict[str, Any]) -> None:
        assert sorted(bench.users) == sorted(ids) and report["users"] == len(ids)

    return check


def _truncated(n_pairs: int, part: str, keep: str) -> Callable[[Benchmark, dict[str, Any]], None]:
    def check(bench: Benchmark, report: dict[str, Any]) -> None:
        assert bench.meta["truncated"]["pairs"] == n_pairs == report["truncated"]["pairs"]
        assert bench.meta["truncated"]["parts"][part] == n_pairs
        cut = [p for p in bench.pairs if p.meta.get("truncated")]
        assert len(cut) == n_pairs
        text = getattr(cut[0], part) if part != "prompt" else prompt_text(cut[0].prompt)
        assert text == keep

    return check


def _test_fraction(bench: Benchmark, report: dict[str, Any]) -> None:
    for user in bench.users:
        splits = [p.split for p in bench.select(user=user)]
        assert splits.count("train") >= 1 and splits.count("test") >= 1, user
    assert bench.meta["split_policy"].startswith("seeded per-user split") and bench.meta["test_fraction"] == 0.5
    assert report["splits"] == {"train": 2, "test": 4}  # round(0.5 * 3) = 2 test pairs per user


def _demoted(bench: Benchmark, report: dict[str, Any]) -> None:
    assert bench.unseen_users == ["u3"] and bench.meta["seen_users_without_train"] == {"count": 1, "users": ["u3"]}
    assert report["seen_users_without_train"]["count"] == 1 and report["users_unseen"] == 1
    assert any("evaluated as unseen" in n for n in report["notes"])


def _default_user(bench: Benchmark, report: dict[str, Any]) -> None:
    assert list(bench.users) == ["me"] and bench.meta["default_user"] == "me"
    assert "default_user 'me'" in report["user_policy"]


SIX_PAIRS = [
    {"user_id": u, "prompt": f"Q{i}?", "chosen": f"good {i}", "rejected": f"bad {i}"} for u in "ab" for i in "123"
]

CASES: list[Case] = [
    # --------------------------------------------------------------------------- encodings and file kinds
    Case(
        "latin1_jsonl",
        "d.jsonl",
        lambda: jsonl(BASE)[:-5] + 'é"}\n'.encode("latin-1"),
        error=Err(3, None, "not UTF-8 text: byte 0xe9"),
    ),
    Case(
        "latin1_csv",
        "d.csv",
        lambda: base_csv() + "u3,Café?,Oui,Non\n".encode("latin-1"),
        error=Err(5, None, "not UTF-8 text: byte 0xe9"),
    ),
    Case(
        "cp1252_quotes_json",
        "d.json",
        lambda: b'[{"user_id": "u1", "prompt": "\x93Hi\x94"}]',
        error=Err(1, None, "not UTF-8 text: byte 0x93"),
    ),
    Case("pickle_renamed", "d.jsonl", lambda: pickle.dumps(BASE), error=Err(None, None, "this is a Python pickle")),
    Case(
        "gzip_renamed",
        "d.jsonl",
        lambda: gzip.compress(jsonl(BASE)),
        error=Err(None, None, "this is a gzip-compressed file"),
    ),
    Case(
        "parquet_named_csv",
        "d.csv",
        lambda: b"PAR1\x15\x04" + b"\x00" * 20,
        error=Err(None, None, "this is a Parquet file, not CSV text"),
    ),
    Case("lfs_pointer_jsonl", "d.jsonl", lambda: LFS, error=Err(None, None, "a Git LFS pointer (123456 bytes")),
    Case("lfs_pointer_parquet", "d.parquet", lambda: LFS, error=Err(None, None, "git lfs pull")),
    Case(
        "utf16_without_bom",
        "d.jsonl",
        lambda: jsonl(BASE).decode().encode("utf-16-le"),
        error=Err(1, None, "a NUL byte at offset 1"),
    ),
    Case("utf8_bom_jsonl", "d.jsonl", lambda: codecs.BOM_UTF8 + jsonl(BASE), pairs=3),
    Case("utf8_bom_json", "d.json", lambda: codecs.BOM_UTF8 + json.dumps(BASE).encode(), pairs=3),
    Case(
        "utf8_bom_csv_keeps_first_column",
        "d.csv",
        lambda: codecs.BOM_UTF8 + base_csv(),
        pairs=3,
        check=_users("u1", "u2"),
    ),
    Case("utf16_bom_jsonl", "d.jsonl", lambda: jsonl(BASE).decode().encode("utf-16"), pairs=3),
    # --------------------------------------------------------------------------------- JSON structure
    Case(
        "invalid_json_line",
        "d.jsonl",
        lambda: jsonl(BASE[:2]) + b'{"user_id": "u2", "prompt": \n',
        error=Err(3, None, "invalid JSON"),
    ),
    Case(
        "invalid_json_line_skipped",
        "d.jsonl",
        lambda: jsonl(BASE[:2]) + b'{"user_id": "u2", "prompt": \n',
        options={"on_error": "skip"},
        skips={"invalid:row": 1},
        pairs=2,
    ),
    Case(
        "truncated_json_file",
        "d.json",
        lambda: json.dumps(BASE, indent=1).encode()[:-40],
        error=Err(17, None, "invalid JSON"),
    ),
    Case("json_scalar", "d.json", lambda: b"42", error=Err(None, None, "expected a list of objects, got int")),
    Case(
        "json_element_not_object",
        "d.json",
        lambda: json.dumps([BASE[0], [1, 2]]).encode(),
        error=Err(2, None, "expected a JSON object, got a list of 2 value(s), 0 of them objects"),
    ),
    Case(
        "deep_nesting_jsonl",
        "d.jsonl",
        lambda: jsonl(BASE[:1]) + b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        error=Err(2, None, "nested too deeply"),
    ),
    Case(
        "deep_nesting_json",
        "d.json",
        lambda: b"[" * 100_000 + b"]" * 100_000,
        error=Err(None, None, "nested too deeply"),
    ),
    Case(
        "duplicate_json_key",
        "d.jsonl",
        lambda: (
            jsonl(BASE[:1])
            + jsonl_raw('{"user_id": "u1", "prompt": "p", "chosen": "a", "chosen": "b", "rejected": "c"}')
        ),
        error=Err(2, "chosen", "key given twice"),
    ),
    Case(
        "huge_integer_literal",
        "d.jsonl",
        lambda: jsonl(BASE[:1]) + jsonl_raw('{"user_id": ' + "9" * 5000 + "}"),
        error=Err(2, None, "invalid JSON: Exceeds the limit"),
    ),
    Case(
        "lone_surrogate",
        "d.jsonl",
        lambda: (
            jsonl(BASE[:1]) + jsonl_raw('{"user_id": "u1", "prompt": "p", "chosen": "bad \\ud800", "rejected": "c"}')
        ),
        error=Err(2, "chosen", "lone surrogate"),
    ),
    Case(
        "wrong_type_with_skip_hint",
        "d.jsonl",
        lambda: jsonl(rows_with(1, chosen=5)),
        error=Err(2, "chosen", f"expected a string or a list of messages, got int; {SKIP_HINT}"),
    ),
    Case(
        "wrong_type_skipped",
        "d.jsonl",
        lambda: jsonl(rows_with(1, chosen=5)),
        options={"on_error": "skip"},
        skips={"invalid:chosen": 1},
        pairs=2,
    ),
    # ---------------------------------------------------------------------------------------------- CSV
    Case(
        "duplicate_csv_header",
        "d.csv",
        lambda: csv_bytes(["user_id", "prompt", "chosen", "rejected", "chosen"], [["u1", "p", "a", "b", "c"]]),
        error=Err(1, "chosen", "column given twice in the header (columns 3 and 5)"),
    ),
    Case(
        "csv_extra_cells",
        "d.csv",
        lambda: base_csv() + b"u3,p,a,b,extra\n",
        error=Err(5, None, "5 cells, more than the header's 4 columns"),
    ),
    Case(
        "csv_missing_cells_skipped",
        "d.csv",
        lambda: base_csv() + b"u3,p,a\n",
        options={"on_error": "skip"},
        skips={"invalid:row": 1},
        pairs=3,
    ),
    Case(
        "csv_5mb_cell",
        "d.csv",
        lambda: csv_bytes(list(BASE[0]), [["u1", "p", "x" * BIG, "short"]]),
        pairs=1,
        check=_truncated(1, "chosen", "x" * DEFAULT_MAX_CHARS),
    ),
    # ----------------------------------------------------------------------------- empty and degenerate
    Case("empty_file_jsonl", "d.jsonl", lambda: b"", error=Err(None, None, "no usable pairs (0 row(s) read")),
    Case("empty_file_csv", "d.csv", lambda: b"", error=Err(None, None, "no usable pairs")),
    Case(
        "header_only_csv",
        "d.csv",
        lambda: b"user_id,prompt,chosen,rejected\n",
        error=Err(None, None, "no usable pairs (0 row(s) read"),
    ),
    Case(
        "every_row_degenerate",
        "d.jsonl",
        lambda: jsonl([{**r, "rejected": r["chosen"]} for r in BASE]),
        error=Err(None, None, "chosen_equals_rejected: 3 pair(s)"),
    ),
    Case("empty_chosen", "d.jsonl", lambda: jsonl(rows_with(0, chosen="")), skips={"empty_response": 1}, pairs=2),
    Case(
        "whitespace_rejected",
        "d.jsonl",
        lambda: jsonl(rows_with(2, rejected=" \n\t")),
        skips={"empty_response": 1, "user_without_pairs": 1},
        pairs=2,
    ),
    Case(
        "sides_differ_only_by_whitespace",
        "d.jsonl",
        lambda: jsonl(rows_with(1, chosen="  A ball.\n")),
        skips={"chosen_equals_rejected": 1},
        pairs=2,
    ),
    Case(
        "empty_assistant_turn",
        "d.jsonl",
        lambda: jsonl(
            [
                *BASE[:2],
                {
                    "user_id": "u2",
                    "chosen": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": ""}],
                    "rejected": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "no"}],
                },
            ]
        ),
        skips={"empty_response": 1, "user_without_pairs": 1},
        pairs=2,
    ),
    Case(
        "duplicate_up_to_whitespace",
        "d.jsonl",
        lambda: jsonl([*BASE, {**BASE[0], "chosen": "A  cat. "}]),
        skips={"duplicate_pair": 1},
        pairs=3,
    ),
    Case(
        "empty_prompt",
        "d.jsonl",
        lambda: jsonl(rows_with(1, prompt=" ")),
        error=Err(2, "prompt", f"empty text; {SKIP_HINT}"),
    ),
    Case(
        "empty_prompt_skipped",
        "d.jsonl",
        lambda: jsonl(rows_with(1, prompt=" ")),
        options={"on_error": "skip"},
        skips={"invalid:prompt": 1},
        pairs=2,
    ),
    # ------------------------------------------------------------------------------------------- user ids
    Case(
        "int_and_string_user_id",
        "d.jsonl",
        lambda: jsonl([*rows_with(0, user_id=1)[:1], {**BASE[1], "user_id": "1"}, BASE[2]]),
        pairs=3,
        check=_merged(1),
    ),
    Case(
        "padded_user_id",
        "d.jsonl",
        lambda: jsonl(rows_with(1, user_id=" u1 ")),
        pairs=3,
        check=lambda b, r: (_users("u1", "u2")(b, r), _merged(1)(b, r)),
    ),
    Case(
        "float_user_id",
        "d.jsonl",
        lambda: jsonl(rows_with(1, user_id=1.5)),
        error=Err(2, "user_id", "expected a string or integer id, got float"),
    ),
    Case(
        "bool_user_id",
        "d.jsonl",
        lambda: jsonl(rows_with(0, user_id=True)),
        error=Err(1, "user_id", "expected a string or integer id, got bool"),
    ),
    Case("blank_user_id", "d.jsonl", lambda: jsonl(rows_with(2, user_id="   ")), error=Err(3, "user_id", "empty id")),
    Case(
        "no_user_column",
        "d.jsonl",
        lambda: jsonl([{k: v for k, v in r.items() if k != "user_id"} for r in BASE]),
        error=Err(1, "user_id", "missing"),
    ),
    Case(
        "default_user_for_file_without_users",
        "d.jsonl",
        lambda: jsonl([{k: v for k, v in r.items() if k != "user_id"} for r in BASE]),
        options={"default_user": "me"},
        pairs=3,
        check=_default_user,
    ),
    Case(
        "default_user_with_user_column",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"default_user": "me"},
        error=Err(1, "user_id", "present, but default_user='me' is set"),
    ),
    Case(
        "default_user_and_user_mapping",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"default_user": "me", "mapping": "user_id=who"},
        error=Err(None, None, "default_user='me' is for files without a user field", kind=ConfigError),
    ),
    # ------------------------------------------------------------------------------------ splits and seen
    Case(
        "unknown_split",
        "d.jsonl",
        lambda: jsonl(rows_with(1, SPLIT_ROWS, split="holdout")),
        error=Err(2, "split", "unknown split 'holdout'"),
    ),
    Case(
        "test_fraction_with_split_column",
        "d.jsonl",
        lambda: jsonl(SPLIT_ROWS),
        options={"test_fraction": 0.5},
        error=Err(1, "split", "the file gives a split, and test_fraction=0.5 is set"),
    ),
    Case(
        "test_fraction_out_of_range",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"test_fraction": 1.5},
        error=Err(None, None, "test_fraction must be a number in (0, 1)", kind=ConfigError),
    ),
    Case(
        "test_fraction_splits_each_user",
        "d.jsonl",
        lambda: jsonl(SIX_PAIRS),
        options={"test_fraction": 0.5},
        pairs=6,
        needs_train=True,
        check=_test_fraction,
    ),
    Case(
        "no_split_needs_train",
        "d.jsonl",
        lambda: jsonl(BASE),
        needs_train=True,
        error=Err(
            None,
            "split",
            "no train pairs (split policy: all test (no split field mapped)): without a "
            "mapped split field every pair is test",
        ),
    ),
    Case(
        "all_train_no_test",
        "d.jsonl",
        lambda: jsonl([{**r, "split": "train"} for r in BASE]),
        error=Err(None, "split", "no test pairs: all 3 pairs are train"),
    ),
    Case(
        "all_users_unseen",
        "d.jsonl",
        lambda: jsonl(SPLIT_ROWS),
        options={"unseen_users": ["u1", "u2"]},
        needs_train=True,
        error=Err(None, "seen", "no seen user has train pairs"),
    ),
    Case(
        "seen_user_without_train_pairs",
        "d.jsonl",
        lambda: jsonl(
            [*SPLIT_ROWS, {"user_id": "u3", "prompt": "Hi?", "chosen": "Hello.", "rejected": "Go.", "split": "test"}]
        ),
        pairs=5,
        needs_train=True,
        check=_demoted,
    ),
    Case(
        "seen_flag_disagrees",
        "d.jsonl",
        lambda: jsonl([{**r, "seen": i != 1} for i, r in enumerate(BASE)]),
        error=Err(2, "seen", "user 'u1' was seen=True"),
    ),
    Case(
        "duplicate_pair_id",
        "d.jsonl",
        lambda: jsonl([{**r, "pid": "same"} for r in BASE[:2]]),
        options={"mapping": "pair_id=pid"},
        error=Err(2, "pid", "duplicate pair id 'same' with different content"),
    ),
    Case(
        "unknown_mapping_field",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"mapping": "usr=x"},
        error=Err(None, "usr", "unknown field", path="mapping"),
    ),
    Case(
        "bad_on_error",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"on_error": "ignore"},
        error=Err(None, None, "on_error must be 'raise' or 'skip'", kind=ConfigError),
    ),
    # ----------------------------------------------------------------------------------------- long texts
    Case(
        "five_mb_response",
        "d.jsonl",
        lambda: jsonl(rows_with(0, rejected="y" * BIG)),
        pairs=3,
        check=_truncated(1, "rejected", "y" * DEFAULT_MAX_CHARS),
    ),
    Case(
        "five_mb_response_kept_whole",
        "d.jsonl",
        lambda: jsonl(rows_with(0, rejected="y" * BIG)),
        options={"max_chars": None},
        pairs=3,
        check=lambda b, r: (len(b.pairs[0].rejected) == BIG) or pytest.fail("cut although max_chars=None"),
    ),
    Case(
        "long_prompt_keeps_its_end",
        "d.jsonl",
        lambda: jsonl(rows_with(0, prompt="x" * 50 + "the question?")),
        options={"max_chars": 13},
        pairs=3,
        check=_truncated(1, "prompt", "the question?"),
    ),
    Case(
        "max_chars_zero",
        "d.jsonl",
        lambda: jsonl(BASE),
        options={"max_chars": 0},
        error=Err(None, None, "max_chars must be a positive integer", kind=ConfigError),
    ),
]


def run_like_the_runner(path: Path, options: dict[str, Any], needs_train: bool) -> tuple[Benchmark, list[str]]:
    bench = load_benchmark_file(path, **options)
    return bench, check_benchmark(bench, needs_train=needs_train)


def test_the_corpus_is_big_and_names_are_unique() -> None:
    assert len(CASES) >= 45 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    path = tmp_path / case.name
    path.write_bytes(case.data())
    report = validate_file(path, **case.options)
    text = format_validation(report)
    if case.error is not None:
        expect = case.error
        with pytest.raises(expect.kind) as info:
            run_like_the_runner(path, case.options, case.needs_train)
        err = info.value
        assert expect.message in str(err)
        if isinstance(err, DataError):
            assert (err.path, err.line, err.field) == (expect.path or str(path), expect.line, expect.field)
        if case.needs_train:  # validate checks what every run needs; a training method needs more
            assert report["ok"] is True and report["train_pairs_seen"] == 0
        else:
            assert report["ok"] is False and report["fatal"] == str(err) and "FAILED" in text
        return
    bench, notes = run_like_the_runner(path, case.options, case.needs_train)
    assert dict(bench.skipped.counts) == case.skips
    assert case.pairs is None or len(bench.pairs) == case.pairs
    assert report["ok"] is True and report["fatal"] is None and "status       : OK" in text
    assert report["pairs_kept"] == len(bench.pairs) and report["rows_read"] == bench.meta["rows_read"]
    assert {r: v["count"] for r, v in report["skipped"].items()} == case.skips
    assert report["skipped_pairs"] == bench.skipped.total()
    assert report["notes"] == notes == bench.meta["notes"]  # the run's results carry what validate shows
    if case.check is not None:
        case.check(bench, report)


def test_validate_accepts_exactly_the_loader_options() -> None:
    import inspect

    def keywords(fn: Callable[..., Any]) -> dict[str, Any]:
        params = inspect.signature(fn).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    assert keywords(validate_file) == keywords(load_benchmark_file)
    assert {"on_error", "dedup", "test_fraction", "default_user", "max_chars", "unseen_users"} <= set(
        keywords(validate_file)
    )


def test_validate_reports_every_count_of_a_skipping_run(tmp_path: Path) -> None:
    rows = [*BASE, BASE[0], {**BASE[1], "chosen": 3}, {**BASE[2], "rejected": ""}, {**BASE[0], "user_id": " u1 "}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    strict = validate_file(path)
    assert strict["ok"] is False and strict["fatal"].startswith(f"{path}:5: field 'chosen'")
    assert strict["diagnosis"] and strict["rows_with_errors"] == 1
    report = validate_file(path, on_error="skip")
    bench = load_benchmark_file(path, on_error="skip")
    assert report["ok"] and report["rows_read"] == 7 and report["rows_with_errors"] == 1
    assert report["skipped"] == {
        "duplicate_pair": {"count": 2, "unit": "pair", "examples": ["d.jsonl:4", "d.jsonl:7"]},
        "empty_response": {"count": 1, "unit": "pair", "examples": ["d.jsonl:6"]},
        "invalid:chosen": {"count": 1, "unit": "pair", "examples": [str(bench.skipped.examples["invalid:chosen"][0])]},
    }
    assert report["skipped_pairs"] == 4 == bench.skipped.total() and report["pairs_kept"] == 3 == len(bench.pairs)
    text = format_validation(report)
    for line in (
        "rows read    : 7 (1 with errors, 1 row(s) lost)",
        "skipped      : 4 pair(s)",
        "duplicate_pair: 2 pair(s)",
    ):
        assert line in text


# ------------------------------------------------------------------------------------- check_benchmark
def test_check_benchmark_zero_rows_no_test_and_no_train(tmp_path: Path) -> None:
    empty = load_benchmark_file(write_jsonl(tmp_path / "empty.jsonl", []))
    with pytest.raises(DataError) as info:
        check_benchmark(empty, needs_train=False)
    assert (info.value.path, info.value.line, info.value.field) == (str(tmp_path / "empty.jsonl"), None, None)
    train_only = load_benchmark_file(write_jsonl(tmp_path / "t.jsonl", [{**r, "split": "train"} for r in BASE]))
    with pytest.raises(DataError, match=r"t\.jsonl: field 'split': no test pairs"):
        check_benchmark(train_only, needs_train=False)
    test_only = load_benchmark_file(write_jsonl(tmp_path / "e.jsonl", BASE))
    assert "no train pairs: every user is evaluated without training data (zero-shot)" in check_benchmark(
        test_only, needs_train=False
    )
    with pytest.raises(DataError) as info:
        check_benchmark(test_only, needs_train=True)
    assert info.value.field == "split" and "test_fraction" in str(info.value) and "split=<column>" in str(info.value)


def test_check_benchmark_demotes_seen_users_of_any_loader(tmp_path: Path) -> None:
    bench = load_benchmark_file(write_jsonl(tmp_path / "d.jsonl", SPLIT_ROWS))
    extra = PreferencePair("x", "u3", "Hi?", "Hello.", "Go.", "test")
    from perbench.data.records import User

    bench.pairs.append(extra)
    bench.users["u3"] = User("u3", seen=True)  # a loader that left a seen user without train pairs
    notes = check_benchmark(bench, needs_train=True)
    assert bench.users["u3"].seen is False and bench.meta["seen_users_without_train"]["users"] == ["u3"]
    assert any("evaluated as unseen" in n for n in notes)


def test_check_benchmark_domain_styles_names_train_fraction(tmp_path: Path) -> None:
    bench = load_domain_styles(write_jsonl(tmp_path / "dom.jsonl", domain_rows_shared_responses()))
    with pytest.raises(DataError, match="set train_fraction"):
        check_benchmark(bench, needs_train=True)


# ------------------------------------------------------------------------------ mirrored deduplication
def half_accuracy(pairs: Sequence[PreferencePair], score: Callable[[Prompt, str], float]) -> float:
    """Accuracy with ties counted ½, for a scorer that sees only (prompt, response)."""
    total = 0.0
    for p in pairs:
        a, b = score(p.prompt, p.chosen), score(p.prompt, p.rejected)
        total += 1.0 if a > b else 0.5 if a == b else 0.0
    return total / len(pairs)


def _hash_score(prompt: Prompt, response: str) -> float:
    digest = hashlib.sha256(f"{prompt_text(prompt)}|{response}".encode()).digest()
    return float(int.from_bytes(digest[:2], "big") % 3)  # few values: plenty of ties


USER_AGNOSTIC: dict[str, Callable[[Prompt, str], float]] = {
    "length": lambda x, y: float(len(y)),
    "hash_with_ties": _hash_score,
    "constant": lambda x, y: 1.0,
    "word_count": lambda x, y: float(len(y.split())),
}


@pytest.mark.parametrize("train_fraction", [0.0, 0.5])
def test_mirrored_pairs_survive_dedup_with_identical_responses_across_styles(
    tmp_path: Path, train_fraction: float
) -> None:
    bench = load_domain_styles(
        write_jsonl(tmp_path / "dom.jsonl", domain_rows_shared_responses()), train_fraction=train_fraction, seed=1
    )
    counts = bench.skipped.counts
    # row 1: concise == formal (2 pairs); row 2: concise == playful up to whitespace (2), socratic empty (6);
    # row 3 repeats row 1's concise/playful unit (2 duplicates) and its mirror-partner units go whole
    assert counts["chosen_equals_rejected"] == 4 and counts["empty_response"] == 6
    assert counts["duplicate_pair"] >= 1 and counts["mirror_of_skipped_pair"] >= 1
    generated = 12 + 12 + 6 + 12
    assert len(bench.pairs) + bench.skipped.total() == generated
    for split in ("train", "test"):
        pairs = [p for p in bench.pairs if p.split == split]
        if not pairs:
            continue
        for name, score in USER_AGNOSTIC.items():
            assert half_accuracy(pairs, score) == 0.5, (split, name)
    # every pair has its mirror: the same (prompt, response pair) the other way round, for another user
    keys = {(prompt_text(p.prompt), p.chosen, p.rejected, p.split) for p in bench.pairs}
    assert all((prompt_text(p.prompt), p.rejected, p.chosen, p.split) in keys for p in bench.pairs)


def test_per_pair_dedup_would_break_the_mirror(tmp_path: Path) -> None:
    """The failure the unit dedup prevents: deduplicating pair by pair keeps one direction of a mirror. Every
    loader's ``dedup_pairs`` matches mirrors first and drops a duplicate's mirror with it (counted)."""
    from perbench.data.records import dedup_pairs, dedup_units

    bench = load_domain_styles(write_jsonl(tmp_path / "dom.jsonl", domain_rows_shared_responses()))
    same = "Photosynthesis turns light into sugar."
    q = "Explain photosynthesis."
    # concise and formal say the same thing: formal>playful duplicates concise>playful for user playful's mirror
    raw = [
        PreferencePair("1", "concise", q, same, "B", "test"),
        PreferencePair("2", "playful", q, "B", same, "test"),
        PreferencePair("3", "formal", q, same, "B", "test"),
        PreferencePair("4", "playful", q, "B", same, "test"),
    ]
    per_pair = dedup_units([[p] for p in raw], SkipReport())
    assert half_accuracy(per_pair, USER_AGNOSTIC["length"]) != 0.5  # 2 of 3 one way round
    skipped = SkipReport()
    kept = dedup_pairs(raw, skipped)
    assert [p.pair_id for p in kept] == ["1", "2"] and half_accuracy(kept, USER_AGNOSTIC["length"]) == 0.5
    assert dict(skipped.counts) == {"duplicate_pair": 1, "mirror_of_skipped_pair": 1}
    assert half_accuracy(bench.pairs, USER_AGNOSTIC["length"]) == 0.5


def test_domain_styles_skips_count_pairs_only_for_the_bad_response(tmp_path: Path) -> None:
    rows = domain_rows_shared_responses()[3:]
    rows.append({"query": "Explain wind.", "responses": {"concise": "Air moves.", "formal": 3, "playful": "Whoosh!"}})
    rows.append({"query": "Explain snow.", "responses": "not an object"})
    rows.append({"query": None, "responses": {"concise": "Cold.", "formal": "Frozen precipitation."}})
    path = write_jsonl(tmp_path / "dom.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_domain_styles(path)
    assert (info.value.line, info.value.field) == (2, "responses.formal") and SKIP_HINT in str(info.value)
    bench = load_domain_styles(path, on_error="skip")
    assert dict(bench.skipped.counts) == {
        "invalid:responses.formal": 4,  # formal's 4 pairs; concise/playful keep their 2
        "unreadable:responses": 1,  # a row whose styles cannot be read: 1 row
        "invalid:query": 2,
    }
    assert bench.skipped.unit("unreadable:responses") == "row" and bench.skipped.total() == 6
    assert len(bench.pairs) == 12 + 2 and bench.meta["rows_with_errors"] == 3


def test_persona_skipped_row_counts_its_history_pairs(tmp_path: Path) -> None:
    history = [{"prompt": "p", "chosen": "c", "rejected": "r"}, {"prompt": "q", "chosen": "c", "rejected": "r"}]
    rows = [
        {"persona": "I like tea.", "prompt": "Drink?", "chosen": "Tea.", "rejected": "Cola.", "history": history},
        {"persona": "I like tea.", "prompt": 5, "chosen": "Tea.", "rejected": "Milk.", "history": history},
    ]
    bench = load_persona(write_jsonl(tmp_path / "p.jsonl", rows), on_error="skip")
    assert bench.skipped.counts["invalid:prompt"] == 3 and len(bench.pairs) == 3


def test_skip_report_units_are_fixed_per_reason() -> None:
    report = SkipReport()
    report.add("duplicate_pair", "a", n=2)
    report.add("user_without_pairs", "u")
    assert report.total() == 2 and report.other() == {"user": 1}
    with pytest.raises(ValueError, match="counts pairs, not rows"):
        report.add("duplicate_pair", unit="row")
