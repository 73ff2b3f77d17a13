"""A run's results as data frames: cells and samples from their Parquet copies (checked against the digest
results.json records) or JSONL, over several runs at once; one row per system matching the leaderboard; a Best-of-N
pick's text by the documented join."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import perbench
from perbench.errors import ConfigError
from perbench.report.frames import CELL_COLUMNS
from tests.fixtures_export import run_dir, tiny_pool  # noqa: F401 - fixtures


def test_cells_as_parquet_beside_jsonl_and_over_many_runs(run_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    jsonl, parquet = run_dir / "cells.jsonl", run_dir / "cells.parquet"
    assert parquet.is_file() and (run_dir / "samples.parquet").is_file()
    record = json.loads((run_dir / "results.json").read_text())["cells"]
    assert record["parquet"]["file"] == "cells.parquet"
    assert parquet.stat().st_size <= jsonl.stat().st_size / 10
    from_parquet = perbench.read_cells(run_dir)
    only_jsonl = tmp_path / "jsonl-only"
    shutil.copytree(run_dir, only_jsonl)
    (only_jsonl / "cells.parquet").unlink()
    from_jsonl = perbench.read_cells(only_jsonl)
    assert list(from_parquet.columns) == list(CELL_COLUMNS)
    cols = [c for c in CELL_COLUMNS if c != "run"]
    pd.testing.assert_frame_equal(from_parquet[cols].astype(object), from_jsonl[cols].astype(object), check_dtype=False)
    both = perbench.read_cells([run_dir, only_jsonl])
    assert len(both) == 2 * len(from_parquet) and set(both.run) == {run_dir.name, "jsonl-only"}
    # a Parquet file changed after the run is refused, as a changed cells.jsonl is
    damaged = tmp_path / "damaged"
    shutil.copytree(run_dir, damaged)
    raw = bytearray((damaged / "cells.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (damaged / "cells.parquet").write_bytes(bytes(raw))
    with pytest.raises(ConfigError, match=r"cells.parquet: sha256 .* does not match"):
        perbench.read_cells(damaged)


def test_samples_from_parquet_equal_jsonl(run_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    only_jsonl = tmp_path / "jsonl-only"
    shutil.copytree(run_dir, only_jsonl)
    (only_jsonl / "samples.parquet").unlink()
    a = perbench.read_samples(run_dir, kind="pair_score")
    b = perbench.read_samples(only_jsonl, kind="pair_score")
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a.drop(columns="run"), b.drop(columns="run"), check_dtype=False)
    with pytest.raises(ConfigError, match="no rows of kind 'generation'"):
        perbench.read_samples(run_dir, kind="generation")


def test_read_systems_matches_the_leaderboard(run_dir: Path) -> None:  # noqa: F811
    systems = perbench.read_systems(run_dir)
    board = (run_dir / "leaderboard.md").read_text()
    table = board.split("## Leaderboard", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    names = [r.split(" | ")[1] for r in rows]
    assert list(systems.system) == [n.replace("\\|", "|") for n in names]
    header = next(line for line in table.splitlines() if line.startswith("| #"))
    first_metric = header.split(" | ")[2]
    for row, (_, s) in zip(rows, systems.iterrows(), strict=True):
        cells = row.split(" | ")
        rank = cells[0].strip("| ")
        assert (rank == "–") == pd.isna(s["rank"])
        shown = re.match(r"([-\d.]+)", cells[2])
        pct = "acc" in first_metric or "sat" in first_metric or "%" in first_metric
        if shown and s["value"] is not None and not pd.isna(s["value"]):
            assert float(shown.group(1)) == pytest.approx(100 * s["value"] if pct else s["value"], abs=0.051)
        acc = (
            re.match(r"([-\d.]+)", cells[header.split(" | ").index("RM acc. seen")])
            if "RM acc. seen" in header
            else None
        )
        if acc:
            assert float(acc.group(1)) == pytest.approx(100 * s["rm_acc_seen"], abs=0.051)
    results = json.loads((run_dir / "results.json").read_text())
    roles = results["analysis"]["roles"]
    assert all(roles[m] == r for m, r in zip(systems.system, systems.role, strict=True))
    assert set(systems.columns) >= {"gain_over_random", "share_of_headroom", "status", "rm_acc_unseen"}
