"""Upstream RM accuracy with its bootstrap CIs, memoized by content in ``derived.sqlite`` (:mod:`perbench.memo`):
the CIs are the cost, so a rerun reads them back."""

from __future__ import annotations

from typing import Any

import numpy as np


def memo_accuracy(
    scores: dict[str, np.ndarray], users: list[str], prompts: list[str], tie: Any, judge: bool, n_boot: int, seed: int
) -> dict[str, Any]:
    """RM accuracy of ``scores`` (``chosen``/``rejected``; a judge's preferences in ``chosen``) over pairs of
    ``users`` × ``prompts``, read back when the same scores, pairs, tie rule and bootstrap were analysed before (a run
    and its rerun both hand on the JSON form)."""
    from perbench.memo import Memo, array_digest
    from perbench.metrics.rm_accuracy import preference_accuracy, rm_accuracy

    boot: dict[str, Any] = {"n_boot": n_boot, "seed": seed, "prompts": prompts}

    def compute() -> dict[str, Any]:
        if judge:
            return preference_accuracy(scores["chosen"], users, tie=tie, **boot)
        return rm_accuracy(scores["chosen"], scores["rejected"], users, tie=tie, **boot)

    memo = Memo()
    try:
        parts = [array_digest(scores["chosen"], scores["rejected"]), users, prompts, tie, judge, n_boot]
        return memo.json("rm_accuracy", [*parts, seed], compute)
    finally:
        memo.close()
