"""A reward model inside a run: built lazily, fit once (state cached by content), adapted per shot count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perbench.config import Component
from perbench.data.records import Benchmark, PreferencePair
from perbench.rewards.base import FeatureRM, RewardModel, RMContext
from perbench.runner.units import Units, unit_key


class MethodHandle:
    def __init__(
        self, spec: Component, bench: Benchmark, ctx: RMContext, units: Units, *, baseline: bool = False
    ) -> None:
        from perbench import registry

        self.spec = spec
        self.label = spec.label()
        self.baseline = baseline
        self.bench = bench
        self.ctx = ctx
        self.units = units
        self.cls: type[RewardModel] = registry.reward_models.get(spec.name)
        self._rm: RewardModel | None = None
        self._adapted: tuple[int, bool] | None = None
        probe = self.cls(**spec.params)
        #: whether the method's unseen-user scores depend on the shots (an instance may switch its class's
        #: ``uses_shots`` off, e.g. P-DPO without adaptation steps falls back to the generic user)
        self.uses_shots = bool(self.cls.uses_shots and getattr(probe, "adapts_from_shots", True))
        # Every method that learns may default to the RM backbone (feature heads, LoRA methods): key on it, and on
        # the length its inputs are cut to.
        f = ctx.features
        backbone = None if f is None else (f.fingerprint, getattr(f, "max_length", None))
        self.fit_key = unit_key("fit", probe.config_key(), bench.fingerprint(), backbone, ctx.seed)

    @property
    def user_agnostic(self) -> bool:
        return self.cls.user_agnostic

    @property
    def is_feature_rm(self) -> bool:
        return issubclass(self.cls, FeatureRM)

    def fitted(self) -> RewardModel:
        """The fitted model: trained once, its state a content-keyed unit (in the run's store and the shared unit
        cache, so a run that differs only in what does not enter the fit reuses it) and reloaded after."""
        if self._rm is None:
            rm = self.cls(**self.spec.params)
            if isinstance(rm, FeatureRM) and self.ctx.features is not None:
                rm.bind(self.ctx.features)
            trained = False

            def fit() -> dict[str, np.ndarray]:
                nonlocal trained
                rm.fit(self.bench.train_pairs(), self.ctx)
                trained = True
                return rm.state()

            state = self.units.arrays("fit", self.fit_key, fit)
            if not trained:
                rm.load_state(state)
            self._rm = rm
        return self._rm

    @property
    def selects_shots(self) -> bool:
        """The method can pick its own shots from a user's train pairs (active selection, e.g. PReF)."""
        return callable(getattr(self.cls, "select_shots", None))

    def adapted(self, shots: int, *, active: bool = False) -> RewardModel:
        """The fitted model with every unseen user adapted from their first ``shots`` pairs (or, ``active``, from
        the ``shots`` pairs the method selects among all their train pairs). A user without train pairs is not
        adapted: the runner reports them as not applicable for methods that adapt from shots."""
        rm = self.fitted()
        state = (shots, active)
        if self._adapted != state and not self.user_agnostic and self.uses_shots:
            for user in self.bench.unseen_users:
                few = self.bench.fewshot(user, shots)
                if few and active:
                    few = rm.select_shots(user, self.bench.fewshot(user), shots)  # type: ignore[attr-defined]
                if few:
                    rm.adapt(user, few)
            self._adapted = state
        return rm

    def key(self, shots: int, *extra: Any) -> str:
        adapts = not self.user_agnostic and self.uses_shots
        return unit_key(self.fit_key, shots if adapts else None, *extra)


def pair_ids(pairs: Sequence[PreferencePair]) -> list[str]:
    return [p.content_key() for p in pairs]


def params_of(rm: Any) -> dict[str, Any]:
    return dict(getattr(rm, "params", {}))
