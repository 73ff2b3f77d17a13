"""The Python front door: :func:`run` runs a config end to end and writes each run's report beside its results,
as ``perbench run`` does (``from perbench import run``). The runner below it (:func:`perbench.runner.run.run`)
writes results.json, cells.jsonl and samples.jsonl and no report; the report is this room's step."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.runner.outcome import RunResult

if TYPE_CHECKING:
    from perbench.config import RunConfig

__all__ = ["RunResult", "run", "write_run_report"]


def run(config: RunConfig | str | Path | None = None, **overrides: Any) -> RunResult:
    """Run a config (a RunConfig, a YAML path, or None for the embedded default) end to end, its report included:
    report.html, leaderboard.md and plots/ in every run directory (each seed's and, with ``seeds:``, the pooled
    one)."""
    from perbench.runner.run import run as run_only

    return run_only(config, finish=write_run_report, **overrides)


def write_run_report(result: RunResult) -> Path:
    """A finished run's report.html (with leaderboard.md and plots/) from the results it just wrote."""
    from perbench.report.html import write_report
    from perbench.runner.rundir import RunData, read_jsonl
    from perbench.runner.state import log

    run = None
    if result.cells is not None:  # the cells in memory are the file's rows: not read back (a run's largest file)
        notes: list[str] = []
        samples = read_jsonl(result.run_dir / "samples.jsonl", notes)
        run = RunData(result.run_dir, result.results, cells=result.cells, samples=samples, notes=notes)
    write_report(result.results, result.report_path, run)
    log(f"report:  {result.report_path}")
    return result.report_path
