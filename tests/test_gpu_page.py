"""bench/gpu_bench.py's page: the figures of one or several runs of bench/gpu.sh, never an estimate in place of a
figure a run did not produce."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(tmp_path: Path, *runs: dict[str, object]) -> str:
    paths = []
    for i, figs in enumerate(runs):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(figs))
    out = tmp_path / "page.md"
    merge = [a for p in paths[:-1] for a in ("--merge", str(p))]
    cmd = [sys.executable, str(ROOT / "bench/gpu_bench.py"), "render", "--figures", str(paths[-1]), *merge]
    subprocess.run([*cmd, "--out", str(out)], check=True, cwd=tmp_path)
    return out.read_text()


def env(date: str) -> dict[str, str]:
    return {"gpu": "one NVIDIA H200", "date": date, "torch": "2.13.0", "transformers": "5.25.0"}


def test_a_step_a_later_run_finished_is_no_longer_unfinished(tmp_path: Path) -> None:
    first = {
        "environment": env("2027-01-01 10:00 UTC"),
        "run:default": {"first": {"wall_s": 41.5, "timing_s": {"units": 30.0}, "peak_gpu_gb": 6.25}},
        "unfinished": {"decoders": "stopped at its 120 s limit", "shapes": "no time left of the 480 s budget"},
    }
    second = {
        "environment": env("2027-01-01 10:09 UTC"),
        "run:decoders": {"first": {"wall_s": 95.0, "timing_s": {"units": 80.0}, "peak_gpu_gb": 9.5}},
    }
    page = render(tmp_path, first, second)
    assert "These runs: one NVIDIA H200, 2027-01-01 10:00 UTC" in page and "2027-01-01 10:09 UTC" in page
    assert "| `default` (empty cache) | 41.50 s | units 30.0 | 6.25 GB |" in page
    assert "| `decoders` (empty cache) | 95.00 s | units 80.0 | 9.50 GB |" in page
    assert "Step `decoders` did not finish" not in page
    assert "Step `shapes` did not finish: no time left of the 480 s budget." in page


def test_no_figures_say_not_yet_measured(tmp_path: Path) -> None:
    page = render(tmp_path, {"unfinished": {"scale": "stopped at its 300 s limit"}})
    assert "This run: no GPU yet." in page
    assert "| `scale` (empty cache) | not yet measured | not yet measured | not yet measured | n/a |" in page
    assert "| `decoders` (empty cache) | not yet measured |" in page and "traceback offline" in page
    assert "Step `scale` did not finish: stopped at its 300 s limit." in page
