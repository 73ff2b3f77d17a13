"""The record of one checkable aspect."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Transform = Callable[[str, random.Random], str]


@dataclass(frozen=True)
class Aspect:
    """A checkable style dimension with two mutually exclusive poles."""

    name: str
    poles: tuple[str, str]
    description: str
    thresholds: str
    check: Callable[[str], str | None]

    def opposite(self, pole: str) -> str:
        if pole not in self.poles:
            raise ValueError(f"unknown pole {pole!r} for aspect {self.name!r} (poles: {self.poles})")
        return self.poles[1] if pole == self.poles[0] else self.poles[0]
