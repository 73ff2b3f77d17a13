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
            bench: Benchmark = loader(**cfg.benchmark.params)
        self.bench = bench
        log(f"benchmark {bench.name}: {bench.summary()['pairs']} pairs, {len(bench.seen_users)} seen / "
            f"{len(bench.unseen_users)} unseen users")

        with self._timed("models"):
            self._load_models()

        handles = self._method_handles()
        with self._timed("upstream"):
            upstream = {h.label: self._upstream(h) for h in handles}
        with self._timed("downstream"):
            downstream = self._downstream(handles)

        self.timing["total"] = time.perf_counter() - t0
        from perbench.runner.results import build_results

        results = build_results(self, upstream, downstream)
        atomic_write_json(self.run_dir / "results.json", results)
        atomic_write_jsonl(self.run_dir / "samples.jsonl", self.samples)
        from perbench.report.html import write_report

        write_report(results, self.run_dir / "report.html")
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
        store = Store(cache_dir() / "features.sqlite")
        self.extractor = FeatureExtractor(self.rm_lm, store, batch_size=cfg.feature_batch_size,
                                          max_length=cfg.max_length)
        self.policy_extractor = (self.extractor if self.policy is self.rm_lm else
                                 FeatureExtractor(self.policy, store, batch_size=cfg.feature_batch_size,
                                                  max_length=cfg.max_length))
        self.ctx = RMContext(features=self.extractor, seed=cfg.seed, device=self.policy.policy.device,
                             extra={"users": self.bench.users, "policy": self.policy})

    def _method_handles(self) -> list[MethodHandle]:
        out = [MethodHandle(m, self.bench, self.ctx, self.units) for m in self.cfg.methods]
        out += [MethodHandle(Component(b), self.bench, self.ctx, self.units, baseline=True) for b in self.cfg.baselines]
        labels = [h.label for h in out]
        dup = {x for x in labels if labels.count(x) > 1}
        if dup:
            raise ValueError(f"methods listed twice: {sorted(dup)}")
        return out

    # ---------------------------------------------------------------- upstream
    def _scores(self, h: MethodHandle, pairs: Sequence[PreferencePair], shots: int, tag: str) -> dict[str, np.ndarray]:
        from perbench.rewards.base import PairwiseJudge

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(shots)
            if isinstance(rm, PairwiseJudge):
                prefs = rm.prefer(pairs)
                return {"chosen": prefs, "rejected": np.full(len(prefs), 0.5)}
            s_w, s_l = rm.score_pairs(pairs)
            return {"chosen": s_w, "rejected": s_l}

        return self.units.arrays("scores", h.key(shots, "scores", tag, pair_ids(pairs)), compute)

    def _accuracy(self, scores: dict[str, np.ndarray], pairs: Sequence[PreferencePair], h: MethodHandle) -> dict[str, Any]:
        from perbench.metrics.rm_accuracy import preference_accuracy, rm_accuracy
        from perbench.rewards.base import PairwiseJudge

        users = [p.user_id for p in pairs]
        tie = self.cfg.tie_policy
        if issubclass(h.cls, PairwiseJudge):
            return preference_accuracy(scores["chosen"], users, tie=tie, n_boot=self.cfg.bootstrap, seed=self.cfg.seed)  # type: ignore[arg-type]
        return rm_accuracy(scores["chosen"], scores["rejected"], users, tie=tie, n_boot=self.cfg.bootstrap,  # type: ignore[arg-type]
                           seed=self.cfg.seed)

    def _upstream(self, h: MethodHandle) -> dict[str, Any]:
        bench, cfg = self.bench, self.cfg
        out: dict[str, Any] = {"baseline": h.baseline, "user_agnostic": h.user_agnostic}
        acc: dict[str, Any] = {}
        groups = {"seen": bench.test_pairs(seen=True), "unseen": bench.test_pairs(seen=False)}
        all_scores: dict[str, dict[str, np.ndarray]] = {}
        for group, pairs in groups.items():
            if not pairs:
                continue
            scores = self._scores(h, pairs, cfg.shots, group)
            all_scores[group] = scores
            acc[group] = self._accuracy(scores, pairs, h)
            for p, sw, sl in zip(pairs, scores["chosen"], scores["rejected"], strict=True):
                self.samples.append({"kind": "pair_score", "method": h.label, "pair_id": p.pair_id,
                                     "user_id": p.user_id, "group": group, "score_chosen": float(sw),
                                     "score_rejected": float(sl)})
        if all_scores:
            pairs = [p for g in all_scores for p in groups[g]]
            merged = {k: np.concatenate([all_scores[g][k] for g in all_scores]) for k in ("chosen", "rejected")}
            acc["all"] = self._accuracy(merged, pairs, h)
        out["rm_accuracy"] = acc
        unseen = groups["unseen"]
        if unseen and not h.user_agnostic:
            curve = {}
            for n in cfg.shot_curve:
                s = self._scores(h, unseen, n, "unseen")
                a = self._accuracy(s, unseen, h)
                curve[str(n)] = {"accuracy": a["accuracy"], "ci": a["ci"], "macro": a["macro"]}
            out["fewshot_curve"] = curve
        if h.is_feature_rm:
            out["policy_accuracy"] = {g: self._policy_accuracy(h, pairs, g) for g, pairs in groups.items() if pairs}
        return out

    def _policy_accuracy(self, h: MethodHandle, pairs: Sequence[PreferencePair], group: str) -> dict[str, Any]:
        from perbench.metrics.policy_accuracy import rgd_scores
        from perbench.metrics.rm_accuracy import rm_accuracy
        from perbench.rewards.base import FeatureRM, ScoreItem

        w = self.cfg.pa_weight

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(self.cfg.shots)
            assert isinstance(rm, FeatureRM)
            res: dict[str, np.ndarray] = {}
            for side in ("chosen", "rejected"):
                items = [ScoreItem(p.user_id, p.prompt, getattr(p, side)) for p in pairs]
                lps = [t.logprobs for t in self.policy_extractor.tokens([(i.prompt, i.response) for i in items],
                                                                        desc="policy log-probs")]
                rewards = rm.token_rewards(items)
                res[f"{side}_sum"], res[f"{side}_mean"] = rgd_scores(lps, rewards, w)
            return res

        s = self.units.arrays("policy_accuracy", h.key(self.cfg.shots, "pa", w, group, pair_ids(pairs),
                                                     self.policy.fingerprint), compute)
        users = [p.user_id for p in pairs]
        out: dict[str, Any] = {"w": w}
        for variant in ("sum", "mean"):
            a = rm_accuracy(s[f"chosen_{variant}"], s[f"rejected_{variant}"], users,
                            tie=self.cfg.tie_policy, n_boot=self.cfg.bootstrap, seed=self.cfg.seed)  # type: ignore[arg-type]
            a.pop("per_user")
            out[variant] = a
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

    def _generate(self, decoder_spec: Component, h: MethodHandle | None, targets: list[tuple[Prompt, str]],
                  label: str) -> dict[tuple[str, str], str]:
        """Generate each (prompt, user) unit once; user-agnostic decoders generate once per prompt."""
        from perbench import registry
        from perbench.decoding.base import GenRequest, batched

        cfg = self.cfg
        decoder = registry.decoders.get(decoder_spec.name)(**decoder_spec.params)
        per_user = h is not None and not h.user_agnostic
        units: dict[str, tuple[Prompt, str]] = {}
        slot: dict[tuple[str, str], str] = {}
        for prompt, user in targets:
            gen_user = user if per_user else "*"
            key = unit_key("gen", decoder.config_key(), self.policy.fingerprint,
                           h.key(cfg.shots) if h is not None else None, prompt_key(prompt), gen_user, cfg.seed,
                           cfg.max_new_tokens)
            units.setdefault(key, (prompt, gen_user))
            slot[(prompt_key(prompt), user)] = key
        todo = self.units.missing(list(units))
        self.units.reused["generate"] += len(units) - len(todo)
        if todo:
            rm = h.adapted(cfg.shots) if h is not None else None
            reqs = [GenRequest(units[k][0], units[k][1], seed=_seed(cfg.seed, k)) for k in todo]
            bar = progress(total=len(reqs), desc=f"decode {label}", unit="gen")
            for batch_keys, batch in zip(batched(todo, cfg.batch_size), batched(reqs, cfg.batch_size), strict=True):
                gens = decoder.generate(self.policy, batch, rm, max_new_tokens=cfg.max_new_tokens)
                for k, g in zip(batch_keys, gens, strict=True):
                    self.units.store.put_json(k, {"text": g.text, "n_tokens": len(g.token_ids), "finished": g.finished})
                    self.units.computed["generate"] += 1
                bar.update(len(batch))
            bar.close()
        texts = {k: self.units.store.get_json(k)["text"] for k in units}
        return {s: texts[k] for s, k in slot.items()}

    def _downstream(self, handles: list[MethodHandle]) -> dict[str, Any]:
        from perbench import registry

        targets = self._eval_targets()
        if not targets:
            return {}
        outputs: dict[str, dict[tuple[str, str], str]] = {}
        guides: dict[str, MethodHandle] = {}
        for d in self.cfg.decoders:
            cls = registry.decoders.get(d.name)
            if not cls.uses_rm:
                outputs[d.label()] = self._generate(d, None, targets, d.label())
                continue
            for h in handles:
                if self.cfg.guide_with is not None and h.label not in self.cfg.guide_with:
                    continue
                if h.baseline:
                    continue
                if not h.is_feature_rm:
                    self.skipped_combos.append({"decoder": d.label(), "method": h.label,
                                                "reason": "decoder needs a frozen-feature RM (per-prefix rewards)"})
                    continue
                label = f"{d.label()}[{h.label}]"
                outputs[label] = self._generate(d, h, targets, label)
                guides[label] = h
        return self._score_outputs(outputs, guides, targets)

    def _score_outputs(self, outputs: dict[str, dict[tuple[str, str], str]], guides: dict[str, MethodHandle],
                       targets: list[tuple[Prompt, str]]) -> dict[str, Any]:
        from perbench.metrics.rubric import rubric_satisfaction
        from perbench.metrics.stats import bootstrap_by_group, pair_weighted
        from perbench.metrics.text import rouge
        from perbench.rewards.base import ScoreItem

        bench = self.bench
        refs = {(prompt_key(r.prompt), r.user_id): r.text for r in bench.references}
        zero_label = next((lab for lab in outputs if lab.startswith("zero_shot")), None)
        result: dict[str, Any] = {}
        for label, texts in outputs.items():
            rows = []
            for prompt, user in targets:
                pk = prompt_key(prompt)
                text = texts[(pk, user)]
                u = bench.users[user]
                row: dict[str, Any] = {"kind": "generation", "decoder": label, "user_id": user, "seen": u.seen,
                                       "prompt": prompt_text(prompt), "text": text, "words": len(text.split())}
                if u.rubric:
                    rs = rubric_satisfaction(text, u)
                    row["rubric_satisfaction"], row["rubric_all"] = rs["satisfaction"], rs["all"]
                if (pk, user) in refs:
                    rg = rouge([text], [refs[(pk, user)]])
                    row["rouge1"], row["rougeL"] = float(rg["rouge1"][0]), float(rg["rougeL"][0])
                rows.append(row)
            if label in guides and zero_label is not None:
                h = guides[label]

                def compute(label: str = label, h: MethodHandle = h) -> dict[str, np.ndarray]:
                    rm = h.adapted(self.cfg.shots)
                    mine = rm.score([ScoreItem(u, p, outputs[label][(prompt_key(p), u)]) for p, u in targets])
                    base = rm.score([ScoreItem(u, p, outputs[zero_label][(prompt_key(p), u)]) for p, u in targets])
                    return {"guided": mine, "zero_shot": base}

                key = h.key(self.cfg.shots, "winrate", label, zero_label,
                            [unit_key(prompt_key(p), u, outputs[label][(prompt_key(p), u)],
                                      outputs[zero_label][(prompt_key(p), u)]) for p, u in targets])
                s = self.units.arrays("win_rate", key, compute)
                for row, a, b in zip(rows, s["guided"], s["zero_shot"], strict=True):
                    row["rm_win"] = 1.0 if a > b else (0.5 if a == b else 0.0)
            self.samples.extend(rows)
            summary: dict[str, Any] = {"n": len(rows)}
            users = [r["user_id"] for r in rows]
            for metric in ("rubric_satisfaction", "rubric_all", "rouge1", "rougeL", "rm_win", "words"):
                vals = np.array([r[metric] for r in rows if metric in r], dtype=np.float64)
                if not len(vals):
                    continue
                us = [r["user_id"] for r in rows if metric in r]
                lo, hi = bootstrap_by_group(vals, us, pair_weighted, n_boot=self.cfg.bootstrap, seed=self.cfg.seed)
                entry: dict[str, Any] = {"mean": float(vals.mean()), "ci": [lo, hi], "n": len(vals)}
                for group, flag in (("seen", True), ("unseen", False)):
                    g = np.array([r[metric] for r in rows if metric in r and r["seen"] == flag], dtype=np.float64)
                    entry[group] = float(g.mean()) if len(g) else None
                summary[metric] = entry
            summary["users"] = len(set(users))
            summary["guide"] = guides[label].label if label in guides else None
            result[label] = summary
        return result


def _seed(base: int, key: str) -> int:
    return (base * 1_000_003 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)) % (2**31)
