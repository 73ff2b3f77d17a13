"""The ``systems:`` block of a run config as plain data (:class:`SystemsSpec`): the run-level axes
(``train_fraction``, ``seed``, ``shots``), each method's parameter grid, and which methods expand. What the block
expands to (labels, each variant's parameters checked as a method's) is ``perbench.systems``'s: the run's preflight
checks it. ``fit_seeds: N`` fits each system of a stochastic method N times and pools the fits into one system."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perbench.specs.located import Where

AXES = ("train_fraction", "seed", "shots")
_KEYS = (*AXES, "params", "methods", "fit_seeds")
#: the most fits pooled into one system
MAX_FIT_SEEDS = 100


@dataclass(frozen=True)
class SystemsSpec:
    """The parsed ``systems:`` block (run-level axes, per-method parameter grids, which methods expand)."""

    train_fraction: tuple[float, ...] = ()
    seed: tuple[int, ...] = ()
    shots: tuple[int, ...] = ()
    params: Mapping[str, Mapping[str, tuple[Any, ...]]] = field(default_factory=dict)
    methods: tuple[str, ...] | None = None
    fit_seeds: int = 1

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> SystemsSpec:
        """Check the block; every problem is a ConfigError naming ``where`` (file, line, key)."""
        if not isinstance(data, Mapping):
            raise where.error(f"expected a mapping ({', '.join(_KEYS)}), got {type(data).__name__}")
        for k in data:
            if k not in _KEYS:
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
        fit_seeds = data.get("fit_seeds", 1)
        if not is_int(fit_seeds) or not 1 <= fit_seeds <= MAX_FIT_SEEDS:
            raise where.at("fit_seeds", data).error(
                f"expected an integer in [1, {MAX_FIT_SEEDS}] (fits pooled into each stochastic system), got "
                f"{fit_seeds!r}"
            )
        return cls(
            tuple(float(f) for f in fractions),
            seeds,
            shots,
            params,
            None if methods is None else tuple(methods),
            fit_seeds,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: list(getattr(self, k)) for k in AXES if getattr(self, k)}
        if self.params:
            out["params"] = {m: {p: list(v) for p, v in g.items()} for m, g in self.params.items()}
        if self.methods is not None:
            out["methods"] = list(self.methods)
        if self.fit_seeds != 1:
            out["fit_seeds"] = self.fit_seeds
        return out
