"""A run killed with SIGKILL at three points (after its first fit, mid-downstream, after its last unit and before
results.json) resumes to the results of an uninterrupted run, and no unit is computed twice across its processes.

Progress is read from the run's store: the tally of computed units per phase that every process adds to.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401  (tiny_pool is a fixture)

RUN = "import sys; from perbench.api import run; run(sys.argv[1])"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PERBENCH_QUIET": "1"}
#: what the last process did and when (not what the run found): its timing, its share of the work, and the
#: batch sizes of the computations it ran (a resumed process that only reuses units runs none)
VOLATILE = ("created", "timing_s", "work", "batching")
LIMIT_S = 240.0  # per process: a hung run fails the test instead of hanging the suite


class Proc:
    """``perbench.runner.run.run(config)`` in a child process, its stderr kept in a file."""

    def __init__(self, cfg_path: Path, log: Path) -> None:
        self.log = log
        # each config its own cache: the two runs must not reuse each other's units (``units.sqlite``)
        env = {**ENV, "PERBENCH_CACHE": str(cfg_path.with_suffix(".cache"))}
        with open(log, "wb") as err:
            self.p = subprocess.Popen(
                [sys.executable, "-c", RUN, str(cfg_path)], env=env, stdout=subprocess.DEVNULL, stderr=err
            )

    def failed(self, what: str) -> str:
        return f"{what} (exit {self.p.returncode}); its stderr:\n{self.log.read_text()[-3000:]}"

    def finish(self) -> None:
        assert self.p.wait(LIMIT_S) == 0, self.failed("the run failed")


def tally(run_dir: Path) -> dict[str, int]:
    """The run's persistent count of computed units per phase ({} before the store exists)."""
    db = run_dir / "units.sqlite"
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return {str(k): int(n) for k, n in con.execute("SELECT name, n FROM tally")}
        finally:
            con.close()
    except sqlite3.Error:  # not created yet, or its write-ahead log not yet set up
        return {}


def kill_when(
    proc: Proc, run_dir: Path, ready: Callable[[dict[str, int]], bool], *, after_s: float = 0.0
) -> dict[str, int]:
    """SIGKILL ``proc`` ``after_s`` seconds after the run's tally satisfies ``ready``; the tally that did.

    A short delay lands the kill inside the next computation rather than among the store writes that follow
    the one just seen (some callers still store a unit and count it in two transactions)."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        t = tally(run_dir)
        if ready(t):
            time.sleep(after_s)
            proc.p.send_signal(signal.SIGKILL)
            proc.p.wait(30)
            assert proc.p.returncode == -signal.SIGKILL, proc.failed("the run ended before it could be killed")
            return t
        assert proc.p.poll() is None, proc.failed(f"the run ended before the kill point (tally {t})")
        time.sleep(0.005)
    raise AssertionError(proc.failed("no kill point within the time limit"))


def stable(results: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in results.items() if k not in VOLATILE}
    out["config"] = {k: v for k, v in results["config"].items() if k != "out_dir"}
    # a commit may land meanwhile; compute: this run's own seconds beside the first run's
    out["provenance"] = {k: v for k, v in results["provenance"].items() if k not in ("git", "compute")}
    return out


def rows(path: Path) -> list[str]:
    return [json.dumps(json.loads(line), sort_keys=True) for line in path.read_text().splitlines()]


def test_killed_run_resumes_to_the_same_results(tiny_pool: Path, tmp_path: Path) -> None:  # noqa: F811
    def config(name: str) -> tuple[Path, Path]:
        cfg = tiny_config(tiny_pool, tmp_path / name).override(bertscore=False, max_new_tokens=4)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg.to_dict()))
        return path, cfg.run_dir()

    ref_cfg, ref_dir = config("uninterrupted")
    cfg, run_dir = config("crashed")
    # the uninterrupted run goes first; the crashed one starts once it is past model loading, and the two
    # overlap from then on
    procs = [Proc(ref_cfg, tmp_path / "uninterrupted.log")]
    ref = procs[0]

    def start(i: int) -> Proc:
        procs.append(Proc(cfg, tmp_path / f"{i}.log"))
        return procs[-1]

    kill_points = []
    try:
        while not tally(ref_dir):
            assert ref.p.poll() is None, ref.failed("the uninterrupted run ended early")
            time.sleep(0.05)
        kill_points.append(kill_when(start(1), run_dir, lambda t: t.get("fit", 0) >= 1, after_s=0.05))
        kill_points.append(kill_when(start(2), run_dir, lambda t: t.get("generate", 0) >= 1, after_s=0.05))
        ref.finish()
        expected = json.loads((ref_dir / "results.json").read_text())
        total = expected["work"]["computed_total"]
        kill_points.append(kill_when(start(3), run_dir, lambda t: t == total))
        start(4).finish()
    finally:
        for proc in procs:  # never leave a run going when the test fails
            if proc.p.poll() is None:
                proc.p.kill()
                proc.p.wait()
    # the kill points: after the first fit (nothing generated yet), mid-downstream, after the last unit
    assert kill_points[0]["fit"] >= 1 and "generate" not in kill_points[0]
    assert 0 < kill_points[1]["generate"] < total["generate"]
    assert kill_points[2] == total
    got = json.loads((run_dir / "results.json").read_text())
    assert stable(got) == stable(expected)
    # no unit was computed twice: four processes together computed what one uninterrupted process did
    assert expected["work"]["computed"] == total
    assert got["work"]["computed_total"] == total
    assert got["work"]["computed"] == {} and got["work"]["recovered"] == {}  # the last process only reused
    samples = rows(run_dir / "samples.jsonl")
    assert len(samples) == len(set(samples)) > 0
    assert Counter(samples) == Counter(rows(ref_dir / "samples.jsonl"))
    assert Counter(rows(run_dir / "cells.jsonl")) == Counter(rows(ref_dir / "cells.jsonl"))
