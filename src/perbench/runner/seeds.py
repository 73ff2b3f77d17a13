"""``seeds: [0, 1, 2]``: the whole config once per seed, then one analysis over every seed's cells.

Each seed is an ordinary run in its own directory (so it resumes on its own); the parent directory holds the
pooled ``cells.jsonl``, a ``results.json`` whose analysis table gives the mean over seeds and the sd across them
(``sd_seeds``) for every number, and what the caller's ``finish`` writes from it (the report).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perbench.io import atomic_write_json, atomic_write_text, writing_inside
from perbench.runner.outcome import RunResult

if TYPE_CHECKING:
    from perbench.config import RunConfig


def run_seeds(
    cfg: RunConfig,
    run_one: Callable[[RunConfig], RunResult],
    finish: Callable[[RunResult], object] | None = None,
) -> RunResult:
    """Run ``cfg`` once per seed with ``run_one`` (the single-seed run), then pool every seed's cells; ``finish``
    gets the pooled run in its directory."""
    import yaml

    from perbench.metrics.rm_accuracy import invalid_pairs
    from perbench.runner.cells import Cells, read_cells
    from perbench.runner.results import analyze_cells, fit_reference_lines
    from perbench.runner.state import log
    from perbench.runner.summary import print_verdict

    assert cfg.seeds
    runs = []
    for i, s in enumerate(cfg.seeds, 1):
        name = None if cfg.run_name is None else f"{cfg.run_name}-seed{s}"
        log(f"seed {s} ({i} of {len(cfg.seeds)} seeds)")
        runs.append(run_one(dataclasses.replace(cfg, seeds=None, seed=s, run_name=name)))
    parent = cfg.run_dir()
    parent.mkdir(parents=True, exist_ok=True)
    with writing_inside(parent):  # nothing written through a link inside the parent run directory
        atomic_write_text(parent / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        pooled = Cells("seeds")
        for r in runs:
            pooled.rows += read_cells(r.run_dir / "cells.jsonl")
        pooled.write(parent / "cells.jsonl")
        first = runs[0].results
        invalid: Counter[str] = Counter()
        for r in runs:
            invalid.update(invalid_pairs(r.results.get("upstream") or {}))
        # a system any seed's fit calls a reference line (fit_notes) stays one in the pooled analysis
        roles = {k: v for r in runs for k, v in fit_reference_lines(r.results.get("upstream") or {}).items()}
        analysis = analyze_cells(
            pooled.rows, cfg, systems=(first.get("systems") or {}).get("members"), invalid=invalid, roles=roles
        )
        results: dict[str, Any] = {
            **first,
            "config": cfg.to_dict(),
            "config_hash": cfg.result_hash(),
            "analysis": analysis,
            "cells": pooled.record(),
            "seed_runs": [{"seed": s, "run_dir": str(r.run_dir)} for s, r in zip(cfg.seeds, runs, strict=True)],
            "note": "upstream/downstream sections are seed "
            f"{cfg.seeds[0]}'s; the analysis pools every seed (mean over seeds, sd across them)",
        }
        atomic_write_json(parent / "results.json", results)
        print_verdict(analysis)
        log(f"results (all seeds): {parent / 'results.json'}")
        pooled_run = RunResult(parent, results, [])
        if finish is not None:
            finish(pooled_run)
    return pooled_run
