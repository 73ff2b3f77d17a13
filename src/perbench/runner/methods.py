"""A reward model inside a run: built lazily, fit once (state cached by content), adapted per shot count."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from perbench.config import Component, RunConfig
from perbench.data.records import Benchmark, PreferencePair
from perbench.metrics.analysis.roles import ORACLE
from perbench.rewards.base import FeatureRM, RewardModel, RMContext
from perbench.runner.units import Units, unit_key
from perbench.systems import SystemDef, train_subset


class MethodHandle:
    """One system of the run (``perbench.systems``): a method with its parameters, the fraction of the train
    pairs and the seed it is fit with, and the shots it adapts unseen users from."""

    def __init__(
        self,
        spec: Component,
        bench: Benchmark,
        ctx: RMContext,
        units: Units,
        *,
        baseline: bool = False,
        system: SystemDef | None = None,
        bench_fp: str | None = None,
    ) -> None:
        from perbench import registry

        if system is None:  # the method alone: all train pairs, the context's seed, RunConfig's default shots
            system = SystemDef(spec.label(), spec, 1.0, ctx.seed, RunConfig().shots, baseline=baseline)
        self.system = system
        self.spec = spec
        self.label = system.label
        self.family = system.family
        self.baseline = system.baseline
        self.shots = system.shots
        self.train_fraction = system.train_fraction
        self.bench = bench
        fit_seed = system.seed if system.fit_seed is None else system.fit_seed
        if fit_seed != ctx.seed:  # the fit's seed (one of a pooled system's fit seeds, or the system's seed)
            ctx = dataclasses.replace(ctx, seed=fit_seed)
        self.units = units
        self.cls: type[RewardModel] = registry.reward_models.get(spec.name)
        #: the method's registered role (``registry.reward_models``): the one place roles come from. Only a method
        #: registered as ``oracle`` gets the answer keys, and the verdict reads the same role, so such a method is
        #: always a reference line; a class attribute (``oracle = True``) grants nothing.
        self.role = registry.reward_models.entry(spec.name).role
        if self.role == ORACLE:  # a separately named upper bound: it alone gets the answer keys
            from perbench.data.user_context import method_inputs

            ctx = dataclasses.replace(ctx, extra={**ctx.extra, **method_inputs(bench.users, oracle=True)})
        self.ctx = ctx
        self._rm: RewardModel | None = None
        self._adapted: tuple[int, bool] | None = None
        #: an unfitted instance of the method (its parameters, e.g. GenARM's β for a decoder's weight)
        self.probe = probe = self.cls(**spec.params)
        #: whether the method's unseen-user scores depend on the shots (an instance may switch its class's
        #: ``uses_shots`` off, e.g. P-DPO without adaptation steps falls back to the generic user)
        self.uses_shots = bool(self.cls.uses_shots and getattr(probe, "adapts_from_shots", True))
        # Every method that learns may default to the RM backbone (feature heads, LoRA methods): key on it, and on
        # the length its inputs are cut to.
        f = ctx.features
        backbone = None if f is None else (f.fingerprint, getattr(f, "max_length", None))
        part: list[tuple[str, Any]] = [] if self.train_fraction >= 1.0 else [("train_fraction", self.train_fraction)]
        if part and system.seed != ctx.seed:  # a pooled fit: its train subset is the system's, drawn by its seed
            part.append(("subset_seed", system.seed))
        self.fit_key = unit_key("fit", probe.config_key(), bench_fp or bench.fingerprint(), backbone, ctx.seed, *part)

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
                rm.fit(self.train_pairs(), self.ctx)
                trained = True
                return rm.state()

            state = self.units.arrays("fit", self.fit_key, fit)
            if not trained:
                rm.load_state(state)
            self._rm = rm
        return self._rm

    def train_pairs(self) -> list[PreferencePair]:
        """The seen users' train pairs this system is fit on (its train fraction, chosen by its seed)."""
        return train_subset(self.bench.train_pairs(), self.train_fraction, self.system.seed)

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
