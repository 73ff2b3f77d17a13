"""What a report reads from a run directory: results.json, and cells.jsonl / samples.jsonl when present."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunData:
    """One run's results with its optional per-unit files; ``notes`` says what could not be read."""

    path: Path
    results: dict[str, Any]
    cells: list[dict[str, Any]] | None = None
    samples: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)


def read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]] | None:
    """The JSON objects of a .jsonl file; bad lines are skipped and counted in ``notes``; None if absent."""
    if not path.is_file():
        return None
    rows: list[dict[str, Any]] = []
    bad = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
    if bad:
        notes.append(f"{path.name}: {bad} unreadable line(s) skipped")
    return rows


def load_run(run_dir: str | Path) -> RunData:
    """A run directory's files. results.json is required; the rest is optional."""
    path = Path(run_dir)
    res_path = path / "results.json"
    if not res_path.is_file():
        raise FileNotFoundError(f"{res_path} does not exist (is {path} a run directory?)")
    results = json.loads(res_path.read_text(encoding="utf-8"))
    if not isinstance(results, dict):
        raise ValueError(f"{res_path}: not a JSON object")
    notes: list[str] = []
    cells = read_jsonl(path / "cells.jsonl", notes)
    samples = read_jsonl(path / "samples.jsonl", notes)
    return RunData(path, results, cells, samples, notes)


def run_roles(results: dict[str, Any]) -> dict[str, str]:
    """Each method's role as a run recorded it: the analysis's ``roles``, or (results written before roles
    existed) ``baseline`` for the upstream entries marked as baselines."""
    analysis = results.get("analysis")
    roles = analysis.get("roles") if isinstance(analysis, dict) else None
    if isinstance(roles, dict):
        return {str(m): str(r) for m, r in roles.items()}
    upstream = results.get("upstream")
    if not isinstance(upstream, dict):
        return {}
    return {str(m): "baseline" for m, u in upstream.items() if isinstance(u, dict) and u.get("baseline")}
