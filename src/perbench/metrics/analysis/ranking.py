"""Ranking and decision: which deployable method leads a metric, and what the data show about it.

- **Order.** Deployable methods by decreasing value; values equal up to float rounding (``TIE_TOL``) are ordered
  by name. On a metric with a random pick (a pooled decoder, :mod:`.headroom`) only the systems that beat it are
  ranked (``order``); the others are ``no_better_than_random`` (not shown better than a random pick).
- **The set for the best** (:mod:`.best_set`): the deployable systems and the baselines (reference lines that are
  no oracle) that could be the best with simultaneous ``level`` confidence (multiple comparisons with the best).
  Its decision: ``separable`` (deploy the one deployable member, shown better than the random pick and every
  baseline), ``baseline`` (a baseline could be the best: no reward model is shown better than it),
  ``equivalent`` (several deployable members, every pair inside the margin), ``undecided``,
  ``no_better_than_random``, or ``too_little_data`` (no bootstrap replicates, CIs that could not resample users
  and prompts, or nothing to compare with).
- **Equivalence** (two one-sided tests at α = 1 − level): two systems are practically equivalent when the
  (1 − 2α) percentile CI of their difference lies inside (−ε, +ε). Not being separated is not equivalence.
- **Identical.** Two methods with the same value on every cell differ by exactly 0: "identical", not an interval.
- ``comparisons``: the leader against every other system: the point, the lower bound of leader − b from the
  leader's simultaneous one-sided family and the upper bound from b's (``ci``), the marginal and equivalence CIs,
  and whether b is in the set. ``best`` is the leader only when ``separable``; ``tied`` the deployable members;
  ``runner_up`` the next system of the set (for ``separable``: the next deployable system). ``stability``: the
  share of bootstrap replicates giving each outcome and each pick (:func:`.best_set.stability`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import FloatArray, ci_, f_, order_by_value
from perbench.metrics.analysis.best_set import (
    BASELINE,
    CODES,
    EQUIVALENT,
    NO_BETTER,
    SEPARABLE,
    TOO_LITTLE,
    UNDECIDED,
    Comparisons,
    compare,
    critical_values,
    decide,
    gate_critical_value,
    one_sided_critical_value,
    stability,
)
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.roles import BASELINE as BASELINE_ROLE
from perbench.metrics.analysis.roles import DEPLOYABLE, RANDOM_PICK

__all__ = ["BASELINE", "EQUIVALENT", "NO_BETTER", "SEPARABLE", "TOO_LITTLE", "UNDECIDED", "ranking",
           "simultaneous", "simultaneous_lower", "thin_data", "tie_order", "tost_level"]  # fmt: skip


def _replicate_se(
    points: Sequence[float], reps: Sequence[FloatArray]
) -> tuple[FloatArray, FloatArray, FloatArray, np.ndarray]:
    """The points, the (B, J) replicate matrix, each difference's replicate sd se*_j (0 where undefined) and
    whether it varies (float noise of a constant is not variation)."""
    pts = np.asarray(points, dtype=np.float64)
    mat = np.stack([np.asarray(r, dtype=np.float64) for r in reps], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.nanstd(mat, axis=0, ddof=1) if mat.shape[0] > 1 else np.zeros(len(pts))
    se = np.where(np.isfinite(se), se, 0.0)
    return pts, mat, se, se > 1e-12 * np.maximum(1.0, np.abs(pts))


def simultaneous(
    points: Sequence[float], reps: Sequence[FloatArray], level: float
) -> tuple[float | None, list[tuple[float, float]]]:
    """The max-statistic critical value c and the intervals Δ̂_j ± c·se*_j (see the module docstring).

    A difference whose replicates never vary (se* = 0) gets the zero-width interval [Δ̂, Δ̂]; c is None when no
    difference varies or no replicate is finite.
    """
    if not points:
        return None, []
    pts, mat, se, vary = _replicate_se(points, reps)
    crit = one_sided_critical_value(np.abs(mat[:, vary] - pts[vary]) / se[vary], level)
    half = np.where(vary, se * (crit if crit is not None else 0.0), 0.0)
    return crit, [(float(p - h), float(p + h)) for p, h in zip(pts, half, strict=True)]


def simultaneous_lower(
    points: Sequence[float], reps: Sequence[FloatArray], level: float, scale: Sequence[float] | None = None
) -> tuple[float | None, list[float]]:
    """One-sided simultaneous lower bounds for several differences Δ_j (each system − the null, say): with se*_j
    the replicates' sd and T = max_j (Δ*_j − Δ̂_j) / se*_j over the bootstrap, c is the ``level`` quantile of T and
    every bound is Δ̂_j − c·se*_j, so P(Δ_j ≥ bound_j for every j) ≈ ``level`` (family-wise, one-sided).

    ``scale``: per difference, a factor on se*_j in the bound (not in T): √(v_j / v*_j), the method-of-moments
    variance over the bootstrap's expected one (:func:`.best_set.variance_ratio`), where the bootstrap overstates
    the variance. A difference whose replicates never vary gets its point as bound; c is None when none varies."""
    if not points:
        return None, []
    pts, mat, se, vary = _replicate_se(points, reps)
    crit = one_sided_critical_value((mat[:, vary] - pts[vary]) / se[vary], level)
    fac = np.ones(len(pts)) if scale is None else np.asarray(scale, dtype=np.float64)
    half = np.where(vary, fac * se * (crit if crit is not None else 0.0), 0.0)
    return crit, [float(p - h) for p, h in zip(pts, half, strict=True)]


def tost_level(level: float) -> float:
    """The (1 − 2α) level of two one-sided tests at α = 1 − level (0.90 for level 0.95)."""
    return max(0.0, 2 * level - 1)


def tie_order(candidates: Sequence[str], systems: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Interchangeable systems in the order a team would pick them: the least data, the cheapest to fit,
    user-agnostic, then by name (``systems[label]``: ``train_fraction``, ``fit_cost``, ``user_agnostic``)."""
    info = systems or {}

    def key(m: str) -> tuple[float, float, int, str]:
        i = info.get(m) or {}
        frac = float(i.get("train_fraction") or 1.0)
        cost = float(i.get("fit_cost", 0.0) or 0.0)
        return (frac, cost, 0 if i.get("user_agnostic") else 1, m)

    return sorted(candidates, key=key)


def ranking(
    est: Estimates,
    metric: str,
    roles: Mapping[str, str],
    margin: float,
    candidates: Collection[str] | None = None,
    systems: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ranking entry of one metric (``analyze(...)["ranking"][metric]``). ``candidates``: the deployable methods
    that beat the metric's random pick (:mod:`.headroom`), the only ones ranked in ``order``; ``systems``: what the
    tie-break among equivalent systems reads (:func:`tie_order`)."""
    vals = {m: e.point for m in est.methods_with(metric) if (e := est.value(m, metric)) is not None}
    deployable = {m: v for m, v in vals.items() if roles.get(m, DEPLOYABLE) == DEPLOYABLE}
    dep_order = order_by_value(deployable)
    below = [] if candidates is None else [m for m in dep_order if m not in set(candidates)]
    order = [m for m in dep_order if m not in below]
    res: dict[str, Any] = {
        "order": order, "leader": dep_order[0] if dep_order else None, "best": None, "tied": dep_order[:1],
        "runner_up": None, "vs_runner_up": None, "decision": None, "equivalent": [], "contenders": [],
        "identical": [], "comparisons": [], "vs_references": [],
        "reference_lines": [m for m in order_by_value(vals) if m not in deployable],
        "no_better_than_random": below,
        "margin": margin, "level": est.level, "equivalence_level": tost_level(est.level),
        "critical_value": None, "best_set": None, "stability": None, "reason": None,
    }  # fmt: skip
    if not dep_order:
        res.update(decision=UNDECIDED, tied=[], reason=f"no deployable method has {metric} rows")
        return res
    names = system_names(roles, vals)
    lead = dep_order[0]
    c = compare(est, metric, names, [m in deployable for m in names], RANDOM_PICK, tost_level(est.level))
    d = critical_values(c, est.level)
    gate = gate_critical_value(c, est.level)
    off = ~np.eye(c.n, dtype=bool)
    fixed, reason = None, None
    thin = thin_data(est, metric, names)
    if est.n_boot < 2:
        fixed = TOO_LITTLE
        reason = f"no bootstrap replicates (n_boot={est.n_boot}): nothing is shown without resampling"
    elif thin:
        fixed, reason = TOO_LITTLE, thin
        res["thin"] = thin
    elif not (c.comparable & off & ~c.identical).any() and (c.identical & off).any():
        fixed, reason = EQUIVALENT, f"the systems of {metric} score identically on every cell"
    elif not (c.comparable & off & ~c.identical).any():
        fixed = TOO_LITTLE
        reason = f"{lead} has no other system or baseline to be compared with on {metric}: nothing is shown"
    tie = [names.index(m) for m in tie_order(dep_order, systems)]
    out = decide(c, d, gate, margin, tie)
    if fixed == TOO_LITTLE and candidates is not None and not order:
        fixed = NO_BETTER  # that none is shown better than the random pick needs no more data to be said
    decision = fixed or CODES[int(out.code[0])]
    if decision == SEPARABLE and names[int(out.pick[0])] != lead:  # the top by mean is out on shared cells only
        decision = UNDECIDED
    members = [m for k, m in enumerate(names) if out.members[0, k]]
    # the systems not shown better than the random pick may be in the set, but are never tied, equivalent or a
    # contender: nothing is recommended that is not shown to beat the null
    dep_members = [m for m in members if m in deployable and m not in below]
    li = names.index(lead)
    comps = [_entry(est, metric, c, d, li, j, margin, members) for j in range(c.n) if j != li]
    identical = [e["b"] for e in comps if e["identical"]]
    res.update(
        decision=decision,
        reason=reason,
        critical_value=None if not np.isfinite(d[li]) else float(d[li]),
        comparisons=comps,
        vs_references=[e for e in comps if e["reference"]],
        best_set=_set_entry(est, names, members, deployable, d, gate),
        stability=stability(c, d, gate, margin, tie, fixed),
        identical=identical,
        tied=dep_members if fixed is None else [lead] if decision != NO_BETTER else [],
    )
    by_b = {e["b"]: e for e in comps}
    if decision == SEPARABLE:
        res["best"] = lead
        runner = next((m for m in dep_order[1:] if m not in identical), None) or next(
            (m for m in names if m not in deployable), None)  # fmt: skip
    else:
        runner = next((m for m in dep_members if m != lead and m not in identical), None)
    if runner is not None:
        res["runner_up"], res["vs_runner_up"] = runner, by_b[runner]
    if decision == EQUIVALENT:
        res["equivalent"] = [m for m in dep_members if m != lead]
    else:
        res["equivalent"] = identical
    if decision in (UNDECIDED, BASELINE):
        res["contenders"] = [m for m in dep_members if m != lead and m not in identical]
    return res


def _set_entry(
    est: Estimates,
    names: Sequence[str],
    members: Sequence[str],
    deployable: Mapping[str, float],
    d: FloatArray,
    gate: float | None,
) -> dict[str, Any]:
    base = len(names) - len(deployable)
    return {
        "members": list(members),
        "deployable": [m for m in members if m in deployable],
        "reference": [m for m in members if m not in deployable],
        "level": est.level,
        "gate_critical_value": gate,
        "critical_values": {m: float(d[k]) for k, m in enumerate(names) if np.isfinite(d[k])},
        "method": (
            f"multiple comparisons with the best over {len(names)} systems ({base} baseline{'s' * (base != 1)}): "
            f"a system is left out when another is shown better than it, one-sided and simultaneous "
            f"{100 * est.level:g}% over its comparisons (max-statistic two-way bootstrap)"
        ),
    }


def system_names(roles: Mapping[str, str], vals: Mapping[str, float]) -> list[str]:
    """The systems the set for the best is taken over: deployable ones by value, then the baselines by value."""
    dep = {m: v for m, v in vals.items() if roles.get(m, DEPLOYABLE) == DEPLOYABLE}
    base = {m: v for m, v in vals.items() if roles.get(m, DEPLOYABLE) == BASELINE_ROLE}
    return [*order_by_value(dep), *order_by_value(base)]


def _entry(
    est: Estimates, metric: str, c: Comparisons, d: FloatArray, i: int, j: int, margin: float, members: Sequence[str]
) -> dict[str, Any]:
    """Leader (i) − system j: the marginal and equivalence CIs of :func:`_comparison`, the simultaneous bounds of
    the set for the best, whether j is in the set and its status."""
    e = _comparison(est, metric, c.names[i], c.names[j], margin)
    e.pop("_est", None)
    e["reference"] = not bool(c.deployable[j])
    e["in_set"] = c.names[j] in members
    if c.comparable[i, j] and not c.identical[i, j]:
        di = float(d[i]) if np.isfinite(d[i]) else 0.0
        dj = float(d[j]) if np.isfinite(d[j]) else 0.0
        lo, hi = c.delta[i, j] - di * c.boot_se[i, j], c.delta[i, j] + dj * c.boot_se[i, j]
        e["ci"] = [float(lo), float(hi)]
        e["lower_simultaneous"] = float(lo)
        e["excluded"] = not e["in_set"]
        e["reversed"] = bool(hi < 0)
        if hi - lo <= 0:
            note = "no variation in the resamples (every resample gives the same difference)"
            e["ci_note"] = "; ".join(x for x in (e["ci_note"], note) if x)
    if e["identical"]:
        e["status"] = "identical"
    elif not e["in_set"]:
        e["status"] = "excluded"
    else:
        e["status"] = "equivalent" if e["equivalent"] else "contender"
    return e


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
