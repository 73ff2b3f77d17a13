"""The Ray executor (a local cluster of 2 workers) vs the local executor on a small grid of tiny random models.

Both executors run the same config (``executor: local`` / ``executor: ray`` in the run config, through
``perbench.runner.run.run``) from an empty run folder and an empty feature cache each time (the converted
models are shared, so no round pays for the conversion), alternating over rounds. The Ray cluster is
started once before the Ray rounds (its start-up is reported on its own). When ``ray`` is not a registered
executor the section says so and the goal is "not measured".
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import Goal, Section, Settings, table

GRID: dict[str, Any] = {
    "benchmark": {"name": "rubrics", "max_train_prompts": 4, "max_test_prompts": 2},
    "policy": "tiny-random",
    "rm_backbone": "tiny-random",
    "methods": ["global_bt", "mpu", "lore"],
    "baselines": ["length", "random"],
    "decoders": ["zero_shot", {"name": "args", "k": 10, "w": 1.0}],
    "max_new_tokens": 12,
    "max_test_prompts": 2,
    "max_gen_users": 2,
    "bootstrap": 20,
    "shot_curve": [1, 5],
    "device": "cpu",
}


def not_measured(sec: Section, why: str) -> Section:
    sec.body.append(f"Not measured: {why}. The suite measures it once the executor is available.")
    sec.goals.append(
        Goal("Ray executor (local cluster, 2 workers) vs local, small grid", "reported", f"not measured: {why}", None)
    )
    return sec


def accuracies(results: dict[str, Any]) -> dict[str, float]:
    out = {}
    for label, up in sorted(results.get("upstream", {}).items()):
        acc = up.get("rm_accuracy", {}).get("all", {}).get("accuracy")
        if acc is not None:
            out[label] = float(acc)
    return out


def run(settings: Settings) -> Section:
    from perbench import registry

    sec = Section("ray", "Ray executor vs local")
    if "ray" not in registry.executors:
        return not_measured(sec, "executor 'ray' not available")
    try:
        import ray
    except ImportError:
        return not_measured(sec, "the `ray` package is not installed")
    from perbench.config import RunConfig
    from perbench.io import cache_dir
    from perbench.runner.run import run as run_config

    models = cache_dir() / "models"
    work = Path(tempfile.mkdtemp(prefix="perbench-bench-ray-"))
    times: dict[str, list[float]] = {"local": [], "ray": []}
    accs: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    t_init = time.perf_counter() - t0
    saved = os.environ.get("PERBENCH_CACHE")
    try:
        for i in range(settings.size(2, 1)):
            for executor in ("local", "ray"):
                cache = work / f"cache-{executor}-{i}"
                cache.mkdir()
                if models.exists():
                    (cache / "models").symlink_to(models, target_is_directory=True)
                os.environ["PERBENCH_CACHE"] = str(cache)
                cfg = RunConfig.from_dict({**GRID, "executor": executor, "out_dir": str(work / f"runs-{executor}-{i}")})
                t = time.perf_counter()
                try:
                    res = run_config(cfg)
                except Exception as e:  # the executor is new: report its failure instead of failing the suite
                    return not_measured(sec, f"the {executor} run failed ({type(e).__name__}: {e})")
                times[executor].append(time.perf_counter() - t)
                accs[executor] = accuracies(res.results)
    finally:
        if saved is None:
            os.environ.pop("PERBENCH_CACHE", None)
        else:
            os.environ["PERBENCH_CACHE"] = saved
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["local"] / med["ray"]
    same = accs["local"] == accs["ray"]
    sec.body += [
        f"Grid: tiny random Llama policy and RM backbone, rubric benchmark (4 train / 2 test prompts), methods "
        f"{', '.join(GRID['methods'])} + 2 baselines, decoders zero-shot and ARGS; median of "
        f"{settings.size(2, 1)} alternating rounds, each from an empty run folder and feature cache.",
        "",
        *table(
            ["executor", "seconds (median)"],
            [["local", f"{med['local']:.1f}"], ["ray, 2 workers", f"{med['ray']:.1f}"]],
        ),
        "",
        f"Ray cluster start-up (once, not in the figures above): {t_init:.1f} s. Same RM accuracies under both "
        f"executors: {'yes' if same else 'no'}.",
    ]
    sec.goals.append(
        Goal(
            "Ray executor (local cluster, 2 workers) vs local, small grid",
            "reported",
            f"{ratio:.2f}× local's speed (same results: {'yes' if same else 'no'})",
            None,
        )
    )
    sec.figures = {"seconds": med, "ray_init_s": t_init, "same_results": same}
    return sec
