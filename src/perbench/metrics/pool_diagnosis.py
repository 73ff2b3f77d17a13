"""Per-pole, per-user and per-prompt diagnosis of one reward model on a Best-of-N pool: which of the users'
wants its reward follows, for whom it collapses, and on which prompts it rewards the wrong samples.

Everything is read from the pool at no extra generation cost: for each (user, prompt) cell, the system's reward of
the cell's N samples and their exact truth (and, per rubric pole the user wants, whether each sample meets it).
The unit of evidence is the within-pool Spearman ρ (:func:`perbench.metrics.onpolicy.within_pool_spearman`):
does the reward order the pool the way the truth does? Cells where the truth is constant across the pool carry
no information and are counted, not averaged in.

- **Poles** (the failure mode "it learned the wrong poles"): per pole, the mean ρ between the reward and the pole's
  0/1 satisfaction over the cells whose user wants it.
- **User-level collapse** ("user collapse"): a user for whom the reward is nearly constant within pools (the median
  within-pool spread below :data:`FLAT` × the system's median over all cells: *flat*), or does not follow the truth
  (the 95 % t-interval of the mean ρ over the user's prompts reaches 0 or below: *blind*); a user with fewer than
  two pools whose truth varies is listed as without evidence, not as collapsed.
- **Query-level reward hacking**: a prompt whose mean ρ over its users has a 95 % t-interval entirely below 0: the
  reward prefers the samples that fit its users worse.
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
    collapsed = []
    uninformative: list[str] = []  # fewer than 2 of the user's pools vary in truth: nothing to judge them by
    for u, idx in sorted(_groups(users).items()):
        ur, us = rho[idx], spread[idx]
        med = float(np.nanmedian(us)) if np.isfinite(us).any() else 0.0
        uci = _t_interval(ur)
        reason = None
        if med <= FLAT * typical:
            reason = "flat"
        elif uci is not None and uci[0] <= 0:
            reason = "blind"
        elif uci is None:
            uninformative.append(u)
        if reason:
            entry = {"user": u, "reason": reason, "rho": _mean(ur), "ci": None if uci is None else list(uci)}
            collapsed.append({**entry, "spread": med, "typical_spread": typical, "prompts": len(idx)})
    out["collapsed_users"] = collapsed
    out["users_without_evidence"] = uninformative
    hacked = []
    for p, idx in sorted(_groups(prompts).items()):
        pr = rho[idx]
        pci = _t_interval(pr)
        if pci is not None and pci[1] < 0:
            hacked.append({"prompt": p, "rho": _mean(pr), "ci": list(pci), "users": int(np.isfinite(pr).sum())})
    out["hacked_prompts"] = sorted(hacked, key=lambda e: e["rho"])
    out["rules"] = {
        "flat": f"median within-pool reward spread below {FLAT:g} × the system's median over all cells",
        "blind": "the 95% t-interval of the user's mean within-pool ρ(reward, truth) over prompts reaches 0",
        "hacked": "the 95% t-interval of the prompt's mean within-pool ρ(reward, truth) over users is below 0",
    }
    return out
