"""A double bootstrap of the selection's rank coefficients on synthetic systems, to check their intervals' coverage.

Systems s = 1..S are scored upstream on each user's own pairs (prompts nested in users, as upstream pair sets are)
and downstream on a crossed users × prompts design, all users shared by both metrics:

    x(s, u, j) = μx_s + c_su + e_suj          y(s, u, p) = μy_s + c'_su + d'_sp + e'_sup

In the bootstrap world the sample is the population: the truth is the full-sample coefficient. An *outer* draw
resamples users and downstream prompts as the analysis does (a user drawn twice is two users); on that pseudo-data
the analysis's own two-way bootstrap (:class:`~perbench.stats.bootstrap.TwoWayBootstrap`, ``n_inner`` replicates)
gives the interval, and coverage is the share of outer draws whose interval holds the full-sample coefficient.
Each interval method gets the same replicates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from perbench.metrics.analysis.selection import BIAS_POSITION, coefficient_ci
from perbench.metrics.correlation import BATCHED, BOUNDS
from perbench.stats.bootstrap import TwoWayBootstrap, percentile_ci, replicate_position

FloatArray = npt.NDArray[np.float64]
Interval = tuple[float, float] | None


@dataclass(frozen=True)
class Design:
    systems: int = 10
    users: int = 20
    prompts: int = 12
    pairs: int = 5  # upstream pairs per user
    spread_x: float = 0.05  # sd of the systems' true upstream values
    spread_y: float = 0.02  # ... and downstream values
    rho: float = 0.8  # correlation of the true values
    user_x: float = 0.1  # sd of c (system × user, upstream)
    noise_x: float = 0.4  # sd of e (per pair)
    user_y: float = 0.05
    prompt_y: float = 0.05
    noise_y: float = 0.25


def simulate(d: Design, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """x (S, U, pairs) and y (S, U, P)."""
    z = rng.normal(size=d.systems)
    mx = d.spread_x * z
    my = d.spread_y * (d.rho * z + np.sqrt(1 - d.rho**2) * rng.normal(size=d.systems))
    s, u, p = d.systems, d.users, d.prompts
    x = mx[:, None, None] + rng.normal(0, d.user_x, (s, u, 1)) + rng.normal(0, d.noise_x, (s, u, d.pairs))
    y = (
        my[:, None, None]
        + rng.normal(0, d.user_y, (s, u, 1))
        + rng.normal(0, d.prompt_y, (s, 1, p))
        + rng.normal(0, d.noise_y, (s, u, p))
    )
    return x, y


def _bootstrap(
    x: FloatArray, y: FloatArray, users: npt.NDArray[np.intp], prompts: npt.NDArray[np.intp], n_boot: int, seed: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The analysis's bootstrap of the pseudo-data made of ``users`` and ``prompts`` (indices, repeats allowed: each
    position is a distinct user or prompt): points (S,) and replicates (n_boot, S) of both metrics."""
    s, _, n_pairs = x.shape
    nu, npr = users.size, prompts.size
    # upstream rows: (copy k of a user, pair j), prompt "k/j" (nested); downstream rows: (copy k, prompt copy l)
    up_u = np.repeat(np.arange(nu), n_pairs)
    up_p = np.array([f"{k}/{j}" for k in range(nu) for j in range(n_pairs)])
    dn_u = np.repeat(np.arange(nu), npr)
    dn_p = np.tile(np.arange(npr), nu).astype(str)
    u_ids = np.concatenate([up_u, dn_u]).astype(str)
    p_ids = np.concatenate([up_p, np.char.add("q", dn_p)])
    n_up, n_dn = up_u.size, dn_u.size
    values = np.concatenate(
        [np.concatenate([x[i][users].ravel(), y[i][np.ix_(users, prompts)].ravel()]) for i in range(s)]
    )
    width = n_up + n_dn
    boot = TwoWayBootstrap(np.tile(u_ids, s).tolist(), np.tile(p_ids, s).tolist(), n_boot=n_boot, seed=seed)
    cols = [np.arange(n_up) + i * width for i in range(s)] + [np.arange(n_up, width) + i * width for i in range(s)]
    point, reps = boot.means(values, cols)
    return point[:s], point[s:], reps[:, :s], reps[:, s:]


def _candidates(name: str) -> dict[str, Callable[[float, FloatArray, float], Interval]]:
    lo_b, hi_b = BOUNDS[name]

    def percentile(t: float, r: FloatArray, level: float) -> Interval:
        return percentile_ci(r[np.isfinite(r)], level)

    def basic(t: float, r: FloatArray, level: float) -> Interval:
        ci = percentile_ci(r[np.isfinite(r)], level)
        return None if ci is None else (max(lo_b, 2 * t - ci[1]), min(hi_b, 2 * t - ci[0]))

    def bias_corrected(t: float, r: FloatArray, level: float) -> Interval:
        f = r[np.isfinite(r)]
        p = float(np.clip(np.mean(f < t) + 0.5 * np.mean(f == t), 0.5 / f.size, 1 - 0.5 / f.size))
        z0, za = stats.norm.ppf(p), stats.norm.ppf((1 - level) / 2)
        q = np.quantile(f, [stats.norm.cdf(2 * z0 + za), stats.norm.cdf(2 * z0 - za)])
        return float(q[0]), float(q[1])

    def analysis(t: float, r: FloatArray, level: float) -> Interval:
        return coefficient_ci(name, t, r, level, r.size)[0]

    return {"percentile": percentile, "basic": basic, "bias-corrected": bias_corrected, "analysis": analysis}


@dataclass(frozen=True)
class Coverage:
    value: float  # the full-sample coefficient (the truth in the bootstrap world)
    position: float  # its position among its own bootstrap replicates
    flagged: bool  # the analysis flags it as biased
    coverage: Mapping[str, float]  # per interval method


def double_bootstrap(
    x: FloatArray,
    y: FloatArray,
    *,
    name: str = "kendall_tau_b",
    n_outer: int = 120,
    n_inner: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> Coverage:
    rng = np.random.default_rng(seed)
    coef = BATCHED[name]
    _, u, p = y.shape
    all_u, all_p = np.arange(u), np.arange(p)
    px, py, rx, ry = _bootstrap(x, y, all_u, all_p, 1000, seed)
    truth = float(coef(px[None], py[None])[0])
    position = replicate_position(truth, coef(rx, ry))
    methods = _candidates(name)
    hits = {k: 0 for k in methods}
    for o in range(n_outer):
        users, prompts = rng.integers(0, u, u), rng.integers(0, p, p)
        px, py, rx, ry = _bootstrap(x, y, users, prompts, n_inner, seed + 1 + o)
        t = float(coef(px[None], py[None])[0])
        reps = coef(rx, ry)
        for k, fn in methods.items():
            ci = fn(t, reps, level) if np.isfinite(t) else None
            hits[k] += ci is not None and ci[0] - 1e-12 <= truth <= ci[1] + 1e-12
    assert position is not None
    flagged = not 1 - BIAS_POSITION < position < BIAS_POSITION
    return Coverage(truth, position, flagged, {k: v / n_outer for k, v in hits.items()})
