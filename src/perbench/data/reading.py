"""Read any supported file or dataset into located rows.

Formats: JSONL, JSON (a list of objects or ``{"data": [...]}``), CSV/TSV, Parquet, a Hugging Face dataset
folder written by ``save_to_disk``, or (with network) a hub id ``org/name``.

Row numbers: JSONL and CSV report the 1-based line in the file; JSON arrays, Parquet and HF datasets report
the 1-based position of the record.

Reading: text files must be UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured). Another encoding, a binary
file under a text name (pickle, gzip, zip, Parquet) and a Git LFS pointer are errors that say what the file
is. A CSV header that names a column twice is an error; so is a JSON object with a key twice, and JSON nested
too deeply to read.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from perbench.data.rows import DataError, MissingFileError, type_name
from perbench.errors import ConfigError
from perbench.io import special_file

Source = str | Path | Sequence[Mapping[str, Any]]

FORMATS: tuple[str, ...] = ("jsonl", "json", "csv", "tsv", "parquet", "hf_disk", "hub", "rows")

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


def check_regular(label: str, path: str | Path) -> None:
    """A :class:`DataError` for a path that is not a regular file or folder: reading a named pipe waits for a
    writer forever and ``/dev/zero`` never ends, so neither is read."""
    what = special_file(path)
    if what is not None:
        raise DataError(label, None, None, f"is {what}, not a regular file; save the data to a file and load that")


def detect_format(source: Source) -> str:
    """One of :data:`FORMATS`, from the suffix / folder layout / hub-id shape."""
    if not isinstance(source, str | Path):
        return "rows"
    path = Path(source)
    check_regular(str(source), path)
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
    raise MissingFileError(source, None, None, f"no such file or folder (and not a hub id 'org/name').{_near(source)}")


def _near(source: str | Path) -> str:
    """`` Did you mean FILE?`` for a path typed without its suffix (``data/pairs`` for ``data/pairs.jsonl``)."""
    path = Path(source)
    near = sorted(p.name for p in path.parent.glob(f"{glob_escape(path.name)}.*")) if path.parent.is_dir() else []
    return f" Did you mean {path.parent / near[0]}?" if near else ""


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
    check_regular(label, path)
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


def unreadable(err: DataError, held: Sequence[Any]) -> DataError:
    """``err`` for a record that holds several rows (``held``, e.g. a JSON array on one JSONL line): a skip of it
    counts every one of them, and the users they name (``DataError.held``) count as lost if nothing else holds
    them."""
    err.held = tuple(r for r in held if isinstance(r, Mapping))
    err.rows = max(1, len(err.held))
    return err


def _as_dict(label: str, line: int, row: Any, *, jsonl: bool = False) -> dict[str, Any] | DataError:
    if isinstance(row, list | tuple):
        objects = sum(isinstance(r, Mapping) for r in row)
        held = f"a list of {len(row)} value(s), {objects} of them objects"
        fix = "; JSON Lines holds one object per line" if jsonl else "; each element of the list is one row"
        return unreadable(DataError(label, line, None, f"expected a JSON object, got {held}{fix}"), row)
    if not isinstance(row, Mapping):
        return DataError(label, line, None, f"expected a JSON object, got {type_name(row)}")
    return dict(row)


def _values_on_line(line: str) -> list[Any] | None:
    """The JSON values written one after another on one line (``{…}{…}``), or None when it is no such line."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
    values, pos = [], 0
    try:
        while pos < len(line):
            value, pos = decoder.raw_decode(line, pos)
            values.append(value)
            while pos < len(line) and line[pos] in " \t\r,":
                pos += 1
    except (ValueError, RecursionError, _DuplicateKey):
        return None
    return values if len(values) > 1 else None


def _read_jsonl_text(label: str, text: str) -> Iterator[Record]:
    # split on "\n" only: str.splitlines would also break at U+2028 and other characters JSON strings may hold
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(label, i, line)
        except DataError as e:
            several = _values_on_line(line.strip()) if "Extra data" in e.message else None
            if several is not None:
                e = DataError(label, i, None, f"{len(several)} JSON values on one line; JSON Lines holds one per line")
                e = unreadable(e, several)
            yield label, i, e
            continue
        yield label, i, _as_dict(label, i, obj, jsonl=True)


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
            others = {k: v for k, v in obj.items() if k != "data" and _rows_like(v)}
            if others:
                listed = ", ".join(f"{k!r} ({len(v)} objects)" for k, v in others.items())
                raise DataError(
                    label,
                    None,
                    None,
                    f'the top-level object holds rows under several keys: "data" ({len(obj["data"])} items) is read, '
                    f'{listed} would not be. Put every row in the one list under "data" (or one list per file)',
                )
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


def _rows_like(value: Any) -> bool:
    """A non-empty list of JSON objects: what a list of rows looks like."""
    return isinstance(value, list) and bool(value) and any(isinstance(v, Mapping) for v in value)


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
        ds = _load_hub(datasets, source, config, None if every else split)
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


def _load_hub(datasets: Any, source: str, config: str | None, split: str | None) -> Any:
    """A hub dataset; a source that is neither a file nor a dataset the hub can give is one located error."""
    try:
        return datasets.load_dataset(source, config, split=split)
    except Exception as e:  # offline, no such dataset, no network: the library's own words vary by cause
        hint = _near(source)
        offline = " (offline)" if os.environ.get("HF_HUB_OFFLINE") == "1" else ""
        raise MissingFileError(
            source,
            None,
            None,
            f"no such file or folder, and not a dataset the hub can give{offline}: {type(e).__name__}.{hint}",
        ) from None


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
