"""A method run in an isolated child process by tests/test_isolation.py (a module that imports no benchmark)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair
from perbench.rewards.base import RewardModel, RMContext, ScoreItem


class ChildProbe(RewardModel):
    """Run in the isolated child: fits a per-user bias from the pairs, and reports what it can reach."""

    name: ClassVar[str] = "child_probe"

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.bias: dict[str, float] = {}

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        import gc

        from perbench.data.records import User as Record

        self.records = sum(isinstance(o, Record) for o in gc.get_objects())
        try:
            import perbench.data.rubrics.users  # noqa: F401
        except ImportError as e:
            self.blocked = str(e)
        self.users = sorted(ctx.extra["users"])
        for p in pairs:
            self.bias[p.user_id] = self.bias.get(p.user_id, 0.0) + 1.0

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([self.bias.get(it.user_id, 0.0) + len(it.response) for it in items])

    def state(self) -> dict[str, np.ndarray]:
        return {"records": np.array([self.records]), "users": np.array(self.users),
                "blocked": np.array([getattr(self, "blocked", "")])}  # fmt: skip
