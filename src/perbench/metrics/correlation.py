"""Agreement between two scorings of the same systems: does the upstream ranking predict the downstream one?

Each function takes ``x`` (the systems' upstream scores) and ``y`` (their downstream scores), higher is better
on both, and returns a float, or ``None`` when the coefficient is undefined: fewer than 3 systems, a constant
input, or a non-finite value. ``None`` is the "not applicable" state; it is never reported as 0 or NaN. The
analysis reports no coefficient over fewer than ``MIN_REPORTED_SYSTEMS`` (5) systems.

- ``kendall_tau_b``: Kendall's τ-b (``scipy.stats.kendalltau``, variant ``b``: corrected for ties).
- ``weighted_tau``: ``scipy.stats.weightedtau`` with its defaults: the additive hyperbolic weigher 1/(r + 1),
  ranks taken from both scorings and averaged, so disagreements among the top systems cost most.
- ``spearman``: Spearman's ρ (``scipy.stats.spearmanr``, average ranks for ties).
- ``pearson``: Pearson's r (``scipy.stats.pearsonr``).
- ``ndcg``: NDCG of the ranking by ``x``, with gain = ``y`` min-max scaled over the systems (best system 1,
  worst 0), discount 1/log2(rank + 1), normalised by the DCG of the ideal ranking (by ``y``). 1 means the
  upstream ranking orders the systems as well as the downstream score itself.
- ``rbo``: rank-biased overlap, Webber, Moffat & Zobel (2010), extrapolated form RBO_ext with persistence
  p = 0.9, between the ranking by ``x`` and the ranking by ``y``. Both lists hold the same k systems, so
  RBO_ext = (X_k / k)·p^k + (1 − p)/p · Σ_{d=1..k} (X_d / d)·p^d, with X_d the overlap of the two top-d sets;
  1 for identical rankings.

Ties. Values equal up to float rounding (``TIE_TOL``, relative) are tied before any coefficient is computed, so
rounding never orders two systems. ``ndcg`` and ``rbo`` average over the orders of tied systems (a tied system's
discount is the mean over the positions its tie group occupies; its chance of being in a top-d set is the share
of those positions within d), so neither depends on the order systems are listed in.

Chance values. ``ndcg_chance`` and ``rbo_chance`` are the expectations under a uniformly random ranking of the
same systems: both are far above 0 for a few systems (RBO of 6 random systems ≈ 0.78), so a value is read
against them.

The ``batched_*`` functions compute the same coefficients for every row of two (replicates × systems)
arrays at once (used to put bootstrap CIs on them); a row where the coefficient is undefined gives NaN there,
which callers drop before taking percentiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Correlation = Callable[[Any, Any], "float | None"]
BatchedCorrelation = Callable[[FloatArray, FloatArray], FloatArray]

MIN_SYSTEMS = 3
#: the fewest systems a coefficient is *reported* over (the analysis says "not applicable" below it): τ-b of 4
#: systems takes 7 values, and its bootstrap interval spans most of them whatever the data say
MIN_REPORTED_SYSTEMS = 5
#: the range of each coefficient (its interval is clipped to it)
BOUNDS: dict[str, tuple[float, float]] = {
    "kendall_tau_b": (-1.0, 1.0),
    "weighted_tau": (-1.0, 1.0),
    "spearman": (-1.0, 1.0),
    "pearson": (-1.0, 1.0),
    "ndcg": (0.0, 1.0),
    "rbo": (0.0, 1.0),
}
RBO_P = 0.9
#: values closer than this (relative to their size, at least 1) are one tie
TIE_TOL = 1e-12
_CHUNK = 2_000_000  # elements of a (replicates × systems × systems) working array


def _prepare(x: Any, y: Any) -> tuple[FloatArray, FloatArray] | None:
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"x and y differ in length ({a.size} vs {b.size})")
    if a.size < MIN_SYSTEMS or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return None
    a, b = snap_ties(a[None, :])[0], snap_ties(b[None, :])[0]
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return a, b


def snap_ties(v: FloatArray) -> FloatArray:
    """Each row's values with every group of values equal up to ``TIE_TOL`` set to the group's smallest value
    (NaN stays NaN), so exact comparisons see the ties that float rounding would hide."""
    a = np.atleast_2d(np.asarray(v, dtype=np.float64))
    n = a.shape[1]
    if n < 2:
        return a.copy()
    order = np.argsort(a, axis=1, kind="stable")
    s = np.take_along_axis(a, order, 1)
    new = np.ones_like(s, dtype=bool)
    with np.errstate(invalid="ignore"):
        new[:, 1:] = ~(np.diff(s, axis=1) <= TIE_TOL * np.maximum(1.0, np.abs(s[:, 1:])))
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0), axis=1)
    out = np.empty_like(a)
    np.put_along_axis(out, order, np.take_along_axis(s, start, 1), 1)
    return out


def _finite(v: Any) -> float | None:
    f = float(v)
    return f if np.isfinite(f) else None


def kendall_tau_b(x: Any, y: Any) -> float | None:
    from scipy import stats

    p = _prepare(x, y)
    return None if p is None else _finite(stats.kendalltau(p[0], p[1], variant="b").statistic)


def weighted_tau(x: Any, y: Any) -> float | None:
    from scipy import stats

    p = _prepare(x, y)
    return None if p is None else _finite(stats.weightedtau(p[0], p[1]).statistic)


def spearman(x: Any, y: Any) -> float | None:
    from scipy import stats

    p = _prepare(x, y)
    return None if p is None else _finite(stats.spearmanr(p[0], p[1]).statistic)


def pearson(x: Any, y: Any) -> float | None:
    from scipy import stats

    p = _prepare(x, y)
    return None if p is None else _finite(stats.pearsonr(p[0], p[1]).statistic)


def ndcg(x: Any, y: Any) -> float | None:
    p = _prepare(x, y)
    return None if p is None else _finite(batched_ndcg(p[0][None, :], p[1][None, :])[0])


def rbo(x: Any, y: Any, p: float = RBO_P) -> float | None:
    q = _prepare(x, y)
    return None if q is None else _finite(batched_rbo(q[0][None, :], q[1][None, :], p)[0])


CORRELATIONS: dict[str, Correlation] = {
    "kendall_tau_b": kendall_tau_b,
    "weighted_tau": weighted_tau,
    "spearman": spearman,
    "pearson": pearson,
    "ndcg": ndcg,
    "rbo": rbo,
}


# ---------------------------------------------------------------- batched (rows = bootstrap replicates)


def _rows(x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """2-D float copies and a mask of the rows on which a coefficient is defined."""
    a = snap_ties(np.asarray(x, dtype=np.float64))
    b = snap_ties(np.asarray(y, dtype=np.float64))
    if a.shape != b.shape:
        raise ValueError(f"x and y differ in shape ({a.shape} vs {b.shape})")
    ok = np.all(np.isfinite(a), axis=1) & np.all(np.isfinite(b), axis=1)
    ok &= a.shape[1] >= MIN_SYSTEMS
    if a.shape[1]:  # a constant row has no ranking (rows with a non-finite value are already excluded)
        ok &= (np.ptp(np.nan_to_num(a), axis=1) > 0) & (np.ptp(np.nan_to_num(b), axis=1) > 0)
    return a, b, ok


def _chunks(n_rows: int, n_sys: int) -> list[slice]:
    step = max(1, _CHUNK // max(1, n_sys * n_sys))
    return [slice(i, min(n_rows, i + step)) for i in range(0, n_rows, step)]


def _lex_rank(primary: FloatArray, secondary: FloatArray) -> npt.NDArray[np.intp]:
    """Rank 0 = best, by decreasing (primary, secondary); full ties: the later system ranks higher.

    This is the rank ``scipy.stats.weightedtau`` derives from ``lexsort((secondary, primary))`` reversed.
    """
    n_rows, n = primary.shape
    order = np.argsort(secondary, axis=1, kind="stable")
    order = np.take_along_axis(order, np.argsort(np.take_along_axis(primary, order, 1), axis=1, kind="stable"), 1)
    rank = np.empty((n_rows, n), dtype=np.intp)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(n - 1, -1, -1), (n_rows, n)), 1)
    return rank


def _tau_from_weights(x: FloatArray, y: FloatArray, w: FloatArray | None) -> FloatArray:
    """Σ w_ij sgn(dx) sgn(dy) / sqrt(Σ_{dx≠0} w_ij · Σ_{dy≠0} w_ij) over pairs i < j, per row."""
    sx = np.sign(x[:, :, None] - x[:, None, :])
    sy = np.sign(y[:, :, None] - y[:, None, :])
    if w is None:
        w = np.ones_like(sx)
    num = np.sum(w * sx * sy, axis=(1, 2))
    den = np.sqrt(np.sum(w * (sx != 0), axis=(1, 2)) * np.sum(w * (sy != 0), axis=(1, 2)))
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = num / den
    return out


def batched_kendall_tau_b(x: FloatArray, y: FloatArray) -> FloatArray:
    return _kendall_tau_b(*_rows(x, y))


def _kendall_tau_b(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    out = np.full(a.shape[0], np.nan)
    for s in _chunks(a.shape[0], a.shape[1]):
        out[s] = _tau_from_weights(a[s], b[s], None)
    out[~ok] = np.nan
    return out


def _hyperbolic_tau(primary: FloatArray, secondary: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
    weight = 1.0 / (_lex_rank(primary, secondary) + 1.0)
    w = weight[:, :, None] + weight[:, None, :]
    return _tau_from_weights(x, y, w)


def batched_weighted_tau(x: FloatArray, y: FloatArray) -> FloatArray:
    return _weighted_tau(*_rows(x, y))


def _weighted_tau(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    out = np.full(a.shape[0], np.nan)
    for s in _chunks(a.shape[0], a.shape[1]):
        out[s] = (_hyperbolic_tau(a[s], b[s], a[s], b[s]) + _hyperbolic_tau(b[s], a[s], a[s], b[s])) / 2
    out[~ok] = np.nan
    return out


def _pearson_rows(a: FloatArray, b: FloatArray) -> FloatArray:
    da = a - a.mean(axis=1, keepdims=True)
    db = b - b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r: FloatArray = np.sum(da * db, axis=1) / np.sqrt(np.sum(da * da, axis=1) * np.sum(db * db, axis=1))
    return np.clip(r, -1.0, 1.0)


def batched_pearson(x: FloatArray, y: FloatArray) -> FloatArray:
    return _pearson(*_rows(x, y))


def _pearson(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    out = _pearson_rows(a, b) if a.shape[1] else np.full(a.shape[0], np.nan)
    out[~ok] = np.nan
    return out


def batched_spearman(x: FloatArray, y: FloatArray) -> FloatArray:
    return _spearman(*_rows(x, y))


def _spearman(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    from scipy import stats

    if not a.shape[1]:
        return np.full(a.shape[0], np.nan)
    ra = np.asarray(stats.rankdata(a, axis=1), dtype=np.float64)
    rb = np.asarray(stats.rankdata(b, axis=1), dtype=np.float64)
    out = _pearson_rows(ra, rb)
    out[~ok] = np.nan
    return out


def _tie_spans(v: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per row and system: how many systems score strictly higher (the first position its tie group occupies,
    0-based), and the size of its tie group."""
    higher = np.sum(v[:, None, :] > v[:, :, None], axis=2).astype(np.float64)
    equal = np.sum(v[:, None, :] == v[:, :, None], axis=2).astype(np.float64)
    return higher, equal


def batched_ndcg(x: FloatArray, y: FloatArray) -> FloatArray:
    return _ndcg(*_rows(x, y))


def _ndcg(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    n = a.shape[1]
    out = np.full(a.shape[0], np.nan)
    if n == 0 or not ok.any():
        return out
    lo = b.min(axis=1, keepdims=True)
    span = b.max(axis=1, keepdims=True) - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = (b - lo) / span
    discount = 1.0 / np.log2(np.arange(2, n + 2))
    cum = np.concatenate([[0.0], np.cumsum(discount)])
    for s in _chunks(a.shape[0], n):
        first, size = _tie_spans(a[s])
        # a tied system's expected discount: the mean over the positions its tie group occupies (a row with a
        # NaN has a tie group of size 0 and is dropped below)
        with np.errstate(invalid="ignore", divide="ignore"):
            expected = (cum[(first + size).astype(np.intp)] - cum[first.astype(np.intp)]) / size
        dcg = np.sum(gain[s] * expected, axis=1)
        ideal = np.sum(-np.sort(-gain[s], axis=1) * discount, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s] = dcg / ideal
    out[~ok] = np.nan
    return out


def batched_rbo(x: FloatArray, y: FloatArray, p: float = RBO_P) -> FloatArray:
    return _rbo(*_rows(x, y), p)


def _rbo(a: FloatArray, b: FloatArray, ok: npt.NDArray[np.bool_], p: float = RBO_P) -> FloatArray:
    n_rows, k = a.shape
    out = np.full(n_rows, np.nan)
    if k == 0 or not ok.any():
        return out
    depth = np.arange(1, k + 1, dtype=np.float64)
    for s in _chunks(n_rows, k):
        # the chance that a system is in a list's top d, over random orders of its tie group; the two lists'
        # orders are independent, so the expected overlap X_d is the sum of the products
        fa, na = _tie_spans(a[s])
        fb, nb = _tie_spans(b[s])
        with np.errstate(invalid="ignore", divide="ignore"):  # rows with a NaN (tie size 0) are dropped below
            in_a = np.clip((depth[None, None, :] - fa[:, :, None]) / na[:, :, None], 0.0, 1.0)
            in_b = np.clip((depth[None, None, :] - fb[:, :, None]) / nb[:, :, None], 0.0, 1.0)
        overlap = np.sum(in_a * in_b, axis=1)  # X_d, shape (rows, k)
        agreement = overlap / depth
        out[s] = agreement[:, -1] * p**k + (1 - p) / p * np.sum(agreement * p**depth, axis=1)
    out[~ok] = np.nan
    return out


def ndcg_chance(y: Any) -> float | None:
    """E[NDCG] when the systems with downstream scores ``y`` are ranked uniformly at random: every position gets
    the mean gain, so E[DCG] = mean(gain) · Σ discounts."""
    b = np.asarray(y, dtype=np.float64).ravel()
    if b.size < MIN_SYSTEMS or not np.all(np.isfinite(b)) or np.ptp(b) == 0:
        return None
    gain = (b - b.min()) / np.ptp(b)
    discount = 1.0 / np.log2(np.arange(2, b.size + 2))
    return float(gain.mean() * discount.sum() / np.sum(np.sort(gain)[::-1] * discount))


def rbo_chance(k: int, p: float = RBO_P) -> float | None:
    """E[RBO_ext] between a fixed ranking of k systems and a uniformly random one: E[X_d] = d²/k."""
    if k < MIN_SYSTEMS:
        return None
    depth = np.arange(1, k + 1, dtype=np.float64)
    return float(p**k + (1 - p) / p * np.sum(depth / k * p**depth))


def batched_all(x: FloatArray, y: FloatArray) -> dict[str, FloatArray]:
    """Every batched coefficient of the same (replicates × systems) arrays, tying near-equal values once."""
    rows = _rows(x, y)
    return {
        "kendall_tau_b": _kendall_tau_b(*rows),
        "weighted_tau": _weighted_tau(*rows),
        "spearman": _spearman(*rows),
        "pearson": _pearson(*rows),
        "ndcg": _ndcg(*rows),
        "rbo": _rbo(*rows),
    }


BATCHED: dict[str, BatchedCorrelation] = {
    "kendall_tau_b": batched_kendall_tau_b,
    "weighted_tau": batched_weighted_tau,
    "spearman": batched_spearman,
    "pearson": batched_pearson,
    "ndcg": batched_ndcg,
    "rbo": batched_rbo,
}
