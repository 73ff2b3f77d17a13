"""Per-pole, per-user and per-prompt diagnosis of one reward model on a Best-of-N pool: which of the users'
wants its reward follows, for whom it collapses, and on which prompts it rewards the wrong samples.

Everything is read from the pool at no extra generation cost: for each (user, prompt) cell, the system's reward of
the cell's N samples and their exact truth (and, per rubric pole the user wants, whether each sample meets it).
The unit of evidence is the within-pool Spearman ρ (:func:`perbench.metrics.onpolicy.within_pool_spearman`):
does the reward order the pool the way the truth does? Cells where the truth is constant across the pool carry
no information and are counted, not averaged in.

- **Poles** (the failure mode "it learned the wrong poles"): per pole, the mean ρ between the reward and the pole's
  0/1 satisfaction over the cells whose user wants it.
- **The null** for users and prompts is a scorer with no information about the samples: the pool's sample labels
  permuted (:data:`N_PERM` permutations, one per prompt and replicate, shared by every user of the prompt, so a
  user-agnostic scorer's correlation across users is kept), each user's or prompt's mean ρ placed among the means the
  permuted scores give (a one-sided permutation p-value), and Holm's step-down adjustment across the users (across
  the prompts) controls the family-wise error at 1 − :data:`LEVEL`. A t-interval over users or prompts would treat
  correlated cells as independent: a random scorer would "hack" some prompt in almost every pool.
- **User-level collapse** ("user collapse"): a user for whom the reward is nearly constant within pools (the median
  within-pool spread below :data:`FLAT` × the system's median over all cells: *flat*), or orders the pools worse
  than a scorer with no information would (mean ρ below the null, Holm-adjusted: *reversed*). A user whose mean ρ is
  not shown above the null is listed as *no evidence of signal* (``users_without_signal``): a statement about the
  data, not a finding of collapse; a user with fewer than two pools whose truth varies is listed as without
  evidence (``users_without_evidence``).
- **Query-level reward hacking**: a prompt whose mean ρ over its users is below the null (Holm-adjusted across
  prompts): the reward prefers the samples that fit its users worse than a random scorer would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perbench.metrics.onpolicy import within_pool_spearman, within_pool_spread

FloatArray = npt.NDArray[np.float64]

#: a user's rewards are "flat" when their median within-pool spread is below this share of the system's median
FLAT = 0.05
LEVEL = 0.95
#: permutations of the pool's sample labels for the random-scorer null (p-values down to 1 / (N_PERM + 1))
N_PERM = 999


def _t_interval(x: FloatArray, level: float = LEVEL) -> tuple[float, float] | None:
    """The t-interval of the mean of ``x`` (None with fewer than 2 values)."""
    from scipy.stats import t

    x = x[np.isfinite(x)]
    if x.size < 2:
        return None
    half = float(t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    m = float(x.mean())
    return m - half, m + half


def _mean(x: FloatArray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _groups(labels: Sequence[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, g in enumerate(labels):
        out.setdefault(g, []).append(i)
    return out


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence between the tests)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out = [1.0] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def _centred_ranks(x: FloatArray) -> FloatArray:
    from scipy.stats import rankdata

    r: FloatArray = rankdata(x, axis=1, method="average").astype(np.float64)
    out: FloatArray = r - r.mean(1, keepdims=True)
    return out


def null_rhos(
    scores: FloatArray, truth: FloatArray, prompts: Sequence[str], n_perm: int = N_PERM, seed: int = 0
) -> FloatArray:
    """(n_perm, cells): each cell's within-pool Spearman ρ with its scores' sample labels permuted, one permutation per
    prompt and replicate shared by the prompt's cells (NaN where the observed ρ is NaN)."""
    S = np.asarray(scores, np.float64)
    T = np.asarray(truth, np.float64)
    out = np.full((n_perm, S.shape[0]), np.nan)
    ok = ~(np.isnan(S).any(1) | np.isnan(T).any(1))
    if not ok.any():
        return out
    rs = np.zeros_like(S)
    rq = np.zeros_like(T)
    rs[ok], rq[ok] = _centred_ranks(S[ok]), _centred_ranks(T[ok])
    den = np.sqrt((rs * rs).sum(1) * (rq * rq).sum(1))
    ok &= den > 0
    rng = np.random.default_rng(seed)
    for _, idx in sorted(_groups(prompts).items()):
        cells = np.array([i for i in idx if ok[i]], dtype=np.intp)
        perms = np.argsort(rng.random((n_perm, S.shape[1])), axis=1)
        if cells.size:
            num = np.matmul(rs[cells][:, perms], rq[cells][:, :, None])[..., 0]  # (cells, n_perm)
            out[:, cells] = (num / den[cells, None]).T
    return out


def _p_values(rho: FloatArray, null: FloatArray, groups: Sequence[Sequence[int]]) -> list[tuple[float, float]]:
    """Per group of cells, one-sided permutation p-values (below, above) of the mean ρ over its cells with a finite
    ρ (the null's ρ is finite on exactly those cells)."""
    finite = np.isfinite(rho)
    member = np.zeros((rho.size, len(groups)))
    for j, idx in enumerate(groups):
        member[[i for i in idx if finite[i]], j] = 1.0
    n = member.sum(0)
    obs = np.where(finite, rho, 0.0) @ member / n
    means = np.where(np.isfinite(null), null, 0.0) @ member / n  # (n_perm, groups)
    tol = 1e-12 * np.maximum(1.0, np.abs(obs))
    below = (1 + (means <= obs + tol).sum(0)) / (means.shape[0] + 1)
    above = (1 + (means >= obs - tol).sum(0)) / (means.shape[0] + 1)
    return [(float(lo), float(hi)) for lo, hi in zip(below, above, strict=True)]


def diagnose(
    scores: FloatArray,
    truth: FloatArray,
    wants: Mapping[str, FloatArray],
    users: Sequence[str],
    prompts: Sequence[str],
) -> dict[str, Any]:
    """The diagnosis of one system (see the module docstring); rows of ``scores`` / ``truth`` / each ``wants[pole]``
    are the cells (user ``users[i]``, prompt ``prompts[i]``), columns the pool's samples."""
    S = np.asarray(scores, np.float64)
    T = np.asarray(truth, np.float64)
    rho = within_pool_spearman(S, T)
    spread = within_pool_spread(S)
    constant = int(np.sum(np.nanmax(T, 1) == np.nanmin(T, 1))) if T.size else 0
    ci = _t_interval(rho)
    out: dict[str, Any] = {
        "cells": int(S.shape[0]),
        "cells_constant_truth": constant,
        "rho_truth": {"mean": _mean(rho), "ci": None if ci is None else list(ci), "cells": int(np.isfinite(rho).sum())},
    }
    poles: dict[str, Any] = {}
    for pole, w in sorted(wants.items()):
        w = np.asarray(w, np.float64)
        wanted = ~np.isnan(w).all(1)
        if not wanted.any():
            continue
        r = np.full(S.shape[0], np.nan)
        r[wanted] = within_pool_spearman(S[wanted], w[wanted])
        pci = _t_interval(r)
        poles[pole] = {
            "rho": _mean(r),
            "ci": None if pci is None else list(pci),
            "cells": int(np.isfinite(r).sum()),
            "cells_wanting": int(wanted.sum()),
            "met": float(np.nanmean(w[wanted])),
        }
    out["poles"] = poles
    typical = float(np.nanmedian(spread)) if np.isfinite(spread).any() else 0.0
    null = null_rhos(S, T, prompts)
    alpha = 1 - LEVEL
    users_idx = sorted(_groups(users).items())
    testable = [(u, idx) for u, idx in users_idx if np.isfinite(rho[idx]).sum() >= 2]
    tests = dict(zip([u for u, _ in testable], _p_values(rho, null, [idx for _, idx in testable]), strict=True))
    low = dict(zip(tests, holm([t[0] for t in tests.values()]), strict=True))
    high = dict(zip(tests, holm([t[1] for t in tests.values()]), strict=True))
    collapsed = []
    no_signal = []
    for u, idx in users_idx:
        ur, us = rho[idx], spread[idx]
        med = float(np.nanmedian(us)) if np.isfinite(us).any() else 0.0
        reason = "flat" if med <= FLAT * typical else "reversed" if u in low and low[u] <= alpha else None
        entry = {"user": u, "rho": _mean(ur), "prompts": len(idx)}
        if u in tests:
            entry.update(p_below=tests[u][0], p_below_adjusted=low[u], p_above=tests[u][1], p_above_adjusted=high[u])
        if reason:
            collapsed.append({**entry, "reason": reason, "spread": med, "typical_spread": typical})
        elif u in high and high[u] > alpha:
            no_signal.append(entry)
    out["collapsed_users"] = collapsed
    out["users_without_signal"] = no_signal
    out["users_tested"] = len(tests)
    out["users_without_evidence"] = [u for u, _ in users_idx if u not in tests]
    by_prompt = [(p, idx) for p, idx in sorted(_groups(prompts).items()) if np.isfinite(rho[idx]).sum() >= 2]
    p_low = [p[0] for p in _p_values(rho, null, [idx for _, idx in by_prompt])]
    adjusted = holm(p_low)
    hacked = [
        {"prompt": p, "rho": _mean(rho[idx]), "p": pl, "p_adjusted": pa, "users": int(np.isfinite(rho[idx]).sum())}
        for (p, idx), pl, pa in zip(by_prompt, p_low, adjusted, strict=True)
        if pa <= alpha
    ]
    out["hacked_prompts"] = sorted(hacked, key=lambda e: e["rho"])
    out["prompts_tested"] = len(by_prompt)
    level = f"Holm-adjusted at {100 * alpha:g}%"
    null_rule = f"{N_PERM} permutations of the pool's sample labels per prompt (a scorer with no information)"
    out["rules"] = {
        "null": null_rule,
        "flat": f"median within-pool reward spread below {FLAT:g} × the system's median over all cells",
        "reversed": f"the user's mean within-pool ρ(reward, truth) over prompts below the null's ({level} across "
        "users)",
        "no evidence of signal": f"the user's mean ρ not shown above the null's ({level} across users)",
        "hacked": f"the prompt's mean ρ over users below the null's ({level} across prompts)",
    }
    return out
