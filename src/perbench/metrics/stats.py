"""Bootstrap confidence intervals resampled by user (cluster bootstrap)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def bootstrap_by_group(
    values: np.ndarray,
    groups: Sequence[str],
    stat: Callable[[np.ndarray, np.ndarray], float],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """CI of ``stat(values, group_index)`` when whole groups (users) are resampled with replacement.

    Returns (nan, nan) for fewer than two groups: one user gives no between-user variance to resample.
    """
    uniq, inv = np.unique(np.asarray(groups), return_inverse=True)
    if len(uniq) < 2 or n_boot <= 0:
        return float("nan"), float("nan")
    members = [np.flatnonzero(inv == g) for g in range(len(uniq))]
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, len(uniq), len(uniq))
        idx = np.concatenate([members[g] for g in pick])
        new_groups = np.concatenate([np.full(len(members[g]), j) for j, g in enumerate(pick)])
        stats[b] = stat(values[idx], new_groups)
    lo, hi = np.nanquantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def pair_weighted(values: np.ndarray, groups: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def macro(values: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups of the group mean."""
    if not len(values):
        return float("nan")
    _, inv = np.unique(groups, return_inverse=True)
    sums = np.bincount(inv, weights=values)
    counts = np.bincount(inv)
    return float(np.mean(sums / counts))
