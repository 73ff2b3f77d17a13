"""Selection analysis: which personalized RM to deploy, and does the upstream ranking predict the downstream one.

Input: cells, the long-format rows ``{group, method, metric, user, prompt, value}`` a run writes (see
``perbench.runner.cells``). Output: :func:`analyze`, the JSON-safe ``results["analysis"]`` dict. One module per
question, each stating its readings:

- :mod:`.base`: cells, group names (``benchmark|policy|seedN``: the setting is the name without ``|seedN``, the
  benchmark its first field and the resampling stratum), metric order, exact ties;
- :mod:`.data` and :mod:`.estimates`: the two-way (users × prompts) bootstrap columns (rl cells' training seeds
  resampled on top, as the RL table does), values (mean over seeds
  within a setting, then over settings; ``sd_seeds`` across seeds), paired differences on shared cells, CIs with
  what they resampled (``resampled``, ``ci_note``), the method table and the paired differences;
- :mod:`.roles`: deployable methods vs reference lines (baselines, oracles, decoders without an RM);
- :mod:`.ranking` and :mod:`.best_set`: order, the set of systems that could be the best (multiple comparisons
  with the best, baselines included), equivalence (TOST within ``equivalence_margin``) and the decision
  (``separable`` | ``baseline`` | ``equivalent`` | ``undecided`` | ``no_better_than_random`` |
  ``too_little_data``) of every metric, with its stability over the bootstrap replicates;
- :mod:`.selection`: upstream → downstream rank correlations over systems, with chance values of NDCG and RBO;
- :mod:`.validity`: which upstream benchmark (pair set) predicts each downstream ranking better, with paired
  bootstrap CIs of the difference between two predictors' correlations;
- :mod:`.fairness`: worst-decile and minority users (selected on train pairs, evaluated on test pairs);
- :mod:`.power`: the users × prompts that would decide (variance components in :mod:`.components`, one
  comparison's size in :mod:`.sizing`, the whole decision in :mod:`.decision_model`);
- :mod:`.verdict`: the paragraph that says what to deploy.

Higher is better for every metric (``rm_win`` is ranked the same way; read it as how strongly an RM prefers its
own guided output, a reward-hacking signal rather than quality).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import (
    DEFAULT_MARGIN,
    DIAGNOSTIC_METRICS,
    TRAIN_ACC,
    Cell,
    GroupKey,
    is_descriptive,
    is_diagnostic,
    is_downstream,
    json_safe,
    metric_sort_key,
    order_by_value,
    parse_group,
)
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.analysis.fairness import fairness, minority_users
from perbench.metrics.analysis.fits import fit_seeds, single_seed_note
from perbench.metrics.analysis.headroom import DEFAULT_FRACTION, headroom, margin_of, qualified
from perbench.metrics.analysis.leader_plan import identify
from perbench.metrics.analysis.power import POWER, decision
from perbench.metrics.analysis.ranking import ranking, system_names
from perbench.metrics.analysis.roles import DEPLOYABLE, method_roles
from perbench.metrics.analysis.selection import selection
from perbench.metrics.analysis.validity import validity
from perbench.metrics.analysis.verdict import choose_metric, verdict
from perbench.stats.bootstrap import MIN_LEVELS

__all__ = [
    "DEFAULT_MARGIN",
    "DIAGNOSTIC_METRICS",
    "TRAIN_ACC",
    "Cell",
    "GroupKey",
    "analyze",
    "is_diagnostic",
    "is_downstream",
    "metric_sort_key",
    "parse_group",
    "plan_sizes",
]


def analyze(
    cells: Iterable[Mapping[str, Any] | Cell],
    *,
    upstream: list[str] | None = None,
    downstream: list[str] | None = None,
    verdict_metric: str | None = None,
    reference_method: str = "global_bt",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    na_reasons: Mapping[str, Mapping[str, str]] | None = None,
    equivalence_margin: float | None = None,
    roles: Mapping[str, str] | None = None,
    adaptive: Mapping[str, Any] | None = None,
    predictors: Sequence[str] | None = None,
    equivalence_fraction: float | None = None,
    systems: Mapping[str, Mapping[str, Any]] | None = None,
    verdict_predictor: str | None = None,
) -> dict[str, Any]:
    """The selection analysis of a run's cells: ``results["analysis"]`` (JSON-safe, deterministic given seed).

    ``upstream`` / ``downstream`` default to the metrics present (names without / with ``:``; diagnostic metrics
    such as ``rm_acc_train`` are left out, and descriptive ones, ``DECODER:words``, which only the verdict's
    trade-offs read; naming one is a ValueError). ``verdict_metric`` defaults to ``args:rubric_satisfaction`` when
    present, else the first downstream metric. ``na_reasons[method][metric]`` gives the runner's reason for a
    method that has no rows. ``equivalence_margin`` is ε in the metric's units (None: ``DEFAULT_MARGIN``, 5 points
    of a proportion; 0: never claim equivalence). ``roles[method]`` is ``deployable``, ``baseline``, ``oracle`` or
    ``decoder`` for methods the registry does not know (see :mod:`.roles`). ``adaptive[metric]`` =
    ``{"rounds", "stopped": "separable"|"equivalent"|"budget", "cells", "budget"}`` says why the runner stopped
    collecting cells for a metric; the verdict states it. ``predictors``: the upstream metrics compared as
    predictors of each downstream ranking (None: the canonical ones present, see :mod:`.validity`).
    ``equivalence_fraction``: on a metric with a random pick and an oracle (:mod:`.headroom`) and no
    ``equivalence_margin``, the margin is this fraction of the headroom (None: ``DEFAULT_FRACTION``).
    ``systems[label]``: what the verdict's tie-break reads (``train_fraction``, ``user_agnostic``, ``fit_s``).
    ``verdict_predictor``: the upstream metric the verdict's upstream sentence reads (None: ``rm_acc_all``).
    """
    if equivalence_margin is not None and (not math.isfinite(float(equivalence_margin)) or equivalence_margin < 0):
        raise ValueError(f"equivalence_margin must be a finite number >= 0, got {equivalence_margin!r}")
    fraction = DEFAULT_FRACTION if equivalence_fraction is None else float(equivalence_fraction)
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise ValueError(f"equivalence_fraction must be in (0, 1], got {equivalence_fraction!r}")
    est = Estimates(cells, upstream, downstream, reference_method, n_boot, seed, level, na_reasons)
    role = method_roles(est.methods, est.pure_decoders, roles)
    # one answer: the selection, the validity comparison and the verdict read the same (deployable) systems;
    # a reference line (a baseline, an oracle) is no candidate a team would rank
    sel, _ = selection(est, methods=[m for m in est.methods if role.get(m) == DEPLOYABLE])
    left_out = sorted(m for m in est.methods if role.get(m) != DEPLOYABLE and m in _with_upstream(est))
    if left_out:
        sel["systems"] += f" Reference lines left out (never a candidate): {', '.join(left_out)}."
    room = headroom(est, role)
    every = [*est.upstream, *est.downstream]
    margins = {k: margin_of(est, k, room.get(k), equivalence_margin, fraction) for k in every}
    rankings = {
        k: ranking(
            est, k, role, margins[k]["value"], qualified(room.get(k), est.methods) if k in room else None, systems
        )
        for k in [*est.upstream, *est.downstream]
    }
    valid = validity(est, sel, predictors, role, verdict_predictor)
    v, _ = verdict(est, verdict_metric, rankings, role, margins, adaptive, room, valid, systems, verdict_predictor)
    fits = fit_seeds(est, systems)
    _note_single_seed(v, fits)
    margin = margins[v["metric"]]["value"] if v["metric"] in margins else DEFAULT_MARGIN
    minority = minority_users(est)
    whole = _whole_decision(est, v["metric"], rankings, margin)
    sized = _d(whole.get("decision")).get("text")
    if sized and v.get("decision") in ("undecided", "baseline", "too_little_data", "no_better_than_random"):
        # what would decide: the planner's size for the whole decision, read into the verdict's own parts
        at = next((i for i, p in enumerate(v["parts"]) if p["kind"] in ("trade_offs", "zero_shot")), len(v["parts"]))
        v["parts"].insert(at, {"kind": "plan", "text": f"{sized}."})
        v["text"] = " ".join(p["text"] for p in v["parts"])
    out = {
        "resampling": (
            f"two-way: users × prompts (pigeonhole bootstrap), n_boot={n_boot}, seed={seed}; with fewer than "
            f"{MIN_LEVELS} users, prompts only (with fewer prompts too, (user, prompt) pairs; see each ci_note)"
        ),
        "multiplicity": (
            f"best, tied and contenders come from the simultaneous {100 * level:g}% confidence set for the best over "
            "the deployable systems and the baselines (multiple comparisons with the best: for each system the "
            "quantile of max_j (Δ̂_ij − Δ*_ij) / se*_ij over the bootstrap); the gate against the random pick uses "
            "method-of-moments standard errors"
        ),
        "equivalence": (
            f"practically equivalent: the {100 * max(0.0, 2 * level - 1):g}% CI of (leader − method) lies inside "
            f"±margin (two one-sided tests at {100 * (1 - level):g}%); the margin is {fraction:g} × the metric's "
            "headroom (oracle − random pick) where it has one and no absolute margin is set"
        ),
        "equivalence_margin": margin,
        "margins": margins,
        "null": (
            "every pooled downstream number stands beside its null, a random pick from the same pool (the pool "
            "mean), and its ceiling, the oracle pick by the exact metric; only systems that beat the random pick "
            "(one-sided, simultaneous over the deployable systems) are ranked"
        ),
        "headroom": room,
        "n_boot": n_boot,
        "notes": est.notes,
        "methods": est.methods,
        "roles": role,
        "metrics": {"upstream": est.upstream, "downstream": est.downstream, "descriptive": est.descriptive},
        "table": est.table(),
        "ranking": rankings,
        "paired": est.paired(),
        "selection": sel,
        "validity": valid,
        "minority": minority,
        "fairness": fairness(est, v["metric"] if v["metric"] and is_downstream(v["metric"]) else None, minority),
        "verdict": v,
        "fit_seeds": fits,
        "power": {v["metric"]: whole["leader"] + whole["vs_random"]} if v["metric"] else {},
        "power_decision": {v["metric"]: whole["decision"]} if v["metric"] else {},
    }
    return dict(json_safe(out))


def _note_single_seed(v: dict[str, Any], fits: Mapping[str, Any]) -> None:
    """The verdict's part about the systems it names that are one fit of a stochastic method, after its decision."""
    named = [v.get("pick") or _d(v.get("headroom")).get("leader"), *(v.get("equivalent") or [])]
    text = single_seed_note(fits, [str(m) for m in named if m])
    if not text:
        return
    after = [i + 1 for i, p in enumerate(v["parts"]) if p["kind"] in ("decision", "tie_break")]
    at = max(after) if after else len(v["parts"])
    v["parts"].insert(at, {"kind": "fit_seeds", "text": text})
    v["text"] = " ".join(p["text"] for p in v["parts"])


def _with_upstream(est: Estimates) -> set[str]:
    return {m for u in est.upstream for m in est.methods_with(u)}


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _whole_decision(est: Estimates, metric: str | None, rankings: Mapping[str, Any], margin: float) -> dict[str, Any]:
    """The planner's rows (the leader against every other deployable system, the ranked ones, then those not shown
    to beat the random pick, and each of them against the random pick: :func:`.decision`) and, as ``decision``,
    the plan of the verdict's own question: the users × prompts that identify the leader
    (:func:`.leader_plan.identify`)."""
    rank = (rankings.get(metric) or {}) if metric else {}
    order = [*(rank.get("order") or []), *(rank.get("no_better_than_random") or [])]
    if not order or metric is None:
        return {"leader": [], "vs_random": [], "decision": None}
    got = decision(est, metric, order, margin=margin, crit=rank.get("critical_value"))
    got["decision"] = _identify(est, metric, rank.get("leader") or order[0], rank, margin)
    return got


def _identify(
    est: Estimates, metric: str, leader: str, rank: Mapping[str, Any], margin: float, effect: float | None = None
) -> dict[str, Any] | None:
    others = [str(c["b"]) for c in rank.get("comparisons") or [] if not c.get("identical")]
    return identify(est, metric, leader, others, margin=margin, effect=effect)


def plan_sizes(
    cells: Iterable[Mapping[str, Any] | Cell],
    *,
    metric: str | None = None,
    effect: float | None = None,
    equivalence_margin: float | None = None,
    roles: Mapping[str, str] | None = None,
    critical_value: float | None = None,
    level: float = 0.95,
    power: float = POWER,
    points: bool = False,
    run_margin: float | None = None,
) -> dict[str, Any]:
    """The power planner on its own (``perbench plan``): for the leader of ``metric`` (default: the verdict's
    default) against each other deployable method, the users × prompts that separate them at ``effect`` (metric
    units; None: each observed difference) or establish equivalence within the margin, at ``power``; where the
    metric has ``random_pick`` cells, each deployable system against the random pick (one-sided); and
    ``decision``, the verdict's own question: the size at which the set for the best holds the leader alone
    (:func:`.leader_plan.identify`; ``effect``: the leader ahead of every other system by at least that much);
    ``whole_decision``: the size at which every per-comparison row succeeds together (:func:`.power.decision`).
    ``critical_value`` is the verdict's simultaneous one when known (None: the planner's own at the current
    size, from the comparisons' joint distribution). ``points``:
    ``effect`` and ``equivalence_margin`` are in points (1/100) when the metric is a proportion. Without
    ``equivalence_margin``, the margin is ``run_margin`` (the run's, in metric units), else ``DEFAULT_MARGIN``."""
    if metric is not None and is_descriptive(metric):
        raise ValueError(f"{metric} is the answers' length, no quality: nothing to plan a decision on")
    est = Estimates(cells, None, None, "", 0, 0, level, None)
    chosen, notes = choose_metric(est, metric)
    if chosen is None:
        raise ValueError("no cells: nothing to plan")
    scale = 0.01 if points and est.is_proportion(chosen) else 1.0
    if equivalence_margin is not None:
        margin = float(equivalence_margin) * scale
    else:
        margin = DEFAULT_MARGIN if run_margin is None else float(run_margin)
    effect = None if effect is None else float(effect) * scale
    _check_plan_request(chosen, est.is_proportion(chosen), scale, margin, effect)
    role = method_roles(est.methods, est.pure_decoders, roles)
    vals = {
        m: v
        for m in est.methods_with(chosen)
        if role.get(m) == DEPLOYABLE and (v := est.point_of(m, chosen)) is not None
    }
    order = order_by_value(vals)
    got: dict[str, Any] = {"leader": [], "vs_random": [], "decision": None, "critical_values": {}}
    ident = None
    if order:
        got = decision(est, chosen, order, margin=margin, crit=critical_value, effect=effect, power=power)
        every = {m: v for m in est.methods_with(chosen) if (v := est.point_of(m, chosen)) is not None}
        others = [m for m in system_names(role, every) if m != order[0]]
        ident = identify(est, chosen, order[0], others, margin=margin, effect=effect, power=power)
    out = {
        "metric": chosen,
        "proportion": est.is_proportion(chosen),
        "leader": order[0] if order else None,
        "order": order,
        "margin": margin,
        "notes": [n.replace("the verdict ranks on", "the plan uses") for n in notes],
        "plans": got["leader"] + got["vs_random"],
        "decision": ident,
        "whole_decision": got["decision"],
        "critical_values": got["critical_values"],
    }
    return dict(json_safe(out))


def _check_plan_request(metric: str, proportion: bool, scale: float, margin: float, effect: float | None) -> None:
    """A margin in [0, the metric's range) and a non-zero effect inside it, else a ValueError that says the units
    (``points``: the request was in points of a proportion)."""
    units = "points" if scale != 1.0 else "the metric's units"
    top = 1.0 / scale if proportion else math.inf
    shown = f"{margin / scale:g} {units}"
    if not (math.isfinite(margin) and margin >= 0 and (not proportion or margin < 1)):
        raise ValueError(f"--margin {shown}: an equivalence margin lies in [0, {top:g}) {units} for {metric}")
    if effect is None:
        return
    shown = f"{effect / scale:g} {units}"
    if effect <= 0 or not math.isfinite(effect) or (proportion and abs(effect) >= 1):
        raise ValueError(
            f"--effect {shown}: the leader's lead to plan for must be > 0 and smaller than {top:g} {units} for {metric}"
        )
