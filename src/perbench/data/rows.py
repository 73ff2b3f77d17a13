"""Located row access for every loader: :class:`DataError`, :class:`ErrorSink`, :class:`Row` and the checks and
parsers of single values (texts, ids, chat messages, prompts, responses, splits, booleans, profiles).

Every problem is a :class:`DataError` naming file, row and field; :class:`ErrorSink` raises it or (with
``on_error="skip"``) counts it in a :class:`~perbench.data.records.SkipReport`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perbench.data.records import Message, ProfileItem, Prompt, SkipReport, Split, canonical_text, is_blank
from perbench.errors import ConfigError, PerbenchError

OnError = Literal["raise", "skip"]

#: the fix a row-level error names when ``on_error="raise"``
SKIP_HINT = "or set on_error: skip to skip and count such rows"

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
    """Bad input, located: ``data.jsonl:7: field 'chosen': expected a string, got int``.

    ``rows`` is how many source rows the located record holds (more than one for a JSON array on one line) and
    ``held`` the row objects it holds, so a skip of it counts what it loses."""

    rows: int = 1
    held: tuple[Mapping[str, Any], ...] = ()
    #: the fix to name when bad rows abort the load, when it is not "skip such rows" (a problem of the whole file)
    fix: str | None = None

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
    if err.message.endswith(SKIP_HINT) or (err.fix is not None and err.message.endswith(err.fix)):
        return err
    out = type(err)(err.path, err.line, err.field, f"{err.message}; {err.fix or SKIP_HINT}")
    out.fix = err.fix
    return out


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


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


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
        return None if is_blank(value) else value

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
    if not allow_empty and is_blank(value):
        raise row.error(path, "empty text")
    return value


def check_ident(row: Row, path: str, value: Any) -> str:
    """An id: a string or an integer in Unicode NFC, zero-width characters and surrounding whitespace stripped (so
    ``1``, ``"1"`` and ``" 1"`` agree, and so do ids that look identical but differ in Unicode form)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise row.error(path, f"expected a string or integer id, got {type_name(value)}")
    text = canonical_text(check_unicode(row, path, str(value))).strip()
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
            return [] if is_blank(stripped) else [ProfileItem("0", value)]
    if not isinstance(value, list | tuple):
        raise row.error(path, f"expected a string or a list, got {type_name(value)}")
    items = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            if not is_blank(check_unicode(row, f"{path}.{i}", item)):
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
