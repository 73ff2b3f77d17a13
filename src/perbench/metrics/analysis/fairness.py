"""Fairness: who each method serves, and who it leaves behind.

Per-user accuracy pools a method's ``rm_acc_seen`` and ``rm_acc_unseen`` rows (test pairs). Worst decile = the
mean of the lowest 10 % of users' accuracies (at least one user). *Minority users* are the users on whom the
reference (user-agnostic) RM scores below 0.5 on their own **train** pairs (``rm_acc_train``: a seen user's train
pairs, an unseen user's few-shot pairs): their preferences oppose what the majority taught it. They are selected
on train pairs and evaluated on test pairs; selecting on the test pairs themselves would make every method look
better on them (regression to the mean). Without ``rm_acc_train`` rows no user is called a minority user.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import TRAIN_ACC, f_
from perbench.metrics.analysis.data import ACC
from perbench.metrics.analysis.estimates import Estimates


def minority_users(est: Estimates) -> dict[str, Any]:
    """The minority users (selected on the reference method's train-pair accuracy) and the rule."""
    train = est.per_user(est.reference, TRAIN_ACC)
    users = sorted(u for u, a in train.items() if a < 0.5)
    na = None
    if not train:
        na = (
            f"reference {est.reference} has no {TRAIN_ACC} rows (its accuracy on each user's train pairs): "
            "minority users are not selected"
        )
    return {
        "reference": est.reference,
        "rule": f"{est.reference} scores below 50% on the user's train pairs (seen users) or few-shot pairs "
        "(unseen users); accuracies are then measured on test pairs",
        "users": users,
        "selected_from": len(train),
        "na": na,
    }


def fairness(est: Estimates, verdict_metric: str | None, minority: Mapping[str, Any]) -> dict[str, Any]:
    ref_acc = est.per_user(est.reference, ACC)
    chosen = set(minority["users"])
    out: dict[str, Any] = {}
    for m in est.methods:
        acc = est.per_user(m, ACC)
        entry: dict[str, Any] = {
            "worst_decile_acc": worst_decile(acc),
            "minority_users": len(chosen),
            "minority_acc": None,
            "minority_na": minority["na"],
            "gain_over_reference": None,
            "per_user": acc,
            "per_user_gain": {u: acc[u] - ref_acc[u] for u in acc if u in ref_acc} if m != est.reference else {},
            "downstream": None,
            "na": None,
        }
        reasons = []
        if not acc:
            reasons.append(f"{m} has no rm_acc_seen/rm_acc_unseen rows")
        if acc and chosen:
            idx = [i for (g, mm, k), r in est.rows.items() if mm == m and k == ACC for i in r.tolist()]
            on = [est.values[i] for i in idx if est.user_label[i] in chosen]
            entry["minority_acc"] = f_(float(np.mean(on))) if on else None
        if m != est.reference:
            entry["gain_over_reference"] = _gain(est, m, ACC, est.reference, ACC)
        if verdict_metric is not None and (down := est.per_user(m, verdict_metric)):
            ref_down = est.per_user(est.reference, verdict_metric)
            entry["downstream"] = {
                "metric": verdict_metric,
                "worst_decile": worst_decile(down),
                "per_user": down,
                "per_user_gain": {u: down[u] - ref_down[u] for u in down if u in ref_down}
                if m != est.reference
                else {},
                "gain_over_reference": None
                if m == est.reference
                else _gain(est, m, verdict_metric, est.reference, verdict_metric),
            }
        entry["na"] = "; ".join(reasons) or None
        out[m] = entry
    return out


def _gain(est: Estimates, a: str, ka: str, b: str, kb: str) -> dict[str, Any] | None:
    d = est.delta(a, ka, b, kb)
    return None if d is None else {"value": f_(d.point), **est.ci_entry(d)}


def worst_decile(per_user: Mapping[str, float]) -> float | None:
    if not per_user:
        return None
    acc = np.sort(np.fromiter(per_user.values(), dtype=np.float64))
    return float(np.mean(acc[: max(1, math.ceil(0.1 * acc.size))]))
