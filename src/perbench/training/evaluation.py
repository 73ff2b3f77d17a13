"""Summaries of trained policies whose rows come from several training seeds.

An *arm* (the policies trained with one reward, a reference such as the placebo, the KL-matched random update
or the untrained base policy) is evaluated on (user, prompt) cells, once per training seed: per metric an
(S, n) matrix (for sampled evaluation, each entry is the mean over that cell's samples). A value is the mean
over seeds and cells; its CI (:func:`perbench.stats.seeded.seeded_bootstrap`) resamples the cells as
every downstream CI does and the seeds on top (with the unbiased seed variance), so it carries the variance
between training runs. A comparison of two arms is paired on the cells both cover, and on the seeds when both
arms were trained with the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perbench.stats.bootstrap import percentile_ci
from perbench.stats.seeded import seed_note, seeded_bootstrap


@dataclass(frozen=True)
class ArmValues:
    """One arm in one evaluation mode: ``values[metric]`` is (S, n) over ``cells`` (user, prompt id), one row
    per training seed, NaN where the metric does not apply."""

    label: str
    seeds: tuple[int, ...]
    cells: tuple[tuple[str, str], ...]
    values: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        for metric, m in self.values.items():
            if m.shape != (len(self.seeds), len(self.cells)):
                raise ValueError(
                    f"{self.label}: {metric} has shape {m.shape}, expected ({len(self.seeds)}, {len(self.cells)})"
                )


def _join(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def _finite(arms: Sequence[ArmValues], metric: str) -> tuple[list[tuple[str, str]], list[np.ndarray]]:
    """The cells every arm covers with a finite value of ``metric`` for every seed, and each arm's matrix there."""
    common: list[tuple[str, str]] | None = None
    for a in arms:
        m = a.values.get(metric)
        if m is None:
            return [], []
        ok = {c for c, good in zip(a.cells, np.isfinite(m).all(0), strict=True) if good}
        common = [c for c in (a.cells if common is None else common) if c in ok]
    cells = common or []
    mats = []
    for a in arms:
        index = {c: i for i, c in enumerate(a.cells)}
        mats.append(a.values[metric][:, [index[c] for c in cells]])
    return cells, mats


def summarise(
    arm: ArmValues, seen: Mapping[str, bool], *, n_boot: int, seed: int, metrics: Sequence[str] | None = None
) -> dict[str, Any]:
    """Per metric: ``mean`` (over seeds and cells), ``ci`` with ``ci_note`` (cells and seeds resampled), ``n``
    cells, ``seeds``, ``per_seed`` means, and the ``seen`` / ``unseen`` users' means."""
    out: dict[str, Any] = {}
    for metric in metrics or list(arm.values):
        cells, mats = _finite([arm], metric)
        if not cells:
            continue
        m = mats[0]
        users, prompts = [u for u, _ in cells], [p for _, p in cells]
        got = seeded_bootstrap([m], users, prompts, n_boot=n_boot, seed=seed)
        ci = percentile_ci(got.reps[:, 0]) if got.resampling.unit is not None and n_boot >= 2 else None
        per_cell = m.mean(0)
        entry: dict[str, Any] = {
            "mean": float(got.point[0]),
            "ci": None if ci is None else [ci[0], ci[1]],
            "ci_note": _join(got.resampling.note, seed_note(m.shape[0])),
            "n": len(cells),
            "seeds": m.shape[0],
            "per_seed": [float(v) for v in m.mean(1)],
        }
        for group, flag in (("seen", True), ("unseen", False)):
            g = per_cell[[seen.get(u) is flag for u in users]]
            entry[group] = float(g.mean()) if len(g) else None
        out[metric] = entry
    return out


def compare(
    arm: ArmValues, ref: ArmValues, *, n_boot: int, seed: int, metrics: Sequence[str] | None = None
) -> dict[str, Any]:
    """Per metric: ``delta`` = arm − ref on the cells both cover, its CI (cells drawn once for both sides; seeds
    drawn once for both when both arms were trained with the same seeds, which pairs each run with its
    counterpart, else each side's on its own), ``ci_note``, ``n`` cells and ``excludes_zero``."""
    out: dict[str, Any] = {}
    for metric in metrics or [m for m in arm.values if m in ref.values]:
        cells, mats = _finite([arm, ref], metric)
        if not cells:
            continue
        got = seeded_bootstrap(
            mats,
            [u for u, _ in cells],
            [p for _, p in cells],
            n_boot=n_boot,
            seed=seed,
            seed_ids=[arm.seeds, ref.seeds],
        )
        diff = got.reps[:, 0] - got.reps[:, 1]
        ci = percentile_ci(diff) if got.resampling.unit is not None and n_boot >= 2 else None
        out[metric] = {
            "delta": float(got.point[0] - got.point[1]),
            "ci": None if ci is None else [ci[0], ci[1]],
            "ci_note": _join(got.resampling.note, seed_note(max(m.shape[0] for m in mats))),
            "n": len(cells),
            "excludes_zero": None if ci is None else bool(ci[0] > 0 or ci[1] < 0),
        }
    return out
