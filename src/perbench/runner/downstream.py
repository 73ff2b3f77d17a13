"""Downstream: generations of every decoder (guided by every reward model it can use) for the evaluated
(prompt, user) targets, each generated once and cached by content; Best-of-N curves over one shared pool."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perbench.config import Component
from perbench.data.records import Prompt, prompt_key
from perbench.progress import progress
from perbench.runner.methods import MethodHandle
from perbench.runner.scoring import QUALITY_METRICS, Scoring
from perbench.runner.state import RunState, seed_for
from perbench.runner.training import Training
from perbench.runner.units import unit_key


@dataclass(frozen=True)
class System:
    """One downstream system: a decoder, the RM guiding it (None for RM-free decoders), its label."""

    spec: Component
    method: MethodHandle | None
    label: str
    family: str  # the decoder's name in cells (``family:metric``)
    pooled: bool  # re-ranks a shared sample pool (Best-of-N)


class Downstream:
    def __init__(self, state: RunState) -> None:
        self.s = state
        self.scoring = Scoring(state)
        self.training = Training(state)

    def eval_targets(self) -> list[tuple[Prompt, str]]:
        """(prompt, user) pairs evaluated downstream: test prompts × users with test pairs on them."""
        by_prompt: dict[str, tuple[Prompt, list[str]]] = {}
        for p in self.s.bench.test_pairs():
            entry = by_prompt.setdefault(prompt_key(p.prompt), (p.prompt, []))
            if p.user_id not in entry[1]:
                entry[1].append(p.user_id)
        keys = sorted(by_prompt)
        rng = np.random.default_rng(self.s.cfg.seed)
        if self.s.cfg.max_test_prompts is not None and len(keys) > self.s.cfg.max_test_prompts:
            keys = sorted(rng.choice(keys, self.s.cfg.max_test_prompts, replace=False).tolist())
        out = []
        for k in keys:
            prompt, users = by_prompt[k]
            users = sorted(users)
            if self.s.cfg.max_gen_users is not None and len(users) > self.s.cfg.max_gen_users:
                users = sorted(rng.choice(users, self.s.cfg.max_gen_users, replace=False).tolist())
            out += [(prompt, u) for u in users]
        return out

    def _decoder(self, spec: Component) -> Any:
        """Build a decoder; decoders that read the users' own data (ICL) get the benchmark, decoders that keep
        sample pools (Best-of-N) this process's sample store."""
        from perbench import registry

        decoder = registry.decoders.get(spec.name)(**spec.params)
        if hasattr(decoder, "bind_benchmark"):
            decoder.bind_benchmark(self.s.bench, shots=self.s.cfg.shots)
        if hasattr(decoder, "pool"):
            decoder.store = self.s.stores.samples
        return decoder

    def _requests(self, decoder: Any, targets: list[tuple[Prompt, str]]) -> list[Any]:
        """One request per target for decoders that share one seed per prompt (Best-of-N's sample pool)."""
        from perbench.models.generate import GenRequest

        return [GenRequest(p, u, seed=seed_for(self.s.cfg.seed, prompt_key(p))) for p, u in targets]

    def _generate(
        self, decoder_spec: Component, h: MethodHandle | None, targets: list[tuple[Prompt, str]], label: str
    ) -> dict[tuple[str, str], str]:
        """Generate each (prompt, user) unit once; user-agnostic decoders generate once per prompt."""
        from perbench.models.generate import GenRequest

        cfg = self.s.cfg
        decoder = self._decoder(decoder_spec)
        own_data = bool(getattr(decoder, "per_user", False))  # the prompt depends on the user's own data
        per_user = (h is not None and not h.user_agnostic) or own_data
        shared_seed = bool(getattr(decoder, "shared_seed", False))
        extra = [self.s.bench.fingerprint()] if own_data else []
        units: dict[str, tuple[Prompt, str]] = {}
        slot: dict[tuple[str, str], str] = {}
        for prompt, user in targets:
            gen_user = user if per_user else "*"
            key = unit_key(
                "gen",
                decoder.config_key(),
                self.s.policy.fingerprint,
                h.key(cfg.shots) if h is not None else None,
                prompt_key(prompt),
                gen_user,
                cfg.seed,
                cfg.max_new_tokens,
                *extra,
            )
            units.setdefault(key, (prompt, gen_user))
            slot[(prompt_key(prompt), user)] = key
        todo = self.s.units.missing(list(units), phase="generate")
        self.s.units.reused["generate"] += len(units) - len(todo)
        if todo:
            rm = h.adapted(cfg.shots) if h is not None else None
            reqs = [
                GenRequest(
                    units[k][0],
                    units[k][1],
                    seed=seed_for(cfg.seed, prompt_key(units[k][0]) if shared_seed else k),
                )
                for k in todo
            ]
            bar = progress(total=len(reqs), desc=f"decode {label}", unit="gen")

            def generate(batch: Sequence[tuple[str, GenRequest]]) -> list[None]:
                gens = decoder.generate(self.s.policy, [r for _, r in batch], rm, max_new_tokens=cfg.max_new_tokens)
                for (k, _), g in zip(batch, gens, strict=True):
                    self.s.units.put_generation("generate", k, g)
                bar.update(len(batch))
                return [None] * len(batch)

            self.s.batcher("generate").run(list(zip(todo, reqs, strict=True)), generate)
            bar.close()
            self._count_samples(decoder)
        texts = self.s.units.texts(units)
        return {s: texts[k] for s, k in slot.items()}

    def _count_samples(self, decoder: Any) -> None:
        if getattr(decoder, "sampled", 0):
            self.s.units.computed["bon_samples"] += int(decoder.sampled)
            decoder.sampled = 0
        if getattr(decoder, "reused", 0):
            self.s.units.reused["bon_samples"] += int(decoder.reused)
            decoder.reused = 0

    def systems(self, handles: list[MethodHandle]) -> tuple[list[System], list[dict[str, str]]]:
        """Every (decoder, guiding RM) the config asks for, and the combinations that cannot run, with why."""
        from perbench import registry
        from perbench.rewards.base import FeatureRM

        out: list[System] = []
        skipped: list[dict[str, str]] = []
        names = [d.name for d in self.s.cfg.decoders]
        for d in self.s.cfg.decoders:
            cls = registry.decoders.get(d.name)
            # cells name a decoder by its registry name unless the config lists that name twice (then its label)
            family = d.name if names.count(d.name) == 1 else d.label()
            if not cls.uses_rm:
                out.append(System(d, None, d.label(), family, False))
                continue
            for h in handles:
                if self.s.cfg.guide_with is not None and h.label not in self.s.cfg.guide_with:
                    continue
                if self.s.unfittable(h):
                    skipped.append({"decoder": d.label(), "method": h.label, "reason": "no train pairs"})
                    continue
                check = getattr(cls, "rm_problem", None)
                problem = (
                    check(h.cls)
                    if check is not None
                    else (None if issubclass(h.cls, FeatureRM) else "needs per-prefix rewards (a FeatureRM)")
                )
                if problem:
                    skipped.append({"decoder": d.label(), "method": h.label, "reason": problem})
                    continue
                pooled = bool(getattr(cls, "shared_seed", False) and hasattr(cls, "pool"))
                out.append(System(d, h, f"{d.label()}[{h.label}]", family, pooled))
        return out, skipped

    def generate(self, system: System, targets: list[tuple[Prompt, str]]) -> dict[tuple[str, str], str]:
        """The system's generations for the targets it can serve (users its RM can score)."""
        h = system.method
        if h is not None:
            na = self.s.not_applicable(h)
            targets = [t for t in targets if t[1] not in na]
        return self._generate(system.spec, h, targets, system.label)

    def pool(self, spec: Component, targets: list[tuple[Prompt, str]]) -> None:
        """Sample (or find cached) the Best-of-N pool of decoder ``spec`` for the targets."""
        decoder = self._decoder(spec)
        decoder.pool(self.s.policy, self._requests(decoder, targets), max_new_tokens=self.s.cfg.max_new_tokens)
        self._count_samples(decoder)

    def run(self, handles: list[MethodHandle]) -> dict[str, Any]:
        targets = self.eval_targets()
        if not targets:
            return {}
        systems, skipped = self.systems(handles)
        self.s.skipped_combos += skipped
        outputs = {sys.label: self.generate(sys, targets) for sys in systems}
        guides = {sys.label: sys.method for sys in systems if sys.method is not None}
        self.s.families = {sys.label: (sys.family, sys.method.label if sys.method else sys.family) for sys in systems}
        if self.s.cfg.rl is not None:  # policies fine-tuned against each RM, evaluated like decoders
            rl_outputs, rl_guides, self.s.rl_info = self.training.run(handles, targets)
            outputs.update(rl_outputs)
            guides.update(rl_guides)
        result = self.scoring.score_outputs(outputs, guides, targets)
        bon = {sys.label: (sys.spec, sys.method) for sys in systems if sys.pooled and sys.method is not None}
        if bon:
            for label, curves in self._bon_curves(bon, targets).items():
                result[label]["bon_curve"] = curves
        return result

    def _bon_curves(
        self, bon: dict[str, tuple[Component, MethodHandle]], targets: list[tuple[Prompt, str]]
    ) -> dict[str, dict[str, Any]]:
        """Quality vs N for every (Best-of-N decoder, RM): one sample pool per decoder (sampled once, cached),
        each sample's quality computed once, each RM only scores the pool."""
        from perbench.decoding.best_of_n import BestOfN, bon_curve, pick_best

        cfg = self.s.cfg
        users = [u for _, u in targets]
        out: dict[str, dict[str, Any]] = {}
        pools: dict[str, tuple[list[Any], list[list[Any]], dict[str, np.ndarray]]] = {}
        for label, (spec, h) in bon.items():
            na = self.s.not_applicable(h)
            keep = np.array([u not in na for u in users], bool)
            decoder = self._decoder(spec)
            pk = decoder.config_key()
            if pk not in pools:
                reqs = self._requests(decoder, targets)
                pool = decoder.pool(self.s.policy, reqs, max_new_tokens=cfg.max_new_tokens)
                self._count_samples(decoder)
                n = len(pool[0]) if pool else 0
                qkey = unit_key(
                    "bon_quality",
                    pk,
                    self.s.policy.fingerprint,
                    cfg.seed,
                    cfg.max_new_tokens,
                    self.s.bench.fingerprint(),
                    [prompt_key(p) + "|" + u for p, u in targets],
                    self.s.judge_lm.fingerprint if self.s.judge is not None else None,
                )

                def quality(pool: list[list[Any]] = pool, n: int = n) -> dict[str, np.ndarray]:
                    flat = [g.text for row in pool for g in row]
                    rows = self.scoring.quality(flat, [t for t in targets for _ in range(n)])
                    names = sorted({m for r in rows for m in r})
                    return {
                        m: np.array([r.get(m, np.nan) for r in rows], np.float64).reshape(len(pool), n) for m in names
                    }

                pools[pk] = (reqs, pool, self.s.units.arrays("bon_quality", qkey, quality))
            reqs, pool, qual = pools[pk]

            def scores(
                h: MethodHandle = h, reqs: list[Any] = reqs, pool: list[list[Any]] = pool
            ) -> dict[str, np.ndarray]:
                return {"scores": np.stack(BestOfN.score_pool(h.adapted(cfg.shots), reqs, pool))}

            skey = h.key(
                cfg.shots,
                "bon_scores",
                pk,
                self.s.policy.fingerprint,
                cfg.seed,
                cfg.max_new_tokens,
                [prompt_key(p) + "|" + u for p, u in targets],
            )
            S = self.s.units.arrays("bon_scores", skey, scores)["scores"]
            curves: dict[str, Any] = {}
            family, method = self.s.families[label]
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
                    self.s.cells.add(method, f"{family}:bon_gain_{metric}", users[i], prompt_key(targets[i][0]), gain)
            out[label] = curves
        return out
