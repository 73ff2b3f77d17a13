"""Best-of-N over shared pools: one pool of N samples per test prompt, re-ranked by every system on every
(user, prompt) cell that has ground truth.

The base policy does not see the user, so the samples of a prompt are draws from the same distribution for
every user: one pool per prompt serves them all (``docs/decoding.md``). For each system and cell, the scores
of the pool's samples give the exact expected quality of Best-of-n over random n-subsets of the pool
(``decoding.best_of_n.bon_weights``); the cell's value is that expectation at the decoder's ``n``, its
``bon_gain_*`` the gain over n = 1 (the pool mean), its ``rm_win`` the expected win of the pick over the
zero-shot output in the system's own reward. Cells of one prompt share its prompt id, so the two-way bootstrap
resamples a prompt together with its pool.

The work, each piece a content-keyed unit (the pool, φ of its texts, its quality per (cell, sample), each system's
scores), is in :mod:`perbench.runner.pool_units`; this module assembles it: cells, per-cell sample rows, the
reference lines (random pick, oracle pick), summaries with the Best-of-n curve, and the on-policy diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perbench.data.records import Prompt, prompt_key
from perbench.memo import Memo, array_digest
from perbench.metrics.analysis.roles import ORACLE_PICK, RANDOM_PICK
from perbench.runner.methods import MethodHandle
from perbench.runner.pool_units import Pool, PoolUnits
from perbench.runner.scoring import DESCRIPTIVE_METRICS, QUALITY_METRICS

__all__ = ["NULL_WIN_RULE", "ONPOLICY_BOK", "ONPOLICY_K", "ONPOLICY_PAIRS", "Pool", "Pooled"]

#: on-policy accuracy metrics (upstream-style: no ``:``) of the diagnosed pool
ONPOLICY_PAIRS, ONPOLICY_BOK, ONPOLICY_K = "onpolicy_acc", "onpolicy_bok_acc", 4
NULL_WIN_RULE = (
    "a scorer with no information ranks the zero-shot output and the n = {n} candidates in random order, so its "
    "pick beats the zero-shot output with probability n/(n+1)"
)


class Pooled(PoolUnits):
    """Pooled Best-of-N: the units of :class:`PoolUnits` assembled into every system's cells and summary."""

    # ------------------------------------------------------------------ assembly
    def evaluate(
        self,
        systems: Sequence[Any],
        targets: list[tuple[Prompt, str]],
        zero: dict[tuple[str, str], str] | None,
    ) -> dict[str, Any]:
        """Cells, per-cell sample rows and a summary (with the Best-of-n curve) for every pooled system. The curves'
        bootstrap and the diagnosis are memoized by content (:class:`perbench.cache.Memo`): a rerun reads them."""
        memo = Memo()
        try:
            return self._evaluate(systems, targets, zero, memo)
        finally:
            memo.close()

    def _evaluate(
        self,
        systems: Sequence[Any],
        targets: list[tuple[Prompt, str]],
        zero: dict[tuple[str, str], str] | None,
        memo: Memo,
    ) -> dict[str, Any]:
        from perbench.decoding.best_of_n import bon_ns, bon_weights

        bench = self.s.bench
        result: dict[str, Any] = {}
        written: set[str] = set()
        diagnosed = self._diagnosis_family(systems)
        for sys in systems:
            h: MethodHandle = sys.method
            decoder = self.decoder(sys.spec)
            pool = self.pool(decoder, targets)
            qual = self.quality(pool)
            if pool.key not in written:
                written.add(pool.key)
                self._pool_rows(sys.spec.label(), pool)
                self._reference_cells(sys.family, sys.spec.label(), pool, qual, decoder.n, zero is not None)
            sc = self.scores(h, pool, zero)
            S, Z = sc["pool"], sc["zero"]
            na = self.s.not_applicable(h)
            keep = [c for c, (_, u) in enumerate(pool.cells) if u not in na]
            n = decoder.n
            metrics = [m for m in (*QUALITY_METRICS, "rubric_all", *DESCRIPTIVE_METRICS) if m in qual]
            rows: list[dict[str, Any]] = []
            w = bon_weights(S, n)  # once per system: every quality, the win rate and the gain weigh by it
            expected = {m: (w * np.asarray(qual[m], np.float64)).sum(-1) for m in metrics}
            base = {m: qual[m].mean(1) for m in metrics}
            win = self._expected_win(w, S, Z)
            gain = (w * np.where(np.isnan(S), 0.0, S)).sum(-1) - Z
            for c in keep:
                u = pool.cells[c][1]
                row: dict[str, Any] = {"user_id": u, "seen": bench.users[u].seen, "prompt_id": pool.prompt_id(c)}
                for m in metrics:
                    if not np.isnan(expected[m][c]):
                        row[m] = float(expected[m][c])
                        if m in QUALITY_METRICS:
                            row[f"bon_gain_{m}"] = float(expected[m][c] - base[m][c])
                if not np.isnan(win[c]):
                    row["rm_win"], row["rm_gain"] = float(win[c]), float(gain[c])
                rows.append(row)
                self.s.samples.append(
                    {
                        "kind": "bon_cell",
                        "decoder": sys.label,
                        "user_id": u,
                        "prompt_id": row["prompt_id"],
                        "n": n,
                        "pool": pool.size,
                        "expected": {m: row[m] for m in metrics if m in row},
                        "pool_mean": {m: float(base[m][c]) for m in metrics if not np.isnan(base[m][c])},
                        "top": int(np.argmax(np.where(np.isnan(S[c]), -np.inf, S[c]))),
                        **({"rm_win": row["rm_win"]} if "rm_win" in row else {}),
                    }
                )
            self.scoring.rows[sys.label] = rows
            self.scoring.add_cells(sys.label, rows, extra=[f"bon_gain_{m}" for m in QUALITY_METRICS])
            summary = self.scoring.summary(rows, h.label, expected=True)
            summary["pool"] = {
                "n": n,
                "pool": pool.size,
                "prompts": len(pool.prompts),
                "cells": len(rows),
                "estimator": f"exact expectation of Best-of-{n} over random {n}-subsets of each prompt's "
                f"{pool.size}-sample pool (ties broken at random)",
            }
            if na:
                summary["not_applicable"] = {
                    "targets": len(pool.cells) - len(keep),
                    "reason": "users without train pairs to adapt from",
                }
            ns = sorted({*bon_ns(pool.size), n})
            curves: dict[str, Any] = {}
            for m in QUALITY_METRICS:
                if m not in qual:
                    continue
                ok = [c for c in keep if not np.isnan(qual[m][c]).any()]
                if not ok:
                    continue
                curves[m] = self._curve(memo, S[ok], qual[m][ok], ns, ok, pool)
            summary["bon_curve"] = curves
            if "rm_win" in summary:
                summary["rm_win"]["null"] = n / (n + 1)
                summary["rm_win"]["null_rule"] = NULL_WIN_RULE.format(n=n)
            if sys.family == diagnosed:
                summary["diagnosis"] = self._diagnose(h, pool, qual, S, keep, memo)
            result[sys.label] = summary
        return result

    def _diagnosis_family(self, systems: Sequence[Any]) -> str | None:
        """The pooled decoder whose pool the on-policy accuracy and the diagnosis read: the verdict metric's, else
        the first one."""
        fams = list(dict.fromkeys(sys.family for sys in systems))
        verdict = self.s.cfg.verdict_metric or ""
        return next((f for f in fams if verdict.startswith(f"{f}:")), fams[0] if fams else None)

    def truth_metric(self, qual: dict[str, np.ndarray]) -> str | None:
        """The exact quality the on-policy pairs and the diagnosis are labelled by: the verdict metric's quality
        when the pool has it, else rubric satisfaction, the judge's score or ROUGE-L (a labelled oracle)."""
        verdict = (self.s.cfg.verdict_metric or "").partition(":")[2]
        for m in (verdict, "rubric_satisfaction", "judge_score", "rougeL"):
            if m in qual and not np.isnan(qual[m]).all():
                return m
        return None

    def _reference_cells(
        self, family: str, label: str, pool: Pool, qual: dict[str, np.ndarray], n: int, with_zero: bool
    ) -> None:
        """The pool's reference lines, on every cell with ground truth: ``random_pick`` (the pool mean, the exact
        Best-of-1: what a pick with no information gets) and ``oracle_pick`` (Best-of-n by the quality itself:
        the ceiling of any re-ranker of this pool), per quality metric; ``random_pick`` also holds the pool's mean
        length (``words``: what re-ranking's change of length is measured from; no oracle, length is no quality);
        for ``rm_win``, ``random_pick`` holds n/(n+1), the win rate of a scorer with no information
        (:data:`NULL_WIN_RULE`)."""
        from perbench.decoding.best_of_n import bon_expected

        cells = self.s.cells
        for m in QUALITY_METRICS:
            if m not in qual:
                continue
            mean = qual[m].mean(1)
            best = bon_expected(qual[m], qual[m], n)
            for c, (_, u) in enumerate(pool.cells):
                cells.add(RANDOM_PICK, f"{family}:{m}", u, pool.prompt_id(c), float(mean[c]))
                cells.add(ORACLE_PICK, f"{family}:{m}", u, pool.prompt_id(c), float(best[c]))
        for m in DESCRIPTIVE_METRICS:
            if m in qual:
                mean = qual[m].mean(1)
                for c, (_, u) in enumerate(pool.cells):
                    cells.add(RANDOM_PICK, f"{family}:{m}", u, pool.prompt_id(c), float(mean[c]))
        if with_zero:
            for c, (_, u) in enumerate(pool.cells):
                cells.add(RANDOM_PICK, f"{family}:rm_win", u, pool.prompt_id(c), n / (n + 1))
        for c, (_, u) in enumerate(pool.cells):
            row: dict[str, Any] = {
                "kind": "bon_pool_cell", "decoder": label, "user_id": u, "prompt_id": pool.prompt_id(c), "n": n,
                "pool": pool.size, "random_pick": {}, "oracle": {}, "oracle_top": {},
            }  # fmt: skip
            for m in QUALITY_METRICS:
                if m in qual and not np.isnan(qual[m][c]).any():
                    row["random_pick"][m] = float(qual[m][c].mean())
                    row["oracle"][m] = float(bon_expected(qual[m][c : c + 1], qual[m][c : c + 1], n)[0])
                    row["oracle_top"][m] = int(np.argmax(qual[m][c]))
            self.s.samples.append(row)

    def _curve(self, memo: Memo, S: np.ndarray, Q: np.ndarray, ns: list[int], ok: list[int], pool: Pool) -> Any:
        """``bon_curve`` of one system and quality (its bootstrap CIs are the cost), memoized by content."""
        from perbench.decoding.best_of_n import bon_curve

        cfg = self.s.cfg
        users = [pool.cells[c][1] for c in ok]
        prompts = [pool.prompt_id(c) for c in ok]
        parts = [array_digest(S, Q), ns, users, prompts, cfg.bootstrap, cfg.seed]
        return memo.json(
            "bon_curve",
            parts,
            lambda: bon_curve(S, Q, ns, users=users, prompts=prompts, n_boot=cfg.bootstrap, seed=cfg.seed),
        )

    def _diagnose(
        self, h: MethodHandle, pool: Pool, qual: dict[str, np.ndarray], S: np.ndarray, keep: list[int], memo: Memo
    ) -> dict[str, Any]:
        """On-policy accuracy cells (``onpolicy_acc``, ``onpolicy_bok_acc@K``) and the per-pole / per-user /
        per-prompt diagnosis of one system on the pool (``perbench.metrics.onpolicy``)."""
        from perbench.metrics.onpolicy import best_of_k_accuracy, pair_accuracy
        from perbench.metrics.pool_diagnosis import diagnose

        truth_name = self.truth_metric(qual)
        if truth_name is None:
            return {"na": "no exact quality on the pool's cells (no checkable rubric, judge or reference)"}
        cfg = self.s.cfg
        T, Sk = qual[truth_name][keep], S[keep]
        users = [pool.cells[c][1] for c in keep]
        prompts = [pool.prompt_id(c) for c in keep]
        k = min(ONPOLICY_K, pool.size)

        def accuracies() -> dict[str, Any]:
            pairs = pair_accuracy(Sk, T, cfg.tie_policy)
            bok = best_of_k_accuracy(Sk, T, k, cfg.tie_policy) if k >= 2 else None
            return {
                "pairs": pairs.value.tolist(),
                "counted": int(pairs.count.sum()),
                "tied": int(pairs.excluded.sum()),
                "bok": None if bok is None else bok.value.tolist(),
                "subsets": None if bok is None else float(bok.count.sum()),
                "subsets_tied": None if bok is None else float(bok.excluded.sum()),
            }

        acc = memo.json("onpolicy_accuracy", [array_digest(Sk, T), cfg.tie_policy, k], accuracies)
        for i, (u, p) in enumerate(zip(users, prompts, strict=True)):
            self.s.cells.add(h.label, ONPOLICY_PAIRS, u, p, float(acc["pairs"][i]))
            if acc["bok"] is not None:
                self.s.cells.add(h.label, f"{ONPOLICY_BOK}@{k}", u, p, float(acc["bok"][i]))
        wants = {p: w[keep] for p, w in self.wants(pool).items()}
        parts = [array_digest(Sk, T, *(wants[p] for p in sorted(wants))), sorted(wants), users, prompts]
        out: dict[str, Any] = memo.json("pool_diagnosis", parts, lambda: diagnose(Sk, T, wants, users, prompts))
        out.update(
            truth=truth_name,
            onpolicy={
                "pairs": acc["counted"],
                "pairs_tied_truth": acc["tied"],
                "cells_without_pairs": int(np.isnan(np.asarray(acc["pairs"], np.float64)).sum()),
                "k": k,
                "subsets": acc["subsets"],
                "subsets_tied_best": acc["subsets_tied"],
                "cells_without_subsets": None
                if acc["bok"] is None
                else int(np.isnan(np.asarray(acc["bok"], np.float64)).sum()),
                "weighting": "each (user, prompt) cell counts alike (its value: the mean over its pairs / subsets)",
            },
        )
        return out

    @staticmethod
    def _expected_win(w: np.ndarray, S: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """Per cell, P(the pick of a random n-subset scores above the zero-shot output) + ½ P(a tie), in the
        system's own reward (NaN where there is no zero-shot reward); ``w``: ``bon_weights(S, n)``."""
        zero = Z[:, None]
        beats = np.where(zero < S, 1.0, np.where(zero == S, 0.5, 0.0))
        out: np.ndarray = (w * beats).sum(1)
        out[np.isnan(Z)] = np.nan
        return out

    def _pool_rows(self, label: str, pool: Pool) -> None:
        """Each pool sample once in samples.jsonl (``bon_sample``)."""
        for p, texts in zip(pool.prompts, pool.texts, strict=True):
            for j, t in enumerate(texts):
                self.s.samples.append(
                    {"kind": "bon_sample", "decoder": label, "prompt_id": prompt_key(p), "sample": j, "text": t}
                )
