"""Reward-model populations: the ``systems:`` block expands each method into many deployable reward models.

A *system* is one deployable RM: a method with its parameters, fitted on a fraction of the seen users' train
pairs with a seed, and adapting unseen users from a number of shots. Without a ``systems:`` block every method
is one system (all train pairs, the run's ``seed`` and ``shots``). With one, each method of ``methods`` (or of
``systems.methods``) is crossed with

- the run-level axes ``train_fraction`` (in (0, 1]), ``seed`` (the fit seed) and ``shots``;
- its own parameter grid under ``params`` (e.g. ``lore: {K: [1, 2, 5]}``), checked like any method parameter.

```yaml
systems:
  train_fraction: [0.25, 0.5, 1.0]
  seed: [0, 1]
  params:
    lore: {K: [2, 5]}
```

Labels. A system is named by its method's label (``lore(K=2)``) plus every run-level axis whose value differs
from the run's own (``train_fraction`` 1.0, ``seed`` = ``seed``, ``shots`` = ``shots``), inside the same
parentheses: ``lore(K=2,train_fraction=0.5)``. So the system that is the plain method keeps the plain label
(``reference_method``, ``guide_with`` and earlier runs name it as before). A label never holds ``@`` or ``|``
(they name a policy and a group elsewhere). The *family* of a system is its label up to the first ``(``: the
method, whose variants are not independent draws (results.json records each system's family and axes).

A train fraction keeps, for each seen user, the first ⌈f·n⌉ of their n train pairs in an order fixed by the
system's seed (:func:`train_subset`): a 0.25 subset lies inside the 0.5 subset of the same seed.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perbench.config import Component, Where
    from perbench.data.records import PreferencePair

AXES = ("train_fraction", "seed", "shots")
_KEYS = (*AXES, "params", "methods")


@dataclass(frozen=True)
class SystemDef:
    """One deployable reward model of a run."""

    label: str
    method: Component  # the method with its parameters (grid values merged in)
    train_fraction: float
    seed: int
    shots: int
    baseline: bool = False

    @property
    def family(self) -> str:
        return family_of(self.label)

    def axes(self) -> dict[str, Any]:
        return {"train_fraction": self.train_fraction, "seed": self.seed, "shots": self.shots}

    def record(self) -> dict[str, Any]:
        """What results.json says about the system (``systems.members[label]``)."""
        return {
            "family": self.family,
            "method": self.method.name,
            "params": dict(self.method.params),
            **self.axes(),
            "baseline": self.baseline,
        }


def family_of(label: str) -> str:
    """A system's method family: its label up to the first ``(``."""
    return label.split("(", 1)[0]


@dataclass(frozen=True)
class SystemsSpec:
    """The parsed ``systems:`` block (run-level axes, per-method parameter grids, which methods expand)."""

    train_fraction: tuple[float, ...] = ()
    seed: tuple[int, ...] = ()
    shots: tuple[int, ...] = ()
    params: Mapping[str, Mapping[str, tuple[Any, ...]]] = field(default_factory=dict)
    methods: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> SystemsSpec:
        """Check the block; every problem is a ConfigError naming ``where`` (file, line, key)."""
        if not isinstance(data, Mapping):
            raise where.error(f"expected a mapping ({', '.join(_KEYS)}), got {type(data).__name__}")
        for k in data:
            if k not in _KEYS:
                import difflib

                close = difflib.get_close_matches(str(k), _KEYS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise where.at(str(k), data).error(f"unknown key.{hint} Allowed: {', '.join(_KEYS)}")

        def values(key: str, ok: Any, text: str) -> tuple[Any, ...]:
            raw = data.get(key)
            at = where.at(key, data)
            if raw is None:
                return ()
            if not isinstance(raw, list | tuple) or not raw:
                raise at.error(f"expected a non-empty list ({text}), got {raw!r}")
            for i, v in enumerate(raw):
                if not ok(v):
                    raise at.at(i, raw).error(f"expected {text}, got {v!r}")
            if len(set(raw)) != len(raw):
                raise at.error(f"a value is listed twice: {list(raw)}")
            return tuple(raw)

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        fractions = values(
            "train_fraction",
            lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1,
            "a number in (0, 1]",
        )
        seeds = values("seed", lambda v: is_int(v) and 0 <= v < 2**32, "an integer seed ≥ 0")
        shots = values("shots", lambda v: is_int(v) and v >= 0, "an integer ≥ 0")
        if len({float(f) for f in fractions}) != len(fractions):
            raise where.at("train_fraction", data).error(f"a value is listed twice: {list(fractions)}")
        params: dict[str, dict[str, tuple[Any, ...]]] = {}
        raw_params = data.get("params") or {}
        at_params = where.at("params", data)
        if not isinstance(raw_params, Mapping):
            raise at_params.error(f"expected a mapping METHOD: {{PARAM: [values]}}, got {raw_params!r}")
        for method, grid in raw_params.items():
            at_m = at_params.at(str(method), raw_params)
            if not isinstance(grid, Mapping) or not grid:
                raise at_m.error(f"expected a mapping PARAM: [values], got {grid!r}")
            params[str(method)] = {}
            for name, vals in grid.items():
                at_p = at_m.at(str(name), grid)
                if not isinstance(vals, list | tuple) or not vals:
                    raise at_p.error(f"expected a non-empty list of values, got {vals!r}")
                params[str(method)][str(name)] = tuple(vals)
        methods = data.get("methods")
        if methods is not None:
            methods = values("methods", lambda v: isinstance(v, str) and v.strip(), "a method's name or label")
        return cls(
            tuple(float(f) for f in fractions), seeds, shots, params, None if methods is None else tuple(methods)
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: list(getattr(self, k)) for k in AXES if getattr(self, k)}
        if self.params:
            out["params"] = {m: {p: list(v) for p, v in g.items()} for m, g in self.params.items()}
        if self.methods is not None:
            out["methods"] = list(self.methods)
        return out


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def system_label(method: Component, axes: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The method's label plus the run-level axes that differ from the run's own values."""
    extra = [f"{k}={_fmt(axes[k])}" for k in AXES if k in axes and axes[k] != defaults[k]]
    base = method.label()
    if not extra:
        return base
    if base.endswith(")"):
        return base[:-1] + "," + ",".join(extra) + ")"
    return f"{base}({','.join(extra)})"


def expand(
    methods: Sequence[Component],
    baselines: Iterable[Component | str],
    spec: SystemsSpec | None,
    *,
    seed: int,
    shots: int,
) -> list[SystemDef]:
    """Every system of a run, methods first (in config order, each method's grid in order), then baselines.
    Raises ValueError naming the first duplicate label or a label holding ``@`` or ``|``."""
    from perbench.config import Component

    defaults: dict[str, Any] = {"train_fraction": 1.0, "seed": seed, "shots": shots}
    out: list[SystemDef] = []
    for m in methods:
        expands = spec is not None and (spec.methods is None or m.name in spec.methods or m.label() in spec.methods)
        if not expands:
            out.append(SystemDef(m.label(), m, 1.0, seed, shots))
            continue
        assert spec is not None
        grid = {**spec.params.get(m.name, {}), **spec.params.get(m.label(), {})}
        names = list(grid)
        for combo in itertools.product(*(grid[n] for n in names)):
            variant = Component(m.name, {**m.params, **dict(zip(names, combo, strict=True))})
            for f, s, k in itertools.product(
                spec.train_fraction or (1.0,), spec.seed or (seed,), spec.shots or (shots,)
            ):
                axes = {"train_fraction": float(f), "seed": s, "shots": k}
                out.append(SystemDef(system_label(variant, axes, defaults), variant, float(f), s, k))
    for b in baselines:
        comp = b if isinstance(b, Component) else Component(b)
        out.append(SystemDef(comp.label(), comp, 1.0, seed, shots, baseline=True))
    seen: set[str] = set()
    for sd in out:
        if sd.label in seen:
            raise ValueError(f"two systems are both labelled {sd.label!r}; list each method and grid value once")
        if "@" in sd.label or "|" in sd.label:
            raise ValueError(f"system label {sd.label!r} holds '@' or '|', which name a policy and a group")
        seen.add(sd.label)
    return out


def train_subset(pairs: Sequence[PreferencePair], fraction: float, seed: int) -> list[PreferencePair]:
    """For each user, the first ⌈fraction·n⌉ of their n pairs in an order fixed by ``seed`` (pairs keep their
    original order in the result). Nested: for one seed, a smaller fraction's subset lies inside a larger one's."""
    if fraction >= 1.0:
        return list(pairs)
    by_user: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_user.setdefault(p.user_id, []).append(i)
    keep: set[int] = set()
    for idx in by_user.values():
        ranked = sorted(idx, key=lambda i: hashlib.sha256(f"{seed}|{pairs[i].content_key()}".encode()).hexdigest())
        keep.update(ranked[: math.ceil(fraction * len(idx))])
    return [p for i, p in enumerate(pairs) if i in keep]
