"""The power and size of one comparison (a − b on one metric) under the verdict's decision rule, and its sentence.

At U users × P prompts the mean difference D̄ has the true and the bootstrap variances of :mod:`.components`:

- separate at effect δ: P(|D̄| > c·s_boot), with c the verdict's simultaneous critical value (z_0.975 for one
  comparison);
- a system beats the random pick (one-sided, at effect δ > 0): P(D̄ > c·s_boot), c the one-sided simultaneous
  critical value over the systems (``ranking.simultaneous_lower``);
- equivalence within ±ε at true difference δ: P(|D̄| + z_{1−α}·s_boot < ε).

The sizes reported keep the run's shape (users and prompts grown by one factor) and also say how many prompts
alone (at the current users) or users alone (at the current prompts) would do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from perbench.metrics.analysis.components import Components, variance_components, variances
from perbench.metrics.analysis.estimates import Estimates

POWER = 0.8
MAX_CELLS = 10**8  # beyond this, a size is reported as unreachable
#: the random pick from the shared pool (the pool mean: exact Best-of-1), the null every system is tested against
RANDOM_PICK = "random_pick"
#: the two families of the decision: the leader against each other system, each system against the random pick
LEADER, VS_RANDOM = "leader", "random_pick"


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


def size_text(s: Mapping[str, Any] | None, comp: Mapping[str, Any]) -> str:
    if s is None:
        return f"more than {MAX_CELLS:,} cells"
    per = "" if comp["crossed"] else " per user"
    return f"about {s['prompts']} prompts{per} × {s['users']} users"


def now_text(comp: Mapping[str, Any]) -> str:
    now_p = comp["prompts"] if comp["crossed"] else max(1, comp["prompts"] // max(1, comp["users"]))
    return f"{now_p} × {comp['users']}"


def plan_text(est: Estimates, e: Mapping[str, Any]) -> str:
    comp = e["components"]
    now = f"now {now_text(comp)}"
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
            return f"no practical size would {goal} at {which} {eff} ({size_text(sep, comp)} at {pct})"
        if sep["scale"] <= 1:
            return f"at {which} {eff} the current {now[4:]} already has {100 * sep['power_now']:.0f}% power to {goal}"
        return f"to {goal} at {which} {eff} you need {size_text(sep, comp)} ({now}; {pct}, one-sided)"
    if e["effect"] == 0:
        parts = [f"{e['a']} and {e['b']} differ by exactly 0 on the cells both cover: no size separates them"]
    elif sep is None:
        parts = [f"no practical size tells {e['a']} from {e['b']} at {which} {eff} ({size_text(sep, comp)} at {pct})"]
    elif sep["scale"] <= 1:
        got = 100 * sep["power_now"]
        parts = [f"at {which} {eff} the current {now[4:]} already has {got:.0f}% power to tell {e['a']} from {e['b']}"]
    else:
        parts = [f"to tell {e['a']} from {e['b']} at {which} {eff} you need {size_text(sep, comp)} ({now}; {pct})"]
    if e["margin"] > 0 and abs(e["observed"]) < e["margin"] and e["equivalence"] is not None:
        m = est.fmt(e["metric"], e["margin"], True).lstrip("+")
        parts.append(f"to establish equivalence within ±{m}, {size_text(e['equivalence'], comp)}")
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
