"""Benchmark validity: which upstream benchmark's ranking of the systems should a team trust for its deployment?

Ma et al. rank a fixed set of RMs by their accuracy on each benchmark and by their downstream score, and call the
benchmark whose ranking agrees better the better proxy. Here every system is scored on several pair sets, the
*predictors* (upstream metrics with one cell per pair): consensus pairs (every user prefers the same response, a
general-quality benchmark in the RewardBench sense), personalization-only pairs (users disagree), all test pairs,
few-shot accuracy on unseen users, policy accuracy, and each other benchmark the run names (``rm_acc_on_NAME``).

- **Systems.** Every deployable system of the run (each member of a ``systems:`` grid is one); reference lines
  (baselines, oracles) are left out: no team would choose among them, and one that every benchmark ranks last
  would inflate every predictor's coefficient alike.
- **Per predictor.** Its τ-b, ρ and NDCG with each downstream metric, with CIs, on the systems that have both
  metrics: the selection's entries (one number, one CI), recomputed on the deployable systems when the run has
  reference lines.
- **Which predicts better.** For two predictors a, b and a downstream metric d: Δ = coef(a, d) − coef(b, d) on the
  systems that have all three metrics, computed on the point values and on every bootstrap replicate, both
  coefficients on the *same* replicate, so the CI of Δ carries their covariance (they share d and usually the
  users and prompts). The CI is the percentile interval of the replicate differences made symmetric about the
  estimate (as every coefficient's, :func:`.selection.coefficient_ci`), marginal: it answers the one
  comparison named. ``a`` (its CI above 0), ``b`` (below 0), ``identical`` (the two predictors rank the systems the
  same way on every replicate) or ``cannot tell``.
- **Verdict.** Per downstream metric, the predictor with the highest τ-b leads; its differences with each other
  predictor get simultaneous intervals (the max-statistic bootstrap of :func:`.ranking.simultaneous`), so "it
  predicts better than all the others" holds at the family-wise level.
- **Agreement.** τ-b between two predictors' rankings (Rezk et al. report τ(RM accuracy, policy accuracy)).

The papers' own values are given beside ours as context (:data:`PUBLISHED`): other RMs, data and judges, so they
are not a test of ours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import EXTERNAL, FloatArray, ci_, f_, order_by_value
from perbench.metrics.analysis.crossfit import COEFFICIENTS, FOLDS, HeldOut, Systems
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.predictors import (
    CURATED,
    HEADLINE,
    ONPOLICY,
    PREDICTORS,
    PUBLISHED,
    describe,
    difference_text,
    published_for,
    verdict_text,
)
from perbench.metrics.analysis.ranking import simultaneous
from perbench.metrics.analysis.roles import BASELINE, DEPLOYABLE, ORACLE
from perbench.metrics.analysis.selection import bias_note, coefficient_ci
from perbench.metrics.analysis.selection import selection as _selection
from perbench.metrics.correlation import MIN_REPORTED_SYSTEMS
from perbench.stats.bootstrap import replicate_position, symmetric_ci

_TIE = 1e-12


def predictors_of(est: Estimates, predictors: Sequence[str] | None) -> list[str]:
    """The given predictors that have rows; by default the canonical ones present (:data:`PREDICTORS`, then every
    ``rm_acc_on_NAME``), or every upstream metric when fewer than two of those are present (an older run)."""
    if predictors is not None:
        return [p for p in predictors if p in est.upstream]
    extra = sorted(u for u in est.upstream if u.startswith(EXTERNAL))
    onpolicy = sorted(u for u in est.upstream if u.startswith(ONPOLICY))
    chosen = [p for p in PREDICTORS if p in est.upstream] + onpolicy + extra
    return chosen if len(chosen) >= 2 else list(est.upstream)


def _difference(sys: Systems, a: str, b: str, d: str, own: dict[str, int]) -> dict[str, Any]:
    """The coefficients of a with d minus b's, on the systems that have a, b and d (see the module docstring);
    a and b are swapped when b has the higher τ-b there, so every difference reads "a − b ≥ 0"."""
    systems = sys.having([a, b, d])
    n = len(systems)
    entry: dict[str, Any] = {
        "a": a, "b": b, "downstream": d, "n_systems": n,
        "partial": n < own.get(a, 0) or n < own.get(b, 0), "na": None,
    }  # fmt: skip
    if n < MIN_REPORTED_SYSTEMS:
        entry["na"] = f"{n} system(s) have {a}, {b} and {d} (need {MIN_REPORTED_SYSTEMS})"
        entry["text"] = difference_text(entry)
        return entry
    ca, cb = sys.coefs(a, d, systems), sys.coefs(b, d, systems)
    ta, tb = ca["kendall_tau_b"][0], cb["kendall_tau_b"][0]
    if ta is not None and tb is not None and tb - ta > _TIE:
        entry.update(a=b, b=a)
        ca, cb = cb, ca
    resampled = sys.resampled(systems, [a, b, d])
    for name in COEFFICIENTS:
        (va, ra), (vb, rb) = ca[name], cb[name]
        entry[name] = _delta(sys.est, name, va, ra, vb, rb, resampled)
    entry["text"] = difference_text(entry)
    return entry


def _delta(
    est: Estimates, name: str, va: float | None, ra: FloatArray, vb: float | None, rb: FloatArray, resampled: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "a": f_(va), "b": f_(vb), "delta": None, "ci": None, "decision": None, "na": None, "note": None,
    }  # fmt: skip
    if va is None or vb is None:
        out["na"] = "a coefficient is undefined (a constant ranking)"
        return out
    delta = 0.0 if abs(va - vb) <= _TIE else va - vb
    reps = ra - rb
    finite = reps[np.isfinite(reps)]
    out["delta"] = delta
    if delta == 0.0 and finite.size and np.all(np.abs(finite) <= _TIE):
        out["decision"] = "identical"
        return out
    if not resampled:
        out["na"] = "a system's value has fewer than 2 (user, prompt) pairs, or no bootstrap: no CI"
        return out
    if finite.size * 2 < est.n_boot:
        out["na"] = "a coefficient is undefined in more than half of the bootstrap replicates: no CI"
        return out
    lo, hi = (-2.0, 2.0) if name != "ndcg" else (-1.0, 1.0)
    ci = symmetric_ci(delta, finite, est.level, bounds=(lo, hi))
    out["ci"] = ci_(ci)
    out["note"] = bias_note(replicate_position(delta, finite))
    if ci is not None:
        out["decision"] = "a" if ci[0] > 0 else "b" if ci[1] < 0 else "cannot tell"
    return out


def _verdict(
    sys: Systems, d: str, table: list[dict[str, Any]], diffs: dict[frozenset[str], dict[str, Any]]
) -> dict[str, Any]:
    """The leader by τ-b (on its own systems) and its simultaneous comparisons with every other predictor."""
    taus = {
        r["upstream"]: float(t["value"]) for r in table if (t := r.get("kendall_tau_b") or {}).get("value") is not None
    }
    order = order_by_value(taus)
    out: dict[str, Any] = {
        "leader": order[0] if order else None, "order": order, "decision": "none", "better_than": [],
        "tied_with": [], "identical": [], "critical_value": None, "comparisons": [], "text": "",
    }  # fmt: skip
    if not order:
        out["text"] = f"No predictor has a defined τ-b with {d} (too few systems, or a constant ranking)."
        return out
    lead = order[0]
    comps = []
    for other in order[1:]:
        e = diffs[frozenset((lead, other))]
        t = e.get("kendall_tau_b") or {}
        sign = 1.0 if e["a"] == lead else -1.0
        c: dict[str, Any] = {
            "b": other, "n_systems": e["n_systems"], "partial": e["partial"], "delta": None, "ci": None,
            "ci_marginal": None, "identical": t.get("decision") == "identical",
        }  # fmt: skip
        if t.get("delta") is not None:
            c["delta"] = sign * t["delta"]
            if t.get("ci"):
                lo, hi = t["ci"]
                c["ci_marginal"] = [lo, hi] if sign > 0 else [-hi, -lo]
            systems = sys.having([lead, other, d])
            c["_reps"] = (
                sys.coefs(lead, d, systems)["kendall_tau_b"][1] - sys.coefs(other, d, systems)["kendall_tau_b"][1]
            )
        comps.append(c)
    family = [c for c in comps if c["ci_marginal"] is not None and not c["identical"]]
    crit, bounds = simultaneous([c["delta"] for c in family], [c["_reps"] for c in family], sys.est.level)
    for c, (lo, hi) in zip(family, bounds, strict=True):
        c["ci"] = [lo, hi] if len(family) > 1 else c["ci_marginal"]  # a family of one: its marginal CI
    crit = crit if len(family) > 1 else None
    for c in comps:
        key = "identical" if c["identical"] else "better_than" if c["ci"] and c["ci"][0] > 0 else "tied_with"
        out[key].append(c["b"])
    out["comparisons"] = [{k: v for k, v in c.items() if not k.startswith("_")} for c in comps]
    out["critical_value"] = crit
    if len(order) == 1:
        out["decision"] = "only predictor"
    else:
        out["decision"] = "best" if out["better_than"] and not out["tied_with"] else "undecided"
    tau_ci = next(r for r in table if r["upstream"] == lead)["kendall_tau_b"].get("ci")
    out["text"] = verdict_text(d, lead, taus[lead], tau_ci, out, sys.est.level)
    out["max_of_k"] = best = _max_of_k(sys, d, order)
    if best.get("ci") and best["k"] > 1:
        lo, hi = best["ci"]
        out["text"] += (
            f" {lead} is the highest of {best['k']} predictors, chosen after the fact: as that maximum, its τ-b has "
            f"the simultaneous 95% interval [{lo:+.2f}, {hi:+.2f}]."
        )
    return out


def _prespecified(table: Sequence[Mapping[str, Any]], name: str | None) -> dict[str, Any] | None:
    """The row of the predictor fixed before the run (``verdict_predictor``; default ``rm_acc_all``, else the first
    predictor present): the one the verdict quotes."""
    rows = {r["upstream"]: r for r in table}
    chosen = name if name in rows else ("rm_acc_all" if name is None and "rm_acc_all" in rows else None)
    if chosen is None and name is None and table:
        chosen = table[0]["upstream"]
    if chosen is None:
        return None
    return {"upstream": chosen, "n_systems": rows[chosen]["n_systems"], "kendall_tau_b": rows[chosen]["kendall_tau_b"]}


def _max_of_k(sys: Systems, d: str, order: Sequence[str]) -> dict[str, Any]:
    """The highest τ-b of K predictors is a maximum, selected after the fact: its percentile interval does not
    cover it (it sits high in its own replicates). The interval given instead is simultaneous over the K
    predictors (the max-statistic bootstrap of |τ*_k − τ̂_k| / se*_k), so it holds whichever predictor came out
    on top."""
    points, reps = [], []
    for u in order:
        t, r = sys.coefs(u, d, sys.having([u, d]))["kendall_tau_b"]
        if t is None:
            continue
        points.append(float(t))
        reps.append(r)
    out: dict[str, Any] = {"upstream": order[0] if order else None, "k": len(points), "value": None, "ci": None}
    if not points:
        return out
    out["value"] = f_(points[0])
    if sys.est.n_boot >= 2 and len(points) > 1:
        crit, bounds = simultaneous(points, reps, sys.est.level)
        if crit is not None:
            lo, hi = bounds[0]
            out.update(ci=[max(-1.0, lo), min(1.0, hi)], critical_value=crit)
    return out


def validity(
    est: Estimates,
    selection: dict[str, Any],
    predictors: Sequence[str] | None = None,
    roles: Mapping[str, str] | None = None,
    prespecified: str | None = None,
) -> dict[str, Any]:
    """``analysis["validity"]``: per downstream metric, the predictors side by side, their pairwise differences,
    and which one to trust (see the module docstring). The systems are the deployable ones (``roles``, see
    :mod:`.roles`; every method without it): a reference line (a baseline, an oracle) is no candidate a team would
    rank, and one that every benchmark puts last (or first) would inflate every predictor alike. Without reference
    lines the per-predictor entries are the selection's own (one number, one CI); with them they are recomputed on
    the deployable systems alone."""
    preds = predictors_of(est, predictors)
    role = {m: (roles or {}).get(m, DEPLOYABLE) for m in est.methods}
    scored = {m for p in preds for m in est.methods_with(p)}  # (a pool's random pick has no upstream rows)
    reference = sorted(m for m, r in role.items() if r in (BASELINE, ORACLE) and m in scored)
    methods = [m for m, r in role.items() if r == DEPLOYABLE]
    if reference:  # (pure decoders have no upstream cells: they are in no system either way)
        selection = _selection(est, methods, preds)[0]
    sel = {(p["upstream"], p["downstream"]): p for p in selection.get("pairs", [])}
    sys = Systems(est, methods)
    held_sys = HeldOut(est, methods, preds)
    out: dict[str, Any] = {
        "systems": (
            f"the deployable systems; reference lines left out: {', '.join(reference)}"
            if reference
            else "every system of the run (none is a reference line)"
        ),
        "reference_lines": reference,
        "predictors": preds,
        "descriptions": {p: describe(p) for p in preds},
        "coefficients": list(COEFFICIENTS),
        "level": est.level,
        "intervals": (
            "each difference a − b (a: the higher τ-b): the marginal percentile CI of coef(a) − coef(b) over the "
            "bootstrap replicates made symmetric about the estimate, both on the same replicate and the same "
            "systems; the verdict: simultaneous "
            "intervals over the comparisons with the leader (max-statistic bootstrap)"
        ),
        "published": [dict(p) for p in PUBLISHED],
        "held_out": (
            f"each predictor measured on one of {FOLDS} halves of the outcome's prompts and the outcome on the other, "
            "the coefficient averaged over the two ways round (a predictor on other prompts is read whole); "
            "which predictor to trust is decided on these"
        ),
        "agreement": _agreement(sys, preds),
        "by_downstream": {},
    }
    for d in (d for d in est.downstream if d.partition(":")[2] != "rm_win"):
        table: list[dict[str, Any]] = [
            {"upstream": u, "n_systems": int(p.get("n_systems", 0)), **{k: p.get(k) or {} for k in COEFFICIENTS}}
            for u in preds
            if (p := sel.get((u, d))) is not None
        ]
        if not any(r["n_systems"] >= MIN_REPORTED_SYSTEMS for r in table):
            continue
        own = {r["upstream"]: r["n_systems"] for r in table}
        diffs = {frozenset((a, b)): _difference(sys, a, b, d, own) for i, a in enumerate(preds) for b in preds[i + 1 :]}
        head = diffs.get(frozenset(HEADLINE))
        vs_curated = [
            diffs[frozenset((p, CURATED))] for p in preds if p.startswith(ONPOLICY) and frozenset((p, CURATED)) in diffs
        ]
        held = _held_out(held_sys, d, preds, prespecified) if held_sys.usable(d) else None
        if held is not None:
            verdict = held["verdict"]
        else:  # no folds to cross-fit over: the on-policy predictors are in-sample, and left out of the verdict
            kept = [r for r in table if not r["upstream"].startswith(ONPOLICY)]
            verdict = _verdict(sys, d, kept, diffs)
            left = [r["upstream"] for r in table if r not in kept]
            if left:
                verdict["text"] += (
                    f" Left out: {', '.join(left)}, read off the same pool samples as {d} and measured in-sample "
                    "(too few prompts to hold half of them out)."
                )
        out["by_downstream"][d] = {
            "predictors": table,
            "in_sample": [r["upstream"] for r in table if r["upstream"].startswith(ONPOLICY)],
            "differences": list(diffs.values()),
            "onpolicy_vs_curated": vs_curated,
            "held_out": held,
            "verdict": verdict,
            "prespecified": _prespecified(table, prespecified),
            "headline": None if head is None else head["text"],
            "published": published_for(downstream=d),
        }
    return out


def _held_out(held: HeldOut, d: str, preds: Sequence[str], prespecified: str | None) -> dict[str, Any] | None:
    """Every predictor's coefficients with ``d`` cross-fitted over prompt folds (:class:`.crossfit.HeldOut`), their
    differences and the verdict on them; None when fewer than two predictors have enough systems."""
    est = held.est
    table: list[dict[str, Any]] = []
    for u in preds:
        systems = held.having([u, d])
        if len(systems) < MIN_REPORTED_SYSTEMS:
            continue
        c = held.coefs(u, d, systems)
        n_boot = est.n_boot if held.resampled(systems, [u, d]) else 0
        row: dict[str, Any] = {"upstream": u, "n_systems": len(systems)}
        for name in COEFFICIENTS:
            v, reps = c[name]
            ci, pos = coefficient_ci(name, f_(v), reps, est.level, n_boot)
            row[name] = {"value": f_(v), "ci": ci_(ci), "note": bias_note(pos)}
        table.append(row)
    if not table:
        return None
    own = {r["upstream"]: r["n_systems"] for r in table}
    names = [r["upstream"] for r in table]
    diffs = {frozenset((a, b)): _difference(held, a, b, d, own) for i, a in enumerate(names) for b in names[i + 1 :]}
    verdict = _verdict(held, d, table, diffs)
    verdict["text"] += (
        f" (Held out: each predictor on one half of {d}'s prompts, {d} on the other, averaged over both ways round.)"
    )
    if verdict.get("max_of_k"):
        verdict["max_of_k"]["held_out"] = True
    return {
        "folds": FOLDS,
        "unit": "prompts",
        "predictors": table,
        "differences": list(diffs.values()),
        "verdict": verdict,
        "prespecified": _prespecified(table, prespecified),
    }


def _agreement(sys: Systems, preds: Sequence[str]) -> list[dict[str, Any]]:
    """τ-b between every two predictors' rankings of the systems that have both, with its CI."""
    out = []
    for i, a in enumerate(preds):
        for b in preds[i + 1 :]:
            systems = sys.having([a, b])
            entry: dict[str, Any] = {"a": a, "b": b, "n_systems": len(systems), "kendall_tau_b": None, "ci": None}
            if len(systems) >= MIN_REPORTED_SYSTEMS:
                v, reps = sys.coefs(a, b, systems)["kendall_tau_b"]
                entry["kendall_tau_b"] = f_(v)
                n_boot = sys.est.n_boot if sys.resampled(systems, [a, b]) else 0
                entry["ci"] = ci_(coefficient_ci("kendall_tau_b", f_(v), reps, sys.est.level, n_boot)[0])
            entry["published"] = published_for(pair=[a, b])
            out.append(entry)
    return out
