"""Methods that fail in the isolated child, for tests/test_bad_inputs_isolated.py (a module that imports no
benchmark, so the child can import it)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from perbench.rewards.base import RewardModel, RMContext, ScoreItem


class Length(RewardModel):
    """A working method: the response's length in characters."""

    name: ClassVar[str] = "length_child"

    def fit(self, pairs: Sequence[Any], ctx: RMContext) -> None:
        return None

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([float(len(it.response)) for it in items])


class OneShort(Length):
    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return super().score(items)[:-1]


class Scalar(Length):
    def score(self, items: Sequence[ScoreItem]) -> Any:
        return 1.0


class ExitsInFit(Length):
    def fit(self, pairs: Sequence[Any], ctx: RMContext) -> None:
        os._exit(3)


class ImportsRunnerInFit(Length):
    def fit(self, pairs: Sequence[Any], ctx: RMContext) -> None:
        import perbench.runner.run  # noqa: F401


class SomeNaN(Length):
    """NaN for about a third of the responses (chosen by the text, so whatever order the items come in)."""

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        import zlib

        out = super().score(items)
        out[[zlib.crc32(str(it.response).encode()) % 3 == 0 for it in items]] = np.nan
        return out


class NotAModel:
    pass
