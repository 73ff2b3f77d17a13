"""The confidence set for the best and the verdict's decision rule, applied to the point estimates and to every
bootstrap replicate (how often each outcome would come out).

**The systems.** The deployable systems and the reference lines that are no oracle (baselines: ``random_pick``,
``length``, ``random``, any ``baselines:`` entry); an oracle reads the answer key and is never a candidate.

**Multiple comparisons with the best** (Hsu's MCB, bootstrap max-statistic form). For systems i, j the paired
difference Δ_ij = θ_i − θ_j (on the cells both cover) has point Δ̂_ij, replicates Δ*_ij and a standard error
s_ij. For each system i, d_i is the ``level`` quantile over the replicates of max_{j≠i} (Δ̂_ij − Δ*_ij) / s*_ij
(:func:`one_sided_critical_value`: the simultaneous one-sided critical value over i's k comparisons). System i is in
the set unless some j is shown better than it: Δ̂_ij + d_i·s_ij < 0. If b is the true best, Δ_bj ≥ 0 for every j,
so b is left out only when one of its own k deviations exceeds d_b: the set holds the best with probability
≥ ``level``, whichever system it is.

**The standard errors.** The set's bounds use the bootstrap's s*_ij: its coverage of the true best is ≥ 95 % in
simulation (``tests/test_analysis_best_set.py``), where the method-of-moments standard error below left the best
out of about 7 % of sets (an estimated standard error's own noise, a z where a t belongs). The gate against the
random pick is less conservative: the two-way (users × prompts) bootstrap overstates the variance of a mean over
a crossed design (its expected variance is k_u·σ²_u/U + k_p·σ²_p/P + k_e·σ²_e/(U·P), k_e → 3,
:mod:`.components`), and the gate's bounds use s_i = s*_i·√(v / v*), v the method-of-moments variance and v* the
bootstrap's expected
one (the same components, pooled over the pairs: a per-pair ratio of noisy moments would make the bounds
anti-conservative; the correlation of the comparisons, and so the critical values, still come from the
replicates): a bias-corrected bootstrap whose family-wise error under the global null is 5.0–5.1 % in simulation
(the bootstrap's own: 2.1–2.8 %).

**The decision** (:func:`decide`, vectorised over replicates): ``too_little_data`` (set by the caller: no
resampling); ``no_better_than_random`` when no deployable system beats the random pick (one-sided, simultaneous
over the deployable systems); ``baseline`` when a reference line is in the set (no reward model is shown better
than it); ``separable`` (deploy X) when X is the only deployable system in the set, beats the random pick (the
gate) and is shown better than every other reference line (Δ̂_Xr − d_X·s*_Xr > 0); ``equivalent`` when the set
holds several deployable systems whose pairwise (2·level − 1) CIs all lie inside ±margin; else ``undecided``.

**Stability.** The rule is re-run on each replicate with Δ*_ij in place of Δ̂_ij (the standard errors, critical
values and the widths of the equivalence CIs kept): the share of replicates giving each outcome and each pick.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perbench.metrics.analysis.base import FloatArray
from perbench.metrics.analysis.components import bootstrap_factors, joint_components
from perbench.metrics.analysis.estimates import Estimates

#: the decision labels (``ranking[metric]["decision"]``), in the order the rule tests them
TOO_LITTLE = "too_little_data"
NO_BETTER = "no_better_than_random"
BASELINE = "baseline"
SEPARABLE, EQUIVALENT, UNDECIDED = "separable", "equivalent", "undecided"
CODES = (TOO_LITTLE, NO_BETTER, BASELINE, SEPARABLE, EQUIVALENT, UNDECIDED)
_TL, _NB, _BL, _SEP, _EQ, _UND = range(len(CODES))

BoolArray = np.ndarray


def one_sided_critical_value(z: FloatArray, level: float) -> float | None:
    """The simultaneous one-sided critical value over k comparisons: the ``level`` quantile over replicates (rows
    of ``z``, NaN where a comparison does not count) of max_j z_j, z_j a standardised deviation of comparison j.
    None when no replicate has a finite deviation."""
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] == 0:
        return None
    ok = np.isfinite(z).any(axis=1)
    if not ok.any():
        return None
    t = np.nanmax(np.where(np.isfinite(z[ok]), z[ok], np.nan), axis=1)
    return float(np.quantile(t, level))


@dataclass
class Comparisons:
    """Every pairwise difference of ``names`` on one metric: Δ̂ (n × n, i − j), replicates (B × n × n), the
    bootstrap standard error (the set's) and the method-of-moments one (the gate's) (n × n), the offsets of the
    equivalence CI from Δ̂ (n × n × 2), which pairs are identical and which can be compared at all."""

    names: list[str]
    deployable: BoolArray
    null: int | None
    delta: FloatArray
    reps: FloatArray
    boot_se: FloatArray
    gate_se: FloatArray
    tost: FloatArray
    identical: BoolArray
    comparable: BoolArray

    @property
    def n(self) -> int:
        return len(self.names)

    def varies(self) -> BoolArray:
        """Pairs whose replicates vary (a standardised deviation exists)."""
        out: BoolArray = self.comparable & ~self.identical & (self.boot_se > 1e-12 * np.maximum(1, abs(self.delta)))
        return out


def compare(
    est: Estimates, metric: str, names: Sequence[str], deployable: Sequence[bool], null: str | None, tost_level: float
) -> Comparisons:
    """The :class:`Comparisons` of ``names`` on ``metric`` from the run's bootstrap replicates (pairs on shared
    cells, :meth:`Estimates.delta`)."""
    n, b = len(names), max(est.n_boot, 1)
    delta = np.full((n, n), np.nan)
    reps = np.full((b, n, n), np.nan)
    tost = np.zeros((n, n, 2))
    identical = np.eye(n, dtype=bool)
    has_ci = np.eye(n, dtype=bool)  # a pair without a CI (too few cells to resample) is compared with nothing
    for i in range(n):
        delta[i, i], reps[:, i, i] = 0.0, 0.0
        for j in range(i + 1, n):
            d = est.delta(names[i], metric, names[j], metric)
            if d is None:
                continue
            delta[i, j], delta[j, i] = d.point, -d.point
            if est.n_boot >= 1 and d.reps.size:
                reps[:, i, j], reps[:, j, i] = d.reps, -d.reps
            identical[i, j] = identical[j, i] = est.identical(names[i], names[j], metric)
            ci = est.ci(d, tost_level)
            has_ci[i, j] = has_ci[j, i] = identical[i, j] or est.ci(d) is not None
            if ci is not None:
                tost[i, j] = (ci[0] - d.point, ci[1] - d.point)
                tost[j, i] = (-(ci[1] - d.point), -(ci[0] - d.point))
    comparable = np.isfinite(delta) & has_ci
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a pair with no shared cell has no replicates
        boot_se = np.nanstd(reps, axis=0, ddof=1) if reps.shape[0] > 1 else np.zeros((n, n))
    boot_se = np.where(np.isfinite(boot_se), boot_se, 0.0)
    gate_se = boot_se * np.sqrt(variance_ratio(est, metric, names))
    nul = names.index(null) if null is not None and null in names else None
    return Comparisons(
        list(names), np.asarray(deployable, dtype=bool), nul, delta, reps, boot_se, gate_se, tost, identical, comparable
    )


def variance_ratio(est: Estimates, metric: str, names: Sequence[str]) -> FloatArray:
    """n × n: the method-of-moments variance of the pairwise mean differences over the two-way bootstrap's expected
    variance of them (:mod:`.components`), pooled over the pairs (Σ v / Σ v*); 1 where either is 0 or the design
    has no components. Cached on
    ``est`` per (metric, names), so the gate (:mod:`.headroom`) and the set read the same numbers."""
    cache: dict[tuple[str, tuple[str, ...]], FloatArray] = est.__dict__.setdefault("_variance_ratio", {})
    key = (metric, tuple(names))
    if key not in cache:
        cache[key] = _variance_ratio(est, metric, names)
    return cache[key]


def _variance_ratio(est: Estimates, metric: str, names: Sequence[str]) -> FloatArray:
    n = len(names)
    cells, vals = zip(*(est.cell_means(m, metric) for m in names), strict=True)
    union = np.unique(np.concatenate(cells)) if n else np.zeros(0, dtype=np.intp)
    if union.size < 3:
        return np.ones((n, n))
    y = np.full((union.size, n), np.nan)
    for k, (c, v) in enumerate(zip(cells, vals, strict=True)):
        y[np.searchsorted(union, c), k] = v
    users, prompts = est.cell_labels(union)
    return pair_variance_ratio(joint_components(users, prompts, y))


def pair_variance_ratio(j: object) -> FloatArray:
    """The ratio of :func:`variance_ratio` from the K × K components of K systems' cell values (a
    :class:`.components.Joint`): a pair's components are C_ii + C_jj − 2·C_ij."""
    from perbench.metrics.analysis.components import Joint

    assert isinstance(j, Joint)
    u = float(max(j.users, 2))
    p = float(max(j.prompts if j.crossed else j.prompts // max(1, j.users), 1))
    ku, kp, ke = bootstrap_factors(u, p, j.crossed)

    def pairs(c: FloatArray) -> FloatArray:
        d = np.diag(c)
        out: FloatArray = np.clip(d[:, None] + d[None, :] - 2 * c, 0.0, None)
        return out

    vu, vp, ve = pairs(j.user), pairs(j.prompt), pairs(j.residual)
    if j.crossed:
        true = vu / u + vp / p + ve / (u * p)
        boot = ku * vu / u + kp * vp / p + ke * ve / (u * p)
    else:
        true = vu / u + ve / (u * p)
        boot = ku * true
    # pooled over the pairs: one pair's ratio is a ratio of noisy moments, and its noise would make the bounds
    # anti-conservative (a z where a t belongs); the pooled one is stable and the design's factor is shared
    off = ~np.eye(true.shape[0], dtype=bool)
    tot_t, tot_b = float(np.sum(true[off])), float(np.sum(boot[off]))
    ratio = tot_t / tot_b if tot_b > 0 and tot_t > 0 else 1.0
    return np.full(true.shape, ratio)


def critical_values(c: Comparisons, level: float) -> FloatArray:
    """d_i of every system (NaN where it has no varying comparison): see the module docstring."""
    vary = c.varies()
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (c.delta[None] - c.reps) / np.where(vary, c.boot_se, 1.0)[None]
    z = np.where(vary[None], z, np.nan)
    out = np.full(c.n, np.nan)
    for i in range(c.n):
        got = one_sided_critical_value(z[:, i, :], level)
        if got is not None:
            out[i] = got
    return out


def gate_critical_value(c: Comparisons, level: float) -> float | None:
    """The one-sided simultaneous critical value of every deployable system against the random pick."""
    if c.null is None:
        return None
    k = np.flatnonzero(c.deployable & c.varies()[:, c.null])
    if not k.size:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (c.reps[:, k, c.null] - c.delta[k, c.null]) / c.boot_se[k, c.null]
    return one_sided_critical_value(z, level)


@dataclass
class Outcome:
    """The rule on R versions of the differences (R = 1: the run's point estimates; R = B: the replicates)."""

    code: np.ndarray  # (R,) index into CODES
    pick: np.ndarray  # (R,) the deployed or tie-broken system, -1 for none
    members: BoolArray  # (R, n): the set for the best
    beats_null: BoolArray  # (R, n)
    lower: FloatArray  # (R, n, n): Δ_ij − d_i·s_ij


def decide(
    c: Comparisons,
    d: FloatArray,
    gate: float | None,
    margin: float,
    tie_order: Sequence[int],
    deltas: FloatArray | None = None,
) -> Outcome:
    """The decision rule (module docstring) on ``deltas`` (R × n × n; default the point estimates)."""
    dd = c.delta[None] if deltas is None else deltas
    r, n = dd.shape[0], c.n
    dcrit = np.where(np.isfinite(d), d, 0.0)
    counts = c.comparable & ~c.identical & ~np.eye(n, dtype=bool)
    lower = dd - dcrit[:, None] * c.boot_se  # θ_i − θ_j ≥ lower, simultaneous over i's comparisons
    upper_i = dd + dcrit[:, None] * c.boot_se  # upper bound of θ_i − θ_j from i's family
    beaten = (upper_i < 0) & counts[None]  # some j shown better than i
    members = ~beaten.any(axis=2)
    ref = ~c.deployable
    if c.null is not None:
        ref = ref.copy()
        ref[c.null] = False  # the random pick is cleared by the gate, not by the set's bound
    if c.null is not None and gate is not None:
        g = dd[:, :, c.null] - gate * c.gate_se[None, :, c.null]
        beats = c.deployable[None] & (g > 0) & c.comparable[None, :, c.null] & ~c.identical[None, :, c.null]
    elif c.null is not None:  # no variation against the null: only a positive constant difference beats it
        beats = c.deployable[None] & (dd[:, :, c.null] > 0) & c.comparable[None, :, c.null]
    else:
        beats = np.broadcast_to(c.deployable[None], (r, n)).copy()
    dep_members = members & c.deployable[None]
    twin: BoolArray = np.asarray(
        np.triu(c.identical, 1).any(axis=0), dtype=bool
    )  # identical to an earlier system: the same choice, counted once
    n_dep = (dep_members & ~twin[None]).sum(axis=1)
    only = np.where(n_dep == 1, np.argmax(dep_members & ~twin[None], axis=1), -1)
    # the only deployable member beats the null and every reference line it can be compared with
    ok_refs = np.ones(r, dtype=bool)
    rows = np.arange(r)
    x = np.where(only >= 0, only, 0)
    lx = lower[rows, x]  # (R, n)
    ok_refs = ((lx > 0) | ~ref[None] | ~counts[x]).all(axis=1) & (only >= 0)
    ok_refs &= beats[rows, x]
    code = np.full(r, _UND)
    lo_eq = dd + c.tost[None, :, :, 0]
    hi_eq = dd + c.tost[None, :, :, 1]
    inside = ((lo_eq > -margin) & (hi_eq < margin) & (margin > 0)) | c.identical[None]
    pair_in = dep_members[:, :, None] & dep_members[:, None, :]
    equiv = (n_dep >= 2) & (inside | ~pair_in).all(axis=(1, 2))
    code[equiv] = _EQ
    code[ok_refs] = _SEP
    code[(members & ~c.deployable[None]).any(axis=1)] = _BL
    if c.null is not None:
        code[~beats.any(axis=1)] = _NB
    pick = np.full(r, -1)
    pick[code == _SEP] = only[code == _SEP]
    order = np.asarray(list(tie_order), dtype=np.intp)
    if order.size and (code == _EQ).any():  # the tie-break among the members that beat the random pick
        can = (dep_members & beats)[:, order]
        first = np.where(can.any(axis=1), order[np.argmax(can, axis=1)], -1)
        pick[code == _EQ] = first[code == _EQ]
    return Outcome(code, pick, members, beats, lower)


def stability(c: Comparisons, d: FloatArray, gate: float | None, margin: float, tie_order: Sequence[int],
              fixed: str | None = None) -> dict[str, object]:  # fmt: skip
    """How often each outcome and each pick comes out when the rule is re-run on every bootstrap replicate;
    ``fixed``: an outcome every replicate shares (too little data)."""
    b = c.reps.shape[0]
    if fixed is not None or b < 2:
        return {"replicates": b, "outcomes": {fixed or TOO_LITTLE: 1.0}, "picks": {}, "in_set": {}}
    got = decide(c, d, gate, margin, tie_order, np.where(np.isfinite(c.reps), c.reps, c.delta[None]))
    outcomes = {CODES[k]: float(np.mean(got.code == k)) for k in range(len(CODES)) if (got.code == k).any()}
    picks = {c.names[k]: float(np.mean(got.pick == k)) for k in np.unique(got.pick[got.pick >= 0]).tolist()}
    in_set = {c.names[k]: float(v) for k, v in enumerate(got.members.mean(axis=0))}
    return {
        "replicates": b,
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: -kv[1])),
        "picks": dict(sorted(picks.items(), key=lambda kv: -kv[1])),
        "in_set": dict(sorted(in_set.items(), key=lambda kv: -kv[1])),
        "method": (
            "the whole rule re-run on each bootstrap replicate of the run (its differences in place of the point "
            "estimates; standard errors, critical values and equivalence-CI widths kept)"
        ),
    }
