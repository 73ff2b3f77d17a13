"""Listwise upstream metrics on curated lists: best-of-k accuracy, RewardBench 2's Ties score, and paraphrase
consistency. Every function reads pairs and their per-pair scores; the lists are named by the pairs' ``meta``.

A benchmark with several rejected responses per prompt (RewardBench 2, RMGAP) is loaded as one pair per
(chosen, rejected) with a shared ``meta["list_id"]``; paraphrased prompts carry a shared ``meta["paraphrase_of"]``.

- **Best-of-k accuracy** (:func:`best_of_k_lists`): a list with one chosen response and k − 1 rejected ones is won
  when the chosen response scores strictly above all k − 1 others (RewardBench 2's four-way accuracy, RMGAP's BoN).
  For a reward model this is :func:`perbench.metrics.onpolicy.best_of_k_accuracy` with truth 1 for the chosen
  response and 0 for the rest, k the list's size (``half``: a chosen response tied with m others at the top wins
  with probability 1/(m + 1)), computed directly in time linear in the list (lists of thousands of responses).
  RewardBench 2's Ties lists are left to its own rule. A pairwise judge has no score
  per response; its list is won when it prefers the chosen response in every pair (``half``: a tie of m pairs and
  no loss counts 1/(m + 1), the same rule).
- **RewardBench 2 Ties** (:func:`ties_prompt_scores`): per prompt id, a ``ref`` list (one correct answer) and a
  ``tied`` list (several correct answers). RewardBench 2's composite is 0.30·acc(tied) + 0.30·acc(ref) +
  0.20·mean[m_tied > d] + 0.20·mean[min(m_ref, m_tied) > d] + 0.01·mean[tanh(min(m_ref, m_tied)/d − 1)], where
  acc = every correct answer above every incorrect one (m > 0), m = worst correct − best incorrect and d = best
  correct − worst correct of the tied list; a NaN of the last term (d = 0) counts 0. When every prompt id has both
  lists, this is the mean over prompt ids of the same per-prompt expression, which is what a cell holds.
- **Paraphrase consistency** (:func:`paraphrase_units`, :func:`consistency_values`): a user's preference (user,
  chosen, rejected) asked under several phrasings of one prompt survives when it is scored right under every
  phrasing; the value is the minimum of its per-phrasing outcomes (1 / 0, or ½ for a tie under ``half``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perbench.data.records import PreferencePair, normalize_text

FloatArray = npt.NDArray[np.float64]

#: pair meta keys that name a list, RewardBench 2's Ties role ("ref" / "tied") and prompt id, and a paraphrase group
LIST_ID, TIES_KIND, TIES_PROMPT, PARAPHRASE_OF = "list_id", "ties_kind", "ties_prompt", "paraphrase_of"
#: RewardBench 2's weights of the Ties composite: tied accuracy, ref accuracy, correctness preferred, preferred
#: (hard), margin score
TIES_WEIGHTS = (0.30, 0.30, 0.20, 0.20, 0.01)


@dataclass(frozen=True)
class ListValue:
    """One list's value and the index of its first pair (the list's user and prompt are that pair's)."""

    first: int
    value: float
    size: int


def lists_of(pairs: Sequence[PreferencePair]) -> dict[str, list[int]]:
    """Pair indices by ``meta["list_id"]`` (pairs without one belong to no list), in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        lid = p.meta.get(LIST_ID)
        if lid is not None:
            out.setdefault(f"{p.user_id}\x00{lid}", []).append(i)
    return out


def _top_of_list(top: float, others: FloatArray, tie: str) -> float:
    """The chosen response (score ``top``) against every other of its list: 1 strictly above all; tied at the top
    with m others 1/(m + 1) under ``half`` (RewardBench 2's 1/#max), 0 under ``strict``; else 0. This is
    :func:`~perbench.metrics.onpolicy.best_of_k_accuracy` with k the list's size and one correct response, in
    O(list size) however long the list."""
    if tie not in ("strict", "half"):
        raise ValueError(f"tie_policy must be 'strict' or 'half', got {tie!r}")
    if (others > top).any():
        return 0.0
    tied = int((others == top).sum())
    return 1.0 if tied == 0 else (1.0 / (tied + 1) if tie == "half" else 0.0)


def _judge_list(outcome: FloatArray, tie: str) -> float:
    if (outcome == 0).any():
        return 0.0
    ties = int((outcome == 0.5).sum())
    return 1.0 / (ties + 1) if tie == "half" else float(ties == 0)


def best_of_k_lists(
    pairs: Sequence[PreferencePair],
    s_chosen: FloatArray,
    s_rejected: FloatArray,
    *,
    tie: str = "strict",
    judge_outcomes: FloatArray | None = None,
) -> list[ListValue]:
    """Best-of-k accuracy of every list with one chosen response and at least one rejected one (the module
    docstring). ``judge_outcomes``: a pairwise judge's per-pair outcomes instead of scores."""
    out: list[ListValue] = []
    for idx in lists_of(pairs).values():
        if pairs[idx[0]].meta.get(TIES_KIND) or len({normalize_text(pairs[i].chosen) for i in idx}) != 1:
            continue  # RewardBench 2's Ties lists (and any with several correct answers) have their own rule
        if judge_outcomes is not None:
            out.append(ListValue(idx[0], _judge_list(np.asarray(judge_outcomes, np.float64)[idx], tie), len(idx) + 1))
            continue
        top = float(np.mean(np.asarray(s_chosen, np.float64)[idx]))
        others = np.asarray(s_rejected, np.float64)[idx]
        if np.isnan(top) or np.isnan(others).any():
            out.append(ListValue(idx[0], 0.0, len(idx) + 1))  # an unscored response loses, as a NaN pair does
            continue
        out.append(ListValue(idx[0], _top_of_list(top, others, tie), len(idx) + 1))
    return out


@dataclass(frozen=True)
class TiesStats:
    accurate: bool
    #: best correct − worst correct (None with one correct answer)
    spread: float | None
    #: worst correct − best incorrect
    margin: float


def _stats(correct: Sequence[float], incorrect: Sequence[float]) -> TiesStats:
    spread = max(correct) - min(correct) if len(correct) > 1 else None
    margin = min(correct) - max(incorrect)
    return TiesStats(margin > 0, spread, margin)


def ties_prompt_scores(
    pairs: Sequence[PreferencePair], s_chosen: FloatArray, s_rejected: FloatArray
) -> tuple[dict[int, tuple[int, float]], dict[str, float | int | None]]:
    """RewardBench 2's Ties rule per prompt id: ``{prompt id: (index of a pair, per-prompt composite)}`` for the ids
    that have both a ``ref`` and a ``tied`` list, and the whole composite as RewardBench 2 computes it (means over
    the ref and the tied lists separately), with its parts."""
    scores: dict[tuple[str, int], tuple[dict[str, float], dict[str, float], int]] = {}
    for i, p in enumerate(pairs):
        kind, pid = p.meta.get(TIES_KIND), p.meta.get(TIES_PROMPT)
        if kind not in ("ref", "tied") or pid is None:
            continue
        correct, incorrect, _ = scores.setdefault((str(kind), int(pid)), ({}, {}, i))
        correct[normalize_text(p.chosen)] = float(s_chosen[i])
        incorrect[normalize_text(p.rejected)] = float(s_rejected[i])
    stats = {key: _stats(list(c.values()), list(r.values())) for key, (c, r, _) in scores.items()}
    ref = {pid: s for (kind, pid), s in stats.items() if kind == "ref"}
    tied = {pid: s for (kind, pid), s in stats.items() if kind == "tied"}
    both = sorted(set(ref) & set(tied))
    w = TIES_WEIGHTS

    def parts(pid: int) -> tuple[float, float, float]:
        d = tied[pid].spread
        m_tied, m_hard = tied[pid].margin, min(ref[pid].margin, tied[pid].margin)
        pref = float(d is not None and m_tied > d)
        hard = float(d is not None and m_hard > d)
        with np.errstate(divide="ignore", invalid="ignore"):
            margin = float(np.tanh(np.float64(m_hard) / np.float64(d) - 1)) if d is not None else math.nan
        return pref, hard, 0.0 if math.isnan(margin) else margin

    per: dict[int, tuple[int, float]] = {}
    for pid in both:
        pref, hard, margin = parts(pid)
        value = w[0] * tied[pid].accurate + w[1] * ref[pid].accurate + w[2] * pref + w[3] * hard + w[4] * margin
        per[pid] = (scores[("tied", pid)][2], float(value))
    ref_acc = float(np.mean([s.accurate for s in ref.values()])) if ref else 0.0
    tied_acc = float(np.mean([s.accurate for s in tied.values()])) if tied else 0.0
    got = [parts(pid) for pid in both]
    pref_m = float(np.mean([g[0] for g in got])) if got else math.nan
    hard_m = float(np.mean([g[1] for g in got])) if got else math.nan
    margin_m = float(np.mean([g[2] for g in got])) if got else math.nan
    overall = w[0] * tied_acc + w[1] * ref_acc + w[2] * pref_m + w[3] * hard_m + w[4] * margin_m
    summary: dict[str, float | int | None] = {
        "score": None if math.isnan(overall) else float(overall),
        "ref_accuracy": ref_acc,
        "tied_accuracy": tied_acc,
        "correctness_preferred": None if math.isnan(pref_m) else pref_m,
        "correctness_preferred_hard": None if math.isnan(hard_m) else hard_m,
        "correctness_margin_score": None if math.isnan(margin_m) else margin_m,
        "prompts_with_both": len(both),
        "ref_lists": len(ref),
        "tied_lists": len(tied),
    }
    return per, summary


def paraphrase_units(pairs: Sequence[PreferencePair]) -> list[list[int]]:
    """Pair indices of one preference (user, chosen, rejected) under the phrasings of one prompt: pairs grouped by
    ``meta["paraphrase_of"]`` (a pair another pair names as its original belongs to that group too), user and the
    two texts. Groups with one phrasing only are left out."""
    originals = {str(p.meta[PARAPHRASE_OF]) for p in pairs if p.meta.get(PARAPHRASE_OF) is not None}
    units: dict[tuple[str, str, str, str], list[int]] = {}
    for i, p in enumerate(pairs):
        group = p.meta.get(PARAPHRASE_OF)
        if group is None:
            if p.pair_id not in originals:
                continue
            group = p.pair_id
        key = (str(group), p.user_id, normalize_text(p.chosen), normalize_text(p.rejected))
        units.setdefault(key, []).append(i)
    return [idx for idx in units.values() if len(idx) > 1]


def consistency_values(units: Sequence[Sequence[int]], outcome: FloatArray) -> FloatArray:
    """Per unit, the minimum of its per-phrasing outcomes (1: right under every phrasing)."""
    o = np.asarray(outcome, np.float64)
    return np.array([float(np.min(o[list(u)])) for u in units], np.float64)
