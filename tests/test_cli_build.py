"""``perbench build`` as a user runs it: the rubric pool and Pref-LaMP written by the command, in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from perbench.data.rubrics.benchmark import read_pool
from tests.fixtures_upstream import lamp5_user_based


def _perbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PERBENCH_QUIET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "perbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_build_rubrics_writes_a_pool_the_loader_reads(tmp_path: Path) -> None:
    out = tmp_path / "pool.jsonl"
    done = _perbench("build", "rubrics", "--policy", "tiny-random", "--limit", "2", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    by_prompt = read_pool(out)  # what `perbench run` with `benchmark: {name: rubrics, pool: ...}` reads
    assert len(by_prompt) == 2
    assert all(len(rows) > 1 and all(r["text"] for r in rows) for rows in by_prompt.values())


def test_build_pref_lamp_prints_table1_and_writes_pairs(tmp_path: Path) -> None:
    root = lamp5_user_based(tmp_path / "lamp")
    out = tmp_path / "built"
    done = _perbench("build", "pref-lamp", "--lamp-dir", str(root), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 8 and all(p["chosen"] != p["rejected"] for p in pairs)
    table = json.loads((out / "table1.json").read_text())
    assert table["n"] == 8 and "Table 1" in done.stdout and "mined" in done.stdout
    assert f"({len(pairs)} pairs)" in done.stdout


def test_build_pref_lamp_without_its_folder_is_one_error_line(tmp_path: Path) -> None:
    done = _perbench("build", "pref-lamp", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("perbench: error:")
    assert "--lamp-dir" in done.stderr and "Traceback" not in done.stderr
