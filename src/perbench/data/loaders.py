"""Load any preference file into a :class:`~perbench.data.records.Benchmark`, with loud, located errors.

Formats: JSONL, JSON (a list of objects or ``{"data": [...]}``), CSV/TSV, Parquet, a Hugging Face dataset
folder written by ``save_to_disk``, or (with network) a hub id ``org/name``. A :class:`FieldMap` says which
source column feeds each canonical field, e.g. ``"user_id=ground_truth_persona,prompt=question"``.

Row numbers: JSONL and CSV report the 1-based line in the file; JSON arrays, Parquet and HF datasets report
the 1-based position of the record. Every problem is either a :class:`DataError` naming file, row and field,
or (``on_error="skip"``) a counted entry in ``Benchmark.skipped`` -- never a silent drop.

Reading: text files must be UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured). Another encoding, a binary
file under a text name (pickle, gzip, zip, Parquet) and a Git LFS pointer are errors that say what the file
is. A CSV header that names a column twice is an error; so is a JSON object with a key twice, and JSON nested
too deeply to read.

Policies (recorded in ``Benchmark.meta``):

* split: taken from a ``split`` field when one is mapped (or a ``split`` column exists); otherwise every pair
  is ``test``, unless ``test_fraction`` asks for a seeded per-user split (``round(f·n)`` of each user's pairs
  become test; a user with two pairs or more keeps at least one train pair and gets at least one test pair).
* seen/unseen users: a ``seen`` field if mapped, else the ``unseen_users`` list, else a seeded
  ``unseen_fraction`` of the sorted user ids; default: every user is seen. When the benchmark has train
  pairs, a seen user without any is evaluated as unseen (never seen in training: few-shot adaptation only),
  listed in ``meta["seen_users_without_train"]`` and ``meta["notes"]``.
* user ids: a string or an integer, surrounding whitespace stripped, so ``1``, ``"1"`` and ``" 1 "`` are one
  user; when a file writes one id in several forms the merge is counted in ``meta["user_id_merges"]``.
  ``default_user`` puts every pair of a file without a user field under one user.
* degenerate pairs: an empty (or whitespace-only) response, or chosen equal to rejected up to whitespace,
  is dropped and counted (``empty_response``, ``chosen_equals_rejected``) -- the pair holds no preference.
* duplicates: pairs are deduplicated on (user, prompt, chosen, rejected), whitespace differences ignored, and
  counted, so metrics are pair-weighted; ``dedup=False`` keeps duplicates (row-weighted).
* long texts: a response over ``max_chars`` characters (default :data:`DEFAULT_MAX_CHARS`) keeps its first
  ``max_chars``; a prompt (each message of a chat prompt) keeps its last ``max_chars``. Truncated pairs are
  counted in ``meta["truncated"]``; ``max_chars=None`` keeps every text whole.
* skip counts are pairs (``SkipReport``): in this loader one row holds one pair (plus its history pairs in
  persona files).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from perbench.data.records import (
    SPLITS,
    Benchmark,
    Message,
    PreferencePair,
    ProfileItem,
    Prompt,
    Reference,
    SkipReport,
    Split,
    User,
    content_hash,
    dedup_pairs,
    pair_identity,
    prompt_key,
    untrained_seen_users,
)
from perbench.data.user_context import describe_user_context, withhold_answer_key
from perbench.errors import ConfigError, PerbenchError

OnError = Literal["raise", "skip"]
Source = str | Path | Sequence[Mapping[str, Any]]

FORMATS: tuple[str, ...] = ("jsonl", "json", "csv", "tsv", "parquet", "hf_disk", "hub", "rows")
CANONICAL_FIELDS: tuple[str, ...] = (
    "pair_id",
    "user_id",
    "prompt",
    "chosen",
    "rejected",
    "split",
    "seen",
    "profile",
    "answer_key",
    "reference",
)
#: fields that were renamed: mapping one is an error that says what to use instead
RENAMED_FIELDS: dict[str, str] = {
    "rubric_text": "map it to 'answer_key' (what decided the labels: kept from every method, read by graders) "
    "or to 'profile' (what the user wrote about themselves: given to methods)",
}
REQUIRED_FIELDS: tuple[str, ...] = ("user_id", "prompt", "chosen", "rejected")
#: default ``max_chars``: far beyond any model input we build, so only runaway texts are cut
DEFAULT_MAX_CHARS = 100_000
#: the fix a row-level error names when ``on_error="raise"``
SKIP_HINT = "or set on_error: skip to skip and count such rows"

_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SPLIT_ALIASES: dict[str, Split] = {
    "train": "train",
    "training": "train",
    "test": "test",
    "eval": "test",
    "evaluation": "test",
    "validation": "test",
    "valid": "test",
    "val": "test",
    "dev": "test",
}
_TRUE = {"true", "1", "yes", "y", "seen"}
_FALSE = {"false", "0", "no", "n", "unseen"}


# --------------------------------------------------------------------------------------------------- errors
class DataError(PerbenchError, ValueError):
    """Bad input, located: ``data.jsonl:7: field 'chosen': expected a string, got int``."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        if self.field:
            return f"{where}: field '{self.field}': {self.message}"
        return f"{where}: {self.message}"

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.field, self.message))


class MissingFileError(DataError, FileNotFoundError):
    """A source path that does not exist (and is not a hub id)."""


def with_skip_hint(err: DataError) -> DataError:
    """``err`` with :data:`SKIP_HINT` appended: the fix for a bad row when bad rows abort the load."""
    if err.message.endswith(SKIP_HINT):
        return err
    return type(err)(err.path, err.line, err.field, f"{err.message}; {SKIP_HINT}")


class ErrorSink:
    """Raise (``on_error="raise"``, the message naming ``on_error: skip``) or count (``"skip"``) row errors.

    A counted error adds ``n`` of ``unit`` (default: the sink's unit, pairs unless told) under
    ``<prefix>:<field>``; ``count`` is the number of rows with errors and ``first`` the first message.
    """

    def __init__(self, on_error: OnError, skipped: SkipReport, unit: str = "pair") -> None:
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.skipped = skipped
        self.unit = unit
        self.first: str | None = None
        self.count = 0

    def __call__(self, err: DataError, n: int = 1, unit: str | None = None, prefix: str = "invalid") -> None:
        if self.on_error == "raise":
            raise with_skip_hint(err) from None
        self.count += 1
        if self.first is None:
            self.first = str(err)
        self.skipped.add(f"{prefix}:{err.field or 'row'}", str(err), n=n, unit=unit or self.unit)


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# ------------------------------------------------------------------------------------------- row access
_MISSING: Any = object()


def resolve(row: Any, path: str) -> Any:
    """Follow a dotted path (``info.post``, ``summaries.0.text``); a literal key with dots wins.

    Returns the module-level ``MISSING`` sentinel when any step is absent.
    """
    if isinstance(row, Mapping) and path in row:
        return row[path]
    cur = row
    for part in path.split("."):
        if isinstance(cur, Mapping):
            if part not in cur:
                return _MISSING
            cur = cur[part]
        elif isinstance(cur, list | tuple) and re.fullmatch(r"-?\d{1,18}", part):
            i = int(part)
            if not -len(cur) <= i < len(cur):
                return _MISSING
            cur = cur[i]
        else:
            return _MISSING
    return cur


MISSING = _MISSING


@dataclass(frozen=True)
class Row:
    """One source record with located, typed accessors that raise :class:`DataError`."""

    label: str
    line: int
    data: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.label}:{self.line}"

    def error(self, field: str | None, message: str) -> DataError:
        return DataError(self.label, self.line, field, message)

    def has(self, path: str) -> bool:
        value = resolve(self.data, path)
        return value is not _MISSING and value is not None

    def get(self, path: str, default: Any = None) -> Any:
        value = resolve(self.data, path)
        return default if value is _MISSING or value is None else value

    def require(self, path: str) -> Any:
        value = resolve(self.data, path)
        if value is _MISSING:
            raise self.error(path, "missing")
        if value is None:
            raise self.error(path, "missing (null)")
        return value

    def text(self, path: str, *, allow_empty: bool = False) -> str:
        value = self.require(path)
        return check_text(self, path, value, allow_empty=allow_empty)

    def opt_text(self, path: str) -> str | None:
        """An optional string: absent, null or empty -> None; any other non-string is an error."""
        value = resolve(self.data, path)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {type_name(value)}")
        check_unicode(self, path, value)
        return value if value.strip() else None

    def ident(self, path: str) -> str:
        return check_ident(self, path, self.require(path))

    def seq(self, path: str) -> list[Any]:
        value = self.require(path)
        if not isinstance(value, list | tuple):
            raise self.error(path, f"expected a list, got {type_name(value)}")
        return list(value)

    def obj(self, path: str) -> Mapping[str, Any]:
        value = self.require(path)
        if not isinstance(value, Mapping):
            raise self.error(path, f"expected an object, got {type_name(value)}")
        return value


def check_unicode(row: Row, path: str, value: str) -> str:
    """``value`` if it is valid Unicode; a lone surrogate (a broken ``\\ud800`` JSON escape) is an error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise row.error(
            path, f"invalid Unicode: a lone surrogate {value[e.start]!r} at character {e.start}; fix that escape"
        ) from None
    return value


def check_text(row: Row, path: str, value: Any, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise row.error(path, f"expected a string, got {type_name(value)}")
    check_unicode(row, path, value)
    if not allow_empty and not value.strip():
        raise row.error(path, "empty text")
    return value


def check_ident(row: Row, path: str, value: Any) -> str:
    """An id: a string or an integer, surrounding whitespace stripped (so ``1``, ``"1"`` and ``" 1"`` agree)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise row.error(path, f"expected a string or integer id, got {type_name(value)}")
    text = check_unicode(row, path, str(value)).strip()
    if not text:
        raise row.error(path, "empty id")
    return text


def parse_messages(row: Row, path: str, value: Any, *, allow_empty_last: bool = False) -> tuple[Message, ...]:
    """A list of ``{role, content}`` objects -> messages; located errors on every element."""
    if not isinstance(value, list | tuple):
        raise row.error(path, f"expected a list of messages, got {type_name(value)}")
    if not value:
        raise row.error(path, "empty message list")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, Mapping):
            raise row.error(f"{path}.{i}", f"expected a {{role, content}} object, got {type_name(m)}")
        for key in ("role", "content"):
            if key not in m or m[key] is None:
                raise row.error(f"{path}.{i}.{key}", "missing")
        role = check_text(row, f"{path}.{i}.role", m["role"])
        last = i == len(value) - 1
        content = check_text(row, f"{path}.{i}.content", m["content"], allow_empty=allow_empty_last and last)
        out.append(Message(role=role.strip(), content=content))
    return tuple(out)


def parse_prompt(row: Row, path: str, value: Any) -> Prompt:
    """A prompt is a non-empty string or a list of chat messages."""
    if isinstance(value, str):
        return check_text(row, path, value)
    if isinstance(value, list | tuple):
        return parse_messages(row, path, value)
    raise row.error(path, f"expected a string or a list of messages, got {type_name(value)}")


def parse_response(row: Row, path: str, value: Any) -> tuple[str, tuple[Message, ...]]:
    """A response string, or a conversation whose last message is the response (TRL style).

    Returns (text, the conversation before the response) -- the latter is empty for plain strings. An empty
    response is returned as is: the pair is degenerate and dropped (counted) later, not a broken row.
    """
    if isinstance(value, str):
        return check_text(row, path, value, allow_empty=True), ()
    if isinstance(value, list | tuple):
        msgs = parse_messages(row, path, value, allow_empty_last=True)
        last = msgs[-1]
        if last.role != "assistant":
            raise row.error(f"{path}.{len(msgs) - 1}.role", f"the last message must be 'assistant', got {last.role!r}")
        return last.content, msgs[:-1]
    raise row.error(path, f"expected a string or a list of messages, got {type_name(value)}")


def parse_split(row: Row, path: str, value: Any) -> Split:
    if not isinstance(value, str):
        raise row.error(path, f"expected a split name (string), got {type_name(value)}")
    split = _SPLIT_ALIASES.get(value.strip().lower())
    if split is None:
        raise row.error(path, f"unknown split {value!r}; use one of {sorted(_SPLIT_ALIASES)}")
    return split


def parse_bool(row: Row, path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise row.error(path, f"expected a boolean (true/false, 1/0, seen/unseen), got {value!r}")


def parse_profile(row: Row, path: str, value: Any) -> list[ProfileItem]:
    """A profile: one string, a list of strings, or a list of objects with ``text`` (or ``content``)."""
    if isinstance(value, str):
        stripped = check_unicode(row, path, value).strip()
        if stripped.startswith("["):  # a JSON list stored in a CSV cell
            try:
                value = json.loads(stripped)
            except (ValueError, RecursionError):
                value = [value]
        else:
            return [ProfileItem("0", value)] if stripped else []
    if not isinstance(value, list | tuple):
        raise row.error(path, f"expected a string or a list, got {type_name(value)}")
    items = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            if check_unicode(row, f"{path}.{i}", item).strip():
                items.append(ProfileItem(str(i), item))
            continue
        if not isinstance(item, Mapping):
            raise row.error(f"{path}.{i}", f"expected a string or an object, got {type_name(item)}")
        key = "text" if "text" in item else "content" if "content" in item else None
        if key is None:
            raise row.error(f"{path}.{i}.text", "missing")
        text = check_text(row, f"{path}.{i}.{key}", item[key])
        item_id = str(item.get("id", i))
        meta = {k: v for k, v in item.items() if k not in (key, "id")}
        items.append(ProfileItem(item_id, text, meta))
    return items


# -------------------------------------------------------------------------------------------- reading
Record = tuple[str, int, dict[str, Any] | DataError]
"""(file label, 1-based line/row number, the row -- or the located error that made it unreadable)."""

_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "a Parquet file"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"PK\x03\x04", "a zip archive (e.g. an .xlsx workbook)"),
    (b"ARROW1", "an Arrow file"),
    (b"\x89HDF", "an HDF5 file"),
)


def detect_format(source: Source) -> str:
    """One of :data:`FORMATS`, from the suffix / folder layout / hub-id shape."""
    if not isinstance(source, str | Path):
        return "rows"
    path = Path(source)
    if path.is_dir():
        if any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return "hf_disk"
        raise DataError(
            source,
            None,
            None,
            "a folder that is not a saved HF dataset (save_to_disk); point at a file or pass fmt=",
        )
    if path.exists():
        fmt = _SUFFIXES.get(path.suffix.lower())
        if fmt is None:
            raise DataError(
                source,
                None,
                None,
                f"unknown file type {path.suffix!r}; pass fmt= one of {', '.join(FORMATS[:5])}",
            )
        return fmt
    if isinstance(source, str) and _HUB_ID.match(source) and path.suffix.lower() not in _SUFFIXES:
        return "hub"
    raise MissingFileError(source, None, None, "no such file or folder (and not a hub id 'org/name')")


def _lfs_size(head: bytes) -> str:
    match = re.search(rb"^size (\d+)", head, re.MULTILINE)
    return f"{int(match.group(1))} bytes" if match else "size unknown"


def sniff(label: str, head: bytes, expected: str) -> None:
    """Raise a :class:`DataError` saying what the file is when its first bytes show it is not ``expected``: a
    Git LFS pointer, or a binary format (pickle, gzip, zip, Parquet, Arrow, HDF5) under a text name."""
    if head.startswith(_LFS_POINTER):
        raise DataError(
            label,
            None,
            None,
            f"a Git LFS pointer ({_lfs_size(head)} of data not downloaded), not the data; fetch it with "
            "`git lfs pull` (or download the file itself)",
        )
    what = next((w for magic, w in _BINARY_MAGIC if head.startswith(magic)), None)
    if what is None and len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5:
        what = "a Python pickle"
    if what is not None and not (expected == "parquet" and head.startswith(b"PAR1")):
        raise DataError(label, None, None, f"this is {what}, not {expected}; convert it (e.g. to JSONL) or rename it")


def read_text(path: str | Path, expected: str = "text") -> str:
    """A text file's content, UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured and dropped).

    Every failure is a :class:`DataError` naming the file: unreadable, a Git LFS pointer, a binary file, a NUL
    byte, or bytes that are not UTF-8 (with the line and offset of the first bad byte)."""
    label = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise DataError(label, None, None, f"cannot read the file ({e.strerror or e})") from None
    sniff(label, raw[:256], expected)
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError as e:
            raise DataError(
                label, None, None, f"broken UTF-16 text at byte offset {e.start}; re-save as UTF-8"
            ) from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise DataError(
            label,
            raw[:nul].count(b"\n") + 1,
            None,
            f"a NUL byte at offset {nul}: a binary file, or UTF-16 text without a byte-order mark; re-save as UTF-8",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            label,
            raw[: e.start].count(b"\n") + 1,
            None,
            f"not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} (latin-1 or Windows-1252?); "
            "re-save the file as UTF-8",
        ) from None


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _json_error(label: str, line: int | None, e: BaseException) -> DataError:
    if isinstance(e, json.JSONDecodeError):
        where = line if line is not None else e.lineno
        return DataError(label, where, None, f"invalid JSON: {e.msg} (column {e.colno})")
    if isinstance(e, _DuplicateKey):
        return DataError(label, line, e.key, "key given twice in one JSON object; keep one")
    if isinstance(e, RecursionError):
        return DataError(label, line, None, "JSON nested too deeply to read; flatten it")
    return DataError(label, line, None, f"invalid JSON: {e}")  # e.g. an integer over Python's digit limit


def parse_json(label: str, line: int | None, text: str) -> Any:
    """``json.loads`` with located errors: invalid JSON, a key twice in one object, too deep, too big a number."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (_DuplicateKey, RecursionError, ValueError) as e:
        raise _json_error(label, line, e) from None


def _as_dict(label: str, line: int, row: Any) -> dict[str, Any] | DataError:
    if not isinstance(row, Mapping):
        return DataError(label, line, None, f"expected a JSON object, got {type_name(row)}")
    return dict(row)


def _read_jsonl_text(label: str, text: str) -> Iterator[Record]:
    # split on "\n" only: str.splitlines would also break at U+2028 and other characters JSON strings may hold
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(label, i, line)
        except DataError as e:
            yield label, i, e
            continue
        yield label, i, _as_dict(label, i, obj)


def _read_json(label: str, text: str) -> Iterator[Record]:
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # several objects, one per line: JSON Lines under a .json name
            yield from _read_jsonl_text(label, text)
            return
        raise _json_error(label, None, e) from None
    except (_DuplicateKey, RecursionError, ValueError) as e:
        raise _json_error(label, None, e) from None
    if isinstance(obj, Mapping):
        if isinstance(obj.get("data"), list):
            obj = obj["data"]
        else:
            raise DataError(
                label,
                None,
                None,
                f'expected a list of objects or {{"data": [...]}}, got an object with keys {sorted(obj)[:8]}',
            )
    if not isinstance(obj, list):
        raise DataError(label, None, None, f"expected a list of objects, got {type_name(obj)}")
    for i, row in enumerate(obj, 1):
        yield label, i, _as_dict(label, i, row)


def _read_csv(label: str, text: str, delimiter: str) -> Iterator[Record]:
    limit = min(len(text) + 1, 2**31 - 1)
    if csv.field_size_limit() < limit:  # one long cell must not abort the read
        csv.field_size_limit(limit)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if header is None:
            return
        first: dict[str, int] = {}
        for i, name in enumerate(header, 1):
            if name in first:
                raise DataError(
                    label, 1, name, f"column given twice in the header (columns {first[name]} and {i}); rename one"
                )
            first[name] = i
        line = reader.line_num + 1
        for cells in reader:
            if cells:
                if len(cells) != len(header):
                    more = "more" if len(cells) > len(header) else "fewer"
                    msg = f"{len(cells)} cells, {more} than the header's {len(header)} columns"
                    yield label, line, DataError(label, line, None, msg)
                else:
                    yield label, line, dict(zip(header, cells, strict=True))
            line = reader.line_num + 1
    except csv.Error as e:
        raise DataError(label, reader.line_num or 1, None, f"unreadable CSV ({e})") from None


def _read_parquet(label: str, path: Path) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open(path, "rb") as fh:
            sniff(label, fh.read(256), "parquet")
        file = pq.ParquetFile(path)
        i = 0
        for batch in file.iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                i += 1
                yield label, i, row
    except (pa.ArrowException, OSError) as e:
        raise DataError(label, None, None, f"unreadable Parquet file ({e})") from None


def _read_hf(
    label: str,
    source: str,
    fmt: str,
    split: str | None,
    config: str | None,
) -> Iterator[Record]:
    import datasets

    every = split == "*"
    if fmt == "hf_disk":
        ds: Any = datasets.load_from_disk(source)
    else:
        ds = datasets.load_dataset(source, config, split=None if every else split)
    if isinstance(ds, datasets.DatasetDict):
        names = sorted(ds)
        if every:
            for name in names:
                for i, row in enumerate(ds[name], 1):
                    yield f"{label}[{name}]", i, dict(row)
            return
        if split is None:
            if len(names) != 1:
                raise DataError(label, None, "split", f"several splits {names}: pass split=")
            split = names[0]
        if split not in ds:
            raise DataError(label, None, "split", f"no split {split!r}; available: {names}")
        ds = ds[split]
        label = f"{label}[{split}]"
    for i, row in enumerate(ds, 1):
        yield label, i, dict(row)


def iter_records(
    source: Source,
    *,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
) -> Iterator[Record]:
    """Like :func:`read_rows`, but a row that cannot be read (an invalid JSONL line, a CSV row with the wrong
    number of cells, a JSON array element that is not an object) comes as its :class:`DataError`, so a loader
    can count it under ``on_error="skip"``. Problems with the whole file still raise."""
    fmt = fmt or detect_format(source)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "rows":
        if isinstance(source, str | Path):
            raise ConfigError("fmt='rows' needs a sequence of dicts")
        for i, row in enumerate(source, 1):
            yield "<rows>", i, _as_dict("<rows>", i, row)
        return
    if not isinstance(source, str | Path):
        raise ConfigError(f"fmt={fmt!r} needs a path, got {type_name(source)}")
    label = str(source)
    if fmt == "jsonl":
        yield from _read_jsonl_text(label, read_text(source, "JSON Lines text"))
    elif fmt == "json":
        yield from _read_json(label, read_text(source, "JSON text"))
    elif fmt in ("csv", "tsv"):
        yield from _read_csv(label, read_text(source, f"{fmt.upper()} text"), "\t" if fmt == "tsv" else ",")
    elif fmt == "parquet":
        yield from _read_parquet(label, Path(source))
    else:
        yield from _read_hf(label, str(source), fmt, split, config)


def read_rows(
    source: Source,
    *,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Yield ``(file label, 1-based line/row number, row)`` from any supported source; any unreadable row raises.

    ``split``/``config`` select a split of a saved ``DatasetDict`` or a hub dataset; ``split="*"`` reads
    every split in name order (the label then names the split).
    """
    for label, line, row in iter_records(source, fmt=fmt, split=split, config=config):
        if isinstance(row, DataError):
            raise row
        yield label, line, row


def source_label(source: Source) -> str:
    return str(source) if isinstance(source, str | Path) else "<rows>"


# ------------------------------------------------------------------------------------------- field map
@dataclass(frozen=True)
class FieldMap:
    """Which source path feeds each canonical field; unmapped fields use their own name.

    ``FieldMap.parse("user_id=ground_truth_persona,prompt=question")``; a source may be a dotted path
    (``info.post``, ``summaries.0.text``). An empty source (``split=``) switches an optional field off.
    """

    paths: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str | Mapping[str, str] | FieldMap | None) -> FieldMap:
        if spec is None:
            return cls({})
        if isinstance(spec, FieldMap):
            return spec
        items: list[tuple[str, str]] = []
        if isinstance(spec, str):
            for chunk in spec.split(","):
                if not chunk.strip():
                    continue
                if "=" not in chunk:
                    raise DataError("mapping", None, chunk.strip(), "expected 'canonical=source'")
                key, _, value = chunk.partition("=")
                items.append((key.strip(), value.strip()))
        elif isinstance(spec, Mapping):
            for key, value in spec.items():
                if not isinstance(value, str):
                    raise DataError("mapping", None, str(key), f"expected a source path string, got {type_name(value)}")
                items.append((str(key).strip(), value.strip()))
        else:
            raise ConfigError(f"mapping must be a string, a dict or a FieldMap, got {type_name(spec)}")
        paths: dict[str, str] = {}
        for key, value in items:
            if key in RENAMED_FIELDS:
                raise DataError("mapping", None, key, f"this field was renamed: {RENAMED_FIELDS[key]}")
            if key not in CANONICAL_FIELDS:
                raise DataError("mapping", None, key, f"unknown field; known: {', '.join(CANONICAL_FIELDS)}")
            if key in paths:
                raise DataError("mapping", None, key, "mapped twice")
            if not value and key in REQUIRED_FIELDS:
                raise DataError("mapping", None, key, "a required field cannot be switched off")
            paths[key] = value
        return cls(paths)

    def source(self, canonical: str) -> str:
        return self.paths.get(canonical, canonical)

    def explicit(self, canonical: str) -> bool:
        return bool(self.paths.get(canonical))

    def disabled(self, canonical: str) -> bool:
        return canonical in self.paths and not self.paths[canonical]

    def to_dict(self) -> dict[str, str]:
        return {k: self.source(k) for k in CANONICAL_FIELDS if not self.disabled(k)}

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.paths.items())


# ------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class LoadOptions:
    """Every option of :func:`load_benchmark_file` (and so of :func:`validate_file`), checked once.

    A bad value is a :class:`~perbench.errors.ConfigError` naming the option.
    """

    mapping: FieldMap = field(default_factory=FieldMap)
    name: str | None = None
    unseen_users: tuple[str, ...] | None = None
    unseen_fraction: float = 0.0
    seed: int = 0
    fmt: str | None = None
    split: str | None = None
    config: str | None = None
    on_error: OnError = "raise"
    dedup: bool = True
    test_fraction: float | None = None
    default_user: str | None = None
    max_chars: int | None = DEFAULT_MAX_CHARS

    @classmethod
    def build(
        cls,
        *,
        mapping: str | Mapping[str, str] | FieldMap | None = None,
        unseen_users: Sequence[str] | None = None,
        **options: Any,
    ) -> LoadOptions:
        if unseen_users is not None:
            if isinstance(unseen_users, str) or not all(isinstance(u, str | int) for u in unseen_users):
                raise ConfigError(f"unseen_users must be a list of user ids, got {unseen_users!r}")
            unseen_users = tuple(str(u).strip() for u in unseen_users)
        return cls(mapping=FieldMap.parse(mapping), unseen_users=unseen_users, **options)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if not is_number(self.unseen_fraction) or not 0.0 <= self.unseen_fraction < 1.0:
            raise ConfigError(f"unseen_fraction must be a number in [0, 1), got {self.unseen_fraction!r}")
        if self.test_fraction is not None and (not is_number(self.test_fraction) or not 0 < self.test_fraction < 1):
            raise ConfigError(f"test_fraction must be a number in (0, 1), or None, got {self.test_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.dedup, bool):
            raise ConfigError(f"dedup must be true or false, got {self.dedup!r}")
        if self.max_chars is not None and (
            isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) or self.max_chars < 1
        ):
            raise ConfigError(
                f"max_chars must be a positive integer, or None to keep texts whole, got {self.max_chars!r}"
            )
        if self.fmt is not None and self.fmt not in FORMATS:
            raise ConfigError(f"unknown format {self.fmt!r}; use one of {', '.join(FORMATS)}")
        if self.default_user is not None:
            if not isinstance(self.default_user, str) or not self.default_user.strip():
                raise ConfigError(f"default_user must be a non-empty user id, got {self.default_user!r}")
            if self.mapping.explicit("user_id"):
                raise ConfigError(
                    f"default_user={self.default_user!r} is for files without a user field, but the mapping names "
                    f"one (user_id={self.mapping.source('user_id')}); drop one of them"
                )
            object.__setattr__(self, "default_user", self.default_user.strip())
        if self.test_fraction is not None and self.mapping.explicit("split"):
            raise ConfigError(
                f"test_fraction={self.test_fraction} splits a file without a split field, but the mapping names one "
                f"(split={self.mapping.source('split')}); drop one of them"
            )


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


# ------------------------------------------------------------------------------------------- loading
@dataclass
class _Parsed:
    pair: PreferencePair
    seen: bool | None
    profile: list[ProfileItem]
    answer_key: str | None
    reference: str | None
    where: str
    split_given: bool
    user_raw: Any


def _parse_row(row: Row, fmap: FieldMap, stem: str, default_user: str | None = None) -> _Parsed:
    def optional(canonical: str) -> Any:
        """Explicitly mapped -> required; otherwise used when present; empty string = absent."""
        if fmap.disabled(canonical):
            return None
        path = fmap.source(canonical)
        value = row.require(path) if fmap.explicit(canonical) else row.get(path)
        if isinstance(value, str) and not value.strip():
            if fmap.explicit(canonical) and canonical in ("split", "seen", "pair_id"):
                raise row.error(path, "empty value")
            return None
        return value

    user_path = fmap.source("user_id")
    if default_user is not None:
        if resolve(row.data, user_path) is not _MISSING:
            raise row.error(
                user_path,
                f"present, but default_user={default_user!r} is set (it is for files without a user field); "
                "drop default_user to use the file's user ids",
            )
        user, user_raw = default_user, default_user
    else:
        user_raw = row.require(user_path)
        user = check_ident(row, user_path, user_raw)
    chosen_path, rejected_path = fmap.source("chosen"), fmap.source("rejected")
    chosen, chosen_ctx = parse_response(row, chosen_path, row.require(chosen_path))
    rejected, _ = parse_response(row, rejected_path, row.require(rejected_path))
    prompt_path = fmap.source("prompt")
    raw_prompt = resolve(row.data, prompt_path)
    prompt: Prompt
    if (raw_prompt is _MISSING or raw_prompt is None) and chosen_ctx and not fmap.explicit("prompt"):
        prompt = chosen_ctx  # implicit prompt: the conversation before the chosen response
    else:
        prompt = parse_prompt(row, prompt_path, row.require(prompt_path))
    split_value = optional("split")
    split: Split = "test" if split_value is None else parse_split(row, fmap.source("split"), split_value)
    seen_value = optional("seen")
    seen = None if seen_value is None else parse_bool(row, fmap.source("seen"), seen_value)
    profile_value = optional("profile")
    profile = [] if profile_value is None else parse_profile(row, fmap.source("profile"), profile_value)
    key_value = optional("answer_key")
    answer_key = None if key_value is None else check_text(row, fmap.source("answer_key"), key_value)
    ref_value = optional("reference")
    reference = None if ref_value is None else check_text(row, fmap.source("reference"), ref_value)
    pid_value = optional("pair_id")
    pair_id = f"{stem}:{row.line}" if pid_value is None else row.ident(fmap.source("pair_id"))
    meta = {"source": row.where, "line": row.line}
    pair = PreferencePair(pair_id, user, prompt, chosen, rejected, split, meta)
    return _Parsed(pair, seen, profile, answer_key, reference, row.where, split_value is not None, user_raw)


def assign_unseen(user_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded ``round(fraction * n)`` of the sorted user ids; stable across runs and machines."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"unseen_fraction must be in [0, 1), got {fraction}")
    ids = sorted(user_ids)
    n = round(fraction * len(ids))
    random.Random(seed).shuffle(ids)
    return set(ids[:n])


def assign_test_split(
    pairs: Sequence[PreferencePair], fraction: float, seed: int, free: set[str] | None = None
) -> list[PreferencePair]:
    """A seeded per-user split: ``round(fraction * n)`` of each user's ``n`` free pairs (ids in ``free``, default
    all) become test, the rest train. A user with two free pairs or more keeps at least one of each; order kept."""
    by_user: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        if free is None or p.pair_id in free:
            by_user.setdefault(p.user_id, []).append(i)
    test: set[int] = set()
    for user, idx in sorted(by_user.items()):
        n = len(idx)
        n_test = round(fraction * n)
        if n >= 2:
            n_test = min(max(n_test, 1), n - 1)
        order = list(idx)
        random.Random(f"{seed}/{user}").shuffle(order)
        test.update(order[:n_test])
    out = []
    for i, p in enumerate(pairs):
        free_pair = free is None or p.pair_id in free
        out.append(replace(p, split="test" if i in test else "train") if free_pair else p)
    return out


def truncate_pair(pair: PreferencePair, max_chars: int | None) -> tuple[PreferencePair, tuple[str, ...]]:
    """``pair`` with texts over ``max_chars`` cut: a response keeps its first ``max_chars`` characters, a prompt
    (each message of a chat prompt) its last ``max_chars``. Returns the pair and the parts that were cut."""
    if max_chars is None:
        return pair, ()
    parts: list[str] = []
    chosen, rejected = pair.chosen, pair.rejected
    if len(chosen) > max_chars:
        chosen = chosen[:max_chars]
        parts.append("chosen")
    if len(rejected) > max_chars:
        rejected = rejected[:max_chars]
        parts.append("rejected")
    prompt: Prompt = pair.prompt
    if isinstance(prompt, str):
        if len(prompt) > max_chars:
            prompt = prompt[-max_chars:]
            parts.append("prompt")
    elif any(len(m.content) > max_chars for m in prompt):
        prompt = tuple(Message(m.role, m.content[-max_chars:]) for m in prompt)
        parts.append("prompt")
    if not parts:
        return pair, ()
    meta = {**pair.meta, "truncated": parts}
    return replace(pair, prompt=prompt, chosen=chosen, rejected=rejected, meta=meta), tuple(parts)


@dataclass
class Truncations:
    """Counts of pairs cut by ``max_chars``, for ``meta["truncated"]``."""

    max_chars: int | None
    pairs: int = 0
    parts: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "chosen": 0, "rejected": 0})
    examples: list[str] = field(default_factory=list)

    def apply(self, pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
        out = []
        for p in pairs:
            cut, parts = truncate_pair(p, self.max_chars)
            if parts:
                self.pairs += 1
                for part in parts:
                    self.parts[part] += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{p.meta.get('source', p.pair_id)} ({', '.join(parts)})")
            out.append(cut)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"max_chars": self.max_chars, "pairs": self.pairs, "parts": dict(self.parts), "examples": self.examples}

    def note(self) -> str | None:
        if not self.pairs:
            return None
        return (
            f"{self.pairs} pair(s) had a text over max_chars={self.max_chars} characters and were cut "
            f"(responses keep their start, prompts their end): {self.parts}"
        )


def demote_untrained(users: Mapping[str, User], pairs: Sequence[PreferencePair]) -> tuple[dict[str, User], list[str]]:
    """Users re-marked unseen because they are seen but have no train pair while the benchmark has train pairs
    (they were never seen in training: they get few-shot adaptation like any unseen user)."""
    demoted = untrained_seen_users(pairs, {u: rec.seen for u, rec in users.items()})
    out = {u: replace(rec, seen=False) if u in demoted else rec for u, rec in users.items()}
    return out, demoted


def demotion_note(demoted: Sequence[str]) -> str:
    shown = ", ".join(repr(u) for u in demoted[:5]) + (" ..." if len(demoted) > 5 else "")
    return (
        f"{len(demoted)} seen user(s) without a train pair are evaluated as unseen (few-shot adaptation only, "
        f"never trained on): {shown}"
    )


RowHook = Callable[[Row, PreferencePair], list[PreferencePair]]
"""Extra (history) pairs derived from a row and its parsed pair; they must not repeat a row's own pair."""
RowSize = Callable[[Row], int]
"""How many pairs a row holds (its own pair and its extra pairs): what a skipped row counts."""


@dataclass
class LoadStats:
    rows_read: int = 0
    rows_with_errors: int = 0
    first_error: str | None = None
    fmt: str = ""


def load_with_stats(
    source: Source,
    opts: LoadOptions,
    *,
    row_hook: RowHook | None = None,
    row_size: RowSize | None = None,
) -> tuple[Benchmark, LoadStats]:
    """The one loading path of :func:`load_benchmark_file`, :func:`validate_file` and the persona loader."""
    fmap = opts.mapping
    label = source_label(source)
    fmt = opts.fmt or detect_format(source)
    stats = LoadStats(fmt=fmt)
    skipped = SkipReport()
    sink = ErrorSink(opts.on_error, skipped)
    stem = Path(label).name if isinstance(source, str | Path) else "row"
    parsed: list[_Parsed] = []
    extras: list[PreferencePair] = []
    user_seen: dict[str, tuple[bool, str]] = {}
    id_forms: dict[str, dict[str, str]] = {}
    for file_label, line, data in iter_records(source, fmt=fmt, split=opts.split, config=opts.config):
        stats.rows_read += 1
        if isinstance(data, DataError):
            stats.rows_with_errors += 1
            sink(data)
            continue
        row = Row(file_label, line, data)
        try:
            item = _parse_row(row, fmap, stem, opts.default_user)
            more = row_hook(row, item.pair) if row_hook is not None else []
            if item.seen is not None:
                first = user_seen.setdefault(item.pair.user_id, (item.seen, row.where))
                if first[0] != item.seen:
                    raise row.error(
                        fmap.source("seen"), f"user {item.pair.user_id!r} was seen={first[0]} at {first[1]}"
                    )
        except DataError as e:
            stats.rows_with_errors += 1
            sink(e, n=row_size(row) if row_size is not None else 1)
            continue
        if opts.test_fraction is not None and item.split_given:
            raise row.error(
                fmap.source("split"),
                f"the file gives a split, and test_fraction={opts.test_fraction} is set; use one of them "
                "(mapping 'split=' switches the file's split off)",
            )
        id_forms.setdefault(item.pair.user_id, {}).setdefault(repr(item.user_raw), row.where)
        parsed.append(item)
        extras.extend(more)
    stats.first_error = sink.first

    # users: profile items (union, first occurrence wins), first answer key
    profiles: dict[str, list[ProfileItem]] = {}
    keys: dict[str, str] = {}
    for item in parsed:
        uid = item.pair.user_id
        known = profiles.setdefault(uid, [])
        texts = {p.text for p in known}
        known.extend(p for p in item.profile if p.text not in texts)
        if item.answer_key is not None:
            keys.setdefault(uid, item.answer_key)
    truncations = Truncations(opts.max_chars)
    row_pairs = truncations.apply([item.pair for item in parsed])
    row_keys = {pair_identity(p) for p in row_pairs}
    kept_extras = []
    for p in truncations.apply(extras):
        if pair_identity(p) in row_keys:
            skipped.add("history_equals_row_pair", p.pair_id)
        else:
            kept_extras.append(p)
    pairs = dedup_pairs(row_pairs + kept_extras, skipped, dedup=opts.dedup)
    first_seen: dict[str, tuple[str, str]] = {}
    unique_ids = []
    for p in pairs:
        key, where = p.content_key(), str(p.meta.get("source", ""))
        prior = first_seen.setdefault(p.pair_id, (key, where))
        if prior[0] != key:
            stats.rows_with_errors += 1
            sink(
                DataError(
                    label,
                    int(p.meta.get("line", 0)) or None,
                    fmap.source("pair_id"),
                    f"duplicate pair id {p.pair_id!r} with different content (first at {prior[1]})",
                )
            )
            continue
        unique_ids.append(p)
    pairs = unique_ids
    stats.first_error = sink.first
    if opts.test_fraction is not None:
        pairs = assign_test_split(pairs, opts.test_fraction, opts.seed, {item.pair.pair_id for item in parsed})
    with_pairs = {p.user_id for p in pairs}
    for uid in sorted(set(profiles) - with_pairs):
        skipped.add("user_without_pairs", uid)
    user_ids = sorted(with_pairs)

    if user_seen:
        if opts.unseen_users is not None or opts.unseen_fraction:
            raise ConfigError("give either a 'seen' field or unseen_users / unseen_fraction, not both")
        unseen = {u for u, (s, _) in user_seen.items() if not s}
        seen_policy = f"from field '{fmap.source('seen')}' (users without a value are seen)"
    elif opts.unseen_users is not None:
        unknown = sorted(set(opts.unseen_users) - set(profiles))
        if unknown:
            raise DataError(label, None, "unseen_users", f"unknown user(s) {unknown[:5]} (not in the file)")
        unseen = set(opts.unseen_users)
        seen_policy = "unseen_users list"
    else:
        unseen = assign_unseen(user_ids, opts.unseen_fraction, opts.seed)
        seen_policy = (
            f"seeded fraction {opts.unseen_fraction} (seed {opts.seed})" if opts.unseen_fraction else "all users seen"
        )
    users = {
        u: withhold_answer_key(
            User(
                u,
                seen=u not in unseen,
                profile=tuple(profiles[u]),
                answer_key={"rubric_text": keys[u]} if u in keys else None,
            ),
            skipped,
        )
        for u in user_ids
    }
    users, demoted = demote_untrained(users, pairs)
    if demoted:
        seen_policy += f"; {len(demoted)} seen user(s) without train pairs re-marked unseen"

    references: list[Reference] = []
    ref_keys: set[str] = set()
    for item in parsed:
        if item.reference is None or item.pair.user_id not in users:
            continue
        key = content_hash(item.pair.user_id, prompt_key(item.pair.prompt))
        if key not in ref_keys:
            ref_keys.add(key)
            references.append(Reference(item.pair.user_id, item.pair.prompt, item.reference, item.pair.split))

    merges = {u: forms for u, forms in sorted(id_forms.items()) if len(forms) > 1 and u in users}
    notes = []
    if merges:
        example = next(iter(merges.items()))
        notes.append(
            f"{len(merges)} user id(s) written in several forms were merged (ids are strings, surrounding "
            f"whitespace stripped), e.g. {example[0]!r}: "
            + ", ".join(f"{form} at {where}" for form, where in example[1].items())
        )
    if demoted:
        notes.append(demotion_note(demoted))
    if truncations.note():
        notes.append(str(truncations.note()))
    meta = {
        "source": label,
        "format": fmt,
        "mapping": fmap.to_dict(),
        "split_policy": _split_policy(fmap, parsed, opts),
        "split_fix": "map a split field (mapping 'split=<column>' with train/test values), or set test_fraction "
        "(e.g. 0.2) for a seeded per-user split",
        "seen_policy": seen_policy,
        "user_policy": (
            f"every pair belongs to default_user {opts.default_user!r} (the file has no user field)"
            if opts.default_user is not None
            else f"from field '{fmap.source('user_id')}'"
        ),
        "rows_read": stats.rows_read,
        "rows_with_errors": stats.rows_with_errors,
        "dedup": opts.dedup,
        "truncated": truncations.to_dict(),
        "user_id_merges": {
            "count": len(merges),
            "examples": {u: forms for u, forms in list(merges.items())[:5]},
        },
        "seen_users_without_train": {"count": len(demoted), "users": demoted[:50]},
        "notes": notes,
        "user_context": describe_user_context(
            "profile" if any(u.profile for u in users.values()) else "pairs_only",
            users,
            included=(["profile"] if any(u.profile for u in users.values()) else []) + ["own train pairs"],
            withheld=[f"answer_key (from '{fmap.source('answer_key')}')"] if keys else [],
            note="user ids are labels for reports and never reach a prompt",
        ),
    }
    if opts.test_fraction is not None:
        meta["test_fraction"] = opts.test_fraction
    if opts.default_user is not None:
        meta["default_user"] = opts.default_user
    bench = Benchmark(
        name=opts.name or (Path(label).stem if isinstance(source, str | Path) else "rows"),
        pairs=pairs,
        users=users,
        references=references,
        skipped=skipped,
        meta=meta,
        weighting="pair" if opts.dedup else "row",
    )
    return bench, stats


def _split_policy(fmap: FieldMap, parsed: list[_Parsed], opts: LoadOptions) -> str:
    if opts.test_fraction is not None:
        return (
            f"seeded per-user split: round({opts.test_fraction}·n) of each user's pairs test, at least one train "
            f"and one test pair for a user with two or more (seed {opts.seed})"
        )
    if fmap.disabled("split"):
        return "all test (split field switched off)"
    if fmap.explicit("split"):
        return f"from field '{fmap.source('split')}'"
    if any(item.split_given for item in parsed):
        return "from column 'split' (rows without one are test)"
    return "all test (no split field mapped)"


def load_benchmark_file(
    source: Source,
    *,
    mapping: str | Mapping[str, str] | FieldMap | None = None,
    name: str | None = None,
    unseen_users: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    on_error: OnError = "raise",
    dedup: bool = True,
    test_fraction: float | None = None,
    default_user: str | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
) -> Benchmark:
    """Load any supported file/dataset with a field mapping into a :class:`Benchmark`.

    Without a mapped ``split`` field every pair is ``test`` (the file is treated as evaluation data) unless
    ``test_fraction`` asks for a seeded per-user split. ``default_user`` names the one user of a file without a
    user field. ``on_error="skip"`` counts bad rows in ``Benchmark.skipped`` instead of raising
    :class:`DataError`. Texts over ``max_chars`` are cut and counted (see the module docstring).
    """
    opts = LoadOptions.build(
        mapping=mapping,
        name=name,
        unseen_users=unseen_users,
        unseen_fraction=unseen_fraction,
        seed=seed,
        fmt=fmt,
        split=split,
        config=config,
        on_error=on_error,
        dedup=dedup,
        test_fraction=test_fraction,
        default_user=default_user,
        max_chars=max_chars,
    )
    bench, _ = load_with_stats(source, opts)
    return bench


# ------------------------------------------------------------------------------------------ validation
def validate_file(
    source: Source,
    *,
    mapping: str | Mapping[str, str] | FieldMap | None = None,
    name: str | None = None,
    unseen_users: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    on_error: OnError = "raise",
    dedup: bool = True,
    test_fraction: float | None = None,
    default_user: str | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
) -> dict[str, Any]:
    """Load ``source`` exactly as :func:`load_benchmark_file` would with the same options, run the benchmark
    checks every run makes (:func:`perbench.data.checks.check_benchmark`), and report (``perbench validate``).

    ``ok`` is True exactly when a run with these options would load the file. When it would not, ``fatal`` holds
    the error a run would print, and -- when that error is a bad row under ``on_error="raise"`` -- the counts
    come from a second pass with ``on_error="skip"`` (``diagnosis``) so the report still shows every problem.
    """
    from perbench.data.checks import check_benchmark

    report: dict[str, Any] = {
        "source": source_label(source),
        "format": fmt,
        "mapping": None,
        "on_error": on_error,
        "rows_read": 0,
        "rows_with_errors": 0,
        "pairs_kept": 0,
        "users": 0,
        "users_seen": 0,
        "users_unseen": 0,
        "splits": {s: 0 for s in SPLITS},
        "train_pairs_seen": 0,
        "skipped": {},
        "skipped_pairs": 0,
        "truncated": None,
        "user_id_merges": None,
        "seen_users_without_train": None,
        "notes": [],
        "first_error": None,
        "fatal": None,
        "diagnosis": None,
        "ok": False,
        "weighting": "pair" if dedup is not False else "row",
        "split_policy": None,
        "seen_policy": None,
        "user_policy": None,
        "references": 0,
    }
    try:
        opts = LoadOptions.build(
            mapping=mapping,
            name=name,
            unseen_users=unseen_users,
            unseen_fraction=unseen_fraction,
            seed=seed,
            fmt=fmt,
            split=split,
            config=config,
            on_error=on_error,
            dedup=dedup,
            test_fraction=test_fraction,
            default_user=default_user,
            max_chars=max_chars,
        )
    except PerbenchError as e:
        report["fatal"] = report["first_error"] = str(e)
        return report
    report["mapping"] = opts.mapping.to_dict()
    try:
        bench, stats = load_with_stats(source, opts)
        notes = check_benchmark(bench, needs_train=False)
    except (PerbenchError, OSError) as e:
        report["fatal"] = report["first_error"] = str(e)
        if opts.on_error == "raise" and isinstance(e, DataError) and e.message.endswith(SKIP_HINT):
            try:
                bench, stats = load_with_stats(source, replace(opts, on_error="skip"))
            except (PerbenchError, OSError):
                return report
            _fill(report, bench, stats, list(bench.meta.get("notes", [])))
            report["diagnosis"] = "counts from a second pass with on_error: skip (a run with on_error: raise stops)"
        return report
    _fill(report, bench, stats, notes)
    report["ok"] = True
    return report


def _fill(report: dict[str, Any], bench: Benchmark, stats: LoadStats, notes: list[str]) -> None:
    report.update(
        format=stats.fmt,
        rows_read=stats.rows_read,
        rows_with_errors=stats.rows_with_errors,
        pairs_kept=len(bench.pairs),
        users=len(bench.users),
        users_seen=len(bench.seen_users),
        users_unseen=len(bench.unseen_users),
        splits={s: sum(p.split == s for p in bench.pairs) for s in SPLITS},
        train_pairs_seen=len(bench.train_pairs()),
        skipped={
            r: {"count": n, "unit": bench.skipped.unit(r), "examples": bench.skipped.examples.get(r, [])}
            for r, n in sorted(bench.skipped.counts.items())
        },
        skipped_pairs=bench.skipped.total(),
        truncated=bench.meta.get("truncated"),
        user_id_merges=bench.meta.get("user_id_merges"),
        seen_users_without_train=bench.meta.get("seen_users_without_train"),
        notes=notes,
        split_policy=bench.meta.get("split_policy"),
        seen_policy=bench.meta.get("seen_policy"),
        user_policy=bench.meta.get("user_policy"),
        references=len(bench.references),
        weighting=bench.weighting,
    )
    report["first_error"] = report["first_error"] or stats.first_error


def format_validation(report: Mapping[str, Any]) -> str:
    """A short human-readable rendering of :func:`validate_file`'s report."""
    lines = [f"{report['source']} ({report.get('format') or '?'})"]
    if report.get("fatal") and not report.get("diagnosis"):
        lines.append(f"  error        : {report['fatal']}")
        lines.append("  status       : FAILED (a run would stop here)")
        return "\n".join(lines)
    splits = report.get("splits", {})
    lines += [
        f"  rows read    : {report['rows_read']} ({report.get('rows_with_errors', 0)} with errors)",
        f"  pairs kept   : {report['pairs_kept']} ({report['weighting']}-weighted)",
        f"  users        : {report['users']} ({report['users_seen']} seen, {report['users_unseen']} unseen;"
        f" {report.get('seen_policy')})",
        f"  user ids     : {report.get('user_policy')}",
        f"  splits       : train {splits.get('train', 0)}, test {splits.get('test', 0)} ({report.get('split_policy')})",
        f"  train pairs  : {report.get('train_pairs_seen', 0)} (seen users: what reward models fit on)",
    ]
    demoted = report.get("seen_users_without_train") or {}
    if demoted.get("count"):
        lines.append(f"  seen -> unseen: {demoted['count']} user(s) without train pairs, e.g. {demoted['users'][:3]}")
    merges = report.get("user_id_merges") or {}
    if merges.get("count"):
        lines.append(f"  id merges    : {merges['count']} user id(s) written in several forms")
    cut = report.get("truncated") or {}
    if cut.get("pairs"):
        lines.append(f"  truncated    : {cut['pairs']} pair(s) over max_chars={cut['max_chars']} {cut['parts']}")
    skipped = report.get("skipped") or {}
    lines.append(f"  skipped      : {report.get('skipped_pairs', 0)} pair(s)")
    for reason, info in skipped.items():
        example = f"  e.g. {info['examples'][0]}" if info.get("examples") else ""
        lines.append(f"    {reason}: {info['count']} {info.get('unit', 'pair')}(s){example}")
    for note in report.get("notes") or []:
        lines.append(f"  note         : {note}")
    if report.get("first_error"):
        lines.append(f"  first error  : {report['first_error']}")
    if report.get("ok"):
        status = "OK"
    elif report.get("diagnosis"):
        status = (
            f"FAILED ({report['rows_with_errors']} row(s) with errors; a run stops at the first: "
            f"{report['fatal']}; the counts above are from on_error: skip)"
        )
    else:
        status = f"FAILED ({report.get('fatal')})"
    lines.append(f"  status       : {status}")
    return "\n".join(lines)
