"""Executors run independent units of a phase (one per reward model, say). ``local`` runs them in this
process, in order; a parallel executor is one more class with the same ``map`` and one registry line."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")


class LocalExecutor:
    name = "local"

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> list[R]:
        return [fn(item) for item in items]
