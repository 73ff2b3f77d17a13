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

    A replicate draws as many groups as there are, with replacement; each draw is a group of its own (a user
    drawn twice counts as two users). :func:`pair_weighted` and :func:`macro` are computed for all replicates
    at once from the groups' sums and counts; any other ``stat`` is called once per replicate on the same draws.
    Returns (nan, nan) for fewer than two groups: one user gives no between-user variance to resample.
    """
    uniq, inv = np.unique(np.asarray(groups), return_inverse=True)
    G = len(uniq)
    if G < 2 or n_boot <= 0:
        return float("nan"), float("nan")
    values = np.asarray(values, np.float64)
    inv = inv.ravel()
    picks = np.random.default_rng(seed).integers(0, G, (n_boot, G))
    if stat is pair_weighted or stat is macro:
        # draws[b, g]: how often replicate b drew group g
        draws = np.bincount((picks + G * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * G)
        draws = draws.reshape(n_boot, G).astype(np.float64)
        sums = np.bincount(inv, weights=values, minlength=G)
        sizes = np.bincount(inv, minlength=G).astype(np.float64)
        stats = draws @ sums / (draws @ sizes) if stat is pair_weighted else draws @ (sums / sizes) / G
    else:
        members = [np.flatnonzero(inv == g) for g in range(G)]
        stats = np.empty(n_boot)
        for b, pick in enumerate(picks):
            idx = np.concatenate([members[g] for g in pick])
            new_groups = np.repeat(np.arange(G), [len(members[g]) for g in pick])
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
