"""The whole decision's power (:class:`DecisionModel`) and its plan (:func:`decision`).

The whole decision: the leader against each other deployable system (two-sided, simultaneous) and, where the metric
has ``random_pick`` cells, each deployable system against the random pick (one-sided, simultaneous). Its power is
P(every comparison succeeds together) at a size, by Monte Carlo over the comparisons' joint normal distribution
(their cross-covariances from :func:`.components.joint_components`), with the critical values of both families
recomputed at each size from the bootstrap's correlation of the comparisons. At the observed differences a leader
comparison succeeds when it is separated or shown equivalent (what the verdict decides); at a chosen effect
(``--effect``) when it is separated; a system is required to beat the random pick only where it is observed above
it. Each comparison's own entry comes from :mod:`.sizing`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import FloatArray, IntArray
from perbench.metrics.analysis.components import Components, Joint, joint_components, sqrt_psd
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.sizing import (
    LEADER,
    POWER,
    RANDOM_PICK,
    VS_RANDOM,
    now_text,
    plan,
    plan_comparison,
    size_text,
    sizes,
)

#: Monte Carlo draws of the decision model: of the estimates (the power) and of the null (the critical values,
#: whose 95 % quantile needs more draws to be stable to ~0.01)
MC_DRAWS, MC_NULL_DRAWS = 5000, 20000


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
        corrected: bool = False,
    ) -> None:
        from scipy.stats import norm

        #: the intervals use the method-of-moments variance (the verdict's set for the best), not the bootstrap's
        self.corrected = corrected
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
        z = self._null @ sqrt_psd(boot / np.outer(safe, safe)).T
        c2 = float(np.quantile(np.abs(z[:, self.two]).max(axis=1), self.level)) if self.two.any() else None
        c1 = float(np.quantile(z[:, ~self.two].max(axis=1), self.level)) if (~self.two).any() else None
        return se, c2, c1

    def power(self, users: float, prompts: float) -> float:
        if not self.required.any():
            return 1.0
        true, boot = self.joint.covariances(users, prompts)
        se, c2, c1 = self.critical_values(true if self.corrected else boot)
        crit = np.where(self.two, c2 or 0.0, c1 or 0.0)
        d = self.effects + self._draw @ sqrt_psd(true).T
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
    kept, joint, observed = difference_joint(est, metric, [(a, b) for a, b, _ in pairs])
    cols = [pairs[k] for k in kept]
    model = None
    c2 = c1 = None
    if joint is not None:
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


def difference_joint(
    est: Estimates, metric: str, pairs: Sequence[tuple[str, str]]
) -> tuple[list[int], Joint | None, FloatArray]:
    """The pairs a − b with a difference to plan from (2 or more shared cells, not constant: their indices), the
    joint variance components of their per-cell differences and their observed mean differences."""
    kept: list[int] = []
    cols: list[tuple[IntArray, FloatArray]] = []
    for k, (a, b) in enumerate(pairs):
        ca, va = est.cell_means(a, metric)
        cb, vb = est.cell_means(b, metric)
        both, ia, ib = np.intersect1d(ca, cb, assume_unique=True, return_indices=True)
        diff = va[ia] - vb[ib]
        if both.size >= 2 and float(np.ptp(diff)) > 0:  # a constant difference has nothing to plan from
            kept.append(k)
            cols.append((both, diff))
    if not cols:
        return kept, None, np.zeros(0)
    union = np.unique(np.concatenate([c[0] for c in cols]))
    y = np.full((union.size, len(cols)), np.nan)
    for k, (cells, diff) in enumerate(cols):
        y[np.searchsorted(union, cells), k] = diff
    users, prompts = est.cell_labels(union)
    return kept, joint_components(users, prompts, y), np.array([float(np.mean(d)) for _, d in cols])


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
    cols: Sequence[tuple[str, str, str]],
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
        for k, (a, b, fam) in enumerate(cols)
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
    now = f"now {now_text(comp)}: {100 * e['power_now']:.0f}%"
    if s is None:
        text = f"{head}: no practical size reaches {pct} power ({now})"
    elif s["scale"] <= 1:
        text = f"{head}: the current {now_text(comp)} already has {100 * e['power_now']:.0f}% power"
    else:
        text = f"{head} needs {size_text(s, comp)} for {pct} power ({now})"
    lim = e["limited_by"]
    if lim is not None and (s is None or s["scale"] > 1):
        text += f"; the hardest part: {lim['a']} − {lim['b']} ({est.fmt(e['metric'], lim['effect'], True)})"
    return text
