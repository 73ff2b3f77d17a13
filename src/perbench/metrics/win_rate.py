"""Reward-hacking win rate (Rezk et al.): each RM judges its **own** guided output against the zero-shot
output for the same (prompt, user). A win is 1, a tie ½, a loss 0; a NaN score (unscorable) is counted
as invalid and left out of the mean. Rezk et al. report 85–100 % while ground-truth quality barely moves:
a high win rate says the decoder optimised the RM, not that the output got better.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perbench.data.records import Prompt
from perbench.rewards.base import RewardModel, ScoreItem


def win_outcomes(guided: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """1 / ½ / 0 per item (guided scored above / equal to / below the baseline); NaN where either is NaN."""
    a, b = np.asarray(guided, np.float64), np.asarray(baseline, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"win_outcomes: {a.shape} vs {b.shape}")
    out = np.where(a > b, 1.0, np.where(a == b, 0.5, 0.0))
    out[np.isnan(a) | np.isnan(b)] = np.nan
    return out


def win_summary(
    outcomes: np.ndarray, users: Sequence[str] | None = None, *, n_boot: int = 0, seed: int = 0
) -> dict[str, Any]:
    """Win rate with wins / ties / losses / invalid counts and, given users, a CI resampled by user."""
    o = np.asarray(outcomes, np.float64)
    ok = ~np.isnan(o)
    out: dict[str, Any] = {
        "win_rate": float(o[ok].mean()) if ok.any() else float("nan"),
        "wins": int((o == 1.0).sum()),
        "ties": int((o == 0.5).sum()),
        "losses": int((o == 0.0).sum()),
        "invalid": int((~ok).sum()),
        "n": len(o),
        "tie_value": 0.5,
    }
    if users is not None and n_boot > 0 and ok.any():
        from perbench.stats.intervals import bootstrap_by_group, pair_weighted

        lo, hi = bootstrap_by_group(
            o[ok], [u for u, k in zip(users, ok, strict=True) if k], pair_weighted, n_boot=n_boot, seed=seed
        )
        out["ci"] = [lo, hi]
    return out


def win_rate(
    rm: RewardModel,
    targets: Sequence[tuple[Prompt, str]],
    guided: Sequence[str],
    baseline: Sequence[str],
    *,
    n_boot: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """Score ``guided[i]`` and ``baseline[i]`` for target i = (prompt, user) with ``rm`` and summarise."""
    if not len(targets) == len(guided) == len(baseline):
        raise ValueError(f"win_rate: {len(targets)} targets, {len(guided)} guided, {len(baseline)} baseline")
    mine = rm.score_distinct([ScoreItem(u, p, y) for (p, u), y in zip(targets, guided, strict=True)])
    base = rm.score_distinct([ScoreItem(u, p, y) for (p, u), y in zip(targets, baseline, strict=True)])
    out = win_summary(win_outcomes(mine, base), [u for _, u in targets], n_boot=n_boot, seed=seed)
    out["outcomes"] = win_outcomes(mine, base).tolist()
    return out
