"""Baselines reported next to every RM: length-only and seeded random. Both ignore the user, so on any
benchmark whose pairs are mirrored across users they score exactly 0.5 — a check of the accounting."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair, prompt_key
from perbench.rewards.base import RewardModel, RMContext, ScoreItem


class LengthRM(RewardModel):
    """Longer is better (word count). ``sign=-1`` gives shorter-is-better."""

    needs_train_pairs: ClassVar[bool] = False

    name: ClassVar[str] = "length"
    user_agnostic: ClassVar[bool] = True

    def __init__(self, sign: int = 1, **params: Any) -> None:
        super().__init__(sign=sign, **params)
        self.sign = sign

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([self.sign * len(it.response.split()) for it in items], dtype=np.float64)


class RandomRM(RewardModel):
    """A seeded uniform score per (prompt, response): the same text gets the same score for every user."""

    needs_train_pairs: ClassVar[bool] = False

    name: ClassVar[str] = "random"
    user_agnostic: ClassVar[bool] = True

    def __init__(self, seed: int = 0, **params: Any) -> None:
        super().__init__(seed=seed, **params)
        self.seed = seed

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        out = []
        for it in items:
            h = hashlib.sha256(f"{self.seed}|{prompt_key(it.prompt)}|{it.response}".encode()).digest()
            out.append(int.from_bytes(h[:8], "little") / 2**64)
        return np.asarray(out, dtype=np.float64)
