"""Executors map the units of a run's plan (``plan.py``); they never decide what a unit computes.

* ``local``: every unit in this process, in plan order (dependencies come first).
* ``ray``: every unit as a Ray task with the unit's CPU/GPU/memory needs, started after the tasks it
  depends on; a task whose worker dies is retried (``max_retries``). Each worker process builds the run's
  state from the config once (benchmark, models) and leaves its results in the run's store and the shared
  caches, so the run directory and ``PERBENCH_CACHE`` must be on a filesystem every node sees (one machine,
  or a shared disk with working file locks). ``pip install 'perbench[ray]'``; ``--executor ray`` starts a
  local Ray instance, ``--ray-address auto|HOST:PORT`` joins an existing cluster (``ray start --head``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perbench.runner.plan import Plan, Unit
    from perbench.runner.work import Work


class LocalExecutor:
    name = "local"

    def execute(self, plan: Plan, work: Work) -> None:
        for unit in plan.units:
            work.execute(unit)


#: environment every worker needs to find the same caches and stay offline when the driver is
FORWARDED_ENV = ("PERBENCH_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PERBENCH_QUIET")


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
        import torch

        from perbench.io import cache_dir

        cfg = work.s.cfg
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        env["PERBENCH_CACHE"] = str(cache_dir().resolve())
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
            task = ray.remote(run_unit)
            refs: dict[str, Any] = {}
            config = cfg.to_dict()
            run_dir = str(work.s.run_dir.resolve())
            threads = torch.get_num_threads()
            for unit in plan.units:
                n = unit.needs
                refs[unit.key] = task.options(
                    name=f"perbench:{unit.label}",
                    num_cpus=n.cpus,
                    num_gpus=n.gpus,
                    memory=int(n.memory_gb * 2**30),
                    max_retries=self.max_retries,
                    runtime_env={"env_vars": env},
                ).remote(config, run_dir, unit, threads, *[refs[d] for d in unit.deps])
            ray.get(list(refs.values()))
        finally:
            if started:
                ray.shutdown()


_WORK: dict[tuple[str, str], Work] = {}


def run_unit(config: dict[str, Any], run_dir: str, unit: Unit, threads: int, *deps: str) -> str:
    """A Ray task: this worker's state for the config (built once per process), then one unit."""
    import torch

    from perbench.config import RunConfig
    from perbench.runner.work import Work

    torch.set_num_threads(threads)  # the driver's count, so results match a local run's to the bit
    cfg = RunConfig.from_dict(config)
    key = (cfg.result_hash(), run_dir)
    if key not in _WORK:
        _WORK[key] = Work.from_config(cfg, Path(run_dir))
    _WORK[key].execute(unit)
    return unit.key
