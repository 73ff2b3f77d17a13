"""The run: one config from data to report. Every expensive unit is keyed by content (see ``units.py``)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perbench.config import Component, RunConfig
from perbench.data.records import Benchmark, PreferencePair, Prompt, prompt_key, prompt_text
from perbench.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, cache_dir
from perbench.progress import progress
from perbench.runner.cells import Cells
from perbench.runner.methods import MethodHandle, pair_ids
from perbench.runner.units import Units, unit_key


@dataclass
class RunResult:
    run_dir: Path
    results: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def results_path(self) -> Path:
        return self.run_dir / "results.json"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.html"


def log(msg: str) -> None:
    import os

    if os.environ.get("PERBENCH_QUIET") != "1":
        print(f"[perbench] {msg}", flush=True)


def run(config: RunConfig | str | Path | None = None, **overrides: Any) -> RunResult:
    """Run a config (a RunConfig, a YAML path, or None for the embedded default) end to end."""
    if config is None:
        cfg = RunConfig.default()
    elif isinstance(config, RunConfig):
        cfg = config
    else:
        cfg = RunConfig.from_yaml(config)
    if overrides:
        cfg = cfg.override(**overrides)
    if cfg.seeds:
        from perbench.runner.seeds import run_seeds

        return run_seeds(cfg)
    return Runner(cfg).run()


class Runner:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run_dir()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.units = Units(self.run_dir / "units.sqlite")
        self.samples: list[dict[str, Any]] = []
        self.timing: dict[str, float] = {}
        self.skipped_combos: list[dict[str, str]] = []
        self.pa_by_policy: dict[str, dict[str, dict[str, Any]]] = {}

    # ---------------------------------------------------------------- phases
    def run(self) -> RunResult:
        import yaml

        from perbench import registry
        from perbench.device import set_threads

        set_threads()
        cfg = self.cfg
        t0 = time.perf_counter()
        atomic_write_text(self.run_dir / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        log(f"run directory: {self.run_dir}")

        with self._timed("benchmark"):
            loader = registry.benchmarks.get(cfg.benchmark.name)
            _check_params(loader, cfg.benchmark)
            bench: Benchmark = loader(**cfg.benchmark.params)
        self.bench = bench
        self.cells = Cells(f"{bench.name}|{cfg.policy}|seed{cfg.seed}")
        log(
            f"benchmark {bench.name}: {bench.summary()['pairs']} pairs, {len(bench.seen_users)} seen / "
            f"{len(bench.unseen_users)} unseen users"
        )

        with self._timed("models"):
            self._load_models()

        handles = self._method_handles()
        with self._timed("upstream"):
            self._prefetch_test_tokens(handles)
            executor = registry.executors.get(cfg.executor)()
            upstream = dict(zip([h.label for h in handles], executor.map(self._upstream, handles), strict=True))
        with self._timed("downstream"):
            downstream = self._downstream_all_policies(handles)

        self.timing["total"] = time.perf_counter() - t0
        from perbench.runner.results import build_results

        for label, by_policy in self.pa_by_policy.items():
            upstream[label]["policy_accuracy_by_policy"] = by_policy
        with self._timed("analysis"):
            analysis = analyze_cells(self.cells.rows, cfg)
        results = build_results(self, upstream, downstream)
        results["analysis"] = analysis
        results["timing_s"]["analysis"] = round(self.timing["analysis"], 2)
        atomic_write_json(self.run_dir / "results.json", results)
        atomic_write_jsonl(self.run_dir / "samples.jsonl", self.samples)
        self.cells.write(self.run_dir / "cells.jsonl")
        from perbench.report.html import write_report

        write_report(results, self.run_dir / "report.html")
        print_verdict(analysis)
        log(f"results: {self.run_dir / 'results.json'}")
        log(f"report:  {self.run_dir / 'report.html'}")
        return RunResult(self.run_dir, results, self.samples)

    def _timed(self, name: str) -> Any:
        runner = self

        class _T:
            def __enter__(self) -> None:
                self.t = time.perf_counter()

            def __exit__(self, *exc: object) -> None:
                runner.timing[name] = runner.timing.get(name, 0.0) + time.perf_counter() - self.t

        return _T()

    def _load_models(self) -> None:
        from perbench.cache import Store
        from perbench.models.loader import load_lm
        from perbench.rewards.base import RMContext
        from perbench.rewards.features import FeatureExtractor

        cfg = self.cfg
        self.policy = load_lm(cfg.policy, device=cfg.device, dtype=cfg.dtype)
        self.rm_lm = load_lm(cfg.rm_backbone, device=cfg.device, dtype=cfg.dtype)
        store = self.feature_store = Store(cache_dir() / "features.sqlite")
        self.extractor = FeatureExtractor(
            self.rm_lm, store, batch_size=cfg.feature_batch_size, max_length=cfg.max_length
        )
        self.policy_extractor = (
            self.extractor
            if self.policy is self.rm_lm
            else FeatureExtractor(self.policy, store, batch_size=cfg.feature_batch_size, max_length=cfg.max_length)
        )
        self.ctx = RMContext(
            features=self.extractor,
            seed=cfg.seed,
            device=self.policy.policy.device,
            extra={"users": self.bench.users, "policy": self.policy},
        )
        self.judge: Any = None
        if cfg.judge:
            from perbench.metrics.judge import RubricJudge

            self.judge_lm = load_lm(cfg.judge, device=cfg.device, dtype=cfg.dtype)
            self.judge = RubricJudge(self.judge_lm)

    def _method_handles(self) -> list[MethodHandle]:
        out = [MethodHandle(m, self.bench, self.ctx, self.units) for m in self.cfg.methods]
        out += [MethodHandle(Component(b), self.bench, self.ctx, self.units, baseline=True) for b in self.cfg.baselines]
        labels = [h.label for h in out]
        dup = {x for x in labels if labels.count(x) > 1}
        if dup:
            raise ValueError(f"methods listed twice: {sorted(dup)}")
        return out

    # ---------------------------------------------------------------- upstream
    def _prefetch_test_tokens(self, handles: list[MethodHandle]) -> None:
        """Policy accuracy needs per-token features of every test response; that pass also yields φ, so
        running it first means scoring never runs the backbone a second time on the same text."""
        if not any(h.is_feature_rm for h in handles):
            return
        groups = [(g, self.bench.test_pairs(seen=g == "seen")) for g in ("seen", "unseen")]
        keys = [self._pa_key(h, g, pairs) for h in handles if h.is_feature_rm for g, pairs in groups if pairs]
        if not self.units.missing(keys):
            return
        texts = {
            (prompt_key(p.prompt), y): (p.prompt, y) for p in self.bench.test_pairs() for y in (p.chosen, p.rejected)
        }
        self.extractor.tokens(list(texts.values()), desc="test features")
        if self.policy_extractor is not self.extractor:
            self.policy_extractor.tokens(list(texts.values()), desc="policy log-probs")

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

        extra = ["active"] if active else []
        return self.units.arrays("scores", h.key(shots, "scores", tag, pair_ids(pairs), *extra), compute)

    def _accuracy(
        self, scores: dict[str, np.ndarray], pairs: Sequence[PreferencePair], h: MethodHandle, tie: Any = None
    ) -> dict[str, Any]:
        from perbench.metrics.rm_accuracy import preference_accuracy, rm_accuracy
        from perbench.rewards.base import PairwiseJudge

        users = [p.user_id for p in pairs]
        prompts = [prompt_key(p.prompt) for p in pairs]
        tie = tie or self.cfg.tie_policy
        boot: dict[str, Any] = {"n_boot": self.cfg.bootstrap, "seed": self.cfg.seed, "prompts": prompts}
        if issubclass(h.cls, PairwiseJudge):
            return preference_accuracy(scores["chosen"], users, tie=tie, **boot)
        return rm_accuracy(scores["chosen"], scores["rejected"], users, tie=tie, **boot)

    def _unfittable(self, h: MethodHandle) -> bool:
        return h.cls.needs_train_pairs and not self.bench.train_pairs()

    def _not_applicable(self, h: MethodHandle) -> set[str]:
        """Unseen users a method cannot score: it adapts from shots and the user has no train pairs."""
        if h.user_agnostic or not h.uses_shots or getattr(h.cls, "scores_without_shots", False):
            return set()
        return {u for u in self.bench.unseen_users if not self.bench.fewshot(u, 1)}

    def _test_groups(self, not_applicable: set[str]) -> dict[str, list[PreferencePair]]:
        """Test pairs by group (seen, unseen) without the users a method cannot score."""
        return {
            g: [p for p in self.bench.test_pairs(seen=g == "seen") if p.user_id not in not_applicable]
            for g in ("seen", "unseen")
        }

    def _upstream(self, h: MethodHandle) -> dict[str, Any]:
        from perbench.rewards.base import PairwiseJudge

        bench, cfg = self.bench, self.cfg
        out: dict[str, Any] = {"baseline": h.baseline, "user_agnostic": h.user_agnostic}
        if self._unfittable(h):
            out["not_applicable"] = "no train pairs to fit on (the benchmark has none)"
            return out
        acc: dict[str, Any] = {}
        na_users = self._not_applicable(h)
        groups = self._test_groups(na_users)
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
            oc = _outcomes(scores, judge, cfg.tie_policy)
            self.cells.add_pairs(h.label, f"rm_acc_{group}", pairs, oc)
            for p, sw, sl in zip(pairs, scores["chosen"], scores["rejected"], strict=True):
                self.samples.append(
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
            sub = self._pers_only(pairs)
            if sub is not None:
                index = {p.pair_id: i for i, p in enumerate(pairs)}
                pick = [index[p.pair_id] for p in sub]
                # ties count ½ here whatever tie_policy says: mirrored pairs then give any user-agnostic scorer
                # exactly 0.5 (a strict rule would count each tied mirror pair as two losses)
                picked = {k: v[pick] for k, v in merged.items()}
                acc["pers_only"] = self._accuracy(picked, sub, h, tie="half")
                self.cells.add_pairs(h.label, "rm_acc_pers_only", sub, _outcomes(picked, judge, "half"))
        out["rm_accuracy"] = acc
        unseen = groups["unseen"]
        if unseen and not h.user_agnostic:
            out["fewshot_curve"] = self._fewshot_curve(h, unseen, out)
        if _has_prefix_reward(h):
            out["policy_accuracy"] = {g: self._policy_accuracy(h, pairs, g) for g, pairs in groups.items() if pairs}
        else:
            out["policy_accuracy"] = {"not_applicable": str(h.cls.no_prefix_reward)}
        return out

    def _pers_only(self, pairs: list[PreferencePair]) -> list[PreferencePair] | None:
        """The test pairs on the benchmark's personalization-only split (None when it has none)."""
        ids = self.bench.subsets.get("personalization_only")
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
            for n in self.cfg.shot_curve:
                s = self._scores(h, unseen, n, "unseen", active=active)
                a = self._accuracy(s, unseen, h)
                curve[str(n)] = {"accuracy": a["accuracy"], "ci": a["ci"], "macro": a["macro"]}
                if not active:
                    eff = [len(self.bench.fewshot(u, n)) if h.uses_shots else 0 for u in users]
                    curve[str(n)]["effective_shots"] = {"mean": float(np.mean(eff)), "min": min(eff), "max": max(eff)}
                self.cells.add_pairs(h.label, f"{metric}@{n}", unseen, _outcomes(s, judge, self.cfg.tie_policy))
            return curve

        curve = points(active=False)
        if h.selects_shots and h.uses_shots:
            out["fewshot_curve_active"] = points(active=True)
        if not h.uses_shots:
            out["fewshot_flat"] = "this method ignores the shots: one value for every shot count"
        return curve

    def _pa_params(self) -> tuple[float, int]:
        """w and k of the ARGS decoder the run deploys (the first ``args`` in ``decoders``); without one,
        ``pa_weight`` and ``pa_rgd_k`` (default k = 10, the ARGS default)."""
        from perbench.decoding.args import ARGS

        for d in self.cfg.decoders:
            if d.name == "args":
                params = ARGS(**d.params).params
                return float(params["w"]), int(params["k"])
        return self.cfg.pa_weight, self.cfg.pa_rgd_k or 10

    def _pa_key(self, h: MethodHandle, group: str, pairs: Sequence[PreferencePair]) -> str:
        w, k = self._pa_params()
        rgd = [k] if self.cfg.pa_rgd else []
        return h.key(self.cfg.shots, "pa3", w, *rgd, group, pair_ids(pairs), self.policy.fingerprint)

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

        w, k = self._pa_params()
        key = self._pa_key(h, group, pairs)
        if self.units.missing([key]):
            problem = policy_accuracy_problem(self.policy, h.adapted(self.cfg.shots))
            if problem is not None:
                return {"not_applicable": problem}

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(self.cfg.shots)
            res: dict[str, np.ndarray] = {}
            for side in ("chosen", "rejected"):
                items = [ScoreItem(p.user_id, p.prompt, getattr(p, side)) for p in pairs]
                if self.cfg.pa_rgd:
                    got = policy_accuracy_scores(self.policy, rm, items, w=w, k=k, max_length=self.cfg.max_length)
                else:  # one teacher-forced pass; the policy's log-probs come from the feature cache
                    texts = [(i.prompt, i.response) for i in items]
                    lps = [t.logprobs for t in self.policy_extractor.tokens(texts, desc="policy log-probs")]
                    got = teacher_forced_scores(lps, rm.token_rewards(items), w)
                res.update({f"{side}_{n}": v for n, v in got.items()})
            return res

        s = self.units.arrays("policy_accuracy", key, compute)
        side = {
            sd: {n[len(sd) + 1 :]: v for n, v in s.items() if n.startswith(sd + "_")} for sd in ("chosen", "rejected")
        }
        out = policy_accuracy_from_scores(
            side["chosen"],
            side["rejected"],
            [p.user_id for p in pairs],
            w,
            k,
            tie=self.cfg.tie_policy,
            n_boot=self.cfg.bootstrap,
            seed=self.cfg.seed,
            prompts=[prompt_key(p.prompt) for p in pairs],
        )
        tie: Any = self.cfg.tie_policy
        variants = [(HEADLINE, "pa"), ("sum", "pa_sum")] + ([("rgd_mean", "pa_rgd")] if self.cfg.pa_rgd else [])
        for variant, metric in variants:
            oc = pair_outcomes(side["chosen"][variant], side["rejected"][variant], tie)
            self.cells.add_pairs(h.label, metric, pairs, oc)
        return out

    # ---------------------------------------------------------------- downstream
    def _eval_targets(self) -> list[tuple[Prompt, str]]:
        """(prompt, user) pairs evaluated downstream: test prompts × users with test pairs on them."""
        by_prompt: dict[str, tuple[Prompt, list[str]]] = {}
        for p in self.bench.test_pairs():
            entry = by_prompt.setdefault(prompt_key(p.prompt), (p.prompt, []))
            if p.user_id not in entry[1]:
                entry[1].append(p.user_id)
        keys = sorted(by_prompt)
        rng = np.random.default_rng(self.cfg.seed)
        if self.cfg.max_test_prompts is not None and len(keys) > self.cfg.max_test_prompts:
            keys = sorted(rng.choice(keys, self.cfg.max_test_prompts, replace=False).tolist())
        out = []
        for k in keys:
            prompt, users = by_prompt[k]
            users = sorted(users)
            if self.cfg.max_gen_users is not None and len(users) > self.cfg.max_gen_users:
                users = sorted(rng.choice(users, self.cfg.max_gen_users, replace=False).tolist())
            out += [(prompt, u) for u in users]
        return out

    def _decoder(self, spec: Component) -> Any:
        """Build a decoder; decoders that read the users' own data (ICL) get the benchmark."""
        from perbench import registry

        decoder = registry.decoders.get(spec.name)(**spec.params)
        if hasattr(decoder, "bind_benchmark"):
            decoder.bind_benchmark(self.bench, shots=self.cfg.shots)
        return decoder

    def _requests(self, decoder: Any, targets: list[tuple[Prompt, str]]) -> list[Any]:
        """One request per target for decoders that share one seed per prompt (Best-of-N's sample pool)."""
        from perbench.models.generate import GenRequest

        return [GenRequest(p, u, seed=_seed(self.cfg.seed, prompt_key(p))) for p, u in targets]

    def _generate(
        self, decoder_spec: Component, h: MethodHandle | None, targets: list[tuple[Prompt, str]], label: str
    ) -> dict[tuple[str, str], str]:
        """Generate each (prompt, user) unit once; user-agnostic decoders generate once per prompt."""
        from perbench.models.generate import GenRequest, batched

        cfg = self.cfg
        decoder = self._decoder(decoder_spec)
        own_data = bool(getattr(decoder, "per_user", False))  # the prompt depends on the user's own data
        per_user = (h is not None and not h.user_agnostic) or own_data
        shared_seed = bool(getattr(decoder, "shared_seed", False))
        extra = [self.bench.fingerprint()] if own_data else []
        units: dict[str, tuple[Prompt, str]] = {}
        slot: dict[tuple[str, str], str] = {}
        for prompt, user in targets:
            gen_user = user if per_user else "*"
            key = unit_key(
                "gen",
                decoder.config_key(),
                self.policy.fingerprint,
                h.key(cfg.shots) if h is not None else None,
                prompt_key(prompt),
                gen_user,
                cfg.seed,
                cfg.max_new_tokens,
                *extra,
            )
            units.setdefault(key, (prompt, gen_user))
            slot[(prompt_key(prompt), user)] = key
        todo = self.units.missing(list(units))
        self.units.reused["generate"] += len(units) - len(todo)
        if todo:
            rm = h.adapted(cfg.shots) if h is not None else None
            reqs = [
                GenRequest(
                    units[k][0],
                    units[k][1],
                    seed=_seed(cfg.seed, prompt_key(units[k][0]) if shared_seed else k),
                )
                for k in todo
            ]
            bar = progress(total=len(reqs), desc=f"decode {label}", unit="gen")
            for batch_keys, batch in zip(batched(todo, cfg.batch_size), batched(reqs, cfg.batch_size), strict=True):
                gens = decoder.generate(self.policy, batch, rm, max_new_tokens=cfg.max_new_tokens)
                for k, g in zip(batch_keys, gens, strict=True):
                    self.units.store.put_json(k, {"text": g.text, "n_tokens": len(g.token_ids), "finished": g.finished})
                    self.units.computed["generate"] += 1
                bar.update(len(batch))
            bar.close()
            self._count_samples(decoder)
        texts: dict[str, str] = {}
        for k in units:
            unit = self.units.store.get_json(k)
            assert unit is not None, "a generation unit vanished from the store"
            texts[k] = unit["text"]
        return {s: texts[k] for s, k in slot.items()}

    def _count_samples(self, decoder: Any) -> None:
        if getattr(decoder, "sampled", 0):
            self.units.computed["bon_samples"] += int(decoder.sampled)
            decoder.sampled = 0
        if getattr(decoder, "reused", 0):
            self.units.reused["bon_samples"] += int(decoder.reused)
            decoder.reused = 0

    def _downstream_all_policies(self, handles: list[MethodHandle]) -> dict[str, Any]:
        """Decoders × reward models × policies: each policy's labels get an ``@policy`` suffix when the
        config lists more than one. Generation units are keyed by the policy fingerprint either way."""
        from perbench.models.loader import load_lm

        specs = self.cfg.policies or [self.cfg.policy]
        main = self.policy
        out: dict[str, Any] = {}
        self.downstream_policies: list[Any] = []
        upstream_rows = list(self.cells.rows)
        main_group = self.cells.group
        for spec in specs:
            self.policy = (
                main if spec == self.cfg.policy else load_lm(spec, device=self.cfg.device, dtype=self.cfg.dtype)
            )
            if spec != self.cfg.policy:
                # a (policy, method) system pairs the method's upstream numbers with its downstream under that
                # policy; policy accuracy is the one upstream number that depends on the policy: computed anew
                self.cells.group = f"{self.bench.name}|{spec}|seed{self.cfg.seed}"
                self.cells.rows += [
                    {**r, "group": self.cells.group} for r in upstream_rows if not r["metric"].startswith("pa")
                ]
                self._policy_accuracy_under(spec, handles)
            self.downstream_policies.append(self.policy)
            first_sample = len(self.samples)
            part = self._downstream(handles)
            suffix = "" if len(specs) == 1 else f"@{spec}"
            for row in self.samples[first_sample:]:
                row["policy"] = spec
                if "decoder" in row:
                    row["decoder"] += suffix
            out.update({f"{label}{suffix}": v for label, v in part.items()})
        self.policy = main
        self.cells.group = main_group
        return out

    def _policy_accuracy_under(self, spec: str, handles: list[MethodHandle]) -> None:
        """Policy accuracy of every RM under another policy of ``policies`` (``self.policy``), stored in
        ``self.pa_by_policy[method][policy][group]``."""
        from perbench.rewards.features import FeatureExtractor

        saved = self.policy_extractor
        self.policy_extractor = FeatureExtractor(
            self.policy, self.feature_store, batch_size=self.cfg.feature_batch_size, max_length=self.cfg.max_length
        )
        for h in handles:
            if self._unfittable(h) or not _has_prefix_reward(h):
                continue
            for g, pairs in self._test_groups(self._not_applicable(h)).items():
                if pairs:
                    got = self._policy_accuracy(h, pairs, g)
                    self.pa_by_policy.setdefault(h.label, {}).setdefault(spec, {})[g] = got
        self.policy_extractor = saved

    def _downstream(self, handles: list[MethodHandle]) -> dict[str, Any]:
        from perbench import registry
        from perbench.rewards.base import FeatureRM

        targets = self._eval_targets()
        if not targets:
            return {}
        outputs: dict[str, dict[tuple[str, str], str]] = {}
        guides: dict[str, MethodHandle] = {}
        bon: dict[str, tuple[Component, MethodHandle]] = {}
        names = [d.name for d in self.cfg.decoders]
        # cells name a decoder by its registry name unless the config lists that name twice (then its label)
        self.families: dict[str, tuple[str, str]] = {}
        for d in self.cfg.decoders:
            cls = registry.decoders.get(d.name)
            family = d.name if names.count(d.name) == 1 else d.label()
            if not cls.uses_rm:
                outputs[d.label()] = self._generate(d, None, targets, d.label())
                self.families[d.label()] = (family, family)
                continue
            for h in handles:
                if self.cfg.guide_with is not None and h.label not in self.cfg.guide_with:
                    continue
                if self._unfittable(h):
                    self.skipped_combos.append({"decoder": d.label(), "method": h.label, "reason": "no train pairs"})
                    continue
                check = getattr(cls, "rm_problem", None)
                problem = (
                    check(h.cls)
                    if check is not None
                    else (None if issubclass(h.cls, FeatureRM) else "needs per-prefix rewards (a FeatureRM)")
                )
                if problem:
                    self.skipped_combos.append({"decoder": d.label(), "method": h.label, "reason": problem})
                    continue
                label = f"{d.label()}[{h.label}]"
                na = self._not_applicable(h)
                outputs[label] = self._generate(d, h, [t for t in targets if t[1] not in na], label)
                guides[label] = h
                self.families[label] = (family, h.label)
                if getattr(cls, "shared_seed", False) and hasattr(cls, "pool"):
                    bon[label] = (d, h)
        result = self._score_outputs(outputs, guides, targets)
        if bon:
            for label, curves in self._bon_curves(bon, targets).items():
                result[label]["bon_curve"] = curves
        return result

    # ---------------------------------------------------------------- quality of any text
    def _quality(self, texts: list[str], targets: list[tuple[Prompt, str]]) -> list[dict[str, float]]:
        """Ground-truth quality of ``texts[i]`` for target i: exact rubric satisfaction where the rubric is
        checkable, ROUGE-1/L against the user's reference where there is one, the judge's rubric score
        where a judge is configured and the user has answer-key aspects."""
        from perbench.metrics.rubric import rubric_satisfaction
        from perbench.metrics.text import rouge

        bench = self.bench
        refs = self._refs()
        out: list[dict[str, float]] = []
        for text, (prompt, user) in zip(texts, targets, strict=True):
            u = bench.users[user]
            row: dict[str, float] = {}
            if u.rubric:
                rs = rubric_satisfaction(text, u)
                row["rubric_satisfaction"], row["rubric_all"] = rs["satisfaction"], rs["all"]
            ref = refs.get((prompt_key(prompt), user))
            if ref is not None:
                rg = rouge([text], [ref])
                row["rouge1"], row["rougeL"] = float(rg["rouge1"][0]), float(rg["rougeL"][0])
            out.append(row)
        if self.cfg.bertscore:
            from perbench.metrics.text import bertscore

            have = [i for i, (p, u) in enumerate(targets) if (prompt_key(p), u) in refs]
            if have:
                f1 = bertscore(
                    [texts[i] for i in have], [refs[(prompt_key(targets[i][0]), targets[i][1])] for i in have]
                )
                for i, f in zip(have, f1, strict=True):
                    out[i]["bertscore_f1"] = float(f)
        if self.judge is not None:
            for row, judged in zip(out, self._judge(texts, targets), strict=True):
                row.update(judged)
        return out

    def _refs(self) -> dict[tuple[str, str], str]:
        if not hasattr(self, "_ref_table"):
            self._ref_table = {(prompt_key(r.prompt), r.user_id): r.text for r in self.bench.references}
        return self._ref_table

    def _judge(self, texts: list[str], targets: list[tuple[Prompt, str]]) -> list[dict[str, float]]:
        """Judge rubric scores (0..1) and parse-failure counts, one cached unit per (user, prompt, text)."""
        from perbench.metrics.judge import rubric_aspects

        assert self.judge is not None
        keys: list[str | None] = []
        todo: dict[str, tuple[str, Prompt, str]] = {}
        for text, (prompt, user) in zip(texts, targets, strict=True):
            if not rubric_aspects(self.bench.users[user]):
                keys.append(None)
                continue
            k = unit_key("judge", self.judge_lm.fingerprint, user, prompt_key(prompt), text)
            keys.append(k)
            todo.setdefault(k, (text, prompt, user))
        missing = self.units.missing(list(todo))
        self.units.reused["judge"] += len(todo) - len(missing)
        if missing:
            users = [self.bench.users[todo[k][2]] for k in missing]
            questions = [
                str(u.meta.get("question") or prompt_text(todo[k][1])) for u, k in zip(users, missing, strict=True)
            ]
            judged = self.judge.score([todo[k][0] for k in missing], users, questions)
            for k, j in zip(missing, judged, strict=True):
                self.units.store.put_json(
                    k,
                    {
                        "judge_score": j.score,
                        "judge_failures": j.n_failed,
                        "judge_aspects": len(j.scores),
                        "raw": j.raw,
                    },
                )
                self.units.computed["judge"] += 1
        out: list[dict[str, float]] = []
        for key in keys:
            if key is None:
                out.append({})
                continue
            rec = self.units.store.get_json(key)
            assert rec is not None, "a judge unit vanished from the store"
            out.append(
                {
                    "judge_score": float(rec["judge_score"]),
                    "judge_failures": float(rec["judge_failures"]),
                    "judge_aspects": float(rec["judge_aspects"]),
                }
            )
        return out

    # ---------------------------------------------------------------- Best-of-N curves
    def _bon_curves(
        self, bon: dict[str, tuple[Component, MethodHandle]], targets: list[tuple[Prompt, str]]
    ) -> dict[str, dict[str, Any]]:
        """Quality vs N for every (Best-of-N decoder, RM): one sample pool per decoder (sampled once, cached),
        each sample's quality computed once, each RM only scores the pool."""
        from perbench.decoding.best_of_n import BestOfN, bon_curve, pick_best

        cfg = self.cfg
        users = [u for _, u in targets]
        out: dict[str, dict[str, Any]] = {}
        pools: dict[str, tuple[list[Any], list[list[Any]], dict[str, np.ndarray]]] = {}
        for label, (spec, h) in bon.items():
            na = self._not_applicable(h)
            keep = np.array([u not in na for u in users], bool)
            decoder = self._decoder(spec)
            pk = decoder.config_key()
            if pk not in pools:
                reqs = self._requests(decoder, targets)
                pool = decoder.pool(self.policy, reqs, max_new_tokens=cfg.max_new_tokens)
                self._count_samples(decoder)
                n = len(pool[0]) if pool else 0
                qkey = unit_key(
                    "bon_quality",
                    pk,
                    self.policy.fingerprint,
                    cfg.seed,
                    cfg.max_new_tokens,
                    self.bench.fingerprint(),
                    [prompt_key(p) + "|" + u for p, u in targets],
                    self.judge_lm.fingerprint if self.judge is not None else None,
                )

                def quality(pool: list[list[Any]] = pool, n: int = n) -> dict[str, np.ndarray]:
                    flat = [g.text for row in pool for g in row]
                    rows = self._quality(flat, [t for t in targets for _ in range(n)])
                    names = sorted({m for r in rows for m in r})
                    return {
                        m: np.array([r.get(m, np.nan) for r in rows], np.float64).reshape(len(pool), n) for m in names
                    }

                pools[pk] = (reqs, pool, self.units.arrays("bon_quality", qkey, quality))
            reqs, pool, qual = pools[pk]

            def scores(
                h: MethodHandle = h, reqs: list[Any] = reqs, pool: list[list[Any]] = pool
            ) -> dict[str, np.ndarray]:
                return {"scores": np.stack(BestOfN.score_pool(h.adapted(cfg.shots), reqs, pool))}

            skey = h.key(
                cfg.shots,
                "bon_scores",
                pk,
                self.policy.fingerprint,
                cfg.seed,
                cfg.max_new_tokens,
                [prompt_key(p) + "|" + u for p, u in targets],
            )
            S = self.units.arrays("bon_scores", skey, scores)["scores"]
            curves: dict[str, Any] = {}
            family, method = self.families[label]
            for metric in QUALITY_METRICS:
                if metric not in qual:
                    continue
                Q = qual[metric]
                ok = ~np.isnan(Q).any(1) & keep
                if not ok.any():
                    continue
                kept = [u for u, m in zip(users, ok, strict=True) if m]
                kept_prompts = [prompt_key(t[0]) for t, m in zip(targets, ok, strict=True) if m]
                curves[metric] = bon_curve(
                    list(S[ok]), list(Q[ok]), users=kept, prompts=kept_prompts, n_boot=cfg.bootstrap, seed=cfg.seed
                )
                # gain of the RM's pick among all N samples over the first sample (N = 1), per target
                for i in np.flatnonzero(ok):
                    gain = Q[i, pick_best(S[i])] - Q[i, 0]
                    self.cells.add(method, f"{family}:bon_gain_{metric}", users[i], prompt_key(targets[i][0]), gain)
            out[label] = curves
        return out

    # ---------------------------------------------------------------- scoring the outputs
    def _score_outputs(
        self,
        outputs: dict[str, dict[tuple[str, str], str]],
        guides: dict[str, MethodHandle],
        targets: list[tuple[Prompt, str]],
    ) -> dict[str, Any]:
        from perbench.metrics.win_rate import win_outcomes
        from perbench.rewards.base import ScoreItem

        bench = self.bench
        zero_label = next((lab for lab in outputs if lab.startswith("zero_shot")), None)
        icl_label = next((lab for lab in outputs if lab.startswith("icl_rag")), None)
        result: dict[str, Any] = {}
        all_rows: dict[str, list[dict[str, Any]]] = {}
        for label, texts in outputs.items():
            mine_targets = [(p, u) for p, u in targets if (prompt_key(p), u) in texts]
            gen = [texts[(prompt_key(p), u)] for p, u in mine_targets]
            rows: list[dict[str, Any]] = []
            for text, (prompt, user), q in zip(gen, mine_targets, self._quality(gen, mine_targets), strict=True):
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
                    from perbench.metrics.rubric import aspect_report

                    row["rubric_aspects"] = aspect_report(text, u)
                    row["user_rubric"] = "; ".join(f"{ap.aspect}: {ap.pole}" for ap in u.rubric)
                rows.append(row)
            if label in guides and zero_label is not None:
                h = guides[label]
                zero = outputs[zero_label]

                def compute(
                    label: str = label,
                    h: MethodHandle = h,
                    tg: list[tuple[Prompt, str]] = mine_targets,
                    zero: dict[tuple[str, str], str] = zero,
                ) -> dict[str, np.ndarray]:
                    rm = h.adapted(self.cfg.shots)
                    mine = rm.score([ScoreItem(u, p, outputs[label][(prompt_key(p), u)]) for p, u in tg])
                    base = rm.score([ScoreItem(u, p, zero[(prompt_key(p), u)]) for p, u in tg])
                    return {"guided": mine, "zero_shot": base}

                key = h.key(
                    self.cfg.shots,
                    "winrate",
                    label,
                    zero_label,
                    [
                        unit_key(prompt_key(p), u, outputs[label][(prompt_key(p), u)], zero[(prompt_key(p), u)])
                        for p, u in mine_targets
                    ],
                )
                s = self.units.arrays("win_rate", key, compute)
                for row, o in zip(rows, win_outcomes(s["guided"], s["zero_shot"]), strict=True):
                    if not np.isnan(o):
                        row["rm_win"] = float(o)
            self.samples.extend(rows)
            all_rows[label] = rows
            family, method = self.families[label]
            for r in rows:
                for metric in (*QUALITY_METRICS, "rm_win"):
                    if metric in r:
                        self.cells.add(method, f"{family}:{metric}", r["user_id"], r["prompt_id"], r[metric])
            summary: dict[str, Any] = {"n": len(rows)}
            for metric in (*QUALITY_METRICS, "rubric_all", "rm_win", "words"):
                have = [r for r in rows if metric in r]
                if not have:
                    continue
                vals = np.array([r[metric] for r in have], dtype=np.float64)
                entry: dict[str, Any] = {"mean": float(vals.mean()), "ci": self._ci(have, vals), "n": len(vals)}
                for group, flag in (("seen", True), ("unseen", False)):
                    g = vals[[r["seen"] == flag for r in have]]
                    entry[group] = float(g.mean()) if len(g) else None
                summary[metric] = entry
            if "rm_win" in summary:
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
            summary["guide"] = guides[label].label if label in guides else None
            if label in guides and len(rows) < len(targets):
                summary["not_applicable"] = {
                    "targets": len(targets) - len(rows),
                    "reason": "users without train pairs to adapt from",
                }
            result[label] = summary
        for label, rows in all_rows.items():
            vs = {}
            for ref in (zero_label, icl_label):
                if ref is None or ref == label:
                    continue
                vs[ref] = self._paired_deltas(rows, all_rows[ref])
            if vs:
                result[label]["vs"] = vs
        return result

    def _ci(self, rows: list[dict[str, Any]], values: np.ndarray) -> list[float] | None:
        """Two-way (users × prompts) bootstrap CI of the mean of ``values`` (one per row)."""
        from perbench.metrics.bootstrap import two_way_ci

        ci = two_way_ci(
            values,
            [r["user_id"] for r in rows],
            [r["prompt_id"] for r in rows],
            n_boot=self.cfg.bootstrap,
            seed=self.cfg.seed,
        )
        return None if ci is None else [float(ci[0]), float(ci[1])]

    def _paired_deltas(self, rows: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean per-(prompt, user) difference ``mine − ref`` of each quality metric, two-way CI."""
        by_key = {(r["prompt_id"], r["user_id"]): r for r in ref}
        out: dict[str, Any] = {}
        for metric in QUALITY_METRICS:
            both = [
                (a, by_key[(a["prompt_id"], a["user_id"])]) for a in rows if (a["prompt_id"], a["user_id"]) in by_key
            ]
            both = [(a, b) for a, b in both if metric in a and metric in b]
            if not both:
                continue
            vals = np.array([a[metric] - b[metric] for a, b in both], np.float64)
            out[metric] = {"delta": float(vals.mean()), "ci": self._ci([a for a, _ in both], vals), "n": len(vals)}
        return out


QUALITY_METRICS = ("rubric_satisfaction", "rouge1", "rougeL", "bertscore_f1", "judge_score")


VERDICT_DEFAULTS = (
    "args:rubric_satisfaction",
    "best_of_n:rubric_satisfaction",
    "args:judge_score",
    "best_of_n:judge_score",
    "args:rougeL",
    "best_of_n:rougeL",
)


def analyze_cells(cells: list[dict[str, Any]], cfg: RunConfig) -> dict[str, Any]:
    """The selection analysis of a run's cells (method table, rankings, correlations, verdict)."""
    from perbench.metrics.analysis import analyze

    metrics = {c["metric"] for c in cells}
    verdict = cfg.verdict_metric or next((m for m in VERDICT_DEFAULTS if m in metrics), None)
    return analyze(
        cells,
        verdict_metric=verdict,
        reference_method=cfg.reference_method,
        n_boot=cfg.bootstrap,
        seed=cfg.seed,
    )


def print_verdict(analysis: dict[str, Any]) -> None:
    """The verdict paragraph and a Kendall τ-b table (upstream metric → downstream metric), on stdout."""
    import os

    if os.environ.get("PERBENCH_QUIET") == "1":
        return
    verdict = analysis.get("verdict") or {}
    print("\nVerdict: " + str(verdict.get("text", "no verdict (no downstream metric)")))
    pairs = (analysis.get("selection") or {}).get("pairs") or []
    if not pairs:
        return
    ups = list(dict.fromkeys(p["upstream"] for p in pairs))
    downs = list(dict.fromkeys(p["downstream"] for p in pairs))
    quality = str(verdict.get("metric") or "").split(":")[-1]
    with_tau = {p["downstream"] for p in pairs if p["kendall_tau_b"].get("value") is not None}
    # the verdict's quality under each decoder; the rest are in results.json and the report
    downs = [d for d in downs if d.split(":")[-1] == quality and d in with_tau] or downs[:3]
    ups = [u for u in ups if not u.startswith("fewshot")] or ups
    cell = {(p["upstream"], p["downstream"]): p["kendall_tau_b"] for p in pairs}
    width = max(len(u) for u in ups) + 2
    print(f"\nKendall τ-b between method rankings (95% CI), {len(ups)} upstream × {len(downs)} downstream metrics:")
    for d in downs:
        print(f"  → {d}")
        for u in ups:
            t = cell.get((u, d)) or {}
            v, ci = t.get("value"), t.get("ci")
            text = "n/a" if v is None else f"{v:+.2f}" + ("" if not ci else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
            print(f"    {u:<{width}}{text}")


def _has_prefix_reward(h: MethodHandle) -> bool:
    """The method defines r(x, y_≤t) for every prefix (policy accuracy, ARGS-style guidance)."""
    return h.cls.no_prefix_reward is None or callable(getattr(h.cls, "candidate_rewards", None))


def _outcomes(scores: dict[str, np.ndarray], judge: bool, tie: str) -> np.ndarray:
    """Per-pair outcome (1 / 0 / ½ under the tie policy) from scores or a pairwise judge's preferences."""
    from perbench.metrics.rm_accuracy import pair_outcomes, preference_outcomes

    if judge:
        return preference_outcomes(scores["chosen"], tie)  # type: ignore[arg-type]
    return pair_outcomes(scores["chosen"], scores["rejected"], tie)  # type: ignore[arg-type]


def _seed(base: int, key: str) -> int:
    return (base * 1_000_003 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)) % (2**31)


def _check_params(fn: Any, spec: Component) -> None:
    """Name missing or unknown benchmark parameters before calling the loader."""
    import inspect

    sig = inspect.signature(fn)
    params = sig.parameters.values()
    missing = [
        p.name
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in spec.params
    ]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    unknown = [] if takes_any else sorted(set(spec.params) - set(sig.parameters))
    accepted = ", ".join(sig.parameters)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], list(sig.parameters), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"benchmark {spec.name!r}: unknown parameter {unknown[0]!r}.{hint} Accepted: {accepted}")
    if missing:
        raise ValueError(
            f"benchmark {spec.name!r} needs {', '.join(missing)}: give it in the config "
            f"(benchmark: {{name: {spec.name}, {missing[0]}: ...}}) or with "
            f"--set 'benchmark={{name: {spec.name}, {missing[0]}: ...}}'. Accepted: {accepted}"
        )
