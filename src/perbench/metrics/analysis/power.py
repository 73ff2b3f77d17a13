"""Power planning: how many users × prompts would separate two methods, or establish their equivalence.

**Variance components.** The paired difference D(u, p) = a − b per (user, prompt) cell follows the crossed random
effects model D = δ + α_u + β_p + ε_up. Method of moments (the U-statistics of Gao & Owen, 2017, which need no
balance): half the mean squared difference of two cells of one user estimates σ²_p + σ²_e, of one prompt
σ²_u + σ²_e, of two cells sharing neither σ²_u + σ²_p + σ²_e; solved and clipped at 0. Prompts that only one user
has (upstream pairs) are nested in users: then σ²_p is not separable from σ²_e and counts as residual.

**Power.** With U users and P prompts, Var(D̄) = σ²_u/U + σ²_p/P + σ²_e/(U·P) (nested: σ²_u/U + σ²_e/(U·P)). The
verdict's intervals come from the two-way bootstrap, whose variance counts the residual twice in a crossed design
(σ²_u/U + σ²_p/P + 2σ²_e/(U·P)); the planner uses that width for the decision and the true variance for the
spread of D̄, so it sizes the test the verdict really runs:

- separate at effect δ: P(|D̄| > c·s_boot), with c the verdict's simultaneous critical value (z_0.975 for one
  comparison);
- equivalence within ±ε at true difference δ: P(|D̄| + z_{1−α}·s_boot < ε).

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

from perbench.metrics.analysis.estimates import Estimates

POWER = 0.8
MAX_CELLS = 10**8  # beyond this, a size is reported as unreachable


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


def variances(c: Components, users: float, prompts: float) -> tuple[float, float]:
    """(true variance of the mean difference, the two-way bootstrap's variance of it) at users × prompts, where
    ``prompts`` is prompts per user for nested prompts."""
    if not c.crossed:
        v = c.user / users + c.residual / (users * prompts)
        return v, v
    base = c.user / users + c.prompt / prompts
    return base + c.residual / (users * prompts), base + 2 * c.residual / (users * prompts)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def power_separate(c: Components, users: float, prompts: float, effect: float, crit: float) -> float:
    true, boot = variances(c, users, prompts)
    if true <= 0:
        return 1.0 if abs(effect) > 0 else 0.0
    s, sb = math.sqrt(true), math.sqrt(boot)
    return _phi((abs(effect) - crit * sb) / s) + _phi((-abs(effect) - crit * sb) / s)


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
) -> dict[str, Any] | None:
    """The planner's entry for a − b on ``metric``: components, power now, and the sizes to separate at
    ``effect`` (None: the observed difference) and to establish equivalence within ``margin``."""
    from scipy.stats import norm

    users, prompts, diffs = paired_cells(est, metric, a, b)
    if len(diffs) < 2:
        return None
    comp = variance_components(users, prompts, diffs)
    observed = float(np.mean(diffs))
    delta = observed if effect is None else effect
    c = crit if crit is not None else float(norm.ppf(1 - (1 - est.level) / 2))
    z = float(norm.ppf(est.level))
    constant = float(np.ptp(diffs)) == 0.0  # the same difference on every cell: nothing to plan from
    sep = eq = None
    if not constant and delta != 0:
        sep = sizes(comp, lambda u, p: power_separate(comp, u, p, delta, c), power)
    if not constant and margin > 0 and abs(observed) < margin:
        eq = sizes(comp, lambda u, p: power_equivalent(comp, u, p, observed, margin, z), power)
    entry = {
        "a": a,
        "b": b,
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


def plan_text(est: Estimates, e: Mapping[str, Any]) -> str:
    comp = e["components"]
    now_p = comp["prompts"] if comp["crossed"] else max(1, comp["prompts"] // max(1, comp["users"]))
    now = f"now {now_p} × {comp['users']}"
    eff = est.fmt(e["metric"], e["effect"], True)
    pct = f"{100 * e['power']:.0f}% power"
    which = "the observed" if e["effect_source"] == "observed" else "an effect of"
    sep = e["separate"]
    if e["constant"]:
        d = est.fmt(e["metric"], e["observed"], True)
        return f"{e['a']} − {e['b']} is {d} on every cell both cover: no variation to plan from"
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
