"""Policy accuracy as a curve over the tilt weight w: from the policy alone (w = 0) to the reward alone.

The sequence tilt S_w(y) = log π(y | x) + w·r_u(x, y) orders a pair (y_w, y_l) by Δ_π + w·Δ_r (Δ_π the gap in
log π, Δ_r the gap in reward). A pair whose two gaps disagree in sign changes sides at w* = −Δ_π / Δ_r > 0 (its
*flip weight*); below every flip weight the tilt is the policy alone, above every one it is the reward's
ranking. Whole-response log π gaps are tens of nats, so at w = 1 an RM with rewards of order one flips few or no
pairs: the curve says where the reward starts to matter. Its points are w = 0, the flip weights' quantiles
(10, 25, 50, 75 and 90 %), just past the largest flip weight, and any weight asked for (a decoder's), each with
the accuracy and how many pairs the tilt orders differently from the policy alone. Everything comes from log π
and r, which the headline computes anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: why a run's headline policy accuracy is not applicable to a method that no weighted decoder uses
NO_WEIGHT = (
    "no decoder of this run applies a weight to this reward (the headline is taken at the weight of the decoder the "
    "RM is deployed with; set pa_weight to choose one): see the curve over w"
)
#: the last point lies this factor past the largest flip weight (every flippable pair has flipped)
PAST = 1.01


def flip_weights(
    lp_chosen: np.ndarray, lp_rejected: np.ndarray, r_chosen: np.ndarray, r_rejected: np.ndarray
) -> np.ndarray:
    """The w > 0 at which each pair's tilt changes sides (pairs that never change sides are left out)."""
    d_lp = np.asarray(lp_chosen, np.float64) - np.asarray(lp_rejected, np.float64)
    d_r = np.asarray(r_chosen, np.float64) - np.asarray(r_rejected, np.float64)
    ok = (d_r != 0) & np.isfinite(d_lp) & np.isfinite(d_r)
    w = -d_lp[ok] / d_r[ok]
    return np.sort(w[w > 0])


def tilt_curve(
    lp_chosen: np.ndarray,
    lp_rejected: np.ndarray,
    r_chosen: np.ndarray,
    r_rejected: np.ndarray,
    *,
    tie: str = "strict",
    weights: Iterable[float] = (),
) -> dict[str, Any]:
    """The accuracy of the sequence tilt at each point of the grid (see the module docstring)."""
    from perbench.metrics.rm_accuracy import pair_outcomes

    lp_c, lp_r = np.asarray(lp_chosen, np.float64), np.asarray(lp_rejected, np.float64)
    r_c, r_r = np.asarray(r_chosen, np.float64), np.asarray(r_rejected, np.float64)
    flips = flip_weights(lp_c, lp_r, r_c, r_r)
    grid = {0.0, *(float(w) for w in weights if np.isfinite(w) and w >= 0)}
    if len(flips):  # flip weights divide by reward gaps: shown to 4 significant digits, so float noise moves none
        grid |= {sig4(float(np.quantile(flips, q))) for q in QUANTILES}
        grid.add(sig4(float(flips[-1] * PAST)))
    base = pair_outcomes(lp_c, lp_r, tie)  # type: ignore[arg-type]
    points = []
    for w in sorted(grid):
        oc = pair_outcomes(lp_c + w * r_c, lp_r + w * r_r, tie)  # type: ignore[arg-type]
        acc = float(np.mean(oc)) if len(oc) else float("nan")
        points.append({"w": w, "accuracy": acc, "pairs_changed": int(np.sum(oc != base))})
    span = None
    if len(flips):
        span = {"min": sig4(float(flips[0])), "median": sig4(float(np.median(flips))), "max": sig4(float(flips[-1]))}
    return {
        "points": points,
        "pairs": len(lp_c),
        "pairs_that_flip": len(flips),
        "flip_w": span,
        "what": "accuracy of log π(y|x) + w·r(x, y) at w = 0, the pairs' flip-weight quantiles and past the last flip",
    }


def sig4(x: float) -> float:
    """``x`` to 4 significant digits."""
    return float(f"{x:.4g}")


def compact(curve: dict[str, Any]) -> str:
    """One line: ``w=0: 49.2 · w=3.1: 55.0 · …`` (accuracy in %)."""
    pts = curve.get("points") or []
    return " · ".join(
        f"w={p['w']:.3g}: {100 * p['accuracy']:.1f}" for p in pts if p.get("accuracy") == p.get("accuracy")
    )
