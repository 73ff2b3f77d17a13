"""Ranking and decision: which deployable method leads a metric, and whether the data separate it from the rest,
establish that the rest are practically equivalent to it, or cannot tell yet.

- **Order.** Deployable methods by decreasing value; values equal up to float rounding (``TIE_TOL``) are ordered
  by name. Baselines, oracles and pure decoders are ``reference_lines``: shown, never ranked against the leader.
  On a metric with a random pick (a pooled decoder, :mod:`.headroom`) only the systems that beat it are ranked;
  the others are ``no_better_than_random`` (decision ``no_better_than_random`` when that is all of them).
- **Simultaneous intervals.** For the k − 1 differences Δ_j = leader − m_j (paired on the cells both cover), the
  bootstrap replicates give se*_j and T = max_j |Δ*_j − Δ̂_j| / se*_j; with c the ``level`` quantile of T, every
  interval is Δ̂_j ± c·se*_j, so all of them hold together with probability ``level`` (family-wise).
- **Equivalence** (two one-sided tests at α = 1 − level): m is practically equivalent to the leader when the
  (1 − 2α) percentile CI of Δ lies inside (−ε, +ε). Not being separated is not equivalence.
- **Identical.** Two methods with the same value on every cell differ by exactly 0: "identical", not an interval.
- **Decision.** ``separable`` when every other method is excluded by its simultaneous interval (lower bound > 0)
  or identical to the leader (at least one excluded); ``equivalent`` when each method not excluded is identical
  or established equivalent; else ``undecided``, and ``contenders`` lists the methods neither excluded nor
  equivalent (where more cells would decide). ``best`` is the leader only when separable; ``tied`` is the leader
  and the contenders. A "separable" or "equivalent" decision whose CIs could not resample users and prompts
  (fewer than 5 users: prompts or pairs only) is ``too_little_data`` instead: no deploy, no equivalence.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import FloatArray, ci_, f_, order_by_value
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.roles import DEPLOYABLE

SEPARABLE, EQUIVALENT, UNDECIDED = "separable", "equivalent", "undecided"
#: no deployable method beats the random pick of the metric's pool
NO_BETTER = "no_better_than_random"
#: the CIs could not resample users and prompts (or the planner says the claim needs more cells): no claim
TOO_LITTLE = "too_little_data"


def simultaneous(
    points: Sequence[float], reps: Sequence[FloatArray], level: float
) -> tuple[float | None, list[tuple[float, float]]]:
    """The max-statistic critical value c and the intervals Δ̂_j ± c·se*_j (see the module docstring).

    A difference whose replicates never vary (se* = 0) gets the zero-width interval [Δ̂, Δ̂]; c is None when no
    difference varies or no replicate is finite.
    """
    if not points:
        return None, []
    pts = np.asarray(points, dtype=np.float64)
    mat = np.stack([np.asarray(r, dtype=np.float64) for r in reps], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.nanstd(mat, axis=0, ddof=1) if mat.shape[0] > 1 else np.zeros(len(pts))
    se = np.where(np.isfinite(se), se, 0.0)
    vary = se > 1e-12 * np.maximum(1.0, np.abs(pts))  # float noise of a constant is not variation
    crit: float | None = None
    if vary.any():
        z = np.abs(mat[:, vary] - pts[vary]) / se[vary]
        finite = np.isfinite(z).any(axis=1)
        if finite.any():
            t = np.nanmax(np.where(np.isfinite(z[finite]), z[finite], np.nan), axis=1)
            crit = float(np.quantile(t, level))
    half = np.where(vary, se * (crit if crit is not None else 0.0), 0.0)
    return crit, [(float(p - h), float(p + h)) for p, h in zip(pts, half, strict=True)]


def simultaneous_lower(
    points: Sequence[float], reps: Sequence[FloatArray], level: float
) -> tuple[float | None, list[float]]:
    """One-sided simultaneous lower bounds for several differences Δ_j (each system − the null, say): with se*_j
    the replicates' sd and T = max_j (Δ*_j − Δ̂_j) / se*_j over the bootstrap, c is the ``level`` quantile of T and
    every bound is Δ̂_j − c·se*_j, so P(Δ_j ≥ bound_j for every j) ≈ ``level`` (family-wise, one-sided).

    A difference whose replicates never vary gets its point as bound; c is None when none varies."""
    if not points:
        return None, []
    pts = np.asarray(points, dtype=np.float64)
    mat = np.stack([np.asarray(r, dtype=np.float64) for r in reps], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.nanstd(mat, axis=0, ddof=1) if mat.shape[0] > 1 else np.zeros(len(pts))
    se = np.where(np.isfinite(se), se, 0.0)
    vary = se > 1e-12 * np.maximum(1.0, np.abs(pts))
    crit: float | None = None
    if vary.any():
        z = (mat[:, vary] - pts[vary]) / se[vary]
        finite = np.isfinite(z).any(axis=1)
        if finite.any():
            t = np.nanmax(np.where(np.isfinite(z[finite]), z[finite], np.nan), axis=1)
            crit = float(np.quantile(t, level))
    half = np.where(vary, se * (crit if crit is not None else 0.0), 0.0)
    return crit, [float(p - h) for p, h in zip(pts, half, strict=True)]


def tost_level(level: float) -> float:
    """The (1 − 2α) level of two one-sided tests at α = 1 − level (0.90 for level 0.95)."""
    return max(0.0, 2 * level - 1)


def _status(c: Mapping[str, Any]) -> str:
    if c["identical"]:
        return "identical"
    if c["excluded"]:
        return "excluded"
    return "equivalent" if c["equivalent"] else "contender"


def ranking(
    est: Estimates,
    metric: str,
    roles: Mapping[str, str],
    margin: float,
    candidates: Collection[str] | None = None,
) -> dict[str, Any]:
    """The ranking entry of one metric (``analyze(...)["ranking"][metric]``). ``candidates``: the deployable methods
    that may be ranked at all (those that beat the metric's random pick, :mod:`.headroom`); the others are listed
    under ``no_better_than_random`` and are never best, tied, equivalent or a contender."""
    vals = {m: e.point for m in est.methods_with(metric) if (e := est.value(m, metric)) is not None}
    deployable = {m: v for m, v in vals.items() if roles.get(m, DEPLOYABLE) == DEPLOYABLE}
    below = [] if candidates is None else [m for m in order_by_value(deployable) if m not in set(candidates)]
    order = order_by_value({m: v for m, v in deployable.items() if m not in below})
    res: dict[str, Any] = {
        "order": order, "best": None, "tied": order[:1], "vs_runner_up": None,
        "decision": None, "equivalent": [], "contenders": [], "identical": [], "comparisons": [],
        "reference_lines": [m for m in order_by_value(vals) if m not in deployable],
        "no_better_than_random": below,
        "margin": margin, "level": est.level, "equivalence_level": tost_level(est.level),
        "critical_value": None, "reason": None,
    }  # fmt: skip
    if not order:
        res.update(
            decision=NO_BETTER if below else UNDECIDED,
            tied=[],
            reason=(
                f"no deployable method beats the random pick on {metric}"
                if below
                else f"no deployable method has {metric} rows"
            ),
        )
        return res
    thin = thin_data(est, metric, [*order, *below])
    if thin:
        res["thin"] = thin
    if len(order) == 1:
        if thin:
            res.update(decision=TOO_LITTLE, reason=thin)
        else:
            only = "that beats the random pick" if below else "deployable method"
            res.update(best=order[0], decision=SEPARABLE, reason=f"{order[0]} is the only {only}")
        return res
    lead = order[0]
    comps = [_comparison(est, metric, lead, m, margin) for m in order[1:]]
    family = [c for c in comps if c["_est"] is not None and not c["identical"] and c["ci_marginal"] is not None]
    crit, bounds = simultaneous([c["_est"].point for c in family], [c["_est"].reps for c in family], est.level)
    res["critical_value"] = crit
    for c, (lo, hi) in zip(family, bounds, strict=True):
        c["ci"] = [lo, hi]
        c["excluded"] = lo > 0
        if hi - lo <= 0:
            note = "no variation in the resamples (every resample gives the same difference)"
            c["ci_note"] = "; ".join(x for x in (c["ci_note"], note) if x)
        c["reversed"] = hi < 0  # the other method is better on the cells both cover
    for c in comps:
        c["status"] = _status(c)
    identical = [c["b"] for c in comps if c["status"] == "identical"]
    equivalent = [c["b"] for c in comps if c["status"] == "equivalent"]
    excluded = [c["b"] for c in comps if c["status"] == "excluded"]
    contenders = [c["b"] for c in comps if c["status"] == "contender"]
    if contenders or est.n_boot < 2:
        decision = UNDECIDED
    elif equivalent or not excluded:
        decision = EQUIVALENT
    else:
        decision = SEPARABLE
    if thin and decision in (SEPARABLE, EQUIVALENT):
        decision = TOO_LITTLE
        res["reason"] = thin
    runner = next((c for c in comps if c["status"] != "identical"), None)
    res.update(
        best=lead if decision == SEPARABLE else None,
        tied=[lead, *contenders],
        decision=decision,
        equivalent=identical + equivalent if decision != TOO_LITTLE else identical,
        contenders=contenders,
        identical=identical,
        comparisons=[{k: v for k, v in c.items() if not k.startswith("_")} for c in comps],
    )
    if runner is not None:
        res["vs_runner_up"] = {k: v for k, v in runner.items() if not k.startswith("_")}
    return res


def thin_data(est: Estimates, metric: str, methods: Sequence[str]) -> str | None:
    """Why the CIs of ``methods`` on ``metric`` cannot carry a "deploy" or an "equivalent" claim (None: they can):
    a value whose bootstrap could not resample users and prompts (fewer than 5 users, or no CI), or whose cells
    cover fewer than 5 prompts."""
    from perbench.stats.bootstrap import MIN_LEVELS, TWO_WAY

    if est.n_boot < 2:
        return None  # said elsewhere: without replicates nothing is called best
    for m in methods:
        e = est.value(m, metric)
        if e is None:
            continue
        how = est.resampled(e.cols)
        if how["resampled"] != TWO_WAY:
            note = how["ci_note"] or "its CI resamples neither users nor prompts"
            return f"{m}'s CI could not resample users and prompts ({note})"
        few = min(est.plans[c].prompts for c in e.cols)
        if few < MIN_LEVELS:
            plural = "s" * (few != 1)
            return f"{m}'s cells cover only {few} prompt{plural} (< {MIN_LEVELS}): its CI says little of the next"
    return None


def _comparison(est: Estimates, metric: str, lead: str, m: str, margin: float) -> dict[str, Any]:
    """Leader − m on the cells both cover: point, marginal and equivalence CIs; the simultaneous CI is set by
    :func:`ranking` once the whole family is known."""
    d = est.delta(lead, metric, m, metric)
    identical = d is not None and est.identical(lead, m, metric)
    entry: dict[str, Any] = {
        "a": lead, "b": m, "delta": None if d is None else f_(d.point), "ci": None, "ci_marginal": None,
        "tost_ci": None, "cells": 0 if d is None else d.cells, "partial": True if d is None else d.partial,
        "identical": identical, "excluded": False, "equivalent": identical, "reversed": False,
        "resampled": None, "ci_note": None, "_est": d,
    }  # fmt: skip
    if d is None:
        entry["ci_note"] = f"{lead} and {m} share no (user, prompt) cell: they cannot be compared"
        return entry
    entry.update(est.resampled(d.cols))
    if identical:
        entry.update(delta=0.0, ci_note="identical scores on every cell: the difference is exactly 0")
        return entry
    entry["ci_marginal"] = ci_(est.ci(d))
    tost = est.ci(d, tost_level(est.level))
    entry["tost_ci"] = ci_(tost)
    entry["equivalent"] = bool(tost is not None and margin > 0 and -margin < tost[0] and tost[1] < margin)
    return entry
