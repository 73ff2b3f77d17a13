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

    @property
    def results_path(self) -> Path:
        return self.run_dir / "results.json"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.html"
