"""Smaller front doors: a benchmark name holding the cells' group separator ``|``, a partial ``plan.object_store``
record in results.json, and a run directory whose cells lost their digest and half their rows."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.config import RunConfig
from perbench.errors import ConfigError
from tests.test_bad_inputs_cli import Outcome, cli, one_line_error

__all__ = ["cli"]


def _data(folder: Path, name: str = "d.jsonl") -> Path:
    rows = [
        {"user_id": u, "prompt": f"Q{k}?", "chosen": f"answer {k} of {u} " * 2, "rejected": f"no {k}", "split": s}
        for u in ("u1", "u2", "u3") for k, s in enumerate(("train", "test", "test", "test"))
    ]  # fmt: skip
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _config(folder: Path, benchmark: Any, name: str = "r") -> Path:
    spec = {"benchmark": benchmark, "methods": [], "baselines": ["length", "random"], "decoders": [],
            "bootstrap": 20, "out_dir": str(folder / "runs"), "run_name": name}  # fmt: skip
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_a_benchmark_name_with_the_group_separator_is_refused_at_its_line(tmp_path: Path, cli: Any) -> None:
    cfg = _config(tmp_path, {"file": {"source": str(_data(tmp_path)), "name": "x|y"}})
    line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if t.strip().startswith("name: x|y"))
    assert one_line_error(cli("run", str(cfg))) == (
        f"{cfg}:{line}: benchmark.file.name: 'x|y' holds '|', which separates the parts of a cell's group "
        "(benchmark|policy|seed); choose a name without it"
    )
    with pytest.raises(ConfigError, match=r"^RunConfig: benchmark\.file\.name: 'x\|y' holds '\|'"):
        RunConfig(benchmark={"file": {"source": "d.jsonl", "name": "x|y"}})
    assert not (tmp_path / "runs").exists()


def test_a_file_named_with_the_group_separator_needs_a_name(tmp_path: Path, cli: Any) -> None:
    cfg = _config(tmp_path, {"name": "file", "source": str(_data(tmp_path, "x|y.jsonl"))})
    err = one_line_error(cli("run", str(cfg)))
    assert err.startswith(f"{cfg}:1: benchmark: the benchmark is named 'x|y' (after its file, without `name:`)"), err
    assert not (tmp_path / "runs").exists()
    renamed = _config(tmp_path, {"file": {"source": str(tmp_path / "x|y.jsonl"), "name": "xy"}})
    assert cli("run", str(renamed)).rc == 0
    from perbench.report.frames import read_cells

    frame = read_cells(tmp_path / "runs" / "r")
    assert set(frame["benchmark"]) == {"xy"} and set(frame["policy"]) == {"smollm2"}


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    from perbench.cli import main

    assert main(["run", str(_config(tmp_path, {"name": "file", "source": str(_data(tmp_path))}))]) == 0
    return tmp_path / "runs" / "r"


PARTIAL = [
    ({"largest": "fit:length"}, "largest_mb, per_node_mb"),
    ({"largest_mb": "1", "per_node_mb": 2.0, "largest": "x"}, "largest_mb"),
    ([1, 2], "largest_mb, per_node_mb, largest"),
]


@pytest.mark.parametrize(("record", "missing"), PARTIAL)
def test_plan_reads_a_partial_object_store_record(record: Any, missing: str, finished: Path, cli: Any) -> None:
    path = finished / "results.json"
    results = json.loads(path.read_text())
    results["plan"]["object_store"] = record
    path.write_text(json.dumps(results))
    got: Outcome = cli("plan", str(finished))
    assert got.rc == 0, got.err
    assert f"note: {path}: plan.object_store: no valid {missing} (a partial or edited record)" in got.err


def test_compare_on_cells_that_lost_their_digest_and_half_their_rows(finished: Path, tmp_path: Path, cli: Any) -> None:
    path = finished / "results.json"
    results = json.loads(path.read_text())
    del results["cells"]["sha256"]
    path.write_text(json.dumps(results))
    cells = (finished / "cells.jsonl").read_text().splitlines(keepends=True)
    (finished / "cells.jsonl").write_text("".join(cells[: len(cells) // 2]))
    for argv in (["compare", str(finished), "--out", str(tmp_path / "c")], ["report", str(finished)],
                 ["plan", str(finished)]):  # fmt: skip
        err = one_line_error(cli(*argv))
        assert err.startswith(f"{finished}/cells.jsonl: results.json (of the current schema) has no record"), err


def test_sigterm_to_a_supervised_run_ends_its_child_too(tmp_path: Path) -> None:
    """``perbench run --executor ray`` runs in a child its first process watches (``cluster.supervise``): a SIGTERM to
    the watcher reaches the child, and the watcher exits as the signal's (128 + 15)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = _config(tmp_path, {"name": "file", "source": str(_data(tmp_path))})
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    code = "import sys; from perbench.runner.cluster import supervise; sys.exit(supervise(sys.argv[1:]))"
    parent = subprocess.Popen([sys.executable, "-c", code, "run", str(cfg)], env=env, stderr=subprocess.DEVNULL)
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    child = 0
    try:
        deadline = time.monotonic() + 60
        while not child and time.monotonic() < deadline and parent.poll() is None:
            child = int((children.read_text().split() or ["0"])[0])
            time.sleep(0.02)
        assert child, "the watcher started no child"
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):  # ended, and reaped by its watcher
            os.kill(child, 0)
    finally:
        parent.kill()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
