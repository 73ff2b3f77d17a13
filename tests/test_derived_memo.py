"""A rerun reads what it derives (the analysis and other derived results, by content and code) and keeps the first
run's compute time beside its own."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from perbench.config import RunConfig
from perbench.memo import Memo, memo_key
from perbench.runner import derived


def test_a_memo_computes_once_and_reads_back(own_cache: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[str, Any]:
        calls.append(1)
        return {"x": [1.5, float("nan")], "n": 3}

    first = Memo()
    a = first.json("kind", ["inputs", 1], compute)
    first.close()
    again = Memo()
    b = again.json("kind", ["inputs", 1], compute)
    c = again.json("kind", ["inputs", 2], compute)  # other inputs: computed
    again.close()
    assert calls == [1, 1] and again.read == 1 and again.computed == 1
    assert a["n"] == b["n"] == c["n"] == 3 and math.isnan(a["x"][1]) and math.isnan(b["x"][1])
    assert (own_cache / "derived.sqlite").exists()
    assert memo_key("kind", {"a": 1, "b": 2}) == memo_key("kind", {"b": 2, "a": 1}) != memo_key("other", {"a": 1})


def test_the_analysis_is_read_back_for_the_same_cells(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perbench.runner import results

    cells = [
        {"group": "g", "method": m, "metric": "rm_acc_all", "user": f"u{u}", "prompt": f"p{p}", "value": float(v)}
        for m, bias in (("a", 0.3), ("b", 0.0))
        for u in range(6)
        for p in range(6)
        for v in [(u * p + int(10 * bias)) % 2]
    ]
    cfg = RunConfig(bootstrap=20, baselines=[])
    calls: list[int] = []
    real = results.analyze_cells

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(results, "analyze_cells", counting)
    first, memo1 = derived.analysis_of(cells, "digest-1", cfg, None, None)
    again, memo2 = derived.analysis_of(cells, "digest-1", cfg, None, None)
    assert (memo1, memo2) == (False, True) and calls == [1] and again == first
    _, memo3 = derived.analysis_of(cells, "digest-1", cfg.override(bootstrap=30), None, None)
    _, memo4 = derived.analysis_of(cells, "digest-2", cfg, None, None)
    assert not memo3 and not memo4 and len(calls) == 3  # other options or other cells: analysed again


def _results(computed: int, total: float, created: str) -> dict[str, Any]:
    return {
        "created": created,
        "timing_s": {"units": total - 10, "total": total},
        "work": {"units": {"computed": computed, "found_finished": 64 - computed}},
    }


def test_provenance_keeps_the_first_runs_compute_time(tmp_path: Path) -> None:
    first = _results(64, 360.0, "2026-12-04T17:00:00+00:00")
    rec = derived.compute_record(tmp_path, first)  # no earlier results: this run computed its units
    assert rec["first_run"] == rec["this_run"] and rec["first_run"]["timing_s"]["total"] == 360.0
    (tmp_path / "results.json").write_text(json.dumps({**first, "provenance": {"compute": rec}}))
    rerun = derived.compute_record(tmp_path, _results(0, 10.6, "2026-12-04T18:00:00+00:00"))
    assert rerun["first_run"]["timing_s"]["total"] == 360.0 and rerun["this_run"]["timing_s"]["total"] == 10.6
    (tmp_path / "results.json").write_text(json.dumps({"provenance": {"compute": rerun}}))
    third = derived.compute_record(tmp_path, _results(0, 9.0, "2026-12-04T19:00:00+00:00"))
    assert third["first_run"]["created"] == "2026-12-04T17:00:00+00:00"
    # a results.json written before the record existed: the run that wrote it, when it computed units
    (tmp_path / "results.json").write_text(json.dumps(first))
    assert derived.compute_record(tmp_path, _results(0, 9.0, "x"))["first_run"]["timing_s"]["total"] == 360.0
    (tmp_path / "results.json").write_text(json.dumps(_results(0, 9.0, "y")))
    assert derived.compute_record(tmp_path, _results(0, 9.0, "z"))["first_run"] is None


def test_the_parquet_copies_are_read_back_for_the_same_rows(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cells.parquet and samples.parquet are keyed by their JSONL's digest: a rerun writing the same rows reads the
    bytes back (no conversion); other rows are converted again."""
    from perbench.runner import tables
    from perbench.runner.cells import Cells
    from perbench.runner.tables import read_parquet_frame

    made: list[int] = []
    real = tables.parquet_bytes

    def counted(table: Any) -> bytes:
        made.append(1)
        return real(table)

    monkeypatch.setattr(tables, "parquet_bytes", counted)
    samples = [{"kind": "generation", "user_id": "u1", "text": "hi"}, {"kind": "bon_cell", "n": 4}]

    def write_both(value: float) -> tuple[bytes, bytes]:
        cells = Cells("g")
        cells.add("global_bt", "acc", "u1", "p1", value)
        cells.write(tmp_path / "cells.jsonl")
        tables.write_samples_parquet(tmp_path / "samples.parquet", samples, json.dumps(samples))
        return (tmp_path / "cells.parquet").read_bytes(), (tmp_path / "samples.parquet").read_bytes()

    first = write_both(1.0)
    assert len(made) == 2
    assert write_both(1.0) == first and len(made) == 2  # read back
    other = write_both(0.0)
    assert len(made) == 3 and other[1] == first[1] and other[0] != first[0]
    frame = read_parquet_frame(tmp_path / "cells.parquet")
    assert list(frame["value"]) == [0.0]
