"""The Ray executor, on one node and on two simulated nodes that share no disk, vs the local executor.

The same small grid of tiny random models runs under three executors (through ``perbench.runner.run.run``),
each time from an empty run folder and an empty driver cache (the converted models are shared, so no round
pays for the conversion), alternating over rounds:

* ``local``: every unit in the driver's process;
* ``ray, one node``: a local Ray instance of 2 CPUs (``ray.init``);
* ``ray, two nodes``: two ``ray start`` nodes of 1 CPU each on this machine (``tests/ray_cluster.py``), each
  with its own temp dir, working directory and cache, whose workers fail on any access to the driver's folders.

A Ray cluster is started before its run and stopped after it; its start-up is reported on its own. The figures
that matter besides the times: how many units the driver computed itself (0 on Ray: the workers compute every
unit and the assembly only reads), whether results.json is the same under every executor, and the model
forwards of each unit under each executor beside local's (equal when no unit repeats another's work).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import ROOT, Goal, Section, Settings, table

GRID: dict[str, Any] = {
    "benchmark": {"name": "rubrics", "max_train_prompts": 4, "max_test_prompts": 2},
    "policy": "tiny-random",
    "rm_backbone": "tiny-random",
    "methods": ["global_bt", "mpu", "lore"],
    "baselines": ["length", "random"],
    "decoders": ["zero_shot", {"name": "args", "k": 10, "w": 1.0}, {"name": "best_of_n", "n": 4}],
    "max_new_tokens": 12,
    "max_test_prompts": 2,
    "max_gen_users": 2,
    "bootstrap": 20,
    "shot_curve": [1, 5],
    "bertscore": False,
    "device": "cpu",
}
#: what may differ between executors: when and where it ran, and who computed what
VOLATILE = {"created", "timing_s", "provenance", "work", "plan", "config", "config_hash", "batching"}
GOAL = "Ray executor (one node; two simulated nodes, no shared disk) vs local, small grid"


def not_measured(sec: Section, why: str) -> Section:
    sec.body.append(f"Not measured: {why}. The suite measures it once the executor is available.")
    sec.goals.append(Goal(GOAL, "driver computes 0 units, same results", f"not measured: {why}", None))
    return sec


def run(settings: Settings) -> Section:
    from perbench import registry

    sec = Section("ray", "Ray executor vs local")
    if "ray" not in registry.executors:
        return not_measured(sec, "executor 'ray' not available")
    try:
        import ray
    except ImportError:
        return not_measured(sec, "the `ray` package is not installed")
    sys.path.insert(0, str(ROOT))
    from tests.ray_cluster import LocalCluster

    from perbench.api import run as run_config
    from perbench.config import RunConfig
    from perbench.io import cache_dir

    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    models = cache_dir() / "models"
    work = Path(tempfile.mkdtemp(prefix="pbr-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    saved = os.environ.get("PERBENCH_CACHE")

    def one_node() -> Callable[[], None]:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(work / "ray1"))
        return ray.shutdown

    def two_nodes() -> Callable[[], None]:
        cluster = LocalCluster([work / "driver"], nodes=2, cpus=1)
        cluster.start()
        return cluster.stop

    starts: dict[str, Callable[[], Callable[[], None]] | None] = {
        "local": None,
        "ray, one node": one_node,
        "ray, two nodes": two_nodes,
    }
    times: dict[str, list[float]] = {k: [] for k in starts}
    startup: dict[str, list[float]] = {k: [] for k in starts if starts[k] is not None}
    last: dict[str, dict[str, Any]] = {}
    rounds = settings.size(2, 1)
    try:
        for _ in range(rounds):
            for name, start in starts.items():
                driver = work / "driver"
                shutil.rmtree(driver, ignore_errors=True)
                (driver / "cache").mkdir(parents=True)
                if models.exists():
                    (driver / "cache" / "models").symlink_to(models.resolve(), target_is_directory=True)
                os.environ["PERBENCH_CACHE"] = str(driver / "cache")
                executor = "local" if start is None else "ray"
                cfg = RunConfig.from_dict({**GRID, "executor": executor, "out_dir": str(driver / "runs")})
                stop = None
                try:
                    if start is not None:
                        t = time.perf_counter()
                        stop = start()
                        startup[name].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    last[name] = run_config(cfg).results
                    times[name].append(time.perf_counter() - t)
                except Exception as e:  # report the executor's failure instead of failing the suite
                    return not_measured(sec, f"the {name} run failed ({type(e).__name__}: {e})")
                finally:
                    if stop is not None:
                        stop()
    finally:
        if saved is None:
            os.environ.pop("PERBENCH_CACHE", None)
        else:
            os.environ["PERBENCH_CACHE"] = saved
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ups = {k: statistics.median(v) for k, v in startup.items()}
    ref = {k: v for k, v in last["local"].items() if k not in VOLATILE}
    same = {k: {kk: vv for kk, vv in res.items() if kk not in VOLATILE} == ref for k, res in last.items()}
    driver = {k: sum(res["work"]["computed"].values()) for k, res in last.items()}
    units = sum(last["local"]["plan"]["units"].values())
    rows = []
    for name in starts:
        res = last[name]
        remote = res["work"].get("remote", {})
        rows.append(
            [
                name,
                f"{med[name]:.1f}",
                f"{med['local'] / med[name]:.2f}×",
                f"{ups[name]:.1f}" if name in ups else "—",
                driver[name],
                sum(remote.get("computed", {}).values()) if remote else "—",
                remote.get("nodes", "—"),
                "yes" if same[name] else "**no**",
            ]
        )
    sec.body += [
        f"Grid: tiny random Llama policy and RM backbone, rubric benchmark (4 train / 2 test prompts), methods "
        f"{', '.join(GRID['methods'])} + 2 baselines, decoders zero-shot, ARGS and Best-of-4: {units} units "
        f"({', '.join(f'{n} {k}' for k, n in last['local']['plan']['units'].items())}). Median of {rounds} "
        "alternating rounds, each from an empty run folder and driver cache; a Ray cluster is started before its "
        "run and stopped after (start-up not in the run's seconds). Two CPUs in every variant: the local "
        "executor's one process, one Ray node of 2 CPUs, or two nodes of 1 CPU.",
        "",
        *table(
            [
                "executor",
                "run seconds (median)",
                "× local's speed",
                "cluster start-up s",
                "units computed by the driver",
                "units computed by workers",
                "nodes",
                "same results.json",
            ],
            rows,
            "lrrrrrrl",
        ),
        "",
        "Units computed by the driver count every store entry its process computed (fits, scores, generations, "
        "win rates, …, in `results.json` `work.computed`); on Ray it computes none. A Ray worker starts by "
        "importing torch and loading the models (once per worker process): on a grid this small that start, not "
        "the units, is most of a Ray run's time.",
    ]
    # model forwards per unit (the unit's own process: the driver's for local, the worker's on Ray), side by side
    by_unit = {name: res["work"].get("calls_by_unit", {}) for name, res in last.items()}
    labels = sorted(set().union(*by_unit.values()))
    fwd_rows = []
    for label in labels:
        got = [by_unit[name].get(label, {}).get("forwards", 0) for name in starts]
        fwd_rows.append([label, *got, "yes" if len(set(got)) == 1 else "**no**"])
    totals = {name: sum(c.get("forwards", 0) for c in by_unit[name].values()) for name in starts}
    fwd_rows.append(["**all units**", *totals.values(), "yes" if len(set(totals.values())) == 1 else "**no**"])
    sec.body += [
        "",
        "Model forwards per unit (`results.json` `work.calls_by_unit`: counted by a hook on every loaded model, in "
        "the process that computed the unit), each executor beside local's:",
        "",
        *table(["unit", *starts, "same"], fwd_rows, "l" + "r" * len(starts) + "l"),
    ]
    ok = all(same.values()) and driver["ray, one node"] == 0 and driver["ray, two nodes"] == 0
    sec.goals.append(
        Goal(
            GOAL,
            "driver computes 0 units, same results",
            f"driver computed {driver['ray, one node']} / {driver['ray, two nodes']} units (one / two nodes); "
            f"{med['local'] / med['ray, one node']:.2f}× / {med['local'] / med['ray, two nodes']:.2f}× local's "
            f"speed; same results: {'yes' if all(same.values()) else 'no'}",
            ok,
        )
    )
    sec.figures = {
        "seconds": med,
        "startup_s": ups,
        "driver_computed": driver,
        "same_results": same,
        "forwards": totals,
    }
    return sec
