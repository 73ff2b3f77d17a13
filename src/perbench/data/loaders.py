"""Load any preference file into a :class:`~perbench.data.records.Benchmark`, with loud, located errors.

Formats: JSONL, JSON (a list of objects or ``{"data": [...]}``), CSV/TSV, Parquet, a Hugging Face dataset
folder written by ``save_to_disk``, or (with network) a hub id ``org/name``. A :class:`FieldMap` says which
source column feeds each canonical field, e.g. ``"user_id=ground_truth_persona,prompt=question"``.

Row numbers: JSONL and CSV report the 1-based line in the file; JSON arrays, Parquet and HF datasets report
the 1-based position of the record. Every problem is either a :class:`DataError` naming file, row and field,
or (``on_error="skip"``) a counted entry in ``Benchmark.skipped`` -- never a silent drop.

Policies (recorded in ``Benchmark.meta``):

* split: taken from a ``split`` field when one is mapped (or a ``split`` column exists); otherwise every pair
  is ``test``. We never invent a train/test split behind the user's back.
* seen/unseen users: a ``seen`` field if mapped, else the ``unseen_users`` list, else a seeded
  ``unseen_fraction`` of the sorted user ids; default: every user is seen.
* duplicates: pairs are deduplicated on (user, prompt, chosen, rejected) and counted, so metrics are
  pair-weighted; ``dedup=False`` keeps duplicates (row-weighted; degenerate pairs are still dropped).
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
    prompt_key,
)
from perbench.data.user_context import describe_user_context, withhold_answer_key
from perbench.errors import PerbenchError

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


class ErrorSink:
    """Raise (``on_error="raise"``) or count (``"skip"``) row errors; remembers the first one."""

    def __init__(self, on_error: OnError, skipped: SkipReport) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.skipped = skipped
        self.first: str | None = None
        self.count = 0

    def __call__(self, err: DataError) -> None:
        if self.on_error == "raise":
            raise err
        self.count += 1
        if self.first is None:
            self.first = str(err)
        self.skipped.add(f"invalid:{err.field or 'row'}", str(err))


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
        elif isinstance(cur, list | tuple) and re.fullmatch(r"-?\d+", part):
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
        return value if value.strip() else None

    def ident(self, path: str) -> str:
        value = self.require(path)
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.error(path, f"expected a string or integer id, got {type_name(value)}")
        text = str(value).strip()
        if not text:
            raise self.error(path, "empty id")
        return text

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


def check_text(row: Row, path: str, value: Any, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise row.error(path, f"expected a string, got {type_name(value)}")
    if not allow_empty and not value.strip():
        raise row.error(path, "empty text")
    return value


def parse_messages(row: Row, path: str, value: Any) -> tuple[Message, ...]:
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
        content = check_text(row, f"{path}.{i}.content", m["content"])
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

    Returns (text, the conversation before the response) -- the latter is empty for plain strings.
    """
    if isinstance(value, str):
        return check_text(row, path, value), ()
    if isinstance(value, list | tuple):
        msgs = parse_messages(row, path, value)
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
        stripped = value.strip()
        if stripped.startswith("["):  # a JSON list stored in a CSV cell
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError:
                value = [value]
        else:
            return [ProfileItem("0", value)] if stripped else []
    if not isinstance(value, list | tuple):
        raise row.error(path, f"expected a string or a list, got {type_name(value)}")
    items = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            if item.strip():
                items.append(ProfileItem(str(i), item))
            continue
        if not isinstance(item, Mapping):
            raise row.error(f"{path}.{i}", f"expected a string or an object, got {type_name(item)}")
        key = "text" if "text" in item else "content" if "content" in item else None
        if key is None:
            raise row.error(f"{path}.{i}.text", "missing")
        text = check_text(row, f"{path}.{i}.{key}", item[key])
        item_id = item.get("id", i)
        meta = {k: v for k, v in item.items() if k not in (key, "id")}
        items.append(ProfileItem(str(item_id), text, meta))
    return items


# -------------------------------------------------------------------------------------------- reading
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
    raise FileNotFoundError(f"{source}: no such file or folder (and not a hub id 'org/name')")


def read_rows(
    source: Source,
    *,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Yield ``(file label, 1-based line/row number, row)`` from any supported source.

    ``split``/``config`` select a split of a saved ``DatasetDict`` or a hub dataset; ``split="*"`` reads
    every split in name order (the label then names the split).
    """
    fmt = fmt or detect_format(source)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "rows":
        if isinstance(source, str | Path):
            raise ValueError("fmt='rows' needs a sequence of dicts")
        for i, row in enumerate(source, 1):
            yield "<rows>", i, _as_dict("<rows>", i, row)
        return
    assert isinstance(source, str | Path)
    label = str(source)
    if fmt == "jsonl":
        yield from _read_jsonl_text(label, Path(source).read_text(encoding="utf-8"))
    elif fmt == "json":
        yield from _read_json(label, Path(source).read_text(encoding="utf-8"))
    elif fmt in ("csv", "tsv"):
        yield from _read_csv(label, Path(source), "\t" if fmt == "tsv" else ",")
    elif fmt == "parquet":
        yield from _read_parquet(label, Path(source))
    else:
        yield from _read_hf(label, str(source), fmt, split, config)


def _as_dict(label: str, line: int, row: Any) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise DataError(label, line, None, f"expected a JSON object, got {type_name(row)}")
    return dict(row)


def _read_jsonl_text(label: str, text: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(label, i, None, f"invalid JSON ({e.msg})") from None
        yield label, i, _as_dict(label, i, obj)


def _read_json(label: str, text: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # several objects, one per line: JSON Lines under a .json name
            yield from _read_jsonl_text(label, text)
            return
        raise DataError(label, e.lineno, None, f"invalid JSON ({e.msg})") from None
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


def _read_csv(label: str, path: Path, delimiter: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        start = 2  # line 1 is the header
        for row in reader:
            if None in row:
                extra = len(row) - 1 + len(row[None])
                raise DataError(label, start, None, f"more cells than header columns ({extra})")
            yield label, start, dict(row)
            start = reader.line_num + 1


def _read_parquet(label: str, path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    i = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            i += 1
            yield label, i, row


def _read_hf(
    label: str,
    source: str,
    fmt: str,
    split: str | None,
    config: str | None,
) -> Iterator[tuple[str, int, dict[str, Any]]]:
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
            raise TypeError(f"mapping must be a string, a dict or a FieldMap, got {type_name(spec)}")
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


def _parse_row(row: Row, fmap: FieldMap, stem: str) -> _Parsed:
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

    user = row.ident(fmap.source("user_id"))
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
    return _Parsed(pair, seen, profile, answer_key, reference, row.where, split_value is not None)


def assign_unseen(user_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded ``round(fraction * n)`` of the sorted user ids; stable across runs and machines."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"unseen_fraction must be in [0, 1), got {fraction}")
    ids = sorted(user_ids)
    n = round(fraction * len(ids))
    random.Random(seed).shuffle(ids)
    return set(ids[:n])


def drop_degenerate(pairs: list[PreferencePair], skipped: SkipReport) -> list[PreferencePair]:
    """Drop empty / chosen == rejected pairs (counted) but keep duplicates: row weighting."""
    out = []
    for p in pairs:
        if not p.chosen.strip() or not p.rejected.strip():
            skipped.add("empty_response", p.pair_id)
        elif p.chosen == p.rejected:
            skipped.add("chosen_equals_rejected", p.pair_id)
        else:
            out.append(p)
    return out


RowHook = Callable[[Row, PreferencePair], list[PreferencePair]]
"""Extra (history) pairs derived from a row and its parsed pair; they must not repeat a row's own pair."""


@dataclass
class LoadStats:
    rows_read: int = 0
    rows_with_errors: int = 0
    first_error: str | None = None
    fmt: str = ""


def load_with_stats(
    source: Source,
    *,
    mapping: str | Mapping[str, str] | FieldMap | None,
    name: str | None,
    unseen_users: Sequence[str] | None,
    unseen_fraction: float,
    seed: int,
    fmt: str | None,
    split: str | None,
    config: str | None,
    on_error: OnError,
    dedup: bool,
    row_hook: RowHook | None = None,
) -> tuple[Benchmark, LoadStats]:
    fmap = FieldMap.parse(mapping)
    label = source_label(source)
    fmt = fmt or detect_format(source)
    stats = LoadStats(fmt=fmt)
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    stem = Path(label).name if isinstance(source, str | Path) else "row"
    parsed: list[_Parsed] = []
    extras: list[PreferencePair] = []
    user_seen: dict[str, tuple[bool, str]] = {}
    for file_label, line, data in read_rows(source, fmt=fmt, split=split, config=config):
        stats.rows_read += 1
        row = Row(file_label, line, data)
        try:
            item = _parse_row(row, fmap, stem)
            more = row_hook(row, item.pair) if row_hook is not None else []
            if item.seen is not None:
                first = user_seen.setdefault(item.pair.user_id, (item.seen, row.where))
                if first[0] != item.seen:
                    raise row.error(
                        fmap.source("seen"), f"user {item.pair.user_id!r} was seen={first[0]} at {first[1]}"
                    )
        except DataError as e:
            stats.rows_with_errors += 1
            sink(e)
            continue
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
    row_keys = {item.pair.content_key() for item in parsed}
    kept_extras = []
    for p in extras:
        if p.content_key() in row_keys:
            skipped.add("history_equals_row_pair", p.pair_id)
        else:
            kept_extras.append(p)
    pairs = dedup_or_degenerate([item.pair for item in parsed] + kept_extras, skipped, dedup)
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
    with_pairs = {p.user_id for p in pairs}
    for uid in sorted(set(profiles) - with_pairs):
        skipped.add("user_without_pairs", uid)
    user_ids = sorted(with_pairs)

    if user_seen:
        if unseen_users is not None or unseen_fraction:
            raise ValueError("give either a 'seen' field or unseen_users / unseen_fraction, not both")
        unseen = {u for u, (s, _) in user_seen.items() if not s}
        seen_policy = f"from field '{fmap.source('seen')}' (users without a value are seen)"
    elif unseen_users is not None:
        unknown = sorted(set(unseen_users) - set(profiles))
        if unknown:
            raise DataError(label, None, "unseen_users", f"unknown user(s) {unknown[:5]} (not in the file)")
        unseen = set(unseen_users)
        seen_policy = "unseen_users list"
    else:
        unseen = assign_unseen(user_ids, unseen_fraction, seed)
        seen_policy = f"seeded fraction {unseen_fraction} (seed {seed})" if unseen_fraction else "all users seen"
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

    references: list[Reference] = []
    ref_keys: set[str] = set()
    for item in parsed:
        if item.reference is None or item.pair.user_id not in users:
            continue
        key = content_hash(item.pair.user_id, prompt_key(item.pair.prompt))
        if key not in ref_keys:
            ref_keys.add(key)
            references.append(Reference(item.pair.user_id, item.pair.prompt, item.reference, item.pair.split))

    meta = {
        "source": label,
        "format": fmt,
        "mapping": fmap.to_dict(),
        "split_policy": _split_policy(fmap, parsed),
        "seen_policy": seen_policy,
        "rows_read": stats.rows_read,
        "rows_with_errors": stats.rows_with_errors,
        "dedup": dedup,
        "user_context": describe_user_context(
            "profile" if any(u.profile for u in users.values()) else "pairs_only",
            users,
            included=(["profile"] if any(u.profile for u in users.values()) else []) + ["own train pairs"],
            withheld=[f"answer_key (from '{fmap.source('answer_key')}')"] if keys else [],
            note="user ids are labels for reports and never reach a prompt",
        ),
    }
    bench = Benchmark(
        name=name or (Path(label).stem if isinstance(source, str | Path) else "rows"),
        pairs=pairs,
        users=users,
        references=references,
        skipped=skipped,
        meta=meta,
        weighting="pair" if dedup else "row",
    )
    return bench, stats


def _split_policy(fmap: FieldMap, parsed: list[_Parsed]) -> str:
    if fmap.disabled("split"):
        return "all test (split field switched off)"
    if fmap.explicit("split"):
        return f"from field '{fmap.source('split')}'"
    if any(item.split_given for item in parsed):
        return "from column 'split' (rows without one are test)"
    return "all test (no split field mapped)"


def dedup_or_degenerate(
    pairs: list[PreferencePair],
    skipped: SkipReport,
    dedup: bool,
) -> list[PreferencePair]:
    """Pair weighting (dedup, the default) or row weighting (keep duplicates); degenerate pairs always go."""
    return dedup_pairs(pairs, skipped) if dedup else drop_degenerate(pairs, skipped)


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
) -> Benchmark:
    """Load any supported file/dataset with a field mapping into a :class:`Benchmark`.

    Without a mapped ``split`` field every pair is ``test`` (the file is treated as evaluation data).
    ``on_error="skip"`` counts bad rows in ``Benchmark.skipped`` instead of raising :class:`DataError`.
    """
    bench, _ = load_with_stats(
        source,
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
    )
    return bench


# ------------------------------------------------------------------------------------------ validation
def validate_file(
    source: Source,
    mapping: str | Mapping[str, str] | FieldMap | None = None,
    *,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    unseen_users: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    dedup: bool = True,
) -> dict[str, Any]:
    """Read everything, collect every problem, and report (for ``perbench validate FILE``)."""
    report: dict[str, Any] = {
        "source": source_label(source),
        "format": fmt,
        "mapping": None,
        "rows_read": 0,
        "pairs_kept": 0,
        "users": 0,
        "users_seen": 0,
        "users_unseen": 0,
        "splits": {s: 0 for s in SPLITS},
        "skipped": {},
        "rows_with_errors": 0,
        "first_error": None,
        "fatal": None,
        "ok": False,
        "weighting": "pair" if dedup else "row",
        "split_policy": None,
        "seen_policy": None,
    }
    try:
        report["mapping"] = FieldMap.parse(mapping).to_dict()
        bench, stats = load_with_stats(
            source,
            mapping=mapping,
            name=None,
            unseen_users=unseen_users,
            unseen_fraction=unseen_fraction,
            seed=seed,
            fmt=fmt,
            split=split,
            config=config,
            on_error="skip",
            dedup=dedup,
        )
    except (DataError, FileNotFoundError, ValueError) as e:
        report["fatal"] = report["first_error"] = str(e)
        return report
    report.update(
        format=stats.fmt,
        rows_read=stats.rows_read,
        pairs_kept=len(bench.pairs),
        users=len(bench.users),
        users_seen=len(bench.seen_users),
        users_unseen=len(bench.unseen_users),
        splits={s: sum(p.split == s for p in bench.pairs) for s in SPLITS},
        skipped={
            r: {"count": n, "examples": bench.skipped.examples.get(r, [])}
            for r, n in sorted(bench.skipped.counts.items())
        },
        rows_with_errors=stats.rows_with_errors,
        first_error=stats.first_error,
        split_policy=bench.meta["split_policy"],
        seen_policy=bench.meta["seen_policy"],
        references=len(bench.references),
    )
    report["ok"] = stats.rows_with_errors == 0 and len(bench.pairs) > 0
    return report


def format_validation(report: Mapping[str, Any]) -> str:
    """A short human-readable rendering of :func:`validate_file`'s report."""
    lines = [f"{report['source']} ({report.get('format') or '?'})"]
    if report.get("fatal"):
        lines.append(f"  error        : {report['fatal']}")
        lines.append("  status       : FAILED (could not read the file)")
        return "\n".join(lines)
    splits = report.get("splits", {})
    lines += [
        f"  rows read    : {report['rows_read']}",
        f"  pairs kept   : {report['pairs_kept']} ({report['weighting']}-weighted)",
        f"  users        : {report['users']} ({report['users_seen']} seen, {report['users_unseen']} unseen;"
        f" {report.get('seen_policy')})",
        f"  splits       : train {splits.get('train', 0)}, test {splits.get('test', 0)} ({report.get('split_policy')})",
    ]
    skipped = report.get("skipped") or {}
    total = sum(v["count"] for v in skipped.values())
    lines.append(f"  skipped      : {total}")
    for reason, info in skipped.items():
        example = f"  e.g. {info['examples'][0]}" if info.get("examples") else ""
        lines.append(f"    {reason}: {info['count']}{example}")
    if report.get("first_error"):
        lines.append(f"  first error  : {report['first_error']}")
    if report.get("ok"):
        status = "OK"
    elif report.get("rows_with_errors"):
        status = f"FAILED ({report['rows_with_errors']} row(s) with errors)"
    else:
        status = "FAILED (no usable pairs)"
    lines.append(f"  status       : {status}")
    return "\n".join(lines)
