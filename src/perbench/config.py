"""One run config, three front doors: YAML (``perbench run cfg.yaml``), CLI flags, Python (``RunConfig(...)``).

Every front door is checked before anything loads, and every problem is a :class:`~perbench.errors.ConfigError`
naming the file, line (for YAML) and key, what is allowed, and a "Did you mean" where a name is misspelt:

- unknown keys; each field's type and range, read from its annotation (``bool``/``int``/``float``/``str``,
  ``Optional``, ``list``, ``Literal``, with :class:`Bound` and :class:`Rule` metadata): integers are never taken
  from strings, non-finite numbers are refused;
- component parameters (benchmark, methods, decoders) against the registered class's or loader's signature
  (names, required ones, value types), decoders' parameter ranges, and each method's and decoder's own
  constructor checks; ``trust_remote_code`` only with the explicit permission (``--trust-remote-code``);
- model names (a bundled alias, ``tiny-random[:SEED]``, an existing folder or ``.gguf`` file, or a hub id
  ``org/name``), ``device``, ``dtype``, ``run_name`` (one plain path component), ``guide_with`` (methods of this
  config), ``verdict_metric`` (a configured decoder);
- YAML: syntax errors with their line, duplicate keys, a directory, a missing or non-regular file as config, an
  alias expansion too large to be a config. An empty file means the embedded default run. Numbers follow YAML 1.2
  (``0100`` is 100, ``0o17`` octal, ``1:30`` text, ``1e-3`` a number); PyYAML's YAML 1.1 rules would read
  ``0100`` as 64 and ``1:30`` as 90.

Every value that shapes a result goes into the config hash that names the run directory, so the same config
resumes the same run.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from perbench.errors import ConfigError


class MissingConfigError(ConfigError, FileNotFoundError):
    """A config file that does not exist (also a FileNotFoundError, for callers that catch that)."""


# ---------------------------------------------------------------------------------------------------- locations
class LinedDict(dict[Any, Any]):
    """A YAML mapping that remembers the (1-based) line of each of its keys."""

    line: int = 0
    key_lines: dict[Any, int]


class LinedList(list[Any]):
    """A YAML sequence that remembers the (1-based) line of each item."""

    line: int = 0
    item_lines: list[int]


@dataclass(frozen=True)
class Where:
    """Where a config value comes from: a file or front door, the line when known, and the key path."""

    source: str
    line: int | None = None
    key: str = ""

    def __str__(self) -> str:
        head = f"{self.source}:{self.line}" if self.line else self.source
        return f"{head}: {self.key}" if self.key else head

    def at(self, key: str | int, container: Any = None) -> Where:
        """The location of ``container[key]`` (its line when the container came from YAML)."""
        path = f"{self.key}[{key}]" if isinstance(key, int) else f"{self.key}.{key}" if self.key else key
        line = self.line
        if isinstance(container, LinedDict):
            line = container.key_lines.get(key, line)
        elif isinstance(container, LinedList) and isinstance(key, int) and 0 <= key < len(container.item_lines):
            line = container.item_lines[key]
        return Where(self.source, line, path)

    def error(self, problem: str) -> ConfigError:
        return ConfigError(f"{self}: {problem}")


# ------------------------------------------------------------------------------------------------------- YAML
#: nodes a config may expand to through aliases (a "billion laughs" file expands to 10⁹)
MAX_NODES = 100_000


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that records each key's and item's line, refuses duplicate keys, reads integers and
    floats by YAML 1.2's rules, and refuses a document whose aliases expand it beyond :data:`MAX_NODES` nodes."""

    source = "config"

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, self.source)
        return node


def _expanded_size(node: yaml.Node, memo: dict[int, int], source: str) -> int:
    """Nodes in ``node`` with every alias expanded (memoised per node, so shared subtrees cost once to count)."""
    known = memo.get(id(node))
    if known is not None:
        if known < 0:
            raise ConfigError(f"{source}:{node.start_mark.line + 1}: an alias refers to itself (a recursive value)")
        return known
    memo[id(node)] = -1
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo, source) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, source) + _expanded_size(v, memo, source) for k, v in node.value)
    if size > MAX_NODES:
        raise ConfigError(
            f"{source}:{node.start_mark.line + 1}: its aliases expand to over {MAX_NODES} values; a run config "
            "is small: write the values out"
        )
    memo[id(node)] = size
    return size


def _construct_map(loader: ConfigLoader, node: yaml.MappingNode) -> Iterator[LinedDict]:
    data = LinedDict()
    yield data
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping reports it with its line
            continue
        if first is not None:
            raise ConfigError(
                f"{loader.source}:{line}: duplicate key {key!r} (first on line {first}); give each key once"
            )
        seen[key] = line
    data.update(loader.construct_mapping(node))
    data.line = node.start_mark.line + 1
    data.key_lines = seen


def _construct_seq(loader: ConfigLoader, node: yaml.SequenceNode) -> Iterator[LinedList]:
    data = LinedList()
    yield data
    data.extend(loader.construct_sequence(node))
    data.line = node.start_mark.line + 1
    data.item_lines = [n.start_mark.line + 1 for n in node.value]


def _construct_int(loader: ConfigLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (leading zeros are decimal), ``0o`` octal or ``0x`` hexadecimal."""
    text = str(loader.construct_scalar(node))
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    base = {"0o": 8, "0x": 16}.get(digits[:2], 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
ConfigLoader.yaml_implicit_resolvers = {  # YAML 1.1's int and float rules out, YAML 1.2's (core schema) in
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
ConfigLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
ConfigLoader.add_constructor(_INT, _construct_int)  # type: ignore[arg-type]
ConfigLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)  # type: ignore[arg-type]
ConfigLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)  # type: ignore[arg-type]


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text with :class:`ConfigLoader`; every problem is a ConfigError naming ``source`` and the line."""
    loader: ConfigLoader | None = None
    try:
        loader = ConfigLoader(text)
        loader.source = source
        return loader.get_single_data()
    except ConfigError:
        raise
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        char = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
        raise ConfigError(f"{source}:{line}: character {char} is not allowed in YAML text") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f"{source}:{mark.line + 1}" if mark is not None else source
        col = f" (column {mark.column + 1})" if mark is not None else ""
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise ConfigError(f"{at}: YAML syntax error: {what}{col}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a run config") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. a timestamp-shaped value that is no date
        raise ConfigError(f"{source}: cannot read a value: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | Path) -> Any:
    """The parsed content of a YAML file; a missing file, a directory or unreadable text is a ConfigError."""
    from perbench.io import special_file

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory; a run config is a YAML file")
    what = special_file(p)
    if what is not None:
        raise ConfigError(f"{p}: is {what}, not a file; a run config is a YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingConfigError(f"{p}: no such config file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    return load_yaml(text, str(p))


# ------------------------------------------------------------------------------------------------ value checks
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


def _show(value: Any) -> str:
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
    return _Problem("", f"expected {describe(tp)}, got {_show(value)}{_quote_hint(value, tp)}")


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
        return None if callable(value) else _Problem("", f"expected a callable, got {_show(value)}")
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


# -------------------------------------------------------------------------------------------- field rules
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")
DEVICES = "auto, cpu, cuda, cuda:N, mps"
DTYPES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = ("fp32", "bf16", "fp16")


def _device_problem(v: str) -> str | None:
    return None if _DEVICE.fullmatch(v) else f"{v!r} is not a device; allowed: {DEVICES}"


def _dtype_problem(v: str) -> str | None:
    ok = v in DTYPES or v in _DTYPE_ALIASES
    return None if ok else f"{v!r} is not a dtype; allowed: {', '.join(DTYPES)}"


def _model_problem(v: str) -> str | None:
    from perbench.models.loader import model_name_problem

    return model_name_problem(v)


#: the longest file name most file systems allow, in bytes
NAME_MAX = 255


def _run_name_problem(v: str) -> str | None:
    plain = v not in ("", ".", "..") and "/" not in v and "\\" not in v and "\0" not in v and ":" not in v[:2]
    size = len(v.encode("utf-8", "surrogatepass"))
    if plain and size > NAME_MAX:
        return f"a folder name of {size} bytes; file systems allow at most {NAME_MAX}: choose a shorter run_name"
    if plain:
        return None
    return (
        f"{v!r} is not one plain folder name: run_name names a folder inside out_dir, so it cannot be empty, "
        "'.' or '..', absolute, or contain / or \\ (set out_dir to write elsewhere)"
    )


def _nonempty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


POSITIVE = Bound(1)
NON_NEGATIVE = Bound(0)
SEED = Bound(0, 2**32 - 1)
#: the most bootstrap replicates a CI draws: the replicate matrix is allocated at once (replicates × columns)
MAX_BOOTSTRAP = 100_000
BOOTSTRAP = Bound(0, MAX_BOOTSTRAP)


def margin_problem(v: float) -> str | None:
    """An equivalence margin is in the metric's own units (0.05 = 5 points of a proportion), in [0, 1): every
    quality perbench ranks on lies in [0, 1], so a margin of 1 or more would call any two methods equivalent."""
    if math.isfinite(v) and 0 <= v < 1:
        return None
    hint = f" (did you mean {v / 100:g}, i.e. {v:g} points?)" if math.isfinite(v) and 1 <= v < 100 else ""
    return f"expected a margin in the metric's own units in [0, 1) (0.05 = 5 points of a proportion), got {v!r}{hint}"


MARGIN = Rule(margin_problem, "a margin in the metric's own units, in [0, 1) (0.05 = 5 points)")
MODEL = Rule(_model_problem, "a model: a bundled alias, tiny-random[:SEED], a local folder or .gguf file, or org/name")
DEVICE = Rule(_device_problem, f"a device ({DEVICES})")
DTYPE = Rule(_dtype_problem, f"a dtype ({', '.join(DTYPES)})")
RUN_NAME = Rule(_run_name_problem, "one plain folder name")
NON_EMPTY = Rule(_nonempty, "a non-empty string")

#: ranges of decoder parameters (by parameter name; ``_DECODER_OVERRIDES`` for decoders that differ)
_DECODER_BOUNDS: dict[str, Bound] = {
    "k": Bound(1),
    "n": Bound(1),
    "alpha": Bound(0),
    "temperature": Bound(0, lo_open=True),
    "top_p": Bound(0, 1, lo_open=True),
    "sample_batch": Bound(1),
    "pool": Bound(1),
    "max_item_chars": Bound(1),
}
_DECODER_OVERRIDES: dict[str, dict[str, Bound]] = {"icl": {"k": Bound(0)}, "icl_rag": {"k": Bound(0)}}


def _method_bound(name: str) -> Bound | None:
    """The range of a method parameter by its name: a penalty weight (``l2``, ``adapt_l2``, ``anchor_ridge``, …)
    is ≥ 0 (a negative one rewards large weights, and the fit diverges or returns nonsense)."""
    return NON_NEGATIVE if name.endswith(("l2", "ridge")) else None


# ------------------------------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Component:
    """A registry name plus keyword parameters, e.g. ``args`` with ``{"k": 10, "w": 1.0}``."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any, where: str | Where) -> Component:
        """A name, ``{name: NAME, <params>}`` or ``{NAME: {<params>}}`` (no registry check)."""
        return _parse_component(value, where if isinstance(where, Where) else Where(where))[0]

    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    def to_dict(self) -> dict[str, Any]:
        """``{name: NAME, <params>}``, or ``{NAME: {<params>}}`` when a parameter is itself called ``name`` (the
        ``file`` loader's): both parse back to the same component."""
        if "name" in self.params:
            return {self.name: dict(self.params)}
        return {"name": self.name, **self.params}


def _plain(value: Any) -> Any:
    """``value`` as plain YAML/JSON data: components as mappings, and the located mappings and sequences that a
    config file was parsed into as plain dicts and lists."""
    if isinstance(value, Component):
        return _plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parse_component(value: Any, where: Where) -> tuple[Component, Any, Where]:
    """-> (component, the mapping its parameters came from, the location of those parameters)."""
    form = "expected a name or {name: NAME, <params>}"
    if isinstance(value, Component):
        name, params, container, at = value.name, value.params, value.params, where
    elif isinstance(value, str):
        name, params, container, at = value, {}, None, where
    elif isinstance(value, dict) and "name" in value:
        name = value["name"]
        params = {k: v for k, v in value.items() if k != "name"}
        container, at = value, where
    elif isinstance(value, dict) and len(value) == 1:
        ((name, params),) = value.items()
        at = where.at(str(name), value)
        params = {} if params is None else params
        container = params
        if not isinstance(params, dict):
            raise at.error(f"the parameters of {name!r} must be a mapping, got {_show(params)}")
    else:
        raise where.error(f"{form}, got {_show(value)}")
    if not isinstance(name, str) or not name.strip():
        raise where.error(f"{form}; the name must be a non-empty string, got {_show(name)}")
    bad = [k for k in params if not isinstance(k, str)]
    if bad:
        raise at.error(f"parameter names are strings, got {_show(bad[0])}")
    return Component(name, dict(params)), container, at


def _component(value: Any, where: Where, kind: str) -> Component:
    """Parse and check one component of ``kind`` (benchmark, method, decoder) against its registry entry."""
    from perbench import registry

    reg = {"benchmark": registry.benchmarks, "method": registry.reward_models, "decoder": registry.decoders}[kind]
    comp, container, at = _parse_component(value, where)
    try:
        reg.entry(comp.name)
        target = reg.get(comp.name)
        accepted = registry.accepted_params(target)
    except registry.UnknownNameError as e:
        raise where.error(str(e)) from None
    except ImportError as e:
        raise where.error(
            f"{kind} {comp.name!r} cannot be imported ({e}); is its optional dependency installed?"
        ) from e
    if accepted is not None:
        _check_params(comp, accepted, at, container, kind)
    if kind in ("decoder", "method"):
        bounds = {**_DECODER_BOUNDS, **_DECODER_OVERRIDES.get(comp.name, {})} if kind == "decoder" else {}
        for k, v in comp.params.items():
            b = bounds.get(k) if kind == "decoder" else _method_bound(k)
            if b is not None and isinstance(v, int | float) and not isinstance(v, bool) and not b.holds(v):
                kind_text = "an integer" if isinstance(v, int) else "a number"
                raise at.at(k, container).error(f"expected {kind_text} {b.text()}, got {v!r}")
    if comp.params.get("trust_remote_code") is True:
        from perbench.rewards.hub_rm import remote_code_allowed, remote_code_refusal

        if not remote_code_allowed():
            model = comp.params.get("model", comp.name)
            raise at.at("trust_remote_code", container).error(remote_code_refusal(str(model)))
    if kind != "benchmark":  # the constructor's own checks; a benchmark loader would load the data
        try:
            target(**comp.params)
        except ConfigError as e:
            raise at.error(str(e)) from None
        except (ValueError, TypeError) as e:
            text = str(e)
            raise at.error(text if text.startswith(comp.name) else f"{comp.name}: {text}") from None
    return comp


def _check_params(comp: Component, accepted: Mapping[str, Any], at: Where, container: Any, kind: str) -> None:
    names = list(accepted)
    listed = ", ".join(names) or "none"
    for k in comp.params:
        if k not in accepted:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise at.at(k, container).error(f"{kind} {comp.name!r}: unknown parameter {k!r}.{hint} Accepted: {listed}")
    missing = [p.name for p in accepted.values() if p.required and p.name not in comp.params]
    if missing:
        first = missing[0]
        spec = f"{{name: {comp.name}, {first}: ...}}"
        key, example = {"benchmark": ("benchmark", spec), "method": ("methods", f"[{spec}]")}.get(
            kind, ("decoders", f"[{spec}]")
        )
        raise at.error(
            f"{kind} {comp.name!r} needs {', '.join(missing)}: give it in the config ({key}: {example}) or with "
            f"--set '{key}={example}'. Accepted: {listed}"
        )
    for k, v in comp.params.items():
        check_value(v, accepted[k].annotation, at.at(k, container))


# --------------------------------------------------------------------------------------------------- the config
@dataclass
class RunConfig:
    benchmark: Component = field(default_factory=lambda: Component("rubrics"))
    policy: Annotated[str, MODEL] = "smollm2"
    rm_backbone: Annotated[str, MODEL] = "smollm2"
    methods: list[Component] = field(default_factory=lambda: [Component("global_bt")])
    #: reference lines scored like methods, never recommended: names, or ``{name: length, unit: chars}``
    baselines: list[Component] = field(default_factory=lambda: [Component("length"), Component("random")])
    decoders: list[Component] = field(
        default_factory=lambda: [Component("zero_shot"), Component("args", {"k": 10, "w": 1.0})]
    )
    #: which systems steer the decoders that generate per (user, prompt), e.g. ARGS and GenARM (default: every
    #: system the decoder can use); each entry is a system's label (``name``, ``name(param=value,…)``) or a
    #: baseline. Best-of-N re-ranks its shared pool with every system whatever this says (scoring is cheap).
    guide_with: list[str] | None = None
    #: few-shot adaptation of unseen users: main number of shots and the curve
    shots: Annotated[int, NON_NEGATIVE] = 10
    shot_curve: list[Annotated[int, POSITIVE]] = field(default_factory=lambda: [1, 2, 5, 10, 20])
    #: the weight w on the reward in policy accuracy (log π(y|x) + w·r(x, y)) for a method that no weighted decoder
    #: guides; a method that steers ARGS or GenARM is measured at that decoder's weight
    pa_weight: float = 1.0
    #: policy accuracy also under the top-k RGD-induced policy (top-k softmax of log π + w·r, the deployed ARGS's
    #: k), a labelled variant; costs one tree forward of k candidates per response token and method
    pa_rgd: bool = False
    #: k of that top-k for methods that do not guide an ``args`` decoder (default: the first ARGS's k, else 10)
    pa_rgd_k: Annotated[int, POSITIVE] | None = None
    tie_policy: Literal["strict", "half"] = "strict"
    #: bootstrap resamples of every CI (0: no CIs)
    bootstrap: Annotated[int, BOOTSTRAP] = 1000
    max_new_tokens: Annotated[int, POSITIVE] = 96
    max_test_prompts: Annotated[int, POSITIVE] | None = 16
    #: for user-conditioned decoding: how many users per prompt get their own generation (None: all)
    max_gen_users: Annotated[int, POSITIVE] | None = 8
    #: generation batch size, or "auto" (a device default: 8 on CPU, 32 on CUDA); either halves on out-of-memory
    batch_size: Annotated[int, POSITIVE] | Literal["auto"] = 8
    feature_batch_size: Annotated[int, POSITIVE] = 16
    max_length: Annotated[int, POSITIVE] = 1024
    #: judge LM for rubric aspects that no checker covers (``User.answer_key``); None: no judge
    judge: Annotated[str, MODEL] | None = None
    #: policies to decode with (decoders × reward models × policies); None: just ``policy``. Upstream policy
    #: accuracy always uses ``policy``.
    policies: list[Annotated[str, MODEL]] | None = None
    seed: Annotated[int, SEED] = 0
    #: run the whole config once per seed and report mean ± sd across seeds (None: just ``seed``)
    seeds: list[Annotated[int, SEED]] | None = None
    #: the downstream metric the verdict ranks methods by (``DECODER:QUALITY``); None: the first present of
    #: args/best_of_n rubric satisfaction, judge score, ROUGE-L
    verdict_metric: str | None = None
    #: the user-agnostic RM that per-user gains and "minority users" are measured against (a method or baseline
    #: label of this config; the default may be absent, then the report says there is no reference)
    reference_method: str = "global_bt"
    #: more upstream benchmarks whose test pairs every system is also scored on, as predictors of the downstream
    #: ranking (cells ``rm_acc_on_NAME``, NAME = the loaded benchmark's name): each entry is a benchmark like
    #: ``benchmark`` (e.g. ``{name: file, source: general.jsonl, default_user: anyone}`` for a non-personalized
    #: file). Their users are scored as users no method has seen (each method's unknown-user fallback)
    upstream_benchmarks: list[Component] | None = None
    #: practical-equivalence margin ε of the verdict, in the metric's units (0.05 = 5 points of a proportion):
    #: methods whose 90% CI of the difference to the leader lies inside ±ε are "practically equivalent"; None:
    #: ``equivalence_fraction`` of the metric's headroom where it has one, else 0.05; 0: never claim equivalence
    equivalence_margin: Annotated[float, MARGIN] | None = None
    #: on a metric with a null and a ceiling (a pooled decoder's random pick and oracle), the equivalence margin as a
    #: fraction of that headroom (oracle − random pick) when ``equivalence_margin`` is unset; None: the default 0.1
    equivalence_fraction: Annotated[float, Bound(0, 1, lo_open=True)] | None = None
    #: the upstream metric the verdict's upstream sentence reads, fixed before the run (None: ``rm_acc_all``, RM
    #: accuracy on every test pair); the best of all predictors is reported beside it as a maximum, adjusted
    verdict_predictor: str | None = None
    #: BERTScore-F1 of generations against the user's reference (bundled all-MiniLM-L6-v2)
    bertscore: bool = True
    #: the training-time downstream phase: GRPO (+ LoRA) of the policy against each RM, evaluated like a decoder
    #: (``perbench.training.RLSpec`` fields plus ``methods: [...]``, default every method); None: off
    rl: dict[str, Any] | None = None
    #: reward-model populations: each method crossed with train fractions, fit seeds, shots and its own
    #: parameter grids (``perbench.systems``); None: one system per method
    systems: dict[str, Any] | None = None
    #: adaptive rounds for the decoders that generate per (user, prompt) (ARGS, GenARM, ICL): ``budget``
    #: (generations per decoder, or minutes as "4min"), ``round`` (cells per round), ``metric`` (a quality;
    #: default the verdict metric's); None: every eligible cell at once
    adaptive: dict[str, Any] | None = None
    #: test prompts that get a shared Best-of-N pool (and zero-shot output) for every user with ground truth
    #: on them (None: every test prompt); ``max_test_prompts`` / ``max_gen_users`` limit per-user decoders only
    max_pool_prompts: Annotated[int, POSITIVE] | None = None
    #: how the run's units are computed (``perbench list executors``)
    executor: str = "local"
    #: what one unit of each kind asks of a machine (Ray schedules by it; ``local`` ignores it):
    #: ``{KIND: {num_cpus: N, num_gpus: N, memory_gb: N}}`` for KIND in features, fit, score, decode, rl; unset
    #: kinds and fields keep their defaults (1 CPU, 2 GB, 4 GB for rl, and 1 GPU when the device is CUDA)
    resources: dict[str, dict[str, float]] | None = None
    #: auto | cpu | cuda | cuda:N | mps
    device: Annotated[str, DEVICE] = "auto"
    #: auto | float32 | bfloat16 | float16
    dtype: Annotated[str, DTYPE] = "auto"
    out_dir: Annotated[str, NON_EMPTY] = "runs"
    #: the run's folder inside ``out_dir`` (one plain name; default: ``BENCHMARK-CONFIGHASH``)
    run_name: Annotated[str, RUN_NAME] | None = None

    def __post_init__(self) -> None:
        """The Python front door is checked like the others (``RunConfig(max_new_tokens=-1)`` is refused)."""
        values = _validate({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, Where("RunConfig"))
        for k, v in values.items():
            setattr(self, k, v)
        #: where each key was given (``run.yaml:3: device``, ``command line: seed``), for checks made at run time
        self._origins: dict[str, str] = {}

    def where(self, key: str) -> str:
        """Where ``key`` was given, as errors name it: ``FILE:LINE: key``, ``command line: key`` or ``key``."""
        return self._origins.get(key, key)

    # ------------------------------------------------------------------ front doors
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str | Where = "config") -> RunConfig:
        """A config from a mapping of keys (``where`` names its source in error messages)."""
        src = where if isinstance(where, Where) else Where(where)
        if not isinstance(data, Mapping):
            raise src.error(f"a run config is a mapping of keys (benchmark:, methods:, …), got {_show(data)}")
        cfg = cls(**_validate(data, src))
        cfg._origins = {k: str(src.at(k, data)) for k in data if isinstance(k, str)}
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """A config from a YAML file; an empty file means the embedded default (:meth:`default`)."""
        data = read_yaml(path)
        if data is None or data == {}:
            return cls.default()
        src = Where(str(path))
        if not isinstance(data, dict):
            raise Where(str(path), 1).error(
                f"a run config is a mapping of keys (benchmark:, methods:, …), got {_show(data)}"
            )
        return cls.from_dict(data, src)

    @classmethod
    def default(cls) -> RunConfig:
        """The embedded default run (``perbench run`` with no arguments)."""
        return cls.from_yaml(str(resources.files("perbench") / "configs" / "default.yaml"))

    def override(self, where: str = "overrides", /, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (a None value sets the key to null, e.g. ``seeds=None``; a key that
        cannot be null is refused); ``where`` (positional) names them in error messages."""
        data = self.to_dict()
        given = dict(changes)
        data.update(given)
        cfg = RunConfig.from_dict(data, where=where)
        cfg._origins = {**self._origins, **{k: str(Where(where).at(k)) for k in given}}
        return cfg

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = _plain(v)
        # a baseline without parameters is written as its name, as configs always wrote it (and as hashes read it)
        out["baselines"] = [b.name if not b.params else _plain(b) for b in self.baselines]
        return out

    def result_hash(self) -> str:
        """Hash of everything that shapes results (not where they are written)."""
        d = self.to_dict()
        for k in ("out_dir", "run_name", "batch_size", "feature_batch_size", "executor", "resources"):
            d.pop(k, None)
        for k in (
            "judge",
            "pa_rgd_k",
            "policies",
            "seeds",
            "verdict_metric",
            "equivalence_margin",
            "equivalence_fraction",
            "verdict_predictor",
            "rl",
            "upstream_benchmarks",
            "systems",
            "adaptive",
            "max_pool_prompts",
        ):  # optional extras: absent = the hash configs had before they existed
            if d.get(k) is None:
                d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def run_dir(self) -> Path:
        """``out_dir`` / the run's folder; ``~`` in ``out_dir`` is the home folder, as a shell reads it."""
        return Path(self.out_dir).expanduser() / (self.run_name or f"{self.benchmark.name}-{self.result_hash()}")


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig, include_extras=True)


def _defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(RunConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _validate(data: Mapping[Any, Any], src: Where) -> dict[str, Any]:
    """Check ``data`` (some or all of RunConfig's keys) -> every field's value, components parsed."""
    hints = _hints()
    names = list(hints)
    for key in data:
        if not isinstance(key, str):
            raise src.error(f"config keys are names, got {_show(key)}")
        if key not in hints:
            close = difflib.get_close_matches(key, sorted(names), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise src.at(key, data).error(f"unknown key.{hint}")
    values = {**_defaults(), **data}
    try:
        for key in data:
            where, value = src.at(key, data), data[key]
            if key == "benchmark":
                values[key] = _component(value, where, "benchmark")
            elif key == "resources":
                values[key] = _resources(value, where)
            elif key in ("methods", "decoders", "baselines", "upstream_benchmarks"):
                if value is None and key == "upstream_benchmarks":
                    continue
                if not isinstance(value, list | tuple):
                    raise where.error(f"expected a list of {key}, got {_show(value)}")
                kind = {"decoders": "decoder", "upstream_benchmarks": "benchmark"}.get(key, "method")
                values[key] = [_component(v, where.at(i, value), kind) for i, v in enumerate(value)]
            else:
                check_value(value, hints[key], where)
                values[key] = list(value) if isinstance(value, tuple) else value
    except RecursionError:
        raise src.error("nested too deeply to be a run config") from None
    _cross_checks(values, data, src)
    return values


#: the kinds of unit whose needs ``resources:`` sets (``runner/plan.py`` maps each unit to one), and their fields
RESOURCE_KINDS = ("features", "fit", "score", "decode", "rl")
RESOURCE_FIELDS: dict[str, Bound] = {
    "num_cpus": NON_NEGATIVE,
    "num_gpus": NON_NEGATIVE,
    "memory_gb": Bound(0, lo_open=True),
}


def _resources(value: Any, where: Where) -> dict[str, dict[str, float]] | None:
    """``resources: {KIND: {FIELD: number}}``, each kind and field checked where it is written."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise where.error(f"expected a mapping of unit kinds ({', '.join(RESOURCE_KINDS)}), got {_show(value)}")
    out: dict[str, dict[str, float]] = {}
    for kind, needs in value.items():
        at = where.at(str(kind), value)
        if kind not in RESOURCE_KINDS:
            close = difflib.get_close_matches(str(kind), RESOURCE_KINDS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise at.error(f"unknown kind of unit {kind!r}.{hint} Allowed: {', '.join(RESOURCE_KINDS)}")
        if not isinstance(needs, dict):
            raise at.error(f"expected a mapping of {', '.join(RESOURCE_FIELDS)}, got {_show(needs)}")
        out[kind] = {}
        for name, n in needs.items():
            field_at = at.at(str(name), needs)
            if name not in RESOURCE_FIELDS:
                close = difflib.get_close_matches(str(name), list(RESOURCE_FIELDS), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise field_at.error(f"unknown field {name!r}.{hint} Allowed: {', '.join(RESOURCE_FIELDS)}")
            check_value(n, Annotated[float, RESOURCE_FIELDS[name]], field_at)
            out[kind][name] = float(n)
    return out


def _cross_checks(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> None:
    """Checks that involve several fields or a registry."""
    from perbench import registry

    def at(key: str) -> Where:
        return src.at(key, data)

    try:
        registry.executors.entry(v["executor"])
    except registry.UnknownNameError as e:
        raise at("executor").error(str(e)) from None
    labels = [m.label() for m in v["methods"] + v["baselines"]]
    seen: set[str] = set()
    for i, label in enumerate(labels):
        if label in seen:
            where = at("methods") if i < len(v["methods"]) else at("baselines")
            raise where.error(f"{label!r} is listed twice (as a method or baseline); list each once")
        seen.add(label)
    labels = _system_labels(v, data, src)
    seen = set(labels)
    for i, g in enumerate(v["guide_with"] or []):
        if g not in seen:
            close = difflib.get_close_matches(g, labels, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise (
                at("guide_with")
                .at(i, data.get("guide_with"))
                .error(
                    f"{g!r} is not one of this config's methods or baselines, so it would guide nothing.{hint} "
                    f"Allowed: {', '.join(labels) or 'none'}"
                )
            )
    ref = v["reference_method"]
    if ref not in labels and ref != _defaults()["reference_method"]:
        close = difflib.get_close_matches(ref, labels, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise at("reference_method").error(
            f"{ref!r} is not one of this config's methods or baselines, so per-user gains and minority users would "
            f"be measured against nothing.{hint} Allowed: {', '.join(labels) or 'none'}"
        )
    if v["rl"] is not None:
        from perbench.training.spec import RLPhase

        RLPhase.from_dict(v["rl"], where=str(at("rl"))).check_methods(labels, where=str(at("rl")))
    if v["adaptive"] is not None:
        from perbench.runner.adaptive import AdaptiveSpec

        AdaptiveSpec.from_dict(v["adaptive"], at("adaptive"))
    metric = v["verdict_metric"]
    if metric is not None:
        decoder, sep, quality = metric.partition(":")
        if not sep or not decoder or not quality:
            raise at("verdict_metric").error(
                f"expected DECODER:QUALITY (e.g. args:rubric_satisfaction), got {metric!r}"
            )
    seeds = v["seeds"]
    if seeds is not None:
        if not seeds:
            raise at("seeds").error("expected at least one seed (or null for just `seed`)")
        dup = sorted({s for s in seeds if seeds.count(s) > 1})
        if dup:
            raise at("seeds").error(f"seed {dup[0]} is listed twice")
        name = v["run_name"]
        longest = None if name is None else f"{name}-seed{max(seeds)}"
        if longest is not None and len(longest.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise at("run_name").error(
                f"with seeds each seed's run folder is RUN_NAME-seedN: {len(longest.encode('utf-8', 'surrogatepass'))} "
                f"bytes for seed {max(seeds)}; file systems allow at most {NAME_MAX}: choose a shorter run_name"
            )


def _system_labels(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> list[str]:
    """The labels of every system the config expands to (``perbench.systems``), each variant's parameters checked
    like a method's."""
    from perbench.systems import SystemsSpec, expand

    raw = v["systems"]
    spec = None
    if raw is not None:
        where = src.at("systems", data)
        spec = SystemsSpec.from_dict(raw, where)
        names = {m.name for m in v["methods"]} | {m.label() for m in v["methods"]}
        named: list[tuple[str, int | str, str, str]] = [
            ("methods", i, m, "") for i, m in enumerate(spec.methods or ())
        ] + [("params", m, m, ", so its grid would expand nothing") for m in spec.params]
        for key, at, m, why in named:
            if m not in names:
                close = difflib.get_close_matches(m, sorted(names), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise (
                    where.at(key, raw)
                    .at(at, raw.get(key))
                    .error(f"{m!r} is not one of this config's methods{why}.{hint}")
                )
    try:
        systems = expand(v["methods"], v["baselines"], spec, seed=v["seed"], shots=v["shots"])
    except ValueError as e:
        raise src.at("systems" if raw is not None else "methods", data).error(str(e)) from None
    if spec is not None and spec.params:
        where = src.at("systems", data).at("params", raw)
        checked: set[str] = set()
        for sd in systems:
            if sd.baseline or sd.method.label() in checked:
                continue
            checked.add(sd.method.label())
            _component(sd.method, where.at(sd.method.name, raw.get("params")), "method")
    return [sd.label for sd in systems]


def parse_set(values: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are parsed as YAML (numbers, lists, mappings)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = load_yaml(raw, f"--set {key.strip()}")
    return out
