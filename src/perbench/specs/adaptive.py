"""The ``adaptive:`` block of a run config as plain data (:class:`AdaptiveSpec`): a budget in generations or
minutes, the cells per round, and the quality the rounds rank by. Which qualities exist is the scoring room's
knowledge: ``perbench.runner.adaptive.check_adaptive`` checks the name in the run's preflight."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perbench.specs.located import Where

_MINUTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(min|mins|minute|minutes|m)\s*$")
_KEYS = ("budget", "round", "metric")


@dataclass(frozen=True)
class AdaptiveSpec:
    """The parsed ``adaptive:`` block."""

    generations: int | None  # a budget in generation units, or
    minutes: float | None  # a budget in minutes of generation
    round: int = 8  # cells added per round
    metric: str | None = None  # the quality the rounds rank by (default: the verdict metric's)

    @property
    def budget_text(self) -> str:
        return f"{self.generations} generations" if self.generations is not None else f"{self.minutes:g} min"

    @classmethod
    def from_dict(cls, data: Any, where: Where) -> AdaptiveSpec:
        if not isinstance(data, Mapping):
            raise where.error(f"expected a mapping (budget, round, metric), got {type(data).__name__}")
        for k in data:
            if k not in _KEYS:
                raise where.at(str(k), data).error(f"unknown key; allowed: {', '.join(_KEYS)}")
        if "budget" not in data:
            raise where.error('needs a budget: a number of generations (budget: 96) or minutes (budget: "4min")')
        budget = data["budget"]
        at = where.at("budget", data)
        generations = minutes = None
        if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1:
            generations = budget
        elif isinstance(budget, str) and (m := _MINUTES.match(budget)) and float(m.group(1)) > 0:
            minutes = float(m.group(1))
        else:
            raise at.error(f'expected a number of generations ≥ 1 or minutes such as "4min", got {budget!r}')
        rnd = data.get("round", 8)
        if not isinstance(rnd, int) or isinstance(rnd, bool) or rnd < 1:
            raise where.at("round", data).error(f"expected an integer ≥ 1 (cells per round), got {rnd!r}")
        metric = data.get("metric")  # which names are qualities: checked in the preflight
        return cls(generations, minutes, rnd, metric)
