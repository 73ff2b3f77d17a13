"""Checks of a config value against its annotation: ``bool``/``int``/``float``/``str``, ``Optional``, ``list``,
``Mapping``, ``Literal``, with :class:`Bound` (a numeric range) and :class:`Rule` (a check and what it allows) as
``Annotated`` metadata. Integers are never taken from strings, non-finite numbers are refused, and a problem
below the value (``[2].k``) is reported at that item's own line.

A leaf of the base: it needs nothing but the value, its annotation and :class:`~perbench.specs.located.Where`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from perbench.specs.located import LinedDict, LinedList, Where


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Bound:
    """A numeric range in a field's annotation, e.g. ``Annotated[int, Bound(1)]`` for "≥ 1"."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def text(self) -> str:
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"in {left}{_num(self.lo)}, {_num(self.hi)}{right}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '≥'} {_num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '≤'} {_num(self.hi)}"
        return ""

    def holds(self, v: float) -> bool:
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))


@dataclass(frozen=True)
class Rule:
    """A check in a field's annotation: ``check(value)`` returns the problem (None: fine); ``text`` says what is
    allowed."""

    check: Callable[[Any], str | None]
    text: str


@dataclass(frozen=True)
class _Problem:
    path: str  # below the checked value: "", "[2]", ".k"
    text: str


_NONE = type(None)


def show(value: Any) -> str:
    """A value as the user wrote it (YAML spelling for booleans and null)."""
    if isinstance(value, str):
        return f"the string {value[:60]!r}" + ("…" if len(value) > 60 else "")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    kind = "a list" if isinstance(value, list | tuple) else "a mapping" if isinstance(value, dict) else "a value"
    text = repr(value)
    return f"{kind} {text[:60]}" + ("…" if len(text) > 60 else "")


def _strip(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _is_seq(tp: Any) -> bool:
    import collections.abc as abc

    return typing.get_origin(tp) in (list, tuple, abc.Sequence) or tp in (list, tuple, abc.Sequence)


def _is_map(tp: Any) -> bool:
    import collections.abc as abc

    return typing.get_origin(tp) in (dict, abc.Mapping) or tp in (dict, abc.Mapping)


def describe(tp: Any) -> str:
    """What an annotation allows, in words."""
    if typing.get_origin(tp) is Annotated:
        base, *meta = typing.get_args(tp)
        rules = [m for m in meta if isinstance(m, Rule)]
        if rules:
            return rules[0].text
        bounds = " ".join(m.text() for m in meta if isinstance(m, Bound))
        return f"{describe(base)} {bounds}".strip()
    if _is_union(tp):
        return " or ".join(dict.fromkeys(describe(a) for a in typing.get_args(tp)))
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if _is_seq(tp):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"a list (each {describe(args[0])})" if args else "a list"
    if _is_map(tp):
        return "a mapping"
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string", _NONE: "null"}
    if tp in names:
        return names[tp]
    return f"a {getattr(tp, '__name__', str(tp))}"


def _quote_hint(value: Any, tp: Any) -> str:
    if not isinstance(value, str):
        return ""
    wanted = set(_leaf_types(tp))
    if wanted & {int, float} and re.fullmatch(r"[-+]?[0-9][0-9_:]*(\.[0-9_]*)?", value) and {"_", ":"} & set(value):
        return " (YAML 1.2 reads digits with _ or : as text: write the plain number, e.g. 1000 or 90)"
    if wanted & {int, float}:
        try:
            float(value)
            return " (write numbers without quotes)"
        except ValueError:
            return ""
    if bool in wanted and value.lower() in ("true", "false", "yes", "no", "on", "off"):
        return " (write true or false without quotes)"
    return ""


def _leaf_types(tp: Any) -> Iterator[Any]:
    tp = _strip(tp)
    if _is_union(tp):
        for a in typing.get_args(tp):
            yield from _leaf_types(a)
    else:
        yield tp


def _expected(tp: Any, value: Any) -> _Problem:
    return _Problem("", f"expected {describe(tp)}, got {show(value)}{_quote_hint(value, tp)}")


def _kind_fits(value: Any, tp: Any) -> bool:
    """Whether ``value`` has the basic kind of ``tp`` (ignoring ranges, rules and elements)."""
    tp = _strip(tp)
    if _is_union(tp):
        return any(_kind_fits(value, a) for a in typing.get_args(tp))
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if _is_seq(tp):
        return isinstance(value, list | tuple)
    return _problem(value, tp) is None


def _problem(value: Any, tp: Any) -> _Problem | None:
    """Why ``value`` does not fit annotation ``tp`` (None: it fits). Unknown annotations accept anything."""
    import collections.abc as abc

    if tp is None or tp is Any or isinstance(tp, str | typing.TypeVar | typing.ForwardRef):
        return None
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        inner = _problem(value, base)
        if inner is not None:
            return inner if inner.path else _expected(tp, value)
        for m in meta:
            if isinstance(m, Bound) and isinstance(value, int | float) and not m.holds(value):
                return _expected(tp, value)
            if isinstance(m, Rule) and (text := m.check(value)):
                return _Problem("", text)
        return None
    if _is_union(tp):
        arms = typing.get_args(tp)
        if value is None:
            return None if _NONE in arms else _expected(tp, value)
        found = [(a, _problem(value, a)) for a in arms if a is not _NONE]
        if any(p is None for _, p in found):
            return None
        fitting = [p for a, p in found if _kind_fits(value, a)]
        return fitting[0] if len(fitting) == 1 and fitting[0] is not None else _expected(tp, value)
    if origin is Literal:
        ok = any(value == a and type(value) is type(a) for a in typing.get_args(tp))
        return None if ok else _expected(tp, value)
    if tp is _NONE:
        return None if value is None else _expected(tp, value)
    if tp is bool:
        return None if isinstance(value, bool) else _expected(tp, value)
    if tp is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else _expected(tp, value)
    if tp is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return _expected(tp, value)
        return None if math.isfinite(value) else _Problem("", f"expected a finite number, got {value!r}")
    if tp is str:
        return None if isinstance(value, str) else _expected(tp, value)
    if _is_seq(tp):
        if not isinstance(value, list | tuple):
            return _expected(tp, value)
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item = typing.Union[tuple(args)] if args else None  # noqa: UP007 - built from a runtime tuple
        for i, v in enumerate(value):
            p = _problem(v, item)
            if p is not None:
                return _Problem(f"[{i}]{p.path}", p.text)
        return None
    if _is_map(tp):
        if not isinstance(value, dict):
            return _expected(tp, value)
        kv = typing.get_args(tp)
        for k, v in value.items():
            p = _problem(k, kv[0]) if kv else None
            if p is None and kv:
                p = _problem(v, kv[1])
            if p is not None:
                return _Problem(f".{k}{p.path}", p.text)
        return None
    if tp is abc.Callable or origin is abc.Callable:
        return None if callable(value) else _Problem("", f"expected a callable, got {show(value)}")
    if isinstance(tp, type):
        try:
            return None if isinstance(value, tp) else _expected(tp, value)
        except TypeError:  # a protocol that cannot be checked at runtime
            return None
    return None


_STEP = re.compile(r"\[(\d+)\]|\.([^.\[]+)")


def _line_below(value: Any, path: str, line: int | None) -> int | None:
    """The line of the item ``path`` (``[2].k``) below ``value``, where YAML recorded it."""
    for m in _STEP.finditer(path):
        index, key = m.group(1), m.group(2)
        if index is not None and isinstance(value, list) and int(index) < len(value):
            if isinstance(value, LinedList):
                line = value.item_lines[int(index)]
            value = value[int(index)]
        elif key is not None and isinstance(value, dict) and key in value:
            if isinstance(value, LinedDict):
                line = value.key_lines.get(key, line)
            value = value[key]
        else:
            break
    return line


def check_value(value: Any, tp: Any, where: Where) -> None:
    """Raise a ConfigError at ``where`` unless ``value`` fits annotation ``tp``."""
    try:
        p = _problem(value, tp)
    except RecursionError:
        raise where.error("nested too deeply") from None
    if p is not None:
        if not p.path:
            raise where.error(p.text)
        raise Where(where.source, _line_below(value, p.path, where.line), where.key + p.path).error(p.text)
