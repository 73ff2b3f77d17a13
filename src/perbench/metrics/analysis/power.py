"""Power planning: how many users × prompts would decide: separate the leader from each other system (or establish
equivalence), and show each system beats the random pick, all together.

**Variance components.** The paired difference D(u, p) = a − b per (user, prompt) cell follows the crossed random
effects model D = δ + α_u + β_p + ε_up. Method of moments (the U-statistics of Gao & Owen, 2017, which need no
balance): half the mean squared difference of two cells of one user estimates σ²_p + σ²_e, of one prompt
σ²_u + σ²_e, of two cells sharing neither σ²_u + σ²_p + σ²_e; solved and clipped at 0. Prompts that only one user
has (upstream pairs) are nested in users: then σ²_p is not separable from σ²_e and counts as residual. Several
comparisons at once (:func:`joint_components`): the same moments with products of two comparisons' differences in
place of squares give K × K covariance matrices, each projected onto the positive semi-definite ones.

**The bootstrap's variance.** With U users and P prompts, Var(D̄) = σ²_u/U + σ²_p/P + σ²_e/(U·P) (nested:
σ²_u/U + σ²_e/(U·P)). The verdict's intervals come from the two-way bootstrap, whose expected variance is
k_u·σ²_u/U + k_p·σ²_p/P + k_e·σ²_e/(U·P) with k_u = (U − 1)/U, k_p = (P − 1)/P and k_e = k_u + k_p + k_u·k_p
(:func:`bootstrap_factors`): a replicate's mean deviates by the users' row means, the prompts' column means and the
interaction, and the residual enters all three (→ 3 for large U and P; 2.8 at 32 users × 16 prompts; nested
prompts: k_u on both parts). The planner uses that width for the decision and the true variance for the spread of
D̄, so it sizes the test the verdict really runs:

- separate at effect δ: P(|D̄| > c·s_boot), with c the verdict's simultaneous critical value (z_0.975 for one
  comparison);
- a system beats the random pick (one-sided, at effect δ > 0): P(D̄ > c·s_boot), c the one-sided simultaneous
  critical value over the systems (``ranking.simultaneous_lower``);
- equivalence within ±ε at true difference δ: P(|D̄| + z_{1−α}·s_boot < ε).

**The whole decision** (:func:`decision`, :class:`DecisionModel`): the leader against each other deployable system
(two-sided, simultaneous) and, where the metric has ``random_pick`` cells, each deployable system against the
random pick (one-sided, simultaneous). Its power is P(every comparison succeeds together) at a size, by Monte Carlo
over the comparisons' joint normal distribution (their cross-covariances from the joint components), with the
critical values of both families recomputed at each size from the bootstrap's correlation of the comparisons. At
the observed differences a leader comparison succeeds when it is separated or shown equivalent (what the verdict
decides); at a chosen effect (``--effect``) when it is separated; a system is required to beat the random pick only
where it is observed above it.

The sizes reported keep the run's shape (users and prompts grown by one factor) and also say how many prompts
alone (at the current users) or users alone (at the current prompts) would do. The planner assumes at least 5
users (fewer: the verdict's CIs resample prompts only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import FloatArray, IntArray
from perbench.metrics.analysis.estimates import Estimates

POWER = 0.8
MAX_CELLS = 10**8  # beyond this, a size is reported as unreachable
#: the random pick from the shared pool (the pool mean: exact Best-of-1), the null every system is tested against
RANDOM_PICK = "random_pick"
#: the two families of the decision: the leader against each other system, each system against the random pick
LEADER, VS_RANDOM = "leader", "random_pick"
#: Monte Carlo draws of the decision model: of the estimates (the power) and of the null (the critical values,
#: whose 95 % quantile needs more draws to be stable to ~0.01)
MC_DRAWS, MC_NULL_DRAWS = 5000, 20000


@dataclass(frozen=True)
class Components:
    user: float
    prompt: float
    residual: float
    users: int
    prompts: int
    cells: int
    crossed: bool  # False: every prompt belongs to one user (prompts nested in users)


def _pair_sum(groups: Sequence[str], y: np.ndarray) -> tuple[float, float]:
    """Σ over groups of Σ_{pairs within the group} (y_i − y_j)², and the number of such pairs."""
    _, inv = np.unique(np.asarray(groups, dtype=object), return_inverse=True)
    inv = inv.ravel()
    n = np.bincount(inv).astype(np.float64)
    s1 = np.bincount(inv, weights=y)
    s2 = np.bincount(inv, weights=y * y)
    return float(np.sum(n * s2 - s1 * s1)), float(np.sum(n * (n - 1) / 2))


def variance_components(users: Sequence[str], prompts: Sequence[str], values: Sequence[float]) -> Components:
    """σ²_user, σ²_prompt, σ²_residual of one value per (user, prompt) cell (see the module docstring)."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    n_users, n_prompts = len(set(users)), len(set(prompts))
    if n < 2:
        return Components(0.0, 0.0, 0.0, n_users, n_prompts, n, False)
    s_all, p_all = float(n * np.sum(y * y) - np.sum(y) ** 2), n * (n - 1) / 2
    s_row, p_row = _pair_sum(users, y)  # same user, different prompts
    s_col, p_col = _pair_sum(prompts, y)  # same prompt, different users
    s_both, p_both = s_all - s_row - s_col, p_all - p_row - p_col
    m_row = s_row / p_row if p_row else None
    m_col = s_col / p_col if p_col else None
    m_both = s_both / p_both if p_both else None
    total = float(np.var(y, ddof=1))
    if m_both is None or (m_row is None and m_col is None):
        return Components(0.0, 0.0, total, n_users, n_prompts, n, False)
    if m_col is None:  # nested prompts: σ²_p is part of the residual
        assert m_row is not None
        return Components(max(0.0, (m_both - m_row) / 2), 0.0, max(0.0, m_row / 2), n_users, n_prompts, n, False)
    if m_row is None:  # one prompt per user: σ²_u is part of the residual
        return Components(0.0, max(0.0, (m_both - m_col) / 2), max(0.0, m_col / 2), n_users, n_prompts, n, False)
    return Components(
        max(0.0, (m_both - m_row) / 2),
        max(0.0, (m_both - m_col) / 2),
        max(0.0, (m_row + m_col - m_both) / 2),
        n_users,
        n_prompts,
        n,
        True,
    )


def bootstrap_factors(users: float, prompts: float, crossed: bool = True) -> tuple[float, float, float]:
    """(k_u, k_p, k_e): the two-way bootstrap's expected variance of a mean over U × P cells is
    k_u·σ²_u/U + k_p·σ²_p/P + k_e·σ²_e/(U·P) (see the module docstring); nested prompts: k_u for every part."""
    ku = max(0.0, (users - 1) / users)
    if not crossed:
        return ku, 0.0, ku
    kp = max(0.0, (prompts - 1) / prompts)
    return ku, kp, ku + kp + ku * kp


def variances(c: Components, users: float, prompts: float) -> tuple[float, float]:
    """(true variance of the mean difference, the two-way bootstrap's variance of it) at users × prompts, where
    ``prompts`` is prompts per user for nested prompts."""
    ku, kp, ke = bootstrap_factors(users, prompts, c.crossed)
    if not c.crossed:
        v = c.user / users + c.residual / (users * prompts)
        return v, ku * v
    true = c.user / users + c.prompt / prompts + c.residual / (users * prompts)
    return true, ku * c.user / users + kp * c.prompt / prompts + ke * c.residual / (users * prompts)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def power_separate(c: Components, users: float, prompts: float, effect: float, crit: float) -> float:
    true, boot = variances(c, users, prompts)
    if true <= 0:
        return 1.0 if abs(effect) > 0 else 0.0
    s, sb = math.sqrt(true), math.sqrt(boot)
    return _phi((abs(effect) - crit * sb) / s) + _phi((-abs(effect) - crit * sb) / s)


def power_beats(c: Components, users: float, prompts: float, effect: float, crit: float) -> float:
    """One-sided: P(D̄ − c·s_boot > 0) at true difference ``effect`` (a system against the random pick)."""
    true, boot = variances(c, users, prompts)
    if true <= 0:
        return 1.0 if effect > crit * math.sqrt(boot) else 0.0
    return _phi((effect - crit * math.sqrt(boot)) / math.sqrt(true))


def power_equivalent(c: Components, users: float, prompts: float, effect: float, margin: float, z: float) -> float:
    true, boot = variances(c, users, prompts)
    half = margin - z * math.sqrt(boot)
    if half <= 0:
        return 0.0
    if true <= 0:
        return 1.0 if abs(effect) < half else 0.0
    s = math.sqrt(true)
    return max(0.0, _phi((half - effect) / s) - _phi((-half - effect) / s))


def _smallest(ok: Callable[[float], bool], lo: float, hi: float) -> float | None:
    """The smallest x in [lo, hi] with ok(x) (ok monotone), to 0.1 % by bisection; None when ok(hi) fails."""
    if not ok(hi):
        return None
    if ok(lo):
        return lo
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        if hi / lo < 1.001:
            break
    return hi


def sizes(c: Components, power: Callable[[float, float], float], target: float = POWER) -> dict[str, Any] | None:
    """The users × prompts reaching ``target`` power: the run's shape scaled, and one factor alone."""
    u0, p0 = max(c.users, 2), max(c.prompts // max(1, c.users) if not c.crossed else c.prompts, 1)

    def at(s: float) -> tuple[int, int]:
        return max(2, math.ceil(s * u0)), max(1, math.ceil(s * p0))

    cap = math.sqrt(MAX_CELLS / (u0 * p0))
    s = _smallest(lambda s: power(*at(s)) >= target, 1e-3, cap)
    if s is None:
        return None
    u, p = at(s)
    more_p = _smallest(lambda p: power(u0, math.ceil(p)) >= target, 1, MAX_CELLS / u0)
    more_u = _smallest(lambda u: power(math.ceil(u), p0) >= target, 2, MAX_CELLS / p0)
    return {
        "users": u,
        "prompts": p,
        "cells": u * p,
        "scale": s,
        "prompts_at_current_users": None if more_p is None else math.ceil(more_p),
        "users_at_current_prompts": None if more_u is None else math.ceil(more_u),
        "power_now": power(u0, p0),
    }


def paired_cells(est: Estimates, metric: str, a: str, b: str) -> tuple[list[str], list[str], list[float]]:
    """a − b per (user, prompt) cell both cover (each side's mean over its rows and groups there)."""
    ca, va = est.cell_means(a, metric)
    cb, vb = est.cell_means(b, metric)
    both, ia, ib = np.intersect1d(ca, cb, assume_unique=True, return_indices=True)
    users, prompts = est.cell_labels(both)
    return users, prompts, (va[ia] - vb[ib]).tolist()


def plan_comparison(
    est: Estimates,
    metric: str,
    a: str,
    b: str,
    *,
    effect: float | None,
    margin: float,
    crit: float | None,
    power: float = POWER,
    family: str = LEADER,
) -> dict[str, Any] | None:
    """The planner's entry for a − b on ``metric``: components, power now, and the sizes to separate at
    ``effect`` (None: the observed difference) and to establish equivalence within ``margin``. ``family``
    :data:`VS_RANDOM`: a one-sided test that a beats b (the random pick), with no equivalence to establish;
    ``crit`` defaults to z for one comparison."""
    from scipy.stats import norm

    users, prompts, diffs = paired_cells(est, metric, a, b)
    if len(diffs) < 2:
        return None
    one_sided = family == VS_RANDOM
    comp = variance_components(users, prompts, diffs)
    observed = float(np.mean(diffs))
    delta = observed if effect is None else effect
    c = crit if crit is not None else float(norm.ppf(est.level if one_sided else 1 - (1 - est.level) / 2))
    z = float(norm.ppf(est.level))
    constant = float(np.ptp(diffs)) == 0.0  # the same difference on every cell: nothing to plan from
    sep = eq = None
    if one_sided:
        if not constant and delta > 0:
            sep = sizes(comp, lambda u, p: power_beats(comp, u, p, delta, c), power)
    else:
        if not constant and delta != 0:
            sep = sizes(comp, lambda u, p: power_separate(comp, u, p, delta, c), power)
        if not constant and margin > 0 and abs(observed) < margin:
            eq = sizes(comp, lambda u, p: power_equivalent(comp, u, p, observed, margin, z), power)
    entry = {
        "a": a,
        "b": b,
        "family": family,
        "one_sided": one_sided,
        "metric": metric,
        "effect": delta,
        "effect_source": "observed" if effect is None else "chosen",
        "observed": observed,
        "margin": margin,
        "power": power,
        "critical_value": c,
        "components": asdict(comp),
        "separate": sep,
        "equivalence": eq,
        "constant": constant,
    }
    entry["text"] = plan_text(est, entry)
    return entry


def _size(s: Mapping[str, Any] | None, comp: Mapping[str, Any]) -> str:
    if s is None:
        return f"more than {MAX_CELLS:,} cells"
    per = "" if comp["crossed"] else " per user"
    return f"about {s['prompts']} prompts{per} × {s['users']} users"


def _now(comp: Mapping[str, Any]) -> str:
    now_p = comp["prompts"] if comp["crossed"] else max(1, comp["prompts"] // max(1, comp["users"]))
    return f"{now_p} × {comp['users']}"


def plan_text(est: Estimates, e: Mapping[str, Any]) -> str:
    comp = e["components"]
    now = f"now {_now(comp)}"
    eff = est.fmt(e["metric"], e["effect"], True)
    pct = f"{100 * e['power']:.0f}% power"
    which = "the observed" if e["effect_source"] == "observed" else "an effect of"
    sep = e["separate"]
    if e["constant"]:
        d = est.fmt(e["metric"], e["observed"], True)
        return f"{e['a']} − {e['b']} is {d} on every cell both cover: no variation to plan from"
    if e.get("one_sided"):
        goal = f"show {e['a']} beats the random pick"
        if e["effect"] <= 0:
            return f"{e['a']} is not above the random pick at {which} {eff}: no size shows it beats it"
        if sep is None:
            return f"no practical size would {goal} at {which} {eff} ({_size(sep, comp)} at {pct})"
        if sep["scale"] <= 1:
            return f"at {which} {eff} the current {now[4:]} already has {100 * sep['power_now']:.0f}% power to {goal}"
        return f"to {goal} at {which} {eff} you need {_size(sep, comp)} ({now}; {pct}, one-sided)"
    if e["effect"] == 0:
        parts = [f"{e['a']} and {e['b']} differ by exactly 0 on the cells both cover: no size separates them"]
    elif sep is None:
        parts = [f"no practical size tells {e['a']} from {e['b']} at {which} {eff} ({_size(sep, comp)} at {pct})"]
    elif sep["scale"] <= 1:
        got = 100 * sep["power_now"]
        parts = [f"at {which} {eff} the current {now[4:]} already has {got:.0f}% power to tell {e['a']} from {e['b']}"]
    else:
        parts = [f"to tell {e['a']} from {e['b']} at {which} {eff} you need {_size(sep, comp)} ({now}; {pct})"]
    if e["margin"] > 0 and abs(e["observed"]) < e["margin"] and e["equivalence"] is not None:
        m = est.fmt(e["metric"], e["margin"], True).lstrip("+")
        parts.append(f"to establish equivalence within ±{m}, {_size(e['equivalence'], comp)}")
    return "; ".join(parts)


def plan(
    est: Estimates,
    metric: str,
    lead: str,
    others: Sequence[str],
    *,
    margin: float,
    crit: float | None,
    effect: float | None = None,
    power: float = POWER,
) -> list[dict[str, Any]]:
    """One planner entry per other method (leader − it), skipping pairs that share fewer than 2 cells."""
    out = []
    for m in others:
        e = plan_comparison(est, metric, lead, m, effect=effect, margin=margin, crit=crit, power=power)
        if e is not None:
            out.append(e)
    return out


# ---------------------------------------------------------------- the whole decision


@dataclass(frozen=True)
class Joint:
    """Variance components of K comparisons' per-cell differences: K × K covariance matrices (users, prompts,
    residual; the diagonal is each comparison's :class:`Components`), each projected onto the positive
    semi-definite matrices."""

    user: FloatArray
    prompt: FloatArray
    residual: FloatArray
    users: int
    prompts: int
    cells: int
    crossed: bool

    def covariances(self, users: float, prompts: float) -> tuple[FloatArray, FloatArray]:
        """(true covariance of the K mean differences, the two-way bootstrap's) at users × prompts (prompts per
        user when nested), as :func:`variances` for one comparison."""
        ku, kp, ke = bootstrap_factors(users, prompts, self.crossed)
        if not self.crossed:
            v = self.user / users + self.residual / (users * prompts)
            return v, ku * v
        true = self.user / users + self.prompt / prompts + self.residual / (users * prompts)
        return true, ku * self.user / users + kp * self.prompt / prompts + ke * self.residual / (users * prompts)


def _group_pair_sums(groups: IntArray, a: FloatArray, m: FloatArray) -> tuple[FloatArray, FloatArray]:
    """For every (k, l): Σ over groups of Σ over pairs of rows of the group where both k and l are present of
    (y_ik − y_jk)(y_il − y_jl), and the number of such pairs. ``a``: values with 0 where absent, ``m``: presence."""
    k = a.shape[1]
    s = np.zeros((k, k))
    n_pairs = np.zeros((k, k))
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for rows in np.split(order, bounds):
        if rows.size < 2:
            continue
        ag, mg = a[rows], m[rows]
        n = mg.T @ mg
        sy = ag.T @ mg  # (k, l): Σ y_k over the rows where both are present
        s += n * (ag.T @ ag) - sy * sy.T
        n_pairs += n * (n - 1) / 2
    return s, n_pairs


def _psd(x: FloatArray) -> FloatArray:
    w, v = np.linalg.eigh((x + x.T) / 2)
    out: FloatArray = (v * np.clip(w, 0.0, None)) @ v.T
    return out


def _sqrt_psd(x: FloatArray) -> FloatArray:
    """L with L Lᵀ = x (x positive semi-definite)."""
    w, v = np.linalg.eigh((x + x.T) / 2)
    out: FloatArray = v * np.sqrt(np.clip(w, 0.0, None))
    return out


def joint_components(users: Sequence[str], prompts: Sequence[str], values: FloatArray) -> Joint:
    """The K × K variance components of ``values`` (cells × K comparisons, NaN where a comparison lacks the
    cell) by the same method of moments as :func:`variance_components`, with products of differences in place
    of squares (cross-covariances from the cells both comparisons have)."""
    y = np.asarray(values, dtype=np.float64)
    m = np.isfinite(y).astype(np.float64)
    a = np.where(m > 0, y, 0.0)
    uid = np.unique(np.asarray(users, dtype=object), return_inverse=True)[1].ravel()
    pid = np.unique(np.asarray(prompts, dtype=object), return_inverse=True)[1].ravel()
    n_users, n_prompts, n = int(uid.max()) + 1 if uid.size else 0, int(pid.max()) + 1 if pid.size else 0, y.shape[0]
    s_all, n_all = _group_pair_sums(np.zeros(n, dtype=np.intp), a, m)
    s_row, n_row = _group_pair_sums(uid, a, m)
    s_col, n_col = _group_pair_sums(pid, a, m)
    s_both, n_both = s_all - s_row - s_col, n_all - n_row - n_col

    def mean(x: FloatArray, c: FloatArray) -> FloatArray:
        out: FloatArray = np.where(c > 0, x / np.maximum(c, 1.0), 0.0)
        return out

    zero = np.zeros_like(s_all)
    m_row, m_col, m_both = mean(s_row, n_row), mean(s_col, n_col), mean(s_both, n_both)
    if not (n_both > 0).any() or not ((n_row > 0).any() or (n_col > 0).any()):
        return Joint(zero, zero, _psd(mean(s_all, n_all)), n_users, n_prompts, n, False)
    if not (n_col > 0).any():  # nested prompts: σ²_p is part of the residual
        return Joint(_psd((m_both - m_row) / 2), zero, _psd(m_row / 2), n_users, n_prompts, n, False)
    if not (n_row > 0).any():  # one prompt per user: σ²_u is part of the residual
        return Joint(zero, _psd((m_both - m_col) / 2), _psd(m_col / 2), n_users, n_prompts, n, False)
    return Joint(
        _psd((m_both - m_row) / 2),
        _psd((m_both - m_col) / 2),
        _psd((m_row + m_col - m_both) / 2),
        n_users,
        n_prompts,
        n,
        True,
    )


class DecisionModel:
    """The whole decision at a size, by Monte Carlo over the comparisons' joint normal distribution.

    Comparison k has true difference ``effects[k]``; at U × P its estimates are N(effects, Σ_true(U, P)) and the
    bootstrap's covariance is Σ_boot(U, P) (:meth:`Joint.covariances`). The critical values are those the
    analysis computes from its replicates: the ``level`` quantile of max_k |Z_k| over the two-sided family
    (leader − each other system) and of max_k Z_k over the one-sided family (each system − the random pick), Z
    ~ N(0, corr(Σ_boot)). A required comparison succeeds when its interval excludes 0 on the side of its effect
    (D̂_k − c·se_k > 0), or, where ``equivalence[k]``, when its (1 − 2α) interval lies inside ±margin; the power
    is the share of draws in which every required comparison succeeds together. The draws are fixed (seeded),
    so the power is a smooth function of the size."""

    def __init__(
        self,
        joint: Joint,
        effects: Sequence[float] | FloatArray,
        two_sided: Sequence[bool],
        required: Sequence[bool],
        equivalence: Sequence[bool],
        *,
        margin: float,
        level: float,
        draws: int = MC_DRAWS,
        null_draws: int = MC_NULL_DRAWS,
        seed: int = 0,
    ) -> None:
        from scipy.stats import norm

        self.joint = joint
        self.effects = np.asarray(effects, dtype=np.float64)
        self.two = np.asarray(two_sided, dtype=bool)
        self.required = np.asarray(required, dtype=bool)
        self.equivalence = np.asarray(equivalence, dtype=bool)
        self.margin, self.level = margin, level
        self.z_tost = float(norm.ppf(level))
        rng = np.random.default_rng(seed)
        k = self.effects.size
        self._null = rng.standard_normal((null_draws, k))
        self._draw = rng.standard_normal((draws, k))
        self._sign = np.where(self.two & (self.effects < 0), -1.0, 1.0)

    def critical_values(self, boot: FloatArray) -> tuple[FloatArray, float | None, float | None]:
        """(se, two-sided c, one-sided c) of the bootstrap covariance ``boot``."""
        se = np.sqrt(np.clip(np.diag(boot), 0.0, None))
        safe = np.where(se > 0, se, 1.0)
        z = self._null @ _sqrt_psd(boot / np.outer(safe, safe)).T
        c2 = float(np.quantile(np.abs(z[:, self.two]).max(axis=1), self.level)) if self.two.any() else None
        c1 = float(np.quantile(z[:, ~self.two].max(axis=1), self.level)) if (~self.two).any() else None
        return se, c2, c1

    def power(self, users: float, prompts: float) -> float:
        if not self.required.any():
            return 1.0
        true, boot = self.joint.covariances(users, prompts)
        se, c2, c1 = self.critical_values(boot)
        crit = np.where(self.two, c2 or 0.0, c1 or 0.0)
        d = self.effects + self._draw @ _sqrt_psd(true).T
        ok = self._sign * d - crit * se > 0
        ok |= self.equivalence & (np.abs(d) + self.z_tost * se < self.margin)
        return float(np.mean(ok[:, self.required].all(axis=1)))


def decision(
    est: Estimates,
    metric: str,
    order: Sequence[str],
    *,
    margin: float,
    crit: float | None = None,
    effect: float | None = None,
    power: float = POWER,
) -> dict[str, Any]:
    """The plan of the whole decision on ``metric``: the leader (``order[0]``) against each other deployable
    system (two-sided, simultaneous) and, when the metric has :data:`RANDOM_PICK` cells, each deployable system
    against the random pick (one-sided, simultaneous over the systems).

    Returns ``leader`` (the per-comparison entries leader − each other, at ``crit`` or else the model's current
    critical value), ``vs_random`` (the same per system against the random pick), ``critical_values`` (the
    model's at the current size) and ``decision``: the users × prompts at which every comparison succeeds
    together with probability ``power`` (:class:`DecisionModel`), None when there is nothing to decide."""
    order = [m for m in order if m != RANDOM_PICK]  # the null is never a candidate
    if not order:
        return {"leader": [], "vs_random": [], "critical_values": {LEADER: None, VS_RANDOM: None}, "decision": None}
    lead, others = order[0], list(order[1:])
    pairs = [(lead, m, LEADER) for m in others]
    if RANDOM_PICK in est.methods_with(metric):
        pairs += [(m, RANDOM_PICK, VS_RANDOM) for m in order]
    cols: list[tuple[str, str, str, IntArray, FloatArray]] = []
    for a, b, fam in pairs:
        ca, va = est.cell_means(a, metric)
        cb, vb = est.cell_means(b, metric)
        both, ia, ib = np.intersect1d(ca, cb, assume_unique=True, return_indices=True)
        diff = va[ia] - vb[ib]
        if both.size >= 2 and float(np.ptp(diff)) > 0:  # a constant difference has nothing to plan from
            cols.append((a, b, fam, both, diff))
    model = None
    c2 = c1 = None
    if cols:
        union = np.unique(np.concatenate([c[3] for c in cols]))
        y = np.full((union.size, len(cols)), np.nan)
        for k, (_, _, _, cells, diff) in enumerate(cols):
            y[np.searchsorted(union, cells), k] = diff
        users, prompts = est.cell_labels(union)
        joint = joint_components(users, prompts, y)
        observed = np.array([float(np.mean(c[4])) for c in cols])
        effects = observed if effect is None else np.full(len(cols), float(effect))
        two = [c[2] == LEADER for c in cols]
        equivalence = [t and effect is None and margin > 0 for t in two]
        # the leader must be separated from (or shown equivalent to) every system; a system shown to beat the
        # random pick only where it is above it
        required = [(e != 0 or q) if t else e > 0 for e, t, q in zip(effects, two, equivalence, strict=True)]
        model = DecisionModel(joint, effects, two, required, equivalence, margin=margin, level=est.level)
        u0, p0 = _shape(joint)
        _, c2, c1 = model.critical_values(joint.covariances(u0, p0)[1])
    lead_crit = crit if crit is not None else c2
    leader_rows = plan(est, metric, lead, others, margin=margin, crit=lead_crit, effect=effect, power=power)
    random_rows = []
    for a, b, fam in pairs:
        if fam == VS_RANDOM:
            e = plan_comparison(est, metric, a, b, effect=effect, margin=margin, crit=c1, power=power, family=fam)
            if e is not None:
                random_rows.append(e)
    out: dict[str, Any] = {
        "leader": leader_rows,
        "vs_random": random_rows,
        "critical_values": {LEADER: c2, VS_RANDOM: c1},
        "decision": None,
    }
    if model is not None:
        out["decision"] = _decision_entry(est, metric, lead, cols, model, leader_rows + random_rows, effect, power)
    return out


def _shape(j: Joint) -> tuple[int, int]:
    """The run's users and prompts (prompts per user when nested), as :func:`sizes` scales them."""
    return max(j.users, 2), max(j.prompts // max(1, j.users) if not j.crossed else j.prompts, 1)


def _row_cells(e: Mapping[str, Any]) -> float:
    """The cells one comparison needs on its own to succeed (separate, or establish equivalence when allowed)."""
    ways = [e.get("separate")] + ([e.get("equivalence")] if e["effect_source"] == "observed" else [])
    got = [float(s["cells"]) for s in ways if s]
    return min(got) if got else math.inf


def _decision_entry(
    est: Estimates,
    metric: str,
    lead: str,
    cols: Sequence[tuple[str, str, str, IntArray, FloatArray]],
    model: DecisionModel,
    rows: Sequence[Mapping[str, Any]],
    effect: float | None,
    power: float,
) -> dict[str, Any]:
    joint = model.joint
    shape = Components(0.0, 0.0, 0.0, joint.users, joint.prompts, joint.cells, joint.crossed)
    tests = [
        {
            "a": a, "b": b, "family": fam, "effect": float(model.effects[k]), "required": bool(model.required[k]),
            "succeeds_by": ("separation or equivalence" if model.equivalence[k] else "separation")
            if fam == LEADER else "beating it",
        }
        for k, (a, b, fam, _, _) in enumerate(cols)
    ]  # fmt: skip
    by_pair = {(r["a"], r["b"]): r for r in rows}
    needs = [(_row_cells(by_pair[(t["a"], t["b"])]), t) for t in tests if t["required"] and (t["a"], t["b"]) in by_pair]
    hardest = max(needs, key=lambda x: x[0])[1] if needs else None
    size = sizes(shape, model.power, power) if model.required.any() else None
    n_lead = sum(1 for t in tests if t["family"] == LEADER)
    n_rand = sum(1 for t in tests if t["family"] == VS_RANDOM)
    entry: dict[str, Any] = {
        "metric": metric,
        "leader": lead,
        "effect": effect,
        "effect_source": "observed" if effect is None else "chosen",
        "power": power,
        "margin": model.margin,
        "level": model.level,
        "comparisons": {LEADER: n_lead, VS_RANDOM: n_rand},
        "required": int(model.required.sum()),
        "tests": tests,
        "power_now": model.power(*_shape(joint)),
        "size": size,
        "crossed": joint.crossed,
        "users": joint.users,
        "prompts": joint.prompts,
        "limited_by": None if hardest is None else {k: hardest[k] for k in ("a", "b", "family", "effect")},
        "model": (
            f"the verdict's rule applied to {MC_DRAWS} draws of the comparisons' joint normal distribution "
            "(variance components of every comparison and their cross-covariances, the two-way bootstrap's "
            "variance for the intervals), the critical values recomputed at each size"
        ),
    }
    entry["text"] = decision_text(est, entry)
    return entry


def decision_text(est: Estimates, e: Mapping[str, Any]) -> str:
    """One sentence: how many users × prompts the whole decision needs."""
    tests = e["tests"]
    n_lead = sum(1 for t in tests if t["family"] == LEADER)
    beat = sum(1 for t in tests if t["family"] == VS_RANDOM and t["required"])
    below = sum(1 for t in tests if t["family"] == VS_RANDOM and not t["required"])
    what = []
    if n_lead:
        how = "separated from (or shown equivalent to)" if e["effect_source"] == "observed" and e["margin"] > 0 else (
            "separated from")  # fmt: skip
        others = "the other system" if n_lead == 1 else f"each of the other {n_lead}"
        what.append(f"{e['leader']} {how} {others}")
    if beat:
        left = f", the {below} not above it left out" if below else ""
        what.append(f"{beat} system{'s' * (beat != 1)} shown to beat the random pick{left}")
    which = "the observed differences" if e["effect_source"] == "observed" else (
        f"an effect of {est.fmt(e['metric'], float(e['effect']), True)} on every comparison")  # fmt: skip
    pct = f"{100 * e['power']:.0f}%"
    head = f"The whole decision ({'; '.join(what)}; simultaneous) at {which}"
    comp = {"crossed": e["crossed"], "users": e["users"], "prompts": e["prompts"]}
    if e["required"] == 0:
        return "The whole decision: nothing to show (no comparison has a difference to detect)"
    s = e["size"]
    now = f"now {_now(comp)}: {100 * e['power_now']:.0f}%"
    if s is None:
        text = f"{head}: no practical size reaches {pct} power ({now})"
    elif s["scale"] <= 1:
        text = f"{head}: the current {_now(comp)} already has {100 * e['power_now']:.0f}% power"
    else:
        text = f"{head} needs {_size(s, comp)} for {pct} power ({now})"
    lim = e["limited_by"]
    if lim is not None and (s is None or s["scale"] > 1):
        text += f"; the hardest part: {lim['a']} − {lim['b']} ({est.fmt(e['metric'], lim['effect'], True)})"
    return text
