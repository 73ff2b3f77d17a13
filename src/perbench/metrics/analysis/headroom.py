"""Every pooled downstream number beside its null and its ceiling.

A pooled decoder (Best-of-N over a shared sample pool) writes two reference lines on every cell it evaluates
(``runner/pooled.py``): ``random_pick``, the pool mean (the exact Best-of-1: what a pick with no information gets),
and ``oracle_pick``, Best-of-n by the exact metric itself (the ceiling of any re-ranker of this pool). Per metric:

- **headroom** = oracle − random pick: what re-ranking this pool could gain at all;
- per system, **gain** = system − random pick (paired on the system's cells) and the **share of headroom** it
  captures, (system − random) / (oracle − random) on the same cells, the ratio taken on the point values and on
  every bootstrap replicate (so its CI carries the covariance of the two); "not applicable" when the headroom's
  CI reaches 0 (a ratio over a denominator that may be 0 has no CI);
- **beats the random pick**: one-sided and simultaneous over the deployable systems (the max-statistic bootstrap of
  :func:`.ranking.simultaneous_lower`, with the method-of-moments standard errors of :mod:`.best_set`): a system
  whose simultaneous lower bound of gain is not above 0 is "not shown better than a random pick from the same
  pool" (which is not the same as no better);
- **decomposition against zero-shot**: system − greedy = (pool mean − greedy: what sampling alone gives) + (system −
  pool mean: what the reward model adds), each with its two-way CI.

For ``rm_win`` the random pick holds n/(n+1), the win rate of a scorer with no information, so "gain" is the win
rate in excess of that null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import ZERO_SHOT, Est, FloatArray, f_, is_downstream
from perbench.metrics.analysis.best_set import variance_ratio
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.ranking import simultaneous_lower, system_names
from perbench.metrics.analysis.roles import DEPLOYABLE, ORACLE_PICK, RANDOM_PICK
from perbench.stats.bootstrap import percentile_ci

#: how the oracle picks, per quality (it reads the answer key: an upper bound, never a method)
ORACLE_BY = {
    "rubric_satisfaction": "the exact rubric checkers",
    "personal_reward": "the simulated user's exact reward (the reward models that define it)",
    "rouge1": "ROUGE-1 against the user's reference (a labelled oracle: it reads the reference)",
    "rougeL": "ROUGE-L against the user's reference (a labelled oracle: it reads the reference)",
    "bertscore_f1": "BERTScore against the user's reference (a labelled oracle: it reads the reference)",
    "judge_score": "the LLM judge's rubric score (a labelled oracle: the judge reads the answer key)",
}


def _entry(est: Estimates, e: Est | None, metric: str | None = None) -> dict[str, Any]:
    if e is None:
        return {"value": None, "ci": None, "resampled": None, "ci_note": None}
    return {"value": f_(e.point), **est.ci_entry(e, metric)}


def _on_cells_of(est: Estimates, a: str, b: str, on: str, metric: str) -> Est | None:
    """a − b restricted to the cells of ``on`` (a and b cover every cell of the pool; ``on`` may lack some users)."""
    per: dict[int, tuple[float, FloatArray, tuple[int, ...], int]] = {}
    for g in range(len(est.groups)):
        pa, pb = est.pair_cols(g, a, metric, on, metric), est.pair_cols(g, b, metric, on, metric)
        if pa is None or pb is None or pa[2] != pb[2]:
            continue
        ca, cb = pa[0], pb[0]
        per[g] = (float(est.point[ca] - est.point[cb]), est.reps[:, ca] - est.reps[:, cb], (ca, cb), pa[2])
    return est._combine(per) if per else None


def _share(est: Estimates, gain: Est | None, room: Est | None) -> dict[str, Any]:
    out: dict[str, Any] = {"value": None, "ci": None, "na": None}
    if gain is None or room is None:
        out["na"] = "no oracle or random pick on this system's cells"
        return out
    room_ci = est.ci(room)
    if room.point <= 0 or (room_ci is not None and room_ci[0] <= 0):
        out["na"] = "the pool's headroom (oracle − random pick) is not reliably above 0, so a share of it is undefined"
        return out
    out["value"] = f_(gain.point / room.point)
    if room_ci is not None and est.n_boot >= 2:
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(room.reps > 0, gain.reps / room.reps, np.nan)
        ci = percentile_ci(ratio, est.level)
        out["ci"] = None if ci is None else [float(ci[0]), float(ci[1])]
    return out


def headroom(est: Estimates, roles: Mapping[str, str]) -> dict[str, Any]:
    """``analysis["headroom"]``: per downstream metric with a random pick, the null, the ceiling and every system
    against them (see the module docstring)."""
    out: dict[str, Any] = {}
    for k in est.downstream:
        if not is_downstream(k) or est.value(RANDOM_PICK, k) is None:
            continue
        fam, _, quality = k.partition(":")
        rand = est.value(RANDOM_PICK, k)
        oracle = est.value(ORACLE_PICK, k)
        room = est.delta(ORACLE_PICK, k, RANDOM_PICK, k) if oracle is not None else None
        entry: dict[str, Any] = {
            "decoder": fam,
            "quality": quality,
            "random_pick": _entry(est, rand, k),
            "oracle": None if oracle is None else {**_entry(est, oracle, k), "by": ORACLE_BY.get(quality, quality)},
            "headroom": None if room is None else _entry(est, room),
            "greedy": None,
            "sampling_term": None,
            "systems": {},
        }
        zs = est.zero_shot_metric(k)
        if zs is not None:
            entry["greedy"] = _entry(est, est.value(ZERO_SHOT, zs), zs)
            entry["sampling_term"] = _entry(est, est.delta(RANDOM_PICK, k, ZERO_SHOT, zs))
        names = [m for m in est.methods_with(k) if m not in (RANDOM_PICK, ORACLE_PICK) and m not in est.pure_decoders]
        gains = {m: est.delta(m, k, RANDOM_PICK, k) for m in names}
        family = [m for m in names if roles.get(m, DEPLOYABLE) == DEPLOYABLE and gains[m] is not None]
        # the standard errors of the set for the best (method-of-moments over the bootstrap's, :mod:`.best_set`)
        every = system_names(roles, {m: v.point for m in est.methods_with(k) if (v := est.value(m, k)) is not None})
        ratio = variance_ratio(est, k, every)
        at = {m: i for i, m in enumerate(every)}
        crit, lows = simultaneous_lower(
            [gains[m].point for m in family],  # type: ignore[union-attr]
            [gains[m].reps for m in family],  # type: ignore[union-attr]
            est.level,
            [float(np.sqrt(ratio[at[m], at[RANDOM_PICK]])) for m in family],
        )
        lower = dict(zip(family, lows, strict=True))
        entry["critical_value"] = crit
        entry["test"] = (
            f"gain over the random pick > 0, one-sided, simultaneous {100 * est.level:g}% over the "
            f"{len(family)} deployable system{'s' * (len(family) != 1)} (max-statistic bootstrap, method-of-moments "
            "standard errors)"
        )
        for m in names:
            g = gains[m]
            value = est.value(m, k)
            sysd: dict[str, Any] = {**_entry(est, value, k), "role": roles.get(m, DEPLOYABLE)}
            low = lower.get(m)
            if low is None and g is not None and crit is not None:  # a reference line: the same critical value
                se = float(np.nanstd(g.reps, ddof=1)) if g.reps.size > 1 else 0.0
                fac = float(np.sqrt(ratio[at[m], at[RANDOM_PICK]])) if m in at else 1.0
                low = g.point - crit * fac * se
            sysd["gain"] = {**_entry(est, g), "lower_simultaneous": f_(low) if low is not None else None}
            room_m = _on_cells_of(est, ORACLE_PICK, RANDOM_PICK, m, k) if oracle is not None else None
            sysd["share"] = _share(est, g, room_m) if oracle is not None else {"value": None, "ci": None, "na": (
                "no oracle for this metric"
            )}  # fmt: skip
            sysd["beats_random"] = bool(low is not None and low > 0 and est.n_boot >= 2)
            if zs is not None:
                sysd["vs_zero_shot"] = _entry(est, est.delta(m, k, ZERO_SHOT, zs))
            entry["systems"][m] = sysd
        out[k] = entry
    return out


def qualified(entry: Mapping[str, Any] | None, methods: list[str]) -> list[str]:
    """The methods that beat the random pick (all of them when the metric has no random pick)."""
    if not entry:
        return list(methods)
    systems = entry.get("systems") or {}
    return [m for m in methods if (systems.get(m) or {}).get("beats_random")]


#: the default equivalence margin on a metric with a headroom: this fraction of oracle − random pick
DEFAULT_FRACTION = 0.1


def margin_of(
    est: Estimates, metric: str, entry: Mapping[str, Any] | None, absolute: float | None, fraction: float
) -> dict[str, Any]:
    """The equivalence margin of ``metric``: the absolute ``equivalence_margin`` when one is set, else ``fraction``
    of the metric's headroom where it has one (above 0), else :data:`.base.DEFAULT_MARGIN`."""
    from perbench.metrics.analysis.base import DEFAULT_MARGIN

    if absolute is not None:
        return {"value": float(absolute), "source": "equivalence_margin", "fraction": None}
    room = (entry or {}).get("headroom") or {}
    if room.get("value") is not None and room["value"] > 0:
        return {
            "value": fraction * float(room["value"]),
            "source": f"{fraction:g} × the headroom (oracle − random pick)",
            "fraction": fraction,
        }
    return {"value": DEFAULT_MARGIN, "source": "the default (the metric has no headroom to scale by)", "fraction": None}
