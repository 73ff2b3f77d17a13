"""A run's phases over one state: builds the plan of units and executes any single unit of it.

The driver holds one :class:`Work` over the run's stores; with the ``local`` executor it computes every unit
itself (:meth:`Work.execute`). A Ray worker builds one per unit over in-memory stores filled with the unit's
dependencies' results (:meth:`Work.for_worker`; ``load_lm`` keeps a process's models), computes the unit and returns
what it added (:meth:`Work.compute_remote`); the driver stores it (:meth:`Work.absorb`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from perbench.config import RunConfig
from perbench.data.records import Benchmark, prompt_key
from perbench.runner.cells import Cells
from perbench.runner.downstream import Downstream
from perbench.runner.methods import MethodHandle
from perbench.runner.plan import Plan, Unit, make_unit
from perbench.runner.state import RunState
from perbench.runner.stores import Stores, UnitResult
from perbench.runner.upstream import Upstream


class Work:
    def __init__(self, state: RunState, handles: list[MethodHandle]) -> None:
        self.s = state
        self.handles = handles
        self.up = Upstream(state)
        self.down = Downstream(state)
        self._policies: dict[str, Any] = {state.cfg.policy: state.policy}
        #: units this process found finished / computed here / stored from another process, by label
        self.skipped: list[str] = []
        self.executed: list[str] = []
        #: what other processes (Ray workers) computed, reused and recovered for this run, per phase
        self.remote: dict[str, Counter[str]] = {k: Counter() for k in ("computed", "reused", "recovered", "features")}
        self.nodes: Counter[str] = Counter()
        #: seconds each unit took on the worker that computed it
        self.remote_seconds: dict[str, float] = {}

    @classmethod
    def for_worker(cls, cfg: RunConfig, bench: Benchmark, stores: Stores) -> Work:
        """A worker's state for ``cfg`` and the driver's benchmark over ``stores``: no run folder (``load_lm`` keeps
        the models of the process for the next unit)."""
        state = RunState(cfg, None, bench, stores)
        if state.needs_models():
            state.load_models()
        return cls(state, state.method_handles())

    # ------------------------------------------------------------------ the plan
    def plan(self) -> Plan:
        """Every unit of the run, keyed by what its results depend on (see ``plan.py``)."""
        s, cfg = self.s, self.s.cfg
        cuda = str(s.ctx.device).startswith("cuda")
        bench = s.bench.fingerprint()
        rm_fp = s.rm_lm.fingerprint if s.rm_lm is not None else None
        pol_fp = s.policy.fingerprint if s.policy is not None else None

        def unit(kind: str, name: str, content: Any, deps: list[Unit], policy: str | None = None) -> Unit:
            return make_unit(kind, name, content, deps, cfg.resources, cuda, policy)

        units: list[Unit] = []
        train: list[Unit] = []
        test: list[Unit] = []
        if any(h.is_feature_rm for h in self.handles):
            pairs = [p.content_key() for p in self.up.train_feature_pairs(self.handles)]
            train = [unit("features", "train", [rm_fp, cfg.max_length, pairs], [])]
            test = [unit("features", "test", [rm_fp, pol_fp, cfg.max_length, bench], [])]
            units += train + test
        fits: dict[str, Unit] = {}
        w, k = s.pa_params()
        pa = [w, k if cfg.pa_rgd else None, pol_fp, cfg.max_length]  # as policy accuracy's own keys
        for h in self.handles:
            if s.unfittable(h):
                continue
            feats = h.is_feature_rm
            fit = fits[h.label] = unit("fit", h.label, h.fit_key, train if feats else [])
            content = [h.key(cfg.shots), cfg.shot_curve, pa, bench]
            units += [fit, unit("upstream", h.label, content, [fit, *(test if feats else [])])]
        targets = self.down.eval_targets() if s.policy is not None else []
        if not targets:
            return Plan(units)
        from perbench import registry

        cells = [f"{prompt_key(p)}|{u}" for p, u in targets]
        systems, _ = self.down.systems(self.handles)
        for policy in cfg.policies or [cfg.policy]:
            common = [self.policy_model(policy).fingerprint, cells, cfg.seed, cfg.max_new_tokens, bench]
            pools: dict[str, Unit] = {}
            for sys in systems:
                deps = [fits[sys.method.label]] if sys.method is not None else []
                decoder = registry.decoders.get(sys.spec.name)(**sys.spec.params).config_key()
                if sys.pooled:  # the RM's pick from one sample pool shared by every RM
                    name = sys.spec.label()
                    if name not in pools:
                        pools[name] = unit("pool", name, [decoder, *common], [], policy)
                        units.append(pools[name])
                    deps.append(pools[name])
                guide = sys.method.key(cfg.shots) if sys.method is not None else None
                units.append(unit("generate", sys.label, [decoder, guide, *common], deps, policy))
        for job in self.down.training.jobs(self.handles, targets):  # RL fine-tuning (rl:)
            name = f"{job.label}:{job.group}"
            units.append(unit("rl", name, self.down.training.key(job), [fits[job.method.label]]))
        return Plan(units)

    # ------------------------------------------------------------------ one unit
    def execute(self, unit: Unit) -> None:
        """Compute ``unit`` here into the run's stores, unless a previous run with the same inputs finished it."""
        stores = self.s.stores
        if stores.finished(unit) is not None:
            self.skipped.append(unit.label)
            return
        with stores.journal() as touched:
            self.compute(unit)
        stores.mark_done(unit, touched)
        self.executed.append(unit.label)

    def compute_remote(self, unit: Unit) -> UnitResult:
        """Compute ``unit`` into this worker's in-memory stores; its results are what it added to them."""
        stores = self.s.stores
        loaded = {name: set(store.keys()) for name, store in stores.by_name().items()}
        with stores.journal() as touched:
            self.compute(unit)
        entries = stores.read({name: keys - loaded[name] for name, keys in touched.items()})
        ext = self.s.extractor.stats if self.s.extractor is not None else None
        units = self.s.units
        return UnitResult(
            unit.key,
            entries,
            computed=dict(units.computed),
            reused=dict(units.reused),
            recovered=dict(units.recovered),
            features={} if ext is None else {"computed": ext.computed, "reused": ext.reused},
        )

    def absorb(self, unit: Unit, result: UnitResult) -> None:
        """Store a unit another process computed, and count its work as theirs."""
        self.s.stores.absorb(unit, result)
        for name in ("computed", "reused", "recovered", "features"):
            self.remote[name].update(getattr(result, name))
        self.nodes[result.node] += 1
        self.remote_seconds[unit.label] = round(result.seconds, 2)
        self.executed.append(unit.label)

    def compute(self, unit: Unit) -> None:
        """Compute ``unit``: its results go to the stores only (the assembly pass writes cells and samples once)."""
        handles = {h.label: h for h in self.handles}
        cells, samples = self.s.cells, self.s.samples
        self.s.cells, self.s.samples = Cells(cells.group), []
        try:
            if unit.kind == "features":
                if unit.name == "train":
                    self.up.train_features(self.handles)
                else:
                    self.up.test_features()
            elif unit.kind == "fit":
                handles[unit.name].fitted()
            elif unit.kind == "upstream":
                self.up.run(handles[unit.name])
            elif unit.kind == "rl":
                jobs = self.down.training.jobs(self.handles, self.down.eval_targets())
                self.down.training.train(next(j for j in jobs if f"{j.label}:{j.group}" == unit.name))
            else:
                self._downstream_unit(unit)
        finally:
            self.s.cells, self.s.samples = cells, samples

    def _downstream_unit(self, unit: Unit) -> None:
        main = self.s.policy
        self.s.policy = self.policy_model(unit.policy or self.s.cfg.policy)
        try:
            targets = self.down.eval_targets()
            systems, _ = self.down.systems(self.handles)
            if unit.kind == "pool":
                spec = next(sys.spec for sys in systems if sys.pooled and sys.spec.label() == unit.name)
                self.down.pool(spec, targets)
            else:
                self.down.generate(next(sys for sys in systems if sys.label == unit.name), targets)
        finally:
            self.s.policy = main

    def policy_model(self, spec: str) -> Any:
        """The loaded policy ``spec`` (the run's main policy, or another of ``policies``, loaded once)."""
        if spec not in self._policies:
            from perbench.models.loader import load_lm

            self._policies[spec] = load_lm(spec, device=self.s.cfg.device, dtype=self.s.cfg.dtype)
        return self._policies[spec]
