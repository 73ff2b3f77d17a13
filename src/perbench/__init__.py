"""perbench: which personalized reward model should I deploy?

Importing this package is light (no torch); heavy modules load on first use:
``perbench.run(CONFIG)`` (a config end to end, its report included: what ``perbench run`` does),
``perbench.load_rm(DIR)`` (a system written by ``perbench export``), ``perbench.read_cells(RUN_DIR)`` and
``perbench.read_samples(RUN_DIR)`` (a run's results as pandas data frames, one run or many) and
``perbench.read_systems(RUN_DIR)`` (one row per system: the leaderboard as a frame), ``perbench.bon_pick_texts``
(each Best-of-N pick with its text).
"""

from __future__ import annotations

import os as _os
from typing import Any

#: MKL's strict conditional numerical reproducibility: its matrix products give the same bits at any thread count,
#: so a unit's numbers do not depend on how many threads computed it (a Ray task's ``num_cpus`` or every core of a
#: local run: docs/cluster.md, "Threads"). MKL reads it once, at its first product, so it is set here, before
#: torch computes anything; a value already set is kept (``MKL_CBWR=AUTO`` opts out).
BLAS_ENV = ("MKL_CBWR", "AUTO,STRICT")
_os.environ.setdefault(*BLAS_ENV)

__version__ = "0.1.0"

__all__ = ["__version__", "bon_pick_texts", "load_rm", "read_cells", "read_samples", "read_systems", "run"]

_LAZY = {
    "load_rm": "perbench.export.load",
    "read_cells": "perbench.report.frames",
    "read_samples": "perbench.report.frames",
    "read_systems": "perbench.report.frames",
    "bon_pick_texts": "perbench.report.frames",
    "run": "perbench.api",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perbench' has no attribute {name!r}")
