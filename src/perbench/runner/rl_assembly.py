"""Assembly of the ``rl`` phase's results (:mod:`perbench.runner.training`): ground-truth quality and RM scores of
every arm's texts, per-arm values, summaries and paired comparisons, the downstream rows, the selection cells and
the samples."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.data.records import Prompt, prompt_key, prompt_text
from perbench.errors import PerbenchError
from perbench.runner.rl_plan import BASE, EXTRA, MODES, PLACEBO, RANDOM, SHUFFLED, Arm, Planning, Texts, mode_label
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.training import RLPhase
    from perbench.training.evaluation import ArmValues


class Assemble:
    """Quality, RM scores, per-arm values, summaries, comparisons, cells and samples of the rl phase."""

    def __init__(
        self,
        training: Planning,
        phase: RLPhase,
        targets: list[tuple[Prompt, str]],
        texts: dict[str, Texts],
        arms: dict[str, Arm],
        reference: tuple[str, dict[tuple[str, str], dict[str, Any]]] | None,
    ) -> None:
        self.t, self.s, self.phase = training, training.s, phase
        self.texts, self.arms, self.reference = texts, arms, reference
        self.prompts = {prompt_key(p): p for p, _ in targets}
        self.n_boot, self.seed = self.s.cfg.bootstrap, self.s.cfg.seed

    def quality(self) -> dict[tuple[str, str, str], dict[str, float]]:
        """Ground-truth quality of every distinct (prompt key, user, text), computed once."""
        from perbench.runner.scoring import Scoring

        items = sorted(
            {
                (pk, u, t)
                for modes in self.texts.values()
                for seeds in modes.values()
                for cells in seeds.values()
                for (pk, u), ts in cells.items()
                for t in ts
            }
        )
        # content-keyed in the unit store: the rl_eval unit computes it, the assembly (and a rerun) reads it
        rows = Scoring(self.s).generation_quality(
            "rl", [t for _, _, t in items], [(self.prompts[pk], u) for pk, u, _ in items]
        )
        out = {}
        for (pk, u, t), q in zip(items, rows, strict=True):
            out[(pk, u, t)] = {**q, "words": float(len(t.split()))}
        return out

    def rm_scores(self, label: str) -> dict[tuple[str, str, str], float]:
        """The arm's RM's score of each of its texts and of the base policy's texts on its cells."""
        from perbench.rewards.base import ScoreItem

        h = self.arms[label].method
        assert h is not None
        shots = h.shots
        mine = self.texts[label]
        cells = {c for seeds in mine.values() for per in seeds.values() for c in per}
        items = {
            (pk, u, t) for seeds in mine.values() for per in seeds.values() for (pk, u), ts in per.items() for t in ts
        }
        items |= {
            (pk, u, t)
            for per in self.texts[BASE].values()
            for (pk, u), ts in per[0].items()
            if (pk, u) in cells
            for t in ts
        }
        order = sorted(items)
        key = h.key(shots, "rl-rm-scores", [unit_key(pk, u, t) for pk, u, t in order])

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(shots)
            return {"scores": rm.score_distinct([ScoreItem(u, self.prompts[pk], t) for pk, u, t in order])}

        scores = self.s.units.arrays("win_rate", key, compute)["scores"]
        return {it: float(v) for it, v in zip(order, scores, strict=True)}

    def values(self, label: str, mode: str, quality: dict[tuple[str, str, str], dict[str, float]]) -> ArmValues:
        """The arm's (S, n) matrix per metric in ``mode``: each entry the mean over the cell's samples."""
        from perbench.metrics.win_rate import win_outcomes
        from perbench.runner.scoring import QUALITY_METRICS
        from perbench.training.evaluation import ArmValues

        per_seed = self.texts[label][mode]
        seeds = tuple(sorted(per_seed))
        cells = sorted({c for s in seeds for c in per_seed[s]})
        for s in seeds:
            if set(per_seed[s]) != set(cells):
                raise PerbenchError(f"{label}: training seed {s} was evaluated on other cells than the others")
        metrics = [*QUALITY_METRICS, *EXTRA]
        vals = {m: np.full((len(seeds), len(cells)), np.nan) for m in metrics}
        scores = self.rm_scores(label) if self.arms[label].kind == "rm" else None
        if scores is not None:
            vals |= {m: np.full((len(seeds), len(cells)), np.nan) for m in ("rm_win", "rm_gain")}
        base = self.texts[BASE][mode][0]
        for i, s in enumerate(seeds):
            for c, (pk, u) in enumerate(cells):
                ts = per_seed[s][(pk, u)]
                for m in metrics:
                    got = [quality[(pk, u, t)].get(m, np.nan) for t in ts]
                    vals[m][i, c] = float(np.mean(got))
                if scores is not None:
                    mine = np.array([scores[(pk, u, t)] for t in ts])
                    ref = np.array([scores[(pk, u, t)] for t in base[(pk, u)]])
                    wins = win_outcomes(mine, ref)  # NaN: an invalid score, left out
                    vals["rm_win"][i, c] = float(wins[~np.isnan(wins)].mean()) if (~np.isnan(wins)).any() else np.nan
                    vals["rm_gain"][i, c] = float(np.mean(mine - ref))
        cell_ids = tuple((u, pk) for pk, u in cells)
        return ArmValues(label, seeds, cell_ids, {m: v for m, v in vals.items() if np.isfinite(v).any()})

    def placebo_of(self, label: str) -> str | None:
        arm = self.arms[label]
        if arm.kind != "rm":
            return None
        if self.phase.placebo == "random":
            return PLACEBO
        if self.phase.placebo == "shuffled" and arm.method is not None:
            return f"{SHUFFLED}[{arm.method.label}]"
        return None

    def build(self, arms_info: dict[str, dict[str, Any]], notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        from perbench.runner.scoring import QUALITY_METRICS
        from perbench.training.evaluation import compare, summarise

        quality = self.quality()
        seen = {u: rec.seen for u, rec in self.s.bench.users.items()}
        metrics = [*QUALITY_METRICS, *EXTRA, "rm_win", "rm_gain"]
        evaluation: dict[str, dict[str, Any]] = {}
        down: dict[str, Any] = {}
        modes = MODES if self.phase.eval_samples > 0 else ("greedy",)
        for mode in modes:
            values = {label: self.values(label, mode, quality) for label in self.texts}
            table: dict[str, Any] = {}
            for label, v in values.items():
                entry = summarise(v, seen, metrics=metrics, n_boot=self.n_boot, seed=self.seed)
                vs: dict[str, Any] = {}
                refs = {"base": BASE if label != BASE else None, "placebo": self.placebo_of(label)}
                if self.arms[label].kind == "rm" and self.phase.kl_matched and self.arms[label].method is not None:
                    refs["kl_matched"] = f"{RANDOM}[{self.arms[label].method.label}]"  # type: ignore[union-attr]
                for role, ref in refs.items():
                    if ref is not None and ref in values:
                        vs[role] = {"against": ref, **compare(v, values[ref], n_boot=self.n_boot, seed=self.seed)}
                table[label] = {"seeds": len(v.seeds), "cells": len(v.cells), **entry, "vs": vs}
                if self.arms[label].kind in ("rm", "placebo"):
                    down[mode_label(label, mode)] = self.downstream_entry(label, mode, v, entry)
                self.add_cells(label, mode, v)
            evaluation[mode] = table
        self.add_samples(quality)
        ctx = self.t.context
        spec = self.phase.spec
        info = {
            "design": {
                "algorithm": spec.algorithm,
                "group": spec.group,
                "seeds": list(self.phase.training_seeds),
                "placebo": self.phase.placebo,
                "kl_matched": self.phase.kl_matched,
                "evaluation": {"greedy": True, "samples": self.phase.eval_samples, "temperature": spec.temperature},
                "kl": {
                    "samples_per_cell": self.phase.kl_samples,
                    "estimator": "Σ_t KL(π(·|x,y<t) ‖ π_base(·|x,y<t)) along y ~ π, nats per sequence",
                },
                "user_context": None if ctx is None else ctx.record,
                "ci": (
                    "cells resampled as every downstream CI (users × prompts, or its fallback), and each arm's "
                    "training seeds resampled on top; comparisons are paired on the cells both arms cover"
                ),
            },
            "arms": arms_info,
            "evaluation": evaluation,
            "notes": notes,
        }
        return down, info

    def downstream_entry(self, label: str, mode: str, v: ArmValues, entry: dict[str, Any]) -> dict[str, Any]:
        """The arm as a downstream row (the decoders' format), with its paired gain over zero-shot (greedy)."""
        from perbench.training.evaluation import ArmValues, compare

        arm = self.arms[label]
        out: dict[str, Any] = {
            "n": len(v.cells),
            **copy.deepcopy(entry),  # its own dicts: a later pass over the downstream rows leaves ``rl`` as it is
            "users": len({u for u, _ in v.cells}),
            "prompts": len({p for _, p in v.cells}),
            "guide": arm.method.label if arm.kind == "rm" and arm.method is not None else None,
            "seeds": len(v.seeds),
        }
        if self.reference is not None and mode == "greedy":
            ref_label, rows = self.reference
            have = [(u, pk) for u, pk in v.cells if (pk, u) in rows]
            ref = ArmValues(
                ref_label,
                (0,),
                tuple(have),
                {m: np.array([[float(rows[(pk, u)].get(m, np.nan)) for u, pk in have]]) for m in v.values},
            )
            out["vs"] = {ref_label: compare(v, ref, n_boot=self.n_boot, seed=self.seed)}
        return out

    def add_cells(self, label: str, mode: str, v: ArmValues) -> None:
        """An RM arm's cells for the selection analysis: per training seed and (user, prompt), the mean over
        samples of each quality metric, of the length in words and of the RM's win rate over the base policy,
        tagged with the seed (``rl_seed``), so the analysis resamples the seeds as the RL table does."""
        from perbench.runner.scoring import DESCRIPTIVE_METRICS, QUALITY_METRICS

        arm = self.arms[label]
        if arm.kind != "rm" or arm.method is None:
            return
        family = "rl" if mode == "greedy" else "rl_sampled"
        for m in (*QUALITY_METRICS, *DESCRIPTIVE_METRICS, "rm_win"):
            if m in v.values:
                every = np.isfinite(v.values[m]).all(0)  # the cells every seed has (the RL table's cells)
                for s, per_cell in zip(v.seeds, v.values[m], strict=True):
                    for (u, pk), value, ok in zip(v.cells, per_cell, every, strict=True):
                        if ok:
                            self.s.cells.add(arm.method.label, f"{family}:{m}", u, pk, float(value), rl_seed=s)

    def add_samples(self, quality: dict[tuple[str, str, str], dict[str, float]]) -> None:
        """One samples.jsonl row per generation of every arm (training seed and sample index included)."""
        from perbench.metrics.rubric import aspect_report

        bench, ctx = self.s.bench, self.t.context
        for label, modes in self.texts.items():
            base = self.arms[label].kind == "base"
            for mode, per_seed in modes.items():
                for s, per in per_seed.items():
                    for (pk, u), ts in per.items():
                        user = bench.users[u]
                        for j, t in enumerate(ts):
                            row: dict[str, Any] = {
                                "kind": "generation",
                                "decoder": mode_label(label, mode),
                                "user_id": u,
                                "seen": user.seen,
                                "prompt_id": pk,
                                "prompt": prompt_text(self.prompts[pk]),
                                "text": t,
                                **quality[(pk, u, t)],
                                "rl_seed": None if base else s,
                                "sample": j if mode == "sampled" else None,
                            }
                            if ctx is not None:  # what the policy saw: the user's context, then the request
                                row["policy_prompt"] = prompt_text(ctx.view(self.prompts[pk], u))
                            if user.rubric:
                                row["rubric_aspects"] = aspect_report(t, user)
                                row["user_rubric"] = "; ".join(f"{ap.aspect}: {ap.pole}" for ap in user.rubric)
                            self.s.samples.append(row)
