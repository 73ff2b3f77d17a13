"""Selection: does the ranking of systems by an upstream metric predict their ranking by a downstream one?

A system is a (setting, method) with both metrics, where a setting is a group name without its ``|seedN``: the
seeds of a setting are averaged into one system, never counted as separate systems. Systems are listed by
(setting, method name), so nothing depends on the order methods were configured in; systems are pooled across
settings as the papers pool across model scales. Each bootstrap replicate recomputes every system's values, then
the coefficient (``perbench.metrics.correlation``); replicates where it is undefined are dropped. NDCG and RBO
come with their chance value (the expectation under a random ranking of the same systems).

No coefficient is reported over fewer than 5 systems (``na`` says why). An interval is the percentile interval
made symmetric about the estimate (:func:`coefficient_ci`); an estimate above 80 % (or below 20 %) of its own
replicates is flagged as biased in the entry's ``note`` (``biased``, ``replicate_position``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import FloatArray, ci_, f_
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.correlation import (
    BOUNDS,
    CORRELATIONS,
    MIN_REPORTED_SYSTEMS,
    batched_all,
    ndcg_chance,
    rbo_chance,
)
from perbench.stats.bootstrap import replicate_position, symmetric_ci

#: the estimate beyond this share of its replicates (or below 1 − it): its interval is flagged as biased
BIAS_POSITION = 0.8


def coefficient_ci(
    name: str, value: float | None, reps: FloatArray, level: float, n_boot: int
) -> tuple[tuple[float, float] | None, float | None]:
    """The interval of a coefficient from its bootstrap replicates (NaN: undefined there, dropped) and the
    estimate's position among them; no interval when it is undefined in more than half of the replicates.

    The interval is :func:`~perbench.stats.bootstrap.symmetric_ci` (the percentile interval made symmetric about
    the estimate), clipped to the coefficient's range: a coefficient of noisy per-system means is pulled toward 0
    in the resamples, so the percentile interval alone sits off to that side (docs/architecture.md, "Intervals of
    rank coefficients", has the coverage of each candidate method)."""
    if value is None:
        return None, None
    pos = replicate_position(value, reps)
    if n_boot < 2 or np.isfinite(reps).sum() * 2 < n_boot:
        return None, pos
    return symmetric_ci(value, reps, level, bounds=BOUNDS.get(name, (-np.inf, np.inf))), pos


def bias_note(position: float | None) -> str | None:
    """The note of a coefficient whose estimate sits far out in its own replicates (see :data:`BIAS_POSITION`)."""
    if position is None or 1 - BIAS_POSITION < position < BIAS_POSITION:
        return None
    side = "above" if position >= BIAS_POSITION else "below"
    share = position if position >= BIAS_POSITION else 1 - position
    return (
        f"biased: the estimate is {side} {100 * share:.0f}% of its bootstrap replicates (a coefficient of noisy "
        "means is pulled toward 0 in the resamples); at such positions its interval covered the truth less than "
        "90% of the time in a double-bootstrap check, so read it as optimistic"
    )


def systems_note(est: Estimates) -> str:
    seeds: dict[str, int] = {}
    for k in est.keys:
        seeds[k.setting] = seeds.get(k.setting, 0) + 1
    most = max(seeds.values(), default=1)
    head = "A system is a (setting, method) with both metrics"
    if most > 1:
        return f"{head}; its values are the mean over the setting's seeds (up to {most}), not one system per seed."
    return head + "."


def selection(
    est: Estimates, methods: Collection[str] | None = None, upstream: Sequence[str] | None = None
) -> tuple[dict[str, Any], dict[str, FloatArray]]:
    """Every (upstream, downstream) pair's coefficients over the systems that have both; ``methods`` restricts the
    systems to those methods (benchmark validity: the deployable ones), ``upstream`` the upstream metrics."""
    settings = sorted({k.setting for k in est.keys})
    chosen = sorted(est.methods if methods is None else set(est.methods) & set(methods))
    single = len(settings) == 1
    cache: dict[tuple[str, str, str], Any] = {}

    def val(s: str, m: str, k: str) -> Any:
        if (s, m, k) not in cache:
            cache[(s, m, k)] = est.value(m, k, s)
        return cache[(s, m, k)]

    pairs = []
    tau_reps: dict[str, FloatArray] = {}
    for u in est.upstream if upstream is None else [u for u in upstream if u in est.upstream]:
        for d in est.downstream:
            systems = [
                (s, m) for s in settings for m in chosen if val(s, m, u) is not None and val(s, m, d) is not None
            ]
            xs, ys = [val(s, m, u) for s, m in systems], [val(s, m, d) for s, m in systems]
            x = np.array([e.point for e in xs])
            y = np.array([e.point for e in ys])
            shape = (est.n_boot, len(systems))
            xr = np.stack([e.reps for e in xs], axis=1) if systems else np.zeros(shape)
            yr = np.stack([e.reps for e in ys], axis=1) if systems else np.zeros(shape)
            cols = [c for e in xs + ys for c in e.cols]
            entry: dict[str, Any] = {"upstream": u, "downstream": d, "n_systems": len(systems)}
            how = est.resampled(cols)
            unresampled = any(est.plans[c].unit is None for c in cols)
            few = len(systems) < MIN_REPORTED_SYSTEMS
            batched = batched_all(xr, yr) if not few and est.n_boot else {}
            for name, fn in CORRELATIONS.items():
                v = None if few else fn(x, y)
                reps = batched.get(name, np.zeros(0))
                if name == "kendall_tau_b":
                    tau_reps[f"{u}\x00{d}"] = reps if v is not None else np.full(est.n_boot, np.nan)
                ci, pos = coefficient_ci(name, v, reps, est.level, 0 if unresampled else est.n_boot)
                na = None
                if few:
                    na = _few(len(systems), "system(s) with both metrics")
                elif v is None:
                    na = "a constant input: the coefficient is undefined"
                elif unresampled and est.n_boot >= 2:
                    na = "a system's value has fewer than 2 (user, prompt) pairs: no CI"
                elif ci is None and est.n_boot >= 2:
                    na = "undefined in more than half of the bootstrap replicates: no CI"
                note = bias_note(pos) if ci is not None else None
                e = {
                    "value": f_(v), "ci": ci_(ci), "na": na, "note": note, "biased": note is not None,
                    "replicate_position": f_(pos) if ci is not None else None, **how,
                }  # fmt: skip
                if name == "ndcg":
                    e["chance"] = f_(ndcg_chance(y)) if v is not None else None
                elif name == "rbo":
                    e["chance"] = f_(rbo_chance(len(systems))) if v is not None else None
                entry[name] = e
            entry["across_methods"] = _across_methods(est, systems, x, y, xr, yr, unresampled)
            entry["points"] = [
                [m if single else f"{m} [{s}]", f_(float(xv)), f_(float(yv))]
                for (s, m), xv, yv in zip(systems, x, y, strict=True)
            ]
            pairs.append(entry)
    best = {d: _best_predictor(est, pairs, tau_reps, d) for d in est.downstream}
    return {"pairs": pairs, "best_predictor": best, "systems": systems_note(est)}, tau_reps


def _few(n: int, what: str) -> str:
    return (
        f"{n} {what} (need {MIN_REPORTED_SYSTEMS}: a rank coefficient over fewer takes so few values that its "
        "interval says little)"
    )


def family(label: str) -> str:
    """A system's method family: its label up to the first ``(`` (``mpu(train_fraction=0.5)`` -> ``mpu``)."""
    return label.split("(", 1)[0]


def _across_methods(
    est: Estimates,
    systems: list[tuple[str, str]],
    x: FloatArray,
    y: FloatArray,
    xr: FloatArray,
    yr: FloatArray,
    unresampled: bool,
) -> dict[str, Any] | None:
    """The across-method version: variants of one method (one family) are not independent systems, so each
    family enters once, with its members' mean on both metrics (and in every bootstrap replicate). None when
    every family has one system (it would repeat the coefficients above)."""
    keys = list(dict.fromkeys((s, family(m)) for s, m in systems))
    if len(keys) == len(systems):
        return None
    members = [[i for i, (s, m) in enumerate(systems) if (s, family(m)) == k] for k in keys]
    fx = np.array([x[ix].mean() for ix in members])
    fy = np.array([y[ix].mean() for ix in members])
    fxr = np.stack([xr[:, ix].mean(axis=1) for ix in members], axis=1)
    fyr = np.stack([yr[:, ix].mean(axis=1) for ix in members], axis=1)
    few = len(keys) < MIN_REPORTED_SYSTEMS
    batched = batched_all(fxr, fyr) if est.n_boot and not few else {}
    out: dict[str, Any] = {"n_families": len(keys), "families": [f for _, f in keys]}
    for name in ("kendall_tau_b", "spearman"):
        v = None if few else CORRELATIONS[name](fx, fy)
        reps = batched.get(name, np.zeros(0))
        ci, pos = coefficient_ci(name, v, reps, est.level, 0 if unresampled else est.n_boot)
        na = None
        if few:
            na = _few(len(keys), "method families")
        elif v is None:
            na = "a constant input: undefined"
        note = bias_note(pos) if ci is not None else None
        out[name] = {"value": f_(v), "ci": ci_(ci), "na": na, "note": note}
    return out


def _best_predictor(
    est: Estimates, pairs: list[dict[str, Any]], tau_reps: dict[str, FloatArray], d: str
) -> dict[str, Any]:
    scored = [(e["upstream"], e["kendall_tau_b"]) for e in pairs if e["downstream"] == d]
    scored = [(u, t) for u, t in scored if t["value"] is not None]
    if not scored:
        return {
            "upstream": None, "kendall_tau_b": None, "ci": None, "p_best": None,
            "text": f"No upstream metric has a defined Kendall tau-b with {d} (too few systems or constant).",
        }  # fmt: skip
    u_best, t_best = max(scored, key=lambda ut: ut[1]["value"])  # ties: the first in canonical metric order
    p_best = None
    if est.n_boot:
        mat = np.stack([tau_reps[f"{u}\x00{d}"] for u, _ in scored], axis=1)
        finite = np.isfinite(mat).any(axis=1)
        if finite.any():
            top = np.argmax(np.where(np.isfinite(mat[finite]), mat[finite], -np.inf), axis=1)
            p_best = float(np.mean(top == [u for u, _ in scored].index(u_best)))
    return {
        "upstream": u_best,
        "kendall_tau_b": t_best["value"],
        "ci": t_best["ci"],
        "p_best": p_best,
        "note": t_best.get("note"),
        "text": _predictor_text(est, u_best, d, t_best["value"], t_best["ci"], p_best),
    }


def _predictor_text(est: Estimates, u: str, d: str, tau: float, ci: list[float] | None, p_best: float | None) -> str:
    pct = f"{100 * est.level:g}%"
    head = f"{u} best predicts {d} (tau-b {tau:.2f}"
    head += f", {pct} CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ", no CI"
    head += f"; the top predictor in {100 * p_best:.0f}% of resamples)" if p_best is not None else ")"
    if ci is None:
        return head + "; without a CI its reliability is unknown."
    if ci[0] > 0:
        return head + "; the CI excludes 0, so its ranking reliably predicts the downstream one."
    if ci[1] < 0:
        return head + "; even it ranks methods against the downstream order (the CI is below 0)."
    return head + "; the CI includes 0, so no upstream metric reliably predicts it."
