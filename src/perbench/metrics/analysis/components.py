"""Variance components of paired differences, and the variance the verdict's bootstrap gives their mean.

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
prompts: k_u on both parts). The planner (:mod:`.power`) uses that width for the decision and the true variance for
the spread of D̄, so it sizes the test the verdict really runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perbench.metrics.analysis.base import FloatArray, IntArray


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


def sqrt_psd(x: FloatArray) -> FloatArray:
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
