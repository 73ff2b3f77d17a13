"""Baselines reported next to every RM: length-only and seeded random. Both ignore the user, so on any
benchmark whose pairs are mirrored across users they score exactly 0.5 — a check of the accounting."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from perbench.data.records import PreferencePair, prompt_key
from perbench.rewards.base import RewardModel, RMContext, ScoreItem

LengthUnit = Literal["words", "chars"]


class LengthRM(RewardModel):
    """Longer is better. ``unit="words"`` (default) counts whitespace-separated words, so responses of the same
    word count tie even when their lengths differ; ``unit="chars"`` counts characters (far fewer ties).
    ``sign=-1`` gives shorter-is-better. In a config: ``methods: [{name: length, unit: chars}]``."""

    needs_train_pairs: ClassVar[bool] = False

    name: ClassVar[str] = "length"
    user_agnostic: ClassVar[bool] = True

    def __init__(self, sign: int = 1, unit: LengthUnit = "words", **params: Any) -> None:
        if unit not in ("words", "chars"):
            raise ValueError(f"length: unit must be 'words' or 'chars', got {unit!r}")
        # the default unit is left out of params, so cache keys of existing runs stay as they were
        super().__init__(sign=sign, **({} if unit == "words" else {"unit": unit}), **params)
        self.sign, self.unit = sign, unit

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def length(self, text: str) -> int:
        return len(text.split()) if self.unit == "words" else len(text)

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([self.sign * self.length(it.response) for it in items], dtype=np.float64)


class RandomRM(RewardModel):
    """A seeded uniform score per (prompt, response): the same text gets the same score for every user.

    ``seed=None`` (default) takes the run's seed (``RMContext.seed``, i.e. ``seed:`` / ``--seed``) at ``fit``;
    an explicit ``seed`` overrides it."""

    needs_train_pairs: ClassVar[bool] = False

    name: ClassVar[str] = "random"
    user_agnostic: ClassVar[bool] = True

    def __init__(self, seed: int | None = None, **params: Any) -> None:
        super().__init__(**({} if seed is None else {"seed": seed}), **params)
        self.seed = seed

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        if "seed" not in self.params:
            self.seed = ctx.seed

    def state(self) -> dict[str, np.ndarray]:
        return {} if self.seed is None else {"seed": np.asarray([self.seed], dtype=np.int64)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if "seed" not in self.params and "seed" in state:
            self.seed = int(state["seed"][0])

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        if self.seed is None:
            raise RuntimeError("random: no seed yet: pass seed= or call fit(pairs, ctx) to take the run's seed")
        out = []
        for it in items:
            h = hashlib.sha256(f"{self.seed}|{prompt_key(it.prompt)}|{it.response}".encode()).digest()
            out.append(int.from_bytes(h[:8], "little") / 2**64)
        return np.asarray(out, dtype=np.float64)
