"""Where a reward model loses the signal on the policy's own samples: on-policy accuracy and pool diagnostics.

Curated preference pairs (chosen vs rejected, written to differ) measure an RM off the policy's distribution.
Best-of-N asks something else: among the policy's own samples for one (user, prompt) cell, does the RM put the
better ones on top? With exact ground truth on every sampled text (a checkable rubric, or a labelled oracle)
the pool answers that directly, at no extra generation cost. Every function here takes one row per cell:
``scores`` (C, N), the system's reward of each of the cell's N pool samples for the cell's user, and ``truth``
(C, N), the exact quality of each sample for that user (NaN where the cell has none).

- **On-policy pair accuracy** (:func:`pair_accuracy`): over the pairs of a cell's samples whose truth differs
  (pairs with equal truth are excluded and counted), the share the RM orders the same way. A tie of the RM's
  scores is wrong (``strict``) or half right (``half``), the run's tie rule. A cell's value is the mean over its
  informative pairs (cells count alike: cell-macro).
- **On-policy best-of-k accuracy** (:func:`best_of_k_accuracy`): RewardBench 2's and RMGAP's listwise rule on the
  pool: over every k-subset of the cell's samples whose best sample is unique, the probability that the RM scores
  that best sample strictly above the k − 1 others (``half``: a tie among the RM's top shares the win). Exact, by
  counting subsets, no sampling.
- **Within-pool rank correlation** (:func:`within_pool_spearman`): Spearman ρ between the rewards and a truth (or
  one rubric pole's 0/1 satisfaction) across a cell's samples; NaN where either is constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CellAccuracy:
    """Per cell: the accuracy (NaN where the cell has no informative pair / subset), how many pairs (subsets) it
    averages, and how many pairs were excluded because their truth is equal."""

    value: FloatArray
    count: FloatArray
    excluded: FloatArray


def _tie_credit(tie_policy: str) -> float:
    if tie_policy not in ("strict", "half"):
        raise ValueError(f"tie_policy must be 'strict' or 'half', got {tie_policy!r}")
    return 0.5 if tie_policy == "half" else 0.0


def pair_accuracy(scores: FloatArray, truth: FloatArray, tie_policy: str = "strict") -> CellAccuracy:
    """On-policy pair accuracy per cell (see the module docstring). A sample whose score or truth is NaN takes
    part in no pair."""
    s = np.asarray(scores, np.float64)
    q = np.asarray(truth, np.float64)
    if s.shape != q.shape or s.ndim != 2:
        raise ValueError(f"scores {s.shape} and truth {q.shape} must both be (cells, N)")
    credit = _tie_credit(tie_policy)
    ok = ~(np.isnan(s) | np.isnan(q))
    both = ok[:, :, None] & ok[:, None, :]
    upper = np.triu(np.ones(s.shape[1:] * 2, dtype=bool), 1)[None]
    valid = both & upper
    dq = q[:, :, None] - q[:, None, :]
    ds = s[:, :, None] - s[:, None, :]
    informative = valid & (dq != 0)
    agree = np.where(ds == 0, credit, (np.sign(ds) == np.sign(dq)).astype(np.float64))
    n = informative.sum((1, 2)).astype(np.float64)
    hits = np.where(informative, agree, 0.0).sum((1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n > 0, hits / n, np.nan)
    excluded = (valid & (dq == 0)).sum((1, 2)).astype(np.float64)
    return CellAccuracy(value, n, excluded)


def best_of_k_accuracy(scores: FloatArray, truth: FloatArray, k: int = 4, tie_policy: str = "strict") -> CellAccuracy:
    """On-policy best-of-k accuracy per cell (see the module docstring): over the k-subsets of a cell's samples
    whose best sample (by truth) is unique, the probability that the RM ranks it first. ``count``: the number of
    such subsets; ``excluded``: k-subsets whose best is tied. A sample whose score or truth is NaN is left out of
    the cell's pool."""
    s = np.asarray(scores, np.float64)
    q = np.asarray(truth, np.float64)
    if s.shape != q.shape or s.ndim != 2:
        raise ValueError(f"scores {s.shape} and truth {q.shape} must both be (cells, N)")
    if k < 2:
        raise ValueError(f"best-of-k needs k >= 2, got {k}")
    credit = _tie_credit(tie_policy)
    N = s.shape[1]
    ok = ~(np.isnan(s) | np.isnan(q))
    pair = ok[:, :, None] & ok[:, None, :]
    below = pair & (q[:, None, :] < q[:, :, None])  # below[c, i, j]: j has lower truth than i
    lower = below.sum(2)
    beaten = (below & (s[:, None, :] < s[:, :, None])).sum(2)
    tied = (below & (s[:, None, :] == s[:, :, None])).sum(2)
    comb = np.array([[math.comb(x, j) for j in range(k)] for x in range(N + 1)], np.float64)  # C(x, j), j < k
    subsets = np.where(ok, comb[lower, k - 1], 0.0).sum(1)
    # i wins a subset of k - 1 lower-truth others when none scores above it; with m of them tied with i's score
    # it is picked with probability 1 / (m + 1) under "half", never under "strict" (m > 0)
    wins = comb[beaten, k - 1]
    if credit:
        for m in range(1, k):
            wins = wins + comb[tied, m] * comb[beaten, k - 1 - m] / (m + 1)
    wins = np.where(ok, wins, 0.0).sum(1)
    n = ok.sum(1)
    total = np.array([math.comb(int(x), k) for x in n], np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(subsets > 0, wins / subsets, np.nan)
    return CellAccuracy(value, subsets, total - subsets)


def _ranks(x: FloatArray) -> FloatArray:
    from scipy.stats import rankdata

    out: FloatArray = rankdata(x, axis=1, method="average").astype(np.float64)
    return out


def within_pool_spearman(scores: FloatArray, truth: FloatArray) -> FloatArray:
    """Spearman ρ per cell between the rewards and the truth across the cell's samples; NaN where either is
    constant or a value is missing (a cell with a NaN is left out, not partly used)."""
    s = np.asarray(scores, np.float64)
    q = np.asarray(truth, np.float64)
    if s.shape != q.shape or s.ndim != 2:
        raise ValueError(f"scores {s.shape} and truth {q.shape} must both be (cells, N)")
    out = np.full(s.shape[0], np.nan)
    ok = ~(np.isnan(s).any(1) | np.isnan(q).any(1))
    if not ok.any():
        return out
    rs, rq = _ranks(s[ok]), _ranks(q[ok])
    rs -= rs.mean(1, keepdims=True)
    rq -= rq.mean(1, keepdims=True)
    den = np.sqrt((rs * rs).sum(1) * (rq * rq).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out[ok] = np.where(den > 0, (rs * rq).sum(1) / den, np.nan)
    return out


def within_pool_spread(scores: FloatArray) -> FloatArray:
    """The standard deviation of the rewards across each cell's samples (NaN where a score is missing)."""
    s = np.asarray(scores, np.float64)
    out: FloatArray = np.where(np.isnan(s).any(1), np.nan, np.std(np.where(np.isnan(s), 0.0, s), axis=1))
    return out
