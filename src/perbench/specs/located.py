"""Config text with its locations: YAML read by YAML 1.2's number rules into mappings and lists that remember the
line of every key and item, and :class:`Where`, the file, line and key path every config error names.

A leaf of the base (it imports nothing of perbench but ``errors`` and ``io``): the config and its section specs
stand on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
