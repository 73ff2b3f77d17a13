"""Upstream: each reward model's accuracy on held-out pairs (seen, unseen, all, personalization-only, consensus,
and the test pairs of every ``upstream_benchmarks`` entry), its few-shot curve on unseen users, and its policy
accuracy under the policy it would steer.

The pair sets besides the benchmark's own test pairs are the predictors of benchmark validity (which upstream
benchmark's ranking predicts the downstream one): ``rm_acc_consensus`` on the benchmark's consensus pairs (every
user prefers the same response; ``Benchmark.pair_sets``), and ``rm_acc_on_NAME`` on another benchmark's test pairs,
whose users are strangers to every method: their ids are prefixed ``NAME/``, so no method can mistake one for a
user it was fit on or adapted to, and each method scores them with its unknown-user reward (docs/methods.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from perbench.data.records import CONSENSUS, Benchmark, PreferencePair, prompt_key
from perbench.runner.methods import MethodHandle, pair_ids
from perbench.runner.state import RunState, has_prefix_reward, outcomes


def stranger_pairs(name: str, bench: Benchmark) -> list[PreferencePair]:
    """``bench``'s test pairs with user and pair ids prefixed ``NAME/``: users no method of the run has seen."""
    return [replace(p, user_id=f"{name}/{p.user_id}", pair_id=f"{name}/{p.pair_id}") for p in bench.test_pairs()]


class Upstream:
    def __init__(self, state: RunState) -> None:
        self.s = state
        self._strangers: dict[str, list[PreferencePair]] = {}

    def strangers(self, name: str) -> list[PreferencePair]:
        if name not in self._strangers:
            self._strangers[name] = stranger_pairs(name, self.s.extras[name])
        return self._strangers[name]

    def extra_sets(self, h: MethodHandle) -> dict[str, list[PreferencePair]]:
        """The pair sets scored besides the test pairs, by metric: consensus (without the users ``h`` cannot
        score) and each extra benchmark's stranger pairs."""
        na = self.s.not_applicable(h)
        out = {}
        consensus = [p for p in self.s.bench.pair_sets.get(CONSENSUS, []) if p.user_id not in na]
        if consensus:
            out["rm_acc_consensus"] = consensus
        for name in self.s.extras:
            out[f"rm_acc_on_{name}"] = self.strangers(name)
        return out

    def prefetch_features(self, handles: list[MethodHandle]) -> None:
        """Every frozen-feature method reads φ of the train responses (fit) and per-token features of the test
        responses (policy accuracy; that pass also yields φ); the policy's log-probs of the test responses
        come with them. One pass each, before any method runs, so no text goes through a backbone twice."""
        if not any(h.is_feature_rm for h in handles):
            return
        groups = [(g, self.s.bench.test_pairs(seen=g == "seen")) for g in ("seen", "unseen")]
        keys = [self._pa_key(h, g, pairs) for h in handles if h.is_feature_rm for g, pairs in groups if pairs]
        fits = [h.fit_key for h in handles if h.is_feature_rm and not self.s.unfittable(h)]
        from perbench.rewards.base import pair_feature_arrays

        if self.s.units.missing(fits, phase="fit"):
            pair_feature_arrays(self.s.extractor, self.s.bench.train_pairs(), desc="train features")
        extra = [
            p
            for h in handles
            if h.is_feature_rm
            for metric, ps in self.extra_sets(h).items()
            if self.s.units.missing([self._score_key(h, ps, self.s.cfg.shots, metric)], phase="scores")
            for p in ps
        ]
        if extra:  # φ only: these pairs have no policy accuracy
            pair_feature_arrays(self.s.extractor, extra, desc="consensus / other benchmarks' features")
        if not self.s.units.missing(keys, phase="policy_accuracy"):
            return
        texts = {
            (prompt_key(p.prompt), y): (p.prompt, y) for p in self.s.bench.test_pairs() for y in (p.chosen, p.rejected)
        }
        self.s.extractor.tokens(list(texts.values()), desc="test features")
        if self.s.policy_extractor is not self.s.extractor:
            self.s.policy_extractor.tokens(list(texts.values()), desc="policy log-probs")

    def _scores(
        self, h: MethodHandle, pairs: Sequence[PreferencePair], shots: int, tag: str, *, active: bool = False
    ) -> dict[str, np.ndarray]:
        from perbench.rewards.base import PairwiseJudge

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(shots, active=active)
            if isinstance(rm, PairwiseJudge):
                prefs = rm.prefer(pairs)
                return {"chosen": prefs, "rejected": np.full(len(prefs), 0.5)}
            s_w, s_l = rm.score_pairs(pairs)
            return {"chosen": s_w, "rejected": s_l}

        return self.s.units.arrays("scores", self._score_key(h, pairs, shots, tag, active=active), compute)

    def _score_key(
        self, h: MethodHandle, pairs: Sequence[PreferencePair], shots: int, tag: str, *, active: bool = False
    ) -> str:
        extra = ["active"] if active else []
        return h.key(shots, "scores", tag, pair_ids(pairs), *extra)

    def _accuracy(
        self, scores: dict[str, np.ndarray], pairs: Sequence[PreferencePair], h: MethodHandle, tie: Any = None
    ) -> dict[str, Any]:
        from perbench.metrics.rm_accuracy import preference_accuracy, rm_accuracy
        from perbench.rewards.base import PairwiseJudge

        users = [p.user_id for p in pairs]
        prompts = [prompt_key(p.prompt) for p in pairs]
        tie = tie or self.s.cfg.tie_policy
        boot: dict[str, Any] = {"n_boot": self.s.cfg.bootstrap, "seed": self.s.cfg.seed, "prompts": prompts}
        if issubclass(h.cls, PairwiseJudge):
            return preference_accuracy(scores["chosen"], users, tie=tie, **boot)
        return rm_accuracy(scores["chosen"], scores["rejected"], users, tie=tie, **boot)

    def run(self, h: MethodHandle) -> dict[str, Any]:
        from perbench.rewards.base import PairwiseJudge

        bench, cfg = self.s.bench, self.s.cfg
        out: dict[str, Any] = {"baseline": h.baseline, "user_agnostic": h.user_agnostic}
        if self.s.unfittable(h):
            out["not_applicable"] = "no train pairs to fit on (the benchmark has none)"
            return out
        acc: dict[str, Any] = {}
        na_users = self.s.not_applicable(h)
        groups = self.s.test_groups(na_users)
        na_pairs = {g: [p for p in bench.test_pairs(seen=g == "seen") if p.user_id in na_users] for g in groups}
        if na_users:
            out["not_applicable"] = {
                "reason": "no train pairs to adapt from",
                "users": len(na_users),
                "pairs": sum(len(v) for v in na_pairs.values()),
            }
        all_scores: dict[str, dict[str, np.ndarray]] = {}
        judge = issubclass(h.cls, PairwiseJudge)
        for group, pairs in groups.items():
            if not pairs:
                if na_pairs[group]:
                    acc[group] = {"na": "not applicable: no user in this group has train pairs to adapt from"}
                continue
            scores = self._scores(h, pairs, cfg.shots, group)
            all_scores[group] = scores
            acc[group] = self._accuracy(scores, pairs, h)
            if group == "unseen" and not h.user_agnostic:
                acc[group]["effective_shots"] = self._effective_shots(h, sorted({p.user_id for p in pairs}), cfg.shots)
            oc = outcomes(scores, judge, cfg.tie_policy)
            self.s.cells.add_pairs(h.label, f"rm_acc_{group}", pairs, oc)
            for p, sw, sl in zip(pairs, scores["chosen"], scores["rejected"], strict=True):
                self.s.samples.append(
                    {
                        "kind": "pair_score",
                        "method": h.label,
                        "pair_id": p.pair_id,
                        "user_id": p.user_id,
                        "group": group,
                        "score_chosen": float(sw),
                        "score_rejected": float(sl),
                    }
                )
        if all_scores:
            pairs = [p for g in all_scores for p in groups[g]]
            merged = {k: np.concatenate([all_scores[g][k] for g in all_scores]) for k in ("chosen", "rejected")}
            acc["all"] = self._accuracy(merged, pairs, h)
            self.s.cells.add_pairs(h.label, "rm_acc_all", pairs, outcomes(merged, judge, cfg.tie_policy))
            sub = self._pers_only(pairs)
            if sub is not None:
                index = {p.pair_id: i for i, p in enumerate(pairs)}
                pick = [index[p.pair_id] for p in sub]
                # ties count ½ here whatever tie_policy says: mirrored pairs then give any user-agnostic scorer
                # exactly 0.5 (a strict rule would count each tied mirror pair as two losses)
                picked = {k: v[pick] for k, v in merged.items()}
                acc["pers_only"] = self._accuracy(picked, sub, h, tie="half")
                self.s.cells.add_pairs(h.label, "rm_acc_pers_only", sub, outcomes(picked, judge, "half"))
        for metric, pairs in self.extra_sets(h).items():
            scores = self._scores(h, pairs, cfg.shots, metric)
            group = metric.removeprefix("rm_acc_")
            acc[group] = self._accuracy(scores, pairs, h)
            if metric != "rm_acc_consensus":
                acc[group]["users"] = (
                    "strangers to every method: each scores them with its unknown-user reward (docs/methods.md)"
                )
            self.s.cells.add_pairs(h.label, metric, pairs, outcomes(scores, judge, cfg.tie_policy))
        out["rm_accuracy"] = acc
        if h.label == cfg.reference_method:
            self._train_accuracy(h, groups)
        unseen = groups["unseen"]
        if unseen and not h.user_agnostic:
            out["fewshot_curve"] = self._fewshot_curve(h, unseen, out)
        if has_prefix_reward(h):
            out["policy_accuracy"] = {g: self._policy_accuracy(h, pairs, g) for g, pairs in groups.items() if pairs}
        else:
            out["policy_accuracy"] = {"not_applicable": str(h.cls.no_prefix_reward)}
        return out

    def _train_accuracy(self, h: MethodHandle, groups: dict[str, list[PreferencePair]]) -> None:
        """The reference method's accuracy on each evaluated user's own train pairs (seen users) or few-shot
        pairs (unseen users), as ``rm_acc_train`` cells: the analysis selects minority users on these pairs, so
        it never selects and evaluates on the same test pairs."""
        from perbench.metrics.analysis import TRAIN_ACC
        from perbench.rewards.base import PairwiseJudge

        bench, cfg = self.s.bench, self.s.cfg
        seen = {p.user_id for p in groups["seen"]}
        pairs = [p for p in bench.train_pairs() if p.user_id in seen]
        pairs += [p for u in sorted({p.user_id for p in groups["unseen"]}) for p in bench.fewshot(u, cfg.shots)]
        if not pairs:
            return
        scores = self._scores(h, pairs, cfg.shots, "train")
        judge = issubclass(h.cls, PairwiseJudge)
        self.s.cells.add_pairs(h.label, TRAIN_ACC, pairs, outcomes(scores, judge, cfg.tie_policy))

    def _pers_only(self, pairs: list[PreferencePair]) -> list[PreferencePair] | None:
        """The test pairs on the benchmark's personalization-only split (None when it has none)."""
        ids = self.s.bench.subsets.get("personalization_only")
        if not ids:
            return None
        return [p for p in pairs if p.pair_id in ids]

    def _fewshot_curve(self, h: MethodHandle, unseen: list[PreferencePair], out: dict[str, Any]) -> dict[str, Any]:
        """Accuracy on unseen users after n shots, with the effective shot count (a user with fewer train pairs
        than n adapts from all they have). Methods that ignore shots are computed once and marked flat
        (``out["fewshot_flat"]``); methods that select their own shots also get ``out["fewshot_curve_active"]``."""
        from perbench.rewards.base import PairwiseJudge

        judge = issubclass(h.cls, PairwiseJudge)
        users = sorted({p.user_id for p in unseen})

        def points(active: bool) -> dict[str, Any]:
            metric = "fewshot_active_acc" if active else "fewshot_acc"
            curve: dict[str, Any] = {}
            for n in self.s.cfg.shot_curve:
                s = self._scores(h, unseen, n, "unseen", active=active)
                a = self._accuracy(s, unseen, h)
                curve[str(n)] = {"accuracy": a["accuracy"], "ci": a["ci"], "macro": a["macro"]}
                curve[str(n)]["effective_shots"] = self._effective_shots(h, users, n)
                self.s.cells.add_pairs(h.label, f"{metric}@{n}", unseen, outcomes(s, judge, self.s.cfg.tie_policy))
            return curve

        curve = points(active=False)
        if h.selects_shots and h.uses_shots:
            out["fewshot_curve_active"] = points(active=True)
        if not h.uses_shots:
            out["fewshot_flat"] = "this method ignores the shots: one value for every shot count"
        return curve

    def _effective_shots(self, h: MethodHandle, users: list[str], n: int) -> dict[str, Any]:
        """How many shots each unseen user really adapted from at the nominal count ``n`` (a user with fewer
        train pairs adapts from all they have; a method that ignores shots uses none)."""
        eff = {u: len(self.s.bench.fewshot(u, n)) if h.uses_shots else 0 for u in users}
        vals = list(eff.values())
        return {
            "nominal": n,
            "mean": float(np.mean(vals)),
            "min": min(vals),
            "max": max(vals),
            "users_below_nominal": sum(v < n for v in vals) if h.uses_shots else 0,
            "by_user": eff,
        }

    def _pa_key(self, h: MethodHandle, group: str, pairs: Sequence[PreferencePair]) -> str:
        w, k = self.s.pa_params()
        rgd = [k] if self.s.cfg.pa_rgd else []
        return h.key(self.s.cfg.shots, "pa3", w, *rgd, group, pair_ids(pairs), self.s.policy.fingerprint)

    def _policy_accuracy(self, h: MethodHandle, pairs: Sequence[PreferencePair], group: str) -> dict[str, Any]:
        """Policy accuracy under the reward-guided policy that ARGS would deploy with this RM (its w, k): the
        headline variant (length-normalised) cannot be moved by adding a constant to the reward; the policy
        alone (w = 0) is reported beside it; 'sum' is labelled as not shift-invariant; the top-k RGD-induced
        policy's variants come with ``pa_rgd``."""
        from perbench.metrics.policy_accuracy import (
            HEADLINE,
            policy_accuracy_from_scores,
            policy_accuracy_problem,
            policy_accuracy_scores,
            teacher_forced_scores,
        )
        from perbench.metrics.rm_accuracy import pair_outcomes
        from perbench.rewards.base import ScoreItem

        w, k = self.s.pa_params()
        key = self._pa_key(h, group, pairs)
        if self.s.units.missing([key], phase="policy_accuracy"):
            problem = policy_accuracy_problem(self.s.policy, h.adapted(self.s.cfg.shots))
            if problem is not None:
                return {"not_applicable": problem}

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(self.s.cfg.shots)
            res: dict[str, np.ndarray] = {}
            for side in ("chosen", "rejected"):
                items = [ScoreItem(p.user_id, p.prompt, getattr(p, side)) for p in pairs]
                if self.s.cfg.pa_rgd:
                    got = policy_accuracy_scores(self.s.policy, rm, items, w=w, k=k, max_length=self.s.cfg.max_length)
                else:  # one teacher-forced pass; the policy's log-probs come from the feature cache
                    texts = [(i.prompt, i.response) for i in items]
                    lps = [t.logprobs for t in self.s.policy_extractor.tokens(texts, desc="policy log-probs")]
                    got = teacher_forced_scores(lps, rm.token_rewards(items), w)
                res.update({f"{side}_{n}": v for n, v in got.items()})
            return res

        s = self.s.units.arrays("policy_accuracy", key, compute)
        side = {
            sd: {n[len(sd) + 1 :]: v for n, v in s.items() if n.startswith(sd + "_")} for sd in ("chosen", "rejected")
        }
        out = policy_accuracy_from_scores(
            side["chosen"],
            side["rejected"],
            [p.user_id for p in pairs],
            w,
            k,
            tie=self.s.cfg.tie_policy,
            n_boot=self.s.cfg.bootstrap,
            seed=self.s.cfg.seed,
            prompts=[prompt_key(p.prompt) for p in pairs],
        )
        tie: Any = self.s.cfg.tie_policy
        variants = [(HEADLINE, "pa"), ("sum", "pa_sum")] + ([("rgd_mean", "pa_rgd")] if self.s.cfg.pa_rgd else [])
        for variant, metric in variants:
            oc = pair_outcomes(side["chosen"][variant], side["rejected"][variant], tie)
            self.s.cells.add_pairs(h.label, metric, pairs, oc)
        return out

    def policy_accuracy_under(self, spec: str, handles: list[MethodHandle]) -> None:
        """Policy accuracy of every RM under another policy of ``policies`` (``self.s.policy``), stored in
        ``self.s.pa_by_policy[method][policy][group]``."""
        saved = self.s.policy_extractor
        self.s.policy_extractor = self.s.features_of(self.s.policy)
        for h in handles:
            if self.s.unfittable(h) or not has_prefix_reward(h):
                continue
            for g, pairs in self.s.test_groups(self.s.not_applicable(h)).items():
                if pairs:
                    got = self._policy_accuracy(h, pairs, g)
                    self.s.pa_by_policy.setdefault(h.label, {}).setdefault(spec, {})[g] = got
        self.s.policy_extractor = saved
