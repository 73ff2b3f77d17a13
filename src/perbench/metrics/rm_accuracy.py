"""RM accuracy with honest accounting: an explicit tie rule, the tie count, per-user numbers, pair- and
user-weighted (macro) means, and bootstrap CIs that resample users."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from perbench.stats.intervals import bootstrap_by_group, macro, pair_weighted

TiePolicy = Literal["strict", "half"]


def pair_outcomes(s_chosen: np.ndarray, s_rejected: np.ndarray, tie: TiePolicy = "strict") -> np.ndarray:
    """1 if chosen scores higher, 0 if lower; a tie is 0 (``strict``, as reference code does) or ½ (``half``).
    A NaN score (e.g. an unparseable judge answer) is always 0."""
    if tie not in ("strict", "half"):
        raise ValueError(f"tie policy must be 'strict' or 'half', got {tie!r}")
    s_w, s_l = np.asarray(s_chosen, np.float64), np.asarray(s_rejected, np.float64)
    out = (s_w > s_l).astype(np.float64)
    ties = s_w == s_l
    if tie == "half":
        out[ties] = 0.5
    out[np.isnan(s_w) | np.isnan(s_l)] = 0.0
    return out


def accuracy_summary(
    outcomes: np.ndarray,
    users: Sequence[str],
    *,
    ties: int = 0,
    tie: TiePolicy = "strict",
    n_boot: int = 1000,
    seed: int = 0,
    invalid: int = 0,
    prompts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Pair-weighted accuracy, macro (mean of per-user accuracies), per-user table. The accuracy's CI resamples
    users and prompts jointly when ``prompts`` is given (two-way bootstrap), else users; the macro CI resamples
    users."""
    outcomes = np.asarray(outcomes, np.float64)
    groups = np.asarray(users)
    per_user: dict[str, dict[str, float]] = {}
    for u in sorted(set(users)):
        m = groups == u
        per_user[u] = {"accuracy": float(outcomes[m].mean()), "n": int(m.sum())}
    if prompts is not None:
        from perbench.stats.bootstrap import two_way_ci

        ci = two_way_ci(outcomes, list(users), list(prompts), n_boot=n_boot, seed=seed)
        lo, hi = (float("nan"), float("nan")) if ci is None else ci
    else:
        lo, hi = bootstrap_by_group(outcomes, list(users), pair_weighted, n_boot=n_boot, seed=seed)
    mlo, mhi = bootstrap_by_group(outcomes, list(users), macro, n_boot=n_boot, seed=seed)
    return {
        "accuracy": pair_weighted(outcomes, groups),
        "ci": [lo, hi],
        "macro": macro(outcomes, groups),
        "macro_ci": [mlo, mhi],
        "n_pairs": len(outcomes),
        "n_users": len(per_user),
        "ties": int(ties),
        "invalid": int(invalid),
        "tie_policy": tie,
        "ci_resamples": "users × prompts" if prompts is not None else "users",
        "per_user": per_user,
    }


def invalid_pairs(upstream: Mapping[str, Any]) -> dict[str, int]:
    """Per system of a run's ``upstream`` section, the test pairs it gave an invalid (NaN) score or answer (seen
    and unseen users: the ``all`` group where there is one); systems without any are left out."""
    out: dict[str, int] = {}
    for label, entry in upstream.items():
        acc = entry.get("rm_accuracy") if isinstance(entry, Mapping) else None
        if not isinstance(acc, Mapping):
            continue
        groups = ["all"] if isinstance(acc.get("all"), Mapping) else ["seen", "unseen"]
        n = sum(int(acc[g].get("invalid") or 0) for g in groups if isinstance(acc.get(g), Mapping))
        if n:
            out[str(label)] = n
    return out


def rm_accuracy(
    s_chosen: np.ndarray,
    s_rejected: np.ndarray,
    users: Sequence[str],
    *,
    tie: TiePolicy = "strict",
    n_boot: int = 1000,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
) -> dict[str, Any]:
    s_w, s_l = np.asarray(s_chosen, np.float64), np.asarray(s_rejected, np.float64)
    invalid = int((np.isnan(s_w) | np.isnan(s_l)).sum())
    ties = int((s_w == s_l).sum())
    return accuracy_summary(
        pair_outcomes(s_w, s_l, tie),
        users,
        ties=ties,
        tie=tie,
        n_boot=n_boot,
        seed=seed,
        invalid=invalid,
        prompts=prompts,
    )


def preference_outcomes(prefs: np.ndarray, tie: TiePolicy = "strict") -> np.ndarray:
    """Per-pair outcome from a pairwise judge's preferences: 1 / 0, a tie (0.5) is ½ or 0 under the tie rule,
    an unparseable answer (NaN) is 0."""
    out = np.nan_to_num(np.asarray(prefs, np.float64), nan=0.0)
    out[out == 0.5] = 0.5 if tie == "half" else 0.0
    return out


def preference_accuracy(
    prefs: np.ndarray,
    users: Sequence[str],
    *,
    tie: TiePolicy = "strict",
    n_boot: int = 1000,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Accuracy from a pairwise judge's preferences (1 / 0 / 0.5 tie / NaN parse failure = wrong)."""
    prefs = np.asarray(prefs, np.float64)
    invalid = int(np.isnan(prefs).sum())
    ties = int((prefs == 0.5).sum())
    out = preference_outcomes(prefs, tie)
    return accuracy_summary(out, users, ties=ties, tie=tie, n_boot=n_boot, seed=seed, invalid=invalid, prompts=prompts)
