"""Training seeds as a resampled factor: the bootstrap of values whose rows come from several independently trained
policies (RL training seeds), on top of the (user, prompt) draws of :mod:`.bootstrap`.

A replicate draws the cells as every other CI does and the S training seeds with replacement, then scales the seed
part by √(S/(S−1)): drawing S values with replacement gives the seed mean a variance (S−1)/S of the unbiased one,
which the scaling restores (:func:`combine_seeds`). Values trained with the same seeds (a reward's run, its
KL-matched random update and the placebo; every reward of one run) share one draw of them, so a difference keeps the
design's pairing. Two entry points: :func:`seeded_bootstrap` for the RL table (arms as (S, n) matrices on common
cells) and :func:`seeded_means` for the selection analysis (columns of long-format rows, each row tagged with its
training seed), the same replicate for the same data up to the random draws.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perbench.stats.bootstrap import MIN_LEVELS, FloatArray, Resampling, TwoWayBootstrap


def seed_note(n_seeds: int) -> str | None:
    """What the seed factor of a CI rests on (None: enough seeds to say nothing)."""
    if n_seeds == 1:
        return "one training seed: the CI leaves out the variance between training runs"
    if n_seeds < MIN_LEVELS:
        return f"only {n_seeds} training seeds (< {MIN_LEVELS}): the CI resamples them, but few runs say little"
    return None


def with_seeds(plan: Resampling, n_seeds: int) -> Resampling:
    """``plan`` of a column whose rows come from ``n_seeds`` training seeds, its note saying when they are few."""
    note = "; ".join(n for n in (plan.note, seed_note(n_seeds)) if n) or None
    return replace(plan, seeds=n_seeds, note=note)


def combine_seeds(per_seed: FloatArray, counts: Any) -> FloatArray:
    """Replicates (n_boot,) of a mean over S seeds from each seed's replicates (n_boot, S), all on the same cell
    draws, and the seeds' draw counts (n_boot, S): the seed mean's deviation scaled by √(S/(S−1))."""
    S = per_seed.shape[1]
    centre: FloatArray = per_seed.mean(1)
    if S < 2:
        return centre
    out: FloatArray = centre + np.sqrt(S / (S - 1)) * ((np.asarray(counts) * per_seed).sum(1) / S - centre)
    return out


def _draw(rng: np.random.Generator, S: int, n_boot: int) -> Any:
    return rng.multinomial(S, np.full(S, 1.0 / S), size=n_boot)  # (n_boot, S)


def seed_draws(seed: int, ids: Sequence[str], n_boot: int) -> Any:
    """(n_boot, S) counts of the training seeds ``ids``, keyed by their content: every column with these seeds gets
    the same counts, whichever other columns are present."""
    digest = hashlib.sha256("\x00".join(ids).encode("utf-8")).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return _draw(np.random.default_rng((abs(int(seed)), 4, *words)), len(ids), n_boot)


def seeded_means(
    boot: TwoWayBootstrap, values: Any, columns: Sequence[Any], seeds: Sequence[str | None], *, seed: int
) -> tuple[FloatArray, FloatArray, list[int]]:
    """:meth:`TwoWayBootstrap.means` with training seeds resampled: (point (n_cols,), replicates (n_boot, n_cols),
    training seeds per column (0: its rows carry none)). ``seeds`` labels each row's training seed (None: not
    a trained policy's row); a column with S ≥ 2 seeds is the mean over its seeds of each seed's mean, its replicates
    :func:`combine_seeds` of the seeds' replicates (same cell draws) with :func:`seed_draws` of its seed labels.
    Columns without seeds get exactly the replicates :meth:`TwoWayBootstrap.means` gives them."""
    lab = np.array(["" if s is None else str(s) for s in seeds], dtype=str)
    if lab.size != boot.n_rows:
        raise ValueError(f"{lab.size} seed labels for {boot.n_rows} rows")
    names, code = np.unique(lab, return_inverse=True)
    code = code.ravel()
    tagged = lab != ""
    expanded = [np.asarray(c, dtype=np.intp).ravel() for c in columns]
    n_cols = len(expanded)
    n_seeds = [0] * n_cols
    parts: dict[int, tuple[list[str], list[int]]] = {}
    for c in range(n_cols):
        rows = expanded[c]
        on = tagged[rows]
        if not on.any():
            continue
        if not on.all():
            raise ValueError(f"column {c}: {int((~on).sum())} of its {rows.size} rows carry no training seed")
        got = code[rows]
        ids = np.unique(got)
        n_seeds[c] = int(ids.size)
        if ids.size < 2:
            continue
        subs = []
        for s in ids.tolist():
            subs.append(len(expanded))
            expanded.append(rows[got == s])
        parts[c] = ([str(names[s]) for s in ids.tolist()], subs)
    point, reps = boot.means(values, expanded)
    for c, (labels, subs) in parts.items():
        point[c] = float(np.mean(point[subs]))
        if boot.n_boot:
            reps[:, c] = combine_seeds(reps[:, subs], seed_draws(seed, labels, boot.n_boot))
    return point[:n_cols], reps[:, :n_cols], n_seeds


@dataclass(frozen=True)
class SeededBootstrap:
    """Point means (n_arms,) and replicates (n_boot, n_arms) of arms whose rows come from several independently
    trained policies (seeds); ``resampling`` is the (user, prompt) unit shared by every arm."""

    point: FloatArray
    reps: FloatArray
    resampling: Resampling
    n_seeds: tuple[int, ...]  # S_k per arm


def seeded_bootstrap(
    arms: Sequence[Any],
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    min_levels: int = MIN_LEVELS,
    seed_ids: Sequence[Sequence[Any]] | None = None,
) -> SeededBootstrap:
    """Bootstrap of arms observed on the same n (user, prompt) cells, arm k once per training seed: an (S_k, n)
    array (S_k = 1 for an untrained reference such as the base policy).

    A replicate draws the cells as :func:`~perbench.stats.bootstrap.bootstrap_ci` does (two-way, or its fallback;
    one set of draws for every arm) and the S_k seeds with replacement (:func:`combine_seeds`). Arms trained with
    the same seeds (``seed_ids[k]``, the training seeds of arm k) share one draw of them; arms without ``seed_ids``
    or with their own seeds draw apart. So the interval carries the variance between training runs, not only
    between cells."""
    mats = [np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in arms]
    n = len(users)
    if any(m.shape[1] != n for m in mats):
        raise ValueError(f"every arm needs one column per cell ({n}), got {[m.shape for m in mats]}")
    if seed_ids is not None and [len(s) for s in seed_ids] != [m.shape[0] for m in mats]:
        raise ValueError(f"seed_ids: one id per row of each arm, got {[len(s) for s in seed_ids]}")
    boot = TwoWayBootstrap(users, prompts, n_boot=max(n_boot, 0), seed=seed, min_levels=min_levels)
    plan = boot.resampling(np.arange(n))
    point = np.array([m.mean() if m.size else np.nan for m in mats])
    reps = np.full((boot.n_boot, len(mats)), np.nan)
    if plan.unit is None or boot.n_boot == 0:
        return SeededBootstrap(point, reps, plan, tuple(m.shape[0] for m in mats))
    cols = [np.arange(n)]
    draws: dict[Any, np.ndarray] = {}
    for k, m in enumerate(mats):
        per_seed = np.stack([boot.means(row, cols)[1][:, 0] for row in m], axis=1)  # (n_boot, S_k), same draws
        S = m.shape[0]
        if S == 1:
            reps[:, k] = per_seed[:, 0]
            continue
        group = ("ids", tuple(seed_ids[k])) if seed_ids is not None else ("arm", k)
        if group not in draws:
            draws[group] = _draw(np.random.default_rng((seed, 3, len(draws))), S, boot.n_boot)
        reps[:, k] = combine_seeds(per_seed, draws[group])
    return SeededBootstrap(point, reps, plan, tuple(m.shape[0] for m in mats))
