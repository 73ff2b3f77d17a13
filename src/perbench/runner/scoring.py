"""The quality of generated text against each user's ground truth (rubric, reference, judge), the RM win
rate over zero-shot, and per-decoder summaries with two-way CIs and paired deltas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.data.records import Prompt, prompt_key, prompt_text
from perbench.runner.methods import MethodHandle
from perbench.runner.state import RunState
from perbench.runner.units import unit_key
from perbench.specs.metrics import DESCRIPTIVE_QUALITIES

QUALITY_METRICS = ("rubric_satisfaction", "personal_reward", "rouge1", "rougeL", "bertscore_f1", "judge_score")
#: what the text is rather than how good: ``words``, the length in whitespace words (cells the analysis never ranks,
#: read by the verdict's trade-offs against zero-shot decoding)
DESCRIPTIVE_METRICS = tuple(sorted(DESCRIPTIVE_QUALITIES))


class Scoring:
    def __init__(self, state: RunState) -> None:
        self.s = state
        #: per label, one row per evaluated (user, prompt): its quality (pooled Best-of-N: expected values)
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def quality(
        self, texts: list[str], targets: list[tuple[Prompt, str]], metrics: set[str] | None = None
    ) -> list[dict[str, float]]:
        """Ground-truth quality of ``texts[i]`` for target i: exact rubric satisfaction where the rubric is
        checkable, ROUGE-1/L and BERTScore against the user's reference where there is one, the judge's rubric
        score where a judge is configured and the user has answer-key aspects. ``metrics`` limits what is
        computed (default: everything). Each text is checked against the rubric aspects once, and ROUGE and
        BERTScore run once per distinct (text, reference), so a sample pool shared by many users costs its
        distinct texts, not its cells."""
        from perbench.data.rubrics.aspects import annotate
        from perbench.metrics.rubric import rubric_satisfaction
        from perbench.metrics.text import rouge

        def wanted(*names: str) -> bool:
            return metrics is None or any(n in metrics for n in names)

        bench = self.s.bench
        refs = self._refs()
        out: list[dict[str, float]] = [{} for _ in texts]
        annotations: dict[str, dict[str, str | None]] = {}
        with_ref: dict[tuple[str, str], list[int]] = {}
        for i, (text, (prompt, user)) in enumerate(zip(texts, targets, strict=True)):
            u = bench.users[user]
            if u.rubric and wanted("rubric_satisfaction", "rubric_all"):
                if text not in annotations:
                    annotations[text] = annotate(text)
                rs = rubric_satisfaction(text, u, annotations[text])
                out[i]["rubric_satisfaction"], out[i]["rubric_all"] = rs["satisfaction"], rs["all"]
            ref = refs.get((prompt_key(prompt), user))
            if ref is not None:
                with_ref.setdefault((text, ref), []).append(i)
        distinct = list(with_ref)
        if distinct and wanted("rouge1", "rougeL"):
            rg = rouge([t for t, _ in distinct], [r for _, r in distinct])
            for k, pair in enumerate(distinct):
                for i in with_ref[pair]:
                    out[i]["rouge1"], out[i]["rougeL"] = float(rg["rouge1"][k]), float(rg["rougeL"][k])
        if distinct and self.s.cfg.bertscore and wanted("bertscore_f1"):
            from perbench.metrics.text import bertscore

            f1 = bertscore([t for t, _ in distinct], [r for _, r in distinct])
            for k, pair in enumerate(distinct):
                for i in with_ref[pair]:
                    out[i]["bertscore_f1"] = float(f1[k])
        truth = self._simulated()
        if truth is not None and wanted("personal_reward"):
            for i, v in enumerate(truth.score(texts, targets, bench.users)):
                if v is not None:
                    out[i]["personal_reward"] = v
        if self.s.judge is not None and wanted("judge_score"):
            for row, judged in zip(out, self._judge(texts, targets), strict=True):
                row.update(judged)
        return out

    def _simulated(self) -> Any:
        """PersonalLLM's simulated users' exact reward (:mod:`perbench.metrics.simulated`), or None."""
        if not hasattr(self, "_truth"):
            from perbench.metrics.simulated import SimulatedUsers

            self._truth = SimulatedUsers.of(self.s.bench, self.s.cfg.device)
        return self._truth

    def _refs(self) -> dict[tuple[str, str], str]:
        if not hasattr(self, "_ref_table"):
            self._ref_table = {(prompt_key(r.prompt), r.user_id): r.text for r in self.s.bench.references}
        return self._ref_table

    def _judge(self, texts: list[str], targets: list[tuple[Prompt, str]]) -> list[dict[str, float]]:
        """Judge rubric scores (0..1) and parse-failure counts, one cached unit per (user, prompt, text)."""
        from perbench.metrics.judge import rubric_aspects

        assert self.s.judge is not None
        keys: list[str | None] = []
        todo: dict[str, tuple[str, Prompt, str]] = {}
        for text, (prompt, user) in zip(texts, targets, strict=True):
            if not rubric_aspects(self.s.bench.users[user]):
                keys.append(None)
                continue
            k = unit_key("judge", self.s.judge_lm.fingerprint, user, prompt_key(prompt), text)
            keys.append(k)
            todo.setdefault(k, (text, prompt, user))
        missing = self.s.units.missing(list(todo), phase="judge")
        self.s.units.reused["judge"] += len(todo) - len(missing)
        if missing:
            users = [self.s.bench.users[todo[k][2]] for k in missing]
            questions = [
                str(u.meta.get("question") or prompt_text(todo[k][1])) for u, k in zip(users, missing, strict=True)
            ]
            judged = self.s.judge.score([todo[k][0] for k in missing], users, questions)
            for k, j in zip(missing, judged, strict=True):
                self.s.units.put_json(
                    "judge",
                    k,
                    {
                        "judge_score": j.score,
                        "judge_failures": j.n_failed,
                        "judge_aspects": len(j.scores),
                        "raw": j.raw,
                    },
                )
        out: list[dict[str, float]] = []
        for key in keys:
            if key is None:
                out.append({})
                continue
            rec = self.s.units.store.get_json(key)
            assert rec is not None, "a judge unit vanished from the store"
            out.append(
                {
                    "judge_score": float(rec["judge_score"]),
                    "judge_failures": float(rec["judge_failures"]),
                    "judge_aspects": float(rec["judge_aspects"]),
                }
            )
        return out

    def generation_quality(
        self, label: str, texts: list[str], targets: list[tuple[Prompt, str]]
    ) -> list[dict[str, float]]:
        """:meth:`quality` of system ``label``'s generations as one content-keyed unit (its judge calls and
        BERTScore are forward passes: the plan unit that made the generations computes it, the assembly reads it;
        one per system, so units that run in parallel never compute the same one)."""
        cfg = self.s.cfg
        key = unit_key(
            "gen_quality",
            label,
            self.s.bench_fingerprint(),
            cfg.bertscore,
            self.s.judge_lm.fingerprint if self.s.judge is not None else None,
            [[prompt_key(p), u, t] for t, (p, u) in zip(texts, targets, strict=True)],
        )
        rows: list[dict[str, float]] = self.s.units.json("quality", key, lambda: self.quality(texts, targets))
        return rows

    def prepare(
        self,
        label: str,
        texts: dict[tuple[str, str], str],
        asked: list[tuple[Prompt, str]],
        guide: MethodHandle | None,
        zero: tuple[str, dict[tuple[str, str], str]] | None,
    ) -> None:
        """Compute what :meth:`score_outputs` reads for ``label`` (its generations' quality and, for a guided
        system with a zero-shot decoder in the run, ``zero`` = (its label, its outputs), the win rate): the work of
        the plan unit that made the generations."""
        mine = [(p, u) for p, u in asked if (prompt_key(p), u) in texts]
        self.generation_quality(label, [texts[(prompt_key(p), u)] for p, u in mine], mine)
        if guide is not None and zero is not None:
            self._win_scores(label, zero[0], guide, texts, zero[1], mine)

    def score_outputs(
        self,
        outputs: dict[str, dict[tuple[str, str], str]],
        guides: dict[str, MethodHandle],
        targets: Mapping[str, list[tuple[Prompt, str]]],
    ) -> dict[str, Any]:
        """Quality, win rate, cells and a summary of each label's generations; ``targets[label]``: the cells it
        was asked for (fewer outputs than targets: users its RM cannot score, reported as not applicable)."""
        zero_label = next((lab for lab in outputs if lab.startswith("zero_shot")), None)
        result: dict[str, Any] = {}
        for label, texts in outputs.items():
            mine_targets = [(p, u) for p, u in targets[label] if (prompt_key(p), u) in texts]
            rows = self._generation_rows(label, [texts[(prompt_key(p), u)] for p, u in mine_targets], mine_targets)
            if label in guides and zero_label is not None:
                zero = outputs[zero_label]
                self._win_rate(label, zero_label, guides[label], outputs[label], zero, mine_targets, rows)
            self.s.samples.extend(rows)
            self.add_cells(label, rows)
            result[label] = self.summary(rows, guides[label].label if label in guides else None)
            if label in guides and len(rows) < len(targets[label]):
                result[label]["not_applicable"] = {
                    "targets": len(targets[label]) - len(rows),
                    "reason": "users without train pairs to adapt from",
                }
        return result

    def _generation_rows(self, label: str, gen: list[str], targets: list[tuple[Prompt, str]]) -> list[dict[str, Any]]:
        from perbench.metrics.rubric import aspect_report

        bench = self.s.bench
        rows: list[dict[str, Any]] = []
        for text, (prompt, user), q in zip(gen, targets, self.generation_quality(label, gen, targets), strict=True):
            u = bench.users[user]
            row = {
                "kind": "generation",
                "decoder": label,
                "user_id": user,
                "seen": u.seen,
                "prompt_id": prompt_key(prompt),
                "prompt": prompt_text(prompt),
                "text": text,
                "words": len(text.split()),
                **q,
            }
            if u.rubric:
                row["rubric_aspects"] = aspect_report(text, u)
                row["user_rubric"] = "; ".join(f"{ap.aspect}: {ap.pole}" for ap in u.rubric)
            rows.append(row)
        self.rows[label] = rows
        return rows

    def _win_rate(
        self,
        label: str,
        zero_label: str,
        h: MethodHandle,
        mine: dict[tuple[str, str], str],
        zero: dict[tuple[str, str], str],
        targets: list[tuple[Prompt, str]],
        rows: list[dict[str, Any]],
    ) -> None:
        """The guiding RM's own verdict on its output vs the zero-shot output of the same (prompt, user)."""
        from perbench.metrics.win_rate import win_outcomes

        s = self._win_scores(label, zero_label, h, mine, zero, targets)
        gains = s["guided"] - s["zero_shot"]
        for row, o, g in zip(rows, win_outcomes(s["guided"], s["zero_shot"]), gains, strict=True):
            if not np.isnan(o):
                row["rm_win"] = float(o)
                # the guiding RM's own reward gain over zero-shot: in that RM's units, so it is reported per
                # system but never compared across methods (no cell)
                row["rm_gain"] = float(g)

    def _win_scores(
        self,
        label: str,
        zero_label: str,
        h: MethodHandle,
        mine: dict[tuple[str, str], str],
        zero: dict[tuple[str, str], str],
        targets: list[tuple[Prompt, str]],
    ) -> dict[str, np.ndarray]:
        """The guiding RM's rewards of its outputs and of the zero-shot outputs on ``targets`` (one unit)."""
        from perbench.rewards.base import ScoreItem, scores_in_order

        def compute() -> dict[str, np.ndarray]:
            # its own outputs and the zero-shot ones in one list, in a secret order: nothing says which is which
            rm = h.adapted(h.shots)
            items = [ScoreItem(u, p, mine[(prompt_key(p), u)]) for p, u in targets]
            items += [ScoreItem(u, p, zero[(prompt_key(p), u)]) for p, u in targets]
            got = scores_in_order(rm, items, self.s.order_rng)
            return {"guided": got[: len(targets)], "zero_shot": got[len(targets) :]}

        key = h.key(
            h.shots,
            "winrate",
            label,
            zero_label,
            [unit_key(prompt_key(p), u, mine[(prompt_key(p), u)], zero[(prompt_key(p), u)]) for p, u in targets],
        )
        return self.s.units.arrays("win_rate", key, compute)

    def add_cells(self, label: str, rows: list[dict[str, Any]], extra: Sequence[str] = ()) -> None:
        """One cell per row and quality metric (plus ``words``, ``rm_win`` and ``extra``), named ``FAMILY:METRIC``."""
        family, method = self.s.families[label]
        for r in rows:
            for metric in (*QUALITY_METRICS, *DESCRIPTIVE_METRICS, "rm_win", *extra):
                if metric in r:
                    self.s.cells.add(method, f"{family}:{metric}", r["user_id"], r["prompt_id"], r[metric])

    def summary(self, rows: list[dict[str, Any]], guide: str | None, *, expected: bool = False) -> dict[str, Any]:
        """Mean, two-way CI and seen / unseen means of every metric of ``rows``; ``expected``: the rows hold
        expectations (pooled Best-of-N), so ``rm_win`` has no win / tie / loss counts."""
        summary: dict[str, Any] = {"n": len(rows)}
        columns = {}
        for metric in (*QUALITY_METRICS, "rubric_all", "rm_win", "rm_gain", "words"):
            have = [r for r in rows if metric in r]
            if have:
                columns[metric] = (have, np.array([r[metric] for r in have], dtype=np.float64))
        cis = self._cis(columns)
        for metric, (have, vals) in columns.items():
            entry: dict[str, Any] = {"mean": float(vals.mean()), **cis[metric], "n": len(vals)}
            for group, flag in (("seen", True), ("unseen", False)):
                g = vals[[r["seen"] == flag for r in have]]
                entry[group] = float(g.mean()) if len(g) else None
            summary[metric] = entry
        if "rm_win" in summary and not expected:
            w = np.array([r["rm_win"] for r in rows if "rm_win" in r])
            summary["rm_win"].update(
                wins=int((w == 1.0).sum()),
                ties=int((w == 0.5).sum()),
                losses=int((w == 0.0).sum()),
                invalid=len(rows) - len(w),
            )
        if "judge_score" in summary:
            summary["judge_score"]["parse_failures"] = int(sum(r.get("judge_failures", 0) for r in rows))
            summary["judge_score"]["aspects"] = int(sum(r.get("judge_aspects", 0) for r in rows))
        summary["users"] = len({r["user_id"] for r in rows})
        summary["prompts"] = len({r["prompt_id"] for r in rows})
        summary["guide"] = guide
        return summary

    def add_vs(self, result: dict[str, Any]) -> None:
        """Each label's paired differences to zero-shot and ICL-RAG on the cells both have (``result[label]["vs"]``)."""
        zero_label = next((lab for lab in self.rows if lab.startswith("zero_shot")), None)
        icl_label = next((lab for lab in self.rows if lab.startswith("icl_rag")), None)
        for label, rows in self.rows.items():
            vs = {}
            for ref in (zero_label, icl_label):
                if ref is None or ref == label:
                    continue
                vs[ref] = self._paired_deltas(rows, self.rows[ref])
            if vs and label in result:
                result[label]["vs"] = vs

    def _ci(self, rows: list[dict[str, Any]], values: np.ndarray) -> dict[str, Any]:
        """``ci``: the two-way (users × prompts) bootstrap CI of the mean of ``values`` (one per row), or its
        fallback with fewer than 5 users, which ``ci_note`` then names (None for the two-way bootstrap)."""
        return self._cis({"": (rows, values)})[""]

    def _cis(self, columns: Mapping[str, tuple[list[dict[str, Any]], np.ndarray]]) -> dict[str, dict[str, Any]]:
        """:meth:`_ci` of several columns (name -> (rows, values)). Columns over the same (user, prompt) rows share
        one bootstrap pass (the same draws a pass per column would make, so the same intervals, at the cost of
        one)."""
        from perbench.data.pairs import content_hash
        from perbench.memo import array_digest, memo_json

        cfg = self.s.cfg
        parts: list[Any] = [cfg.bootstrap, cfg.seed]
        for name, (rows, values) in columns.items():  # memoized by content: a rerun reads the intervals
            cells = content_hash(*(f"{r['user_id']}\x00{r['prompt_id']}" for r in rows))
            parts.append([name, cells, array_digest(np.asarray(values, np.float64))])
        return memo_json("summary_cis", parts, lambda: self._compute_cis(columns))

    def _compute_cis(self, columns: Mapping[str, tuple[list[dict[str, Any]], np.ndarray]]) -> dict[str, dict[str, Any]]:
        from perbench.stats.bootstrap import TwoWayBootstrap, percentile_ci

        cfg = self.s.cfg
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for name, (rows, _) in columns.items():
            groups.setdefault(tuple((r["user_id"], r["prompt_id"]) for r in rows), []).append(name)
        out: dict[str, dict[str, Any]] = {}
        for cells, names in groups.items():
            T, k = len(cells), len(names)
            users, prompts = [u for u, _ in cells], [p for _, p in cells]
            boot = TwoWayBootstrap(users * k, prompts * k, n_boot=max(cfg.bootstrap, 0), seed=cfg.seed)
            plan = boot.resampling(np.arange(T))
            cis: list[Any] = [None] * k
            if plan.unit is not None and cfg.bootstrap >= 2:
                values = np.concatenate([np.asarray(columns[n][1], np.float64) for n in names])
                _, reps = boot.means(values, [np.arange(i * T, (i + 1) * T) for i in range(k)])
                cis = [percentile_ci(reps[:, i]) for i in range(k)]
            for n, ci in zip(names, cis, strict=True):
                out[n] = {"ci": None if ci is None else [float(ci[0]), float(ci[1])], "ci_note": plan.note}
        return out

    def _paired_deltas(self, rows: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean per-(prompt, user) difference ``mine − ref`` of each quality metric, two-way CI."""
        by_key = {(r["prompt_id"], r["user_id"]): r for r in ref}
        shared = [(a, by_key[(a["prompt_id"], a["user_id"])]) for a in rows if (a["prompt_id"], a["user_id"]) in by_key]
        columns = {}
        for metric in QUALITY_METRICS:
            both = [(a, b) for a, b in shared if metric in a and metric in b]
            if both:
                columns[metric] = ([a for a, _ in both], np.array([a[metric] - b[metric] for a, b in both], np.float64))
        cis = self._cis(columns)
        return {
            metric: {"delta": float(vals.mean()), **cis[metric], "n": len(vals)}
            for metric, (_, vals) in columns.items()
        }
