"""The plan of the verdict's own question: how many users × prompts until the set for the best (:mod:`.best_set`)
holds the leader alone, shown better than every other deployable system and every baseline (leader
identification).

The leader L is the top deployable system. Each comparison L − j (every other deployable system and baseline j)
has per-cell differences; their joint variance components (:func:`.components.joint_components`) give the
comparisons' joint normal distribution at any size. At U × P the verdict shows L better than j when
D̂_j − d·s_j > 0, s_j the two-way bootstrap's standard error (what the set for the best uses) and d the
one-sided simultaneous critical value over the k comparisons (from their correlation); the power is the share of
:class:`.decision_model.DecisionModel` draws in which every comparison succeeds together. The effect model: the
observed differences, or (``effect`` X) the leader ahead of every other system by at least X — each comparison's
effect max(observed, X), an ordering of the systems that can occur. At the observed differences a system at or
above the leader cannot be shown below it at any size: the plan says so instead of a size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.components import Components
from perbench.metrics.analysis.decision_model import DecisionModel, _shape, difference_joint
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.sizing import POWER, now_text, size_text, sizes
from perbench.metrics.analysis.verdict_phrasing import names


def identify(
    est: Estimates,
    metric: str,
    leader: str,
    others: Sequence[str],
    *,
    margin: float,
    effect: float | None = None,
    power: float = POWER,
) -> dict[str, Any] | None:
    """The leader-identification plan (module docstring); None when no comparison has a difference to plan from."""
    kept, joint, observed = difference_joint(est, metric, [(leader, b) for b in others])
    if joint is None:
        return None
    cols = [others[k] for k in kept]
    effects = observed if effect is None else np.maximum(observed, float(effect))
    k = len(cols)
    model = DecisionModel(joint, effects, [False] * k, [True] * k, [False] * k, margin=margin, level=est.level)
    behind = [b for b, e in zip(cols, effects, strict=True) if e <= 0]
    u0, p0 = _shape(joint)
    true_now = np.sqrt(np.clip(np.diag(joint.covariances(u0, p0)[0]), 1e-300, None))
    hardest = int(np.argmin(effects / true_now))
    shape = Components(0.0, 0.0, 0.0, joint.users, joint.prompts, joint.cells, joint.crossed)
    entry: dict[str, Any] = {
        "question": "leader identification",
        "metric": metric,
        "leader": leader,
        "effect": effect,
        "effect_source": "observed" if effect is None else "chosen",
        "power": power,
        "margin": margin,
        "level": est.level,
        "comparisons": k,
        "tests": [{"a": leader, "b": b, "effect": float(e)} for b, e in zip(cols, effects, strict=True)],
        "behind": behind,
        "power_now": model.power(u0, p0),
        "size": None if behind else sizes(shape, model.power, power),
        "crossed": joint.crossed,
        "users": joint.users,
        "prompts": joint.prompts,
        "limited_by": {"a": leader, "b": cols[hardest], "effect": float(effects[hardest])},
        "model": (
            f"the set for the best's rule (the leader shown better than each of the {k} other systems, one-sided, "
            "simultaneous, at the two-way bootstrap's width) applied to draws of the comparisons' joint normal "
            "distribution at each size"
        ),
    }
    entry["text"] = identify_text(est, entry)
    return entry


def identify_text(est: Estimates, e: Mapping[str, Any]) -> str:
    """One sentence: the users × prompts at which the set for the best shrinks to the leader."""
    lead, metric, k = e["leader"], e["metric"], e["comparisons"]
    which = "the observed differences" if e["effect_source"] == "observed" else (
        f"a lead of at least {est.fmt(metric, float(e['effect']), True)} over every other system")  # fmt: skip
    head = (
        f"Identifying {lead} as the best on {metric} (shown better than each of the other {k} systems and "
        f"baselines, simultaneous) at {which}"
    )
    comp = {"crossed": e["crossed"], "users": e["users"], "prompts": e["prompts"]}
    pct = f"{100 * e['power']:.0f}%"
    if e["behind"]:
        b = e["behind"]
        return (
            f"{head}: no size does it, since {names(b)} {'scores' if len(b) == 1 else 'score'} at or above {lead}"
            f" (`perbench plan RUN_DIR --effect X` sizes a lead of X)"
        )
    s = e["size"]
    now = f"now {now_text(comp)}: {100 * e['power_now']:.0f}%"
    if s is None:
        text = f"{head}: no practical size reaches {pct} power ({now})"
    elif s["scale"] <= 1:
        return f"{head}: the current {now_text(comp)} already has {100 * e['power_now']:.0f}% power"
    else:
        text = f"{head} needs {size_text(s, comp)} for {pct} power ({now})"
    lim = e["limited_by"]
    return text + f"; the hardest part: {lim['a']} − {lim['b']} ({est.fmt(metric, lim['effect'], True)})"
