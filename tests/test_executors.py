"""The run as a plan of units: the local and Ray executors give the same results.json, also when a Ray
worker is killed in the middle of a unit (Ray retries it)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from perbench.runner.run import run
from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401 - tiny_pool is a fixture

GRID = {
    "methods": ["global_bt", "mpu"],
    "decoders": ["zero_shot", {"name": "args", "k": 3, "w": 1.0}, {"name": "best_of_n", "n": 2}],
    "bertscore": False,
}


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """results.json without what legitimately differs between two executions: timing, provenance, paths,
    and the work counters (which process computed what)."""
    drop = {"created", "timing_s", "provenance", "work", "plan", "config", "config_hash", "batching"}
    return {k: v for k, v in results.items() if k not in drop}


def _run(pool: Path, out: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, **extra: Any) -> dict[str, Any]:
    monkeypatch.setenv("PERBENCH_CACHE", str(cache))
    cfg = tiny_config(pool, out).override(**GRID, **extra)
    return run(cfg).results


@pytest.fixture(scope="module")
def local(tiny_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:  # noqa: F811
    """The grid run with the local executor (and where it ran)."""
    base = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as mp:
        return _run(tiny_pool, base / "runs", base / "cache", mp), base


def test_local_plan_lists_every_unit(
    tiny_pool: Path,  # noqa: F811
    local: tuple[dict[str, Any], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    res, base = local
    units = res["plan"]["units"]
    # features once; fit + upstream per method and baseline; generation per (decoder, RM); one shared pool
    assert units["features"] == 1 and units["fit"] == units["upstream"] == 4
    # zero_shot, args and Best-of-N × 2 feature RMs (Best-of-N × the baselines too: they score any text)
    assert units["pool"] == 1 and units["generate"] == 1 + 2 + 4
    assert res["work"]["computed"]["plan"] == sum(units.values())
    again = _run(tiny_pool, base / "runs", base / "cache", monkeypatch)
    assert again["work"]["computed"] == {} and again["work"]["reused"]["plan"] == sum(units.values())


def _worker_pids() -> list[int]:
    """Ray worker processes busy with a perbench unit (their process title names the task)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ray::") and ("perbench:" in cmd or "run_unit" in cmd):
            out.append(int(d.name))
    return out


def test_ray_executor_matches_local_after_a_killed_worker(
    tiny_pool: Path,  # noqa: F811
    local: tuple[dict[str, Any], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")

    monkeypatch.setenv("PERBENCH_CACHE", str(tmp_path / "cache-ray"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and not killed:
            pids = _worker_pids()
            if pids:
                time.sleep(0.5)  # let it get into the unit
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        remote = _run(tiny_pool, tmp_path / "ray", tmp_path / "cache-ray", monkeypatch, executor="ray")
    finally:
        stop.set()
        thread.join()
        ray.shutdown()
    assert killed, "no Ray worker was seen running a unit"
    assert remote["plan"]["executor"] == "ray"
    # the driver found every unit computed by the workers: its own assembly computed nothing expensive
    assert "fit" not in remote["work"]["computed"] and "generate" not in remote["work"]["computed"]
    assert comparable(remote) == comparable(local[0])
