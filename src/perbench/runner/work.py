"""A run's phases over one state: builds the plan of units and executes any single unit of it.

The driver and every executor worker hold one :class:`Work`; a worker builds its own from the config
(:meth:`Work.from_config`, models loaded once per process), executes the units it is given, and leaves
their results in the run's store, where the driver's assembly pass finds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perbench.config import RunConfig
from perbench.runner.cells import Cells
from perbench.runner.downstream import Downstream
from perbench.runner.methods import MethodHandle
from perbench.runner.plan import Needs, Plan, Unit, make_unit
from perbench.runner.state import RunState, load_benchmark
from perbench.runner.units import Units
from perbench.runner.upstream import Upstream


class Work:
    def __init__(self, state: RunState, handles: list[MethodHandle]) -> None:
        self.s = state
        self.handles = handles
        self.up = Upstream(state)
        self.down = Downstream(state)
        self._policies: dict[str, Any] = {state.cfg.policy: state.policy}

    @classmethod
    def from_config(cls, cfg: RunConfig, run_dir: Path) -> Work:
        """A worker's own state for ``cfg``: the benchmark, the models and the run's store."""
        bench = load_benchmark(cfg)
        state = RunState(cfg, run_dir, bench, Units(run_dir / "units.sqlite"))
        if state.needs_models():
            state.load_models()
        return cls(state, state.method_handles())

    # ------------------------------------------------------------------ the plan
    def plan(self) -> Plan:
        cfg = self.s.cfg
        base = self.s.units_base
        device_gpus = 1.0 if str(self.s.ctx.device).startswith("cuda") else 0.0
        model = Needs(cpus=1.0, gpus=device_gpus, memory_gb=2.0)
        units: list[Unit] = []
        features: list[Unit] = []
        if any(h.is_feature_rm for h in self.handles):
            features = [make_unit(base, "features", "", [], model)]
            units += features
        fits: dict[str, Unit] = {}
        for h in self.handles:
            if self.s.unfittable(h):
                continue
            fit = fits[h.label] = make_unit(base, "fit", h.label, features if h.is_feature_rm else [], model)
            units += [fit, make_unit(base, "upstream", h.label, [fit], model)]
        if self.s.policy is None:
            return Plan(units)
        systems, _ = self.down.systems(self.handles)
        if not self.down.eval_targets() and not (any(s.pooled for s in systems) and self.down.pool_targets()):
            return Plan(units)
        if not self.down.pool_targets():
            systems = [s for s in systems if not s.pooled]
        for policy in cfg.policies or [cfg.policy]:
            pools: dict[str, Unit] = {}
            rounds: dict[str, Unit] = {}
            plain = [make_unit(base, "generate", sys.label, [], model, policy) for sys in systems if sys.plain]
            units += plain
            for sys in systems:
                if sys.plain:
                    continue
                deps = [fits[sys.method.label]] if sys.method is not None else []
                name = sys.spec.label()
                if sys.pooled:  # the system's scores of one sample pool shared by every system and user
                    if name not in pools:
                        pools[name] = make_unit(base, "pool", name, [], model, policy)
                        units.append(pools[name])
                    units.append(make_unit(base, "generate", sys.label, [*deps, pools[name], *plain], model, policy))
                elif cfg.adaptive is not None:  # one unit runs the decoder's rounds over all of its systems
                    mine = [s for s in systems if s.per_cell and s.spec.label() == name and s.method is not None]
                    if name not in rounds:
                        rounds[name] = make_unit(
                            base, "adaptive", name, [fits[s.method.label] for s in mine if s.method], model, policy
                        )
                        units.append(rounds[name])
                else:
                    units.append(make_unit(base, "generate", sys.label, deps, model, policy))
        for job in self.down.training.jobs(self.handles, self.down.eval_targets()):  # RL fine-tuning (rl:)
            units.append(make_unit(base, "rl", f"{job.label}:{job.group}", [fits[job.method.label]], model))
        return Plan(units)

    # ------------------------------------------------------------------ one unit
    def execute(self, unit: Unit) -> None:
        """Compute ``unit`` (its results go to the stores) unless a previous process finished it."""
        done = unit.done_key()
        if self.s.units.store.get_json(done) is not None:
            self.s.units.reused["plan"] += 1
            return
        handles = {h.label: h for h in self.handles}
        # a unit leaves its results in the stores only: the assembly pass writes cells and samples once
        cells, samples = self.s.cells, self.s.samples
        self.s.cells, self.s.samples = Cells(cells.group), []
        try:
            with self.s.timed(f"units.{unit.kind}"):
                self._compute(unit, handles)
        finally:
            self.s.cells, self.s.samples = cells, samples
        self.s.units.put_json("plan", done, {"unit": unit.label, "policy": unit.policy})

    def _compute(self, unit: Unit, handles: dict[str, MethodHandle]) -> None:
        if unit.kind == "features":
            self.up.prefetch_features(self.handles)
        elif unit.kind == "fit":
            handles[unit.name].fitted()
        elif unit.kind == "upstream":
            self.up.run(handles[unit.name])
        elif unit.kind == "rl":
            jobs = self.down.training.jobs(self.handles, self.down.eval_targets())
            self.down.training.train(next(j for j in jobs if f"{j.label}:{j.group}" == unit.name))
        else:
            self._downstream_unit(unit)

    def _downstream_unit(self, unit: Unit) -> None:
        main = self.s.policy
        self.s.policy = self.policy_model(unit.policy or self.s.cfg.policy)
        try:
            systems, _ = self.down.systems(self.handles)
            if unit.kind == "pool":
                spec = next(sys.spec for sys in systems if sys.pooled and sys.spec.label() == unit.name)
                self.down.pool(spec, self.handles)
            elif unit.kind == "adaptive":
                self.down.rounds(next(sys.spec for sys in systems if sys.spec.label() == unit.name), systems)
            else:
                sys = next(sys for sys in systems if sys.label == unit.name)
                if sys.pooled:
                    self.down.pooled_scores(sys, systems)
                else:
                    self.down.generate(sys, self.down.targets_of(sys, systems))
        finally:
            self.s.policy = main

    def policy_model(self, spec: str) -> Any:
        """The loaded policy ``spec`` (the run's main policy, or another of ``policies``, loaded once)."""
        if spec not in self._policies:
            from perbench.models.loader import load_lm

            self._policies[spec] = load_lm(spec, device=self.s.cfg.device, dtype=self.s.cfg.dtype)
        return self._policies[spec]
