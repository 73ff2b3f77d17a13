"""What a run hands back: its folder and its results (the record ``run`` and ``run_seeds`` both return)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunResult:
    run_dir: Path
    results: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    #: the cells the run just wrote to cells.jsonl (plain rows, as the file holds them); None: read the file
    cells: list[dict[str, Any]] | None = None

    @property
    def results_path(self) -> Path:
        return self.run_dir / "results.json"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.html"
