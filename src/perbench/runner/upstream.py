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

from perbench.data.records import CONSENSUS, PARAPHRASED, Benchmark, PreferencePair, prompt_key
from perbench.runner.listwise import record_listwise
from perbench.runner.methods import MethodHandle, pair_ids
from perbench.runner.state import PAWeight, RunState, has_prefix_reward, outcomes

#: (variant, cell metric) of policy accuracy: the headline first, then the labelled variants
PA_CELLS = (
    ("tilt", "pa"),
    ("prefix_mean", "pa_prefix_mean"),
    ("prefix_sum", "pa_prefix_sum"),
    ("rgd_mean", "pa_rgd"),
)


def stranger_pairs(name: str, bench: Benchmark) -> list[PreferencePair]:
    """``bench``'s test pairs with user and pair ids prefixed ``NAME/``: users no method of the run has seen."""
    return [replace(p, user_id=f"{name}/{p.user_id}", pair_id=f"{name}/{p.pair_id}") for p in bench.test_pairs()]


class Upstream:
    def __init__(self, state: RunState) -> None:
        self.s = state
        self._strangers: dict[str, list[PreferencePair]] = {}
        #: log π(y | x) per (policy fingerprint, prompt key, response), read once from the feature cache
        self._lp_sums: dict[tuple[str, str, str], float] = {}
        self._extractors: dict[str, Any] = {}

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
        paraphrased = [p for p in self.s.bench.pair_sets.get(PARAPHRASED, []) if p.user_id not in na]
        if paraphrased:
            out["rm_acc_paraphrased"] = paraphrased
        for name in self.s.extras:
            out[f"rm_acc_on_{name}"] = self.strangers(name)
        return out

    def train_feature_pairs(self, handles: list[MethodHandle]) -> list[PreferencePair]:
        """The train pairs frozen-feature methods read: the seen users' (fit) and the unseen users' shots (adapt:
        up to the most shots any point of the run uses, or all of them when a method selects its own)."""
        bench, cfg = self.s.bench, self.s.cfg
        most = None if any(h.selects_shots for h in handles) else max([*(h.shots for h in handles), *cfg.shot_curve])
        return bench.train_pairs() + [p for u in bench.unseen_users for p in bench.fewshot(u, most)]

    def train_features(self, handles: list[MethodHandle]) -> None:
        """φ of every train response frozen-feature methods fit and adapt on, in one pass before any fits."""
        from perbench.rewards.base import pair_feature_arrays

        pair_feature_arrays(self.s.extractor, self.train_feature_pairs(handles), desc="train features")

    def test_features(self, handles: list[MethodHandle]) -> None:
        """Per-token features of the test responses (policy accuracy; that pass also yields φ) and the policy's
        log-probs of them: one pass each, so no text goes through a backbone twice. φ of the other pair sets
        (consensus pairs, other benchmarks' pairs) comes with them."""
        from perbench.rewards.base import pair_feature_arrays

        extra = [p for h in handles if h.is_feature_rm for ps in self.extra_sets(h).values() for p in ps]
        if extra:  # φ only: these pairs have no policy accuracy
            pair_feature_arrays(self.s.extractor, extra, desc="consensus / other benchmarks' features")
        texts = {
            (prompt_key(p.prompt), y): (p.prompt, y) for p in self.s.bench.test_pairs() for y in (p.chosen, p.rejected)
        }
        self.s.extractor.tokens(list(texts.values()), desc="test features")
        if self.s.policy_extractor not in (None, self.s.extractor):
            self.s.policy_extractor.tokens(list(texts.values()), desc="policy log-probs")

    def _scores(
        self, h: MethodHandle, pairs: Sequence[PreferencePair], shots: int, tag: str, *, active: bool = False
    ) -> dict[str, np.ndarray]:
        from perbench.rewards.base import PairwiseJudge, prefer_blind, score_pair_sides

        def compute() -> dict[str, np.ndarray]:
            # the method sees both sides of every pair in one list in a secret order (a judge: A/B drawn per pair);
            # the runner, not the method, assembles which score is whose
            rm = h.adapted(shots, active=active)
            if isinstance(rm, PairwiseJudge):
                prefs = prefer_blind(rm, pairs, self.s.order_rng)
                return {"chosen": prefs, "rejected": np.full(len(prefs), 0.5)}
            s_w, s_l = score_pair_sides(rm, pairs, self.s.order_rng)
            return {"chosen": s_w, "rejected": s_l}

        return self.s.units.arrays("scores", self._score_key(h, pairs, shots, tag, active=active), compute)

    def _score_key(
        self, h: MethodHandle, pairs: Sequence[PreferencePair], shots: int, tag: str, *, active: bool = False
    ) -> str:
        from perbench.rewards.base import PairwiseJudge

        extra = ["active"] if active else []
        extra += ["ab_drawn"] if issubclass(h.cls, PairwiseJudge) else []  # not the chosen-first scores of before
        return h.key(shots, "scores", tag, pair_ids(pairs), *extra)

    def _accuracy(
        self, scores: dict[str, np.ndarray], pairs: Sequence[PreferencePair], h: MethodHandle, tie: Any = None
    ) -> dict[str, Any]:
        from perbench.rewards.base import PairwiseJudge
        from perbench.runner.accuracy_memo import memo_accuracy

        users, prompts = [p.user_id for p in pairs], [prompt_key(p.prompt) for p in pairs]
        judge = issubclass(h.cls, PairwiseJudge)
        cfg = self.s.cfg
        return memo_accuracy(scores, users, prompts, tie or cfg.tie_policy, judge, cfg.bootstrap, cfg.seed)

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
        scored: dict[str, tuple[list[PreferencePair], dict[str, np.ndarray]]] = {}
        judge = issubclass(h.cls, PairwiseJudge)
        for group, pairs in groups.items():
            if not pairs:
                if na_pairs[group]:
                    acc[group] = {"na": "not applicable: no user in this group has train pairs to adapt from"}
                continue
            scores = self._scores(h, pairs, h.shots, group)
            all_scores[group] = scores
            acc[group] = self._accuracy(scores, pairs, h)
            if group == "unseen" and not h.user_agnostic:
                acc[group]["effective_shots"] = self._effective_shots(h, sorted({p.user_id for p in pairs}), h.shots)
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
            scored["all"] = (pairs, merged)
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
            scores = self._scores(h, pairs, h.shots, metric)
            group = metric.removeprefix("rm_acc_")
            acc[group] = self._accuracy(scores, pairs, h)
            if metric.startswith("rm_acc_on_"):
                acc[group]["users"] = (
                    "strangers to every method: each scores them with its unknown-user reward (docs/methods.md)"
                )
            self.s.cells.add_pairs(h.label, metric, pairs, outcomes(scores, judge, cfg.tie_policy))
            scored[metric] = (pairs, scores)
        own = scored.pop("all", None)
        for group, got in record_listwise(
            self.s.cells, h.label, own, dict(scored), judge=judge, tie=cfg.tie_policy
        ).items():
            acc.setdefault(group, {}).update(got)
        out["rm_accuracy"] = acc
        from perbench.runner.information import method_notes

        out.update(method_notes(h, bench))  # what it saw of the profiles, what it records of its fit
        if h.label == cfg.reference_method:
            self._train_accuracy(h, groups)
        unseen = groups["unseen"]
        if unseen and not h.user_agnostic:
            out["fewshot_curve"] = self._fewshot_curve(h, unseen, out)
        problem = self.pa_problem(h)
        if problem is None:
            out["policy_accuracy"] = {g: self._policy_accuracy(h, pairs, g) for g, pairs in groups.items() if pairs}
        else:
            out["policy_accuracy"] = {"not_applicable": problem}
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
        pairs += [p for u in sorted({p.user_id for p in groups["unseen"]}) for p in bench.fewshot(u, h.shots)]
        if not pairs:
            return
        scores = self._scores(h, pairs, h.shots, "train")
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
        train pairs adapts from all they have; a method that ignores shots uses none; a method that reads only
        some of them, like the ICL judge's ``max_examples``, says how many with ``shots_seen``)."""
        seen = getattr(h.probe, "shots_seen", None)
        eff = {}
        for u in users:
            got = len(self.s.bench.fewshot(u, n)) if h.uses_shots else 0
            eff[u] = int(seen(got)) if callable(seen) else got
        vals = list(eff.values())
        return {
            "nominal": n,
            "mean": float(np.mean(vals)),
            "min": min(vals),
            "max": max(vals),
            "users_below_nominal": sum(v < n for v in vals) if h.uses_shots else 0,
            "by_user": eff,
        }

    def _pa_key(self, h: MethodHandle, group: str, pairs: Sequence[PreferencePair], pw: PAWeight) -> str:
        rgd = [pw.k] if self.s.cfg.pa_rgd else []
        return h.key(h.shots, "pa4", pw.w, *rgd, group, pair_ids(pairs), self.s.policy.fingerprint)

    def pa_problem(self, h: MethodHandle, policy: Any = None) -> str | None:
        """Why ``h`` has no policy accuracy at all under ``policy`` (default: the one being evaluated; None: it has
        the headline; the per-prefix variants may still be not applicable, see :meth:`_policy_accuracy`)."""
        from perbench.rewards.base import PairwiseJudge

        policy = policy if policy is not None else self.s.policy
        if policy is None or policy.no_logprobs:
            return policy.no_logprobs if policy is not None else "no policy in this run"
        if issubclass(h.cls, PairwiseJudge):
            return "a pairwise judge gives no reward r_u(x, y) for a single response"
        return None

    def _policy_features(self) -> Any:
        """The feature extractor of the policy being evaluated (the run's main one, or another of ``policies``)."""
        ext = self.s.policy_extractor
        if ext is not None and ext.lm is self.s.policy:
            return ext
        fp = self.s.policy.fingerprint
        if fp not in self._extractors:
            self._extractors[fp] = self.s.features_of(self.s.policy)
        return self._extractors[fp]

    def _logprob_sums(self, pairs: Sequence[PreferencePair]) -> dict[str, np.ndarray]:
        """log π(y | x) of each pair's chosen and rejected response under the evaluated policy (cached per text)."""
        ext = self._policy_features()
        texts = [(p.prompt, y) for p in pairs for y in (p.chosen, p.rejected)]
        keys = [(ext.fingerprint, prompt_key(x), y) for x, y in texts]
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._lp_sums}
        if todo:
            sums = ext.logprob_sums(list(todo.values()), desc="policy log-probs")
            self._lp_sums.update(zip(todo, sums, strict=True))
        lp = np.array([self._lp_sums[k] for k in keys], np.float64)
        return {"chosen": lp[0::2], "rejected": lp[1::2]}

    def _policy_accuracy(
        self,
        h: MethodHandle,
        pairs: Sequence[PreferencePair],
        group: str,
        pw: PAWeight | None = None,
        *,
        variants: bool = True,
    ) -> dict[str, Any]:
        """Policy accuracy under the tilted policy π·exp(w·r_u) of the decoder the method guides (its weight w,
        :meth:`RunState.pa_weights`; the first decoder's unless ``pw`` names another). The headline is the
        sequence tilt (every RM that scores single responses has it); with ``variants`` the labelled per-prefix
        variants (prefix-sum, prefix-sum / length, and with ``pa_rgd`` the top-k RGD-induced policy) are added
        where the method defines a reward for every prefix, and the cells are recorded."""
        from perbench.metrics.pa_curve import NO_WEIGHT, tilt_curve
        from perbench.metrics.policy_accuracy import (
            policy_accuracy_from_scores,
            policy_accuracy_problem,
            policy_accuracy_scores,
            sequence_tilt,
            teacher_forced_scores,
        )
        from perbench.metrics.rm_accuracy import pair_outcomes
        from perbench.rewards.base import ScoreItem, put_back

        pw = pw or self.s.pa_headline(h)
        scores = self._scores(h, pairs, h.shots, group)
        lp = self._logprob_sums(pairs)
        curve = tilt_curve(
            lp["chosen"], lp["rejected"], scores["chosen"], scores["rejected"], tie=self.s.cfg.tie_policy,
            weights=[p.w for p in self.s.pa_weights(h)],
        )  # fmt: skip
        if pw is None:  # no weighted decoder: no weight to take the headline at, the curve only
            return {"not_applicable": NO_WEIGHT, "curve": curve}
        w, k = pw.w, pw.k
        side = {
            sd: {"tilt": sequence_tilt(lp[sd], scores[sd], w), "policy_sum": lp[sd]} for sd in ("chosen", "rejected")
        }
        problem: str | None = None
        if variants:
            problem = None if has_prefix_reward(h) else str(h.cls.no_prefix_reward)
            key = self._pa_key(h, group, pairs, pw)
            if problem is None and self.s.units.missing([key], phase="policy_accuracy"):
                problem = policy_accuracy_problem(self.s.policy, h.adapted(h.shots))

            def compute() -> dict[str, np.ndarray]:
                rm = h.adapted(h.shots)
                # both sides in one list, in a secret order (as RM accuracy's scores): the order says nothing
                sides = [ScoreItem(p.user_id, p.prompt, getattr(p, sd)) for sd in ("chosen", "rejected") for p in pairs]
                order = self.s.order_rng.permutation(len(sides))
                items = [sides[i] for i in order]
                if self.s.cfg.pa_rgd:
                    got = policy_accuracy_scores(self.s.policy, rm, items, w=w, k=k, max_length=self.s.cfg.max_length)
                else:  # one teacher-forced pass; the policy's log-probs come from the feature cache
                    texts = [(i.prompt, i.response) for i in items]
                    lps = [t.logprobs for t in self._policy_features().tokens(texts, desc="policy log-probs")]
                    got = teacher_forced_scores(lps, rm.token_rewards(items), w)
                back = {n: put_back(order, v) for n, v in got.items() if n not in ("tilt", "policy_sum")}
                return {f"{sd}_{n}": v[i * len(pairs) : (i + 1) * len(pairs)] for n, v in back.items()
                        for i, sd in enumerate(("chosen", "rejected"))}  # fmt: skip

            if problem is None:
                s = self.s.units.arrays("policy_accuracy", key, compute)
                for sd in ("chosen", "rejected"):
                    side[sd].update({n[len(sd) + 1 :]: v for n, v in s.items() if n.startswith(sd + "_")})
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
        out["w_source"] = pw.source()
        out["decoder"] = pw.decoder
        out["curve"] = curve
        if problem is not None:
            out["variants_not_applicable"] = problem
        if variants:
            tie: Any = self.s.cfg.tie_policy
            for variant, metric in PA_CELLS:
                if variant in side["chosen"]:
                    oc = pair_outcomes(side["chosen"][variant], side["rejected"][variant], tie)
                    self.s.cells.add_pairs(h.label, metric, pairs, oc)
        return out

    def decoder_policy_accuracy(self, h: MethodHandle, decoder: str) -> dict[str, Any] | None:
        """The headline policy accuracy at the weight decoder ``decoder`` (a label) applies to ``h``'s reward, per
        test group: what a downstream row of that decoder guided by ``h`` is reported next to (None: the decoder
        applies no weight to it)."""
        if self.pa_problem(h) is not None or self.s.unfittable(h):
            return None
        pw = next((p for p in self.s.pa_weights(h) if p.decoder == decoder), None)
        if pw is None:
            return None
        out: dict[str, Any] = {"w": pw.w, "decoder": decoder, "metric": "sequence tilt (headline)"}
        for g, pairs in self.s.test_groups(self.s.not_applicable(h)).items():
            if pairs:
                acc = self._policy_accuracy(h, pairs, g, pw, variants=False)
                out[g] = {k: acc[k] for k in ("tilt", "w0")}
        return out

    def policy_accuracy_under(self, spec: str, handles: list[MethodHandle]) -> None:
        """Policy accuracy of every RM under another policy of ``policies`` (``self.s.policy``), stored in
        ``self.s.pa_by_policy[method][policy][group]``; a policy served by an inference endpoint (no log-probs of
        given responses) gets ``{"not_applicable": why}`` in place of its groups."""
        saved, why = self.s.policy_extractor, self.s.policy.no_logprobs
        self.s.policy_extractor = saved if why else self.s.features_of(self.s.policy)
        for h in handles:
            if why:
                self.s.pa_by_policy.setdefault(h.label, {})[spec] = {"not_applicable": why}
            elif not self.s.unfittable(h) and self.pa_problem(h) is None:
                for g, pairs in self.s.test_groups(self.s.not_applicable(h)).items():
                    if pairs:
                        got = self._policy_accuracy(h, pairs, g)
                        self.s.pa_by_policy.setdefault(h.label, {}).setdefault(spec, {})[g] = got
        self.s.policy_extractor = saved
