"""The shape of the house, read from the source: every ``import`` in ``src/perbench`` (module level, inside
functions and under ``TYPE_CHECKING`` alike) is an arrow, and

- no arrows form a circle;
- every arrow runs down the pipeline of docs/architecture.md (a room imports only the rooms below it): there is
  no upward arrow (:data:`UPWARD_ALLOWED` is empty);
- the config is a leaf of the base: the ``perbench.config`` package imports nothing of perbench but ``errors``,
  ``io``, ``registry``, its section specs (``perbench.specs``, which themselves import only ``errors`` and ``io``)
  and its own modules;
- no module is over :data:`MAX_LINES` lines, except those in :data:`OVERSIZED` (a list that only shrinks: a listed
  module that is back under the limit fails the test until it is taken off).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "perbench"
MAX_LINES = 450

#: the pipeline, lowest first: a module may import its own room and the rooms before it in this list
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        (
            "errors",
            "io",
            "registry",
            "specs",
            "config",
            "device",
            "progress",
            "sealed",
            "sqlite_file",
            "cache",
            "memo",
            "calls",
            "stats",
        ),
    ),
    ("data", ("data",)),
    ("models", ("models",)),
    ("rewards", ("rewards", "systems")),
    ("decoding", ("decoding",)),
    ("training", ("training",)),
    ("metrics", ("metrics",)),
    ("builders", ("builders",)),
    ("runner", ("runner",)),
    ("report", ("report",)),
    ("export", ("export",)),
    ("api", ("api",)),
    ("cli", ("cli", "__main__")),
)
#: what the config and its section specs may import (modules of perbench, by their first name below it; each
#: package its own modules)
LEAVES = {"config": {"errors", "io", "registry", "specs", "config"}, "specs": {"errors", "io", "specs"}}

#: upward arrows allowed, (importer, imported) -> why: none (a new one must argue its case here)
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

#: modules over MAX_LINES today; each leaves this list when it is split
OVERSIZED: set[str] = set()


@dataclass(frozen=True)
class Arrow:
    source: str  # importing module
    target: str  # imported module
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def module_names(root: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: dict[str, Path]) -> str:
    """The module ``name`` is, or the package that holds it (``from perbench.x import thing``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def arrows(modules: dict[str, Path] | None = None) -> Iterator[Arrow]:
    """Every import of a perbench module by a perbench module, wherever it is written."""
    modules = modules or module_names()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in dict.fromkeys(_known(t, modules) for t in targets if t.split(".")[0] == "perbench"):
                if t and t != name:
                    yield Arrow(name, t, node.lineno)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> int:
    r = room(module)
    if r == "__init__":
        return 0
    for i, (_, rooms) in enumerate(LAYERS):
        if r in rooms:
            return i
    raise AssertionError(f"{module}: its room {r!r} is in no layer of LAYERS; place it in the pipeline")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


# ------------------------------------------------------------------------------------------------ the tests
def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "perbench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from perbench.sub import b\n"
        "def f():\n    import perbench.sub.c\n"
    )
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\nfrom .c import g\n")
    (pkg / "sub" / "c.py").write_text("def g(): pass\n")
    found = {(a.source, a.target) for a in arrows(module_names(pkg))}
    assert found == {
        ("perbench.a", "perbench.sub.b"),
        ("perbench.a", "perbench.sub.c"),
        ("perbench.sub", "perbench.sub.b"),
        ("perbench.sub.b", "perbench.a"),
        ("perbench.sub.b", "perbench.sub.c"),
    }
    edges: dict[str, set[str]] = {}
    for s, t in found:
        edges.setdefault(s, set()).add(t)
    assert cycles(edges) == [["perbench.a", "perbench.sub.b"]]


def test_no_import_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for a in arrows():
        edges.setdefault(a.source, set()).add(a.target)
    circles = cycles(edges)
    assert circles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_every_arrow_runs_down_the_pipeline() -> None:
    upward = []
    used = set()
    for a in arrows():
        if layer_of(a.target) > layer_of(a.source):
            if (a.source, a.target) in UPWARD_ALLOWED:
                used.add((a.source, a.target))
            else:
                upward.append(str(a))
    assert upward == [], "imports of a room above: " + "; ".join(sorted(upward))
    assert set(UPWARD_ALLOWED) <= used, f"no longer upward, take off UPWARD_ALLOWED: {set(UPWARD_ALLOWED) - used}"


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_the_config_is_a_leaf(leaf: str) -> None:
    bad = [
        str(a)
        for a in arrows()
        if (a.source == f"perbench.{leaf}" or a.source.startswith(f"perbench.{leaf}."))
        and room(a.target) not in LEAVES[leaf]
    ]
    assert bad == [], f"{leaf} imports beyond {sorted(LEAVES[leaf])}: " + "; ".join(bad)


def test_no_module_over_the_limit() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    over = sorted(f"{name} ({n} lines)" for name, n in sizes.items() if n > MAX_LINES and name not in OVERSIZED)
    assert over == [], f"modules over {MAX_LINES} lines: {over}; split them"
    shrunk = sorted(name for name in OVERSIZED if sizes.get(name, 0) <= MAX_LINES)
    assert shrunk == [], f"back under {MAX_LINES} lines (or gone): take {shrunk} off OVERSIZED"


def test_the_models_rule_covers_every_key_that_names_a_model() -> None:
    """The config's ``MODEL`` annotation only says what the key holds; which names load is the models room's rule
    (run in the preflight), so every annotated key must be one it checks."""
    import typing

    from perbench.config import MODEL, RunConfig
    from perbench.models.checks import MODEL_KEYS

    def mentions(tp: object) -> bool:
        return tp is MODEL or any(mentions(a) for a in typing.get_args(tp)) or MODEL in getattr(tp, "__metadata__", ())

    hints = typing.get_type_hints(RunConfig, include_extras=True)
    assert {k for k, tp in hints.items() if mentions(tp)} == set(MODEL_KEYS)
