"""A run's phases over one state: builds the plan of units and executes any single unit of it.

The driver holds one :class:`Work` over the run's stores; with the ``local`` executor it computes every unit
itself (:meth:`Work.execute`). A Ray worker builds one per unit over in-memory stores that read through to the
unit's dependencies' results (:meth:`Work.for_worker`; ``load_lm`` keeps a process's models), computes the unit and
returns what it added (:meth:`Work.compute_remote`); the driver stores it (:meth:`Work.absorb`) and counts the
attempts Ray made (:meth:`Work.count_attempts`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perbench.config import RunConfig
from perbench.data.records import Benchmark, prompt_key
from perbench.runner.cells import Cells
from perbench.runner.downstream import Downstream
from perbench.runner.lease import Leases
from perbench.runner.methods import MethodHandle
from perbench.runner.plan import Plan, Unit, make_unit
from perbench.runner.state import RunState
from perbench.runner.stores import Stores, UnitResult
from perbench.runner.upstream import Upstream
from perbench.specs.endpoint import Endpoint

#: seconds between two looks at a unit another run is computing
LEASE_POLL_S = 1.0


def shared_path(stores: Stores) -> Path | None:
    """The shared unit cache's file (None: stores in memory, or no shared cache)."""
    shared = stores.units.shared
    return None if shared is None or shared.in_memory else shared.path


class Work:
    def __init__(self, state: RunState, handles: list[MethodHandle]) -> None:
        self.s = state
        self.handles = handles
        self.up = Upstream(state)
        self.down = Downstream(state)
        self._policies: dict[str | Endpoint, Any] = {state.cfg.policy: state.policy}
        #: units this process found finished / computed here / stored from another process, by label
        self.skipped: list[str] = []
        self.executed: list[str] = []
        #: what other processes (Ray workers) computed, reused and recovered for this run, per phase
        self.remote: dict[str, Counter[str]] = {
            k: Counter() for k in ("computed", "reused", "recovered", "features", "calls")
        }
        self.nodes: Counter[str] = Counter()
        #: seconds each unit took on the worker that computed it
        self.remote_seconds: dict[str, float] = {}
        #: the bytes of store entries each unit's result carried back (what the object store held for it)
        self.remote_bytes: dict[str, int] = {}
        #: the bytes of its dependencies' results each unit's worker fetched (the ones whose keys it read)
        self.read_bytes: dict[str, int] = {}
        #: units whose Ray task ran more than once (a worker or node died, a result lost with a node was
        #: rebuilt), by label: the extra attempts this run saw
        self.retried: dict[str, int] = {}
        #: model forwards and metric evaluations per unit computed for this run (here or on a worker), by label
        self.unit_calls: dict[str, dict[str, int]] = {}
        #: leases on units in the shared unit cache (another run sharing it computes each shared unit once)
        self.leases = Leases(shared_path(state.stores))
        #: units found finished because another run sharing the cache computed them while this one waited
        self.waited: list[str] = []

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
        # where the units compute (not the driver); a run without models computes on no GPU
        cuda = s.needs_models() and s.unit_policy.device.startswith("cuda")
        bench = s.bench_fingerprint()
        extras = {name: b.fingerprint() for name, b in s.extras.items()}  # upstream_benchmarks
        rm_fp = s.rm_lm.fingerprint if s.rm_lm is not None else None
        pol_fp = s.policy.fingerprint if s.policy is not None else None

        def unit(
            kind: str, name: str, content: Any, deps: Sequence[Unit | None], policy: str | Endpoint | None = None
        ) -> Unit:  # a unit names its policy (a served one by its model's name: ``_under_policy`` maps it back)
            named = None if policy is None else str(policy)
            return make_unit(kind, name, content, [d for d in deps if d is not None], cfg.resources, cuda, named)

        units: list[Unit] = []
        train: list[Unit] = []
        test: list[Unit] = []
        if any(h.is_feature_rm for h in self.handles):
            pairs = [p.content_key() for p in self.up.train_feature_pairs(self.handles)]
            train = [unit("features", "train", [rm_fp, cfg.max_length, pairs], [])]
            test = [unit("features", "test", [rm_fp, pol_fp, cfg.max_length, bench, extras], [])]
            units += train + test
        fits: dict[str, Unit] = {}
        ups: dict[str, Unit] = {}
        for h in self.handles:
            if s.unfittable(h):
                continue
            feats = h.is_feature_rm
            fit = fits[h.label] = unit("fit", h.label, h.fit_key, train if feats else [])
            pw = s.pa_headline(h)  # as policy accuracy's own keys: the headline's weight (and k, for RGD)
            pa = [None if pw is None else pw.w, pw.k if pw is not None and cfg.pa_rgd else None, pol_fp, cfg.max_length]
            content: list[Any] = [h.key(h.shots), cfg.shot_curve, pa, bench]
            # every upstream unit reads the test features' unit: the feature RMs their φ, and every method (the
            # baselines too) the policy's log-probs of the test responses for its policy accuracy
            ups[h.label] = unit("upstream", h.label, content, [fit, *test])
            units += [fit, ups[h.label]]
        if s.policy is None:
            return Plan(units)
        systems, _ = self.down.systems(self.handles)
        eval_cells = [f"{prompt_key(p)}|{u}" for p, u in self.down.eval_targets()]
        pool_cells = [f"{prompt_key(p)}|{u}" for p, u in self.down.pool_targets()]
        if not pool_cells:
            systems = [sys for sys in systems if not sys.pooled]
        if not eval_cells and not any(sys.pooled for sys in systems):
            return Plan(units)
        from perbench import registry

        # what the quality of a generation depends on besides its text and cell
        quality = [cfg.bertscore, s.judge_lm.fingerprint if s.judge_lm is not None else None]
        plain_cells = [f"{prompt_key(p)}|{u}" for p, u in self.down.plain_targets(systems)]
        main: list[str | Endpoint] = [cfg.policy]
        policies: list[str | Endpoint] = [*(cfg.policies or main)]
        for policy in policies:
            policy_lm = self.policy_model(policy)
            policy_fp = policy_lm.fingerprint
            common = [policy_fp, cfg.seed, cfg.max_new_tokens, bench, quality]
            if policy != cfg.policy:  # policy accuracy under another policy of ``policies`` (its scores: upstream)
                for h in self.handles:
                    if h.label in ups and self.up.pa_problem(h, policy_lm) is None:
                        content = [h.key(h.shots), s.pa_headline(h), cfg.pa_rgd, cfg.max_length, policy_fp, bench]
                        units.append(unit("upstream", h.label, content, [ups[h.label]], policy))
            zero = self.down.zero_shot(systems)
            plain: dict[str, Unit] = {}
            for sys in systems:
                if sys.plain:
                    decoder = registry.decoders.get(sys.spec.name)(**sys.spec.params).config_key()
                    plain[sys.label] = unit("generate", sys.label, [decoder, plain_cells, *common], [], policy)
            units += plain.values()
            zero_unit = plain.get(zero.label) if zero is not None else None
            pools: dict[str, Unit] = {}
            rounds: dict[str, Unit] = {}
            for sys in systems:
                if sys.plain:
                    continue
                name = sys.spec.label()
                decoder = registry.decoders.get(sys.spec.name)(**sys.spec.params).config_key()
                fitted = fits[sys.method.label] if sys.method is not None else None
                guide = sys.method.key(sys.method.shots) if sys.method is not None else None
                if sys.pooled:  # the system's scores of one sample pool shared by every system and user
                    if name not in pools:
                        # "wants": the unit also stores each sample's per-pole satisfaction (the diagnosis)
                        content = [decoder, pool_cells, rm_fp, cfg.max_length, "wants", *common]
                        pools[name] = unit("pool", name, content, [], policy)
                        units.append(pools[name])
                    content = [decoder, guide, pool_cells, *common]
                    units.append(unit("generate", sys.label, content, [fitted, pools[name], zero_unit], policy))
                elif cfg.adaptive is not None:  # one unit runs the decoder's rounds over all of its systems
                    if name not in rounds:
                        mine = [x for x in systems if x.per_cell and x.spec.label() == name]
                        content = [
                            decoder,
                            [x.method.key(x.method.shots) if x.method is not None else None for x in mine],
                            eval_cells,
                            cfg.adaptive,
                            [cfg.bootstrap, cfg.reference_method, cfg.verdict_metric, cfg.equivalence_margin],
                            [b.label() for b in cfg.baselines],
                            *common,
                        ]
                        deps = [fits[x.method.label] for x in mine if x.method is not None]
                        rounds[name] = unit("adaptive", name, content, [*deps, zero_unit], policy)
                        units.append(rounds[name])
                else:
                    content = [decoder, guide, eval_cells, *common]
                    units.append(unit("generate", sys.label, content, [fitted, zero_unit], policy))
            if cfg.rl is not None:  # RL fine-tuning (rl:): one unit per trained run, then one evaluating them all
                training, targets = self.down.training, self.down.eval_targets()
                runs: list[Unit] = []
                for job in training.jobs(self.handles, targets):
                    content = [training.key(job, targets), cfg.max_new_tokens]
                    runs.append(unit("rl", job.name, content, [fits[job.method.label]] if job.method else [], policy))
                units += runs
                # one evaluation unit per trained run (and its KL-matched update) and one for the base policy, so
                # the cluster evaluates as it trains; then the summary (quality and RM scores of every text)
                content = [cfg.rl, eval_cells, *common]
                evals = [unit("rl_eval", r.name, [r.key, *content], [r], policy) for r in runs]
                evals.append(unit("rl_eval", "base", [[r.key for r in runs], *content], [], policy))
                units += evals
                units.append(unit("rl_eval", "rl", [[r.key for r in runs], *content], [*evals, zero_unit], policy))
        return Plan(units)

    # ------------------------------------------------------------------ one unit
    def execute(self, unit: Unit) -> None:
        """Compute ``unit`` here into the run's stores, unless a previous run with the same inputs finished it, or
        another run sharing the cache holds its lease (then wait for that run to finish it, and reuse it)."""
        stores = self.s.stores
        if stores.finished(unit) is not None:
            self.skipped.append(unit.label)
            return
        while not self.leases.claim(unit.key):
            if unit.label not in self.waited:
                self.note_elsewhere(unit)
                self.waited.append(unit.label)
            time.sleep(LEASE_POLL_S)
            if stores.finished(unit) is not None:
                self.skipped.append(unit.label)
                return
        try:
            if stores.finished(unit) is not None:  # finished between the check and the claim
                self.skipped.append(unit.label)
                return
            if unit.label in self.waited:  # its owner left without finishing it: computed here after all
                self.waited.remove(unit.label)
            from perbench import calls

            before = calls.snapshot()
            with stores.journal() as touched:
                self.compute(unit)
            self.unit_calls[unit.label] = calls.since(before)
            stores.mark_done(unit, touched)
            self.executed.append(unit.label)
        finally:
            self.leases.release(unit.key)

    def note_elsewhere(self, unit: Unit) -> None:
        from perbench.runner.state import log

        log(f"{unit.label}: another run sharing the cache computes it ({self.leases.holder(unit.key)}); waiting for it")

    def compute_remote(self, unit: Unit) -> UnitResult:
        """Compute ``unit`` into this worker's in-memory stores; its results are what it added to them."""
        stores = self.s.stores
        from perbench import calls

        loaded = {name: set(store.keys()) for name, store in stores.by_name().items()}
        before = calls.snapshot()
        with stores.journal() as touched:
            self.compute(unit)
        made = calls.since(before)
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
            calls=made,
        )

    def absorb(self, unit: Unit, result: UnitResult) -> None:
        """Store a unit another process computed, and count its work as theirs."""
        self.s.stores.absorb(unit, result)
        for name in ("computed", "reused", "recovered", "features", "calls"):
            self.remote[name].update(getattr(result, name))
        self.nodes[result.node] += 1
        self.remote_seconds[unit.label] = round(result.seconds, 2)
        self.unit_calls[unit.label] = dict(result.calls)
        self.remote_bytes[unit.label] = sum(len(v) for entries in result.entries.values() for v in entries.values())
        self.read_bytes[unit.label] = result.read_bytes
        self.executed.append(unit.label)

    def count_attempts(self, label: str, attempt: int) -> None:
        """A unit's task seen at Ray's attempt number ``attempt`` (its own result, or the copy a dependant read):
        every attempt before it was a computation that died or whose result was lost."""
        if attempt > self.retried.get(label, 0):
            self.retried[label] = attempt

    def compute(self, unit: Unit) -> None:
        """Compute ``unit``: its results go to the stores only (the assembly pass writes cells and samples once)."""
        handles = {h.label: h for h in self.handles}
        cells, samples = self.s.cells, self.s.samples
        self.s.cells, self.s.samples = Cells(cells.group, cells.pooled), []
        try:
            with self.s.timed(f"units.{unit.kind}"):
                self._compute(unit, handles)
        finally:
            self.s.cells, self.s.samples = cells, samples

    def _compute(self, unit: Unit, handles: dict[str, MethodHandle]) -> None:
        if unit.kind == "features":
            if unit.name == "train":
                self.up.train_features(self.handles)
            else:
                self.up.test_features(self.handles)
        elif unit.kind == "fit":
            handles[unit.name].fitted()
        elif unit.kind == "upstream" and unit.policy is None:
            self.up.run(handles[unit.name])
        else:
            self._under_policy(unit, handles)

    def _under_policy(self, unit: Unit, handles: dict[str, MethodHandle]) -> None:
        """A unit that reads a policy of ``policies`` (the main one unless ``unit.policy`` names another)."""
        main = self.s.policy
        main_spec = self.s.cfg.policy
        # the unit names its policy by ``str(spec)`` (a served one by its model's name): back to the config's spec
        specs = [main_spec, *(self.s.cfg.policies or [])]
        named = next((p for p in specs if str(p) == unit.policy), main_spec)  # None (no name): the main one
        self.s.policy = self.policy_model(named)
        try:
            if unit.kind == "upstream":
                self.up.policy_accuracy_under(str(unit.policy), [handles[unit.name]])
            elif unit.kind in ("rl", "rl_eval"):
                self.down.training_unit(self.handles, unit.kind, unit.name)
            else:
                systems, _ = self.down.systems(self.handles)
                if unit.kind == "pool":
                    spec = next(sys.spec for sys in systems if sys.pooled and sys.spec.label() == unit.name)
                    self.down.pool(spec, self.handles)
                elif unit.kind == "adaptive":
                    self.down.adaptive_unit(next(sys.spec for sys in systems if sys.spec.label() == unit.name), systems)
                else:
                    self.down.system_unit(next(sys for sys in systems if sys.label == unit.name), systems)
        finally:
            self.s.policy = main

    def policy_model(self, spec: str | Endpoint) -> Any:
        """The policy ``spec`` (the run's main policy, or another of ``policies``; its weights load on first use)."""
        if spec not in self._policies:
            self._policies[spec] = self.s.model(spec)
        return self._policies[spec]
