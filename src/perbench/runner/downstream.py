"""Downstream: what every decoder (guided by every system it can use) gives each user, each generation made once
and cached by content.

Which cells each kind of system is evaluated on:

- **pooled** Best-of-N (``runner/pooled.py``): every (user, test prompt) cell with ground truth (``pool_targets``),
  from one shared sample pool per prompt, for every system;
- **per-cell** decoders, whose output depends on the user (ARGS, GenARM guided by a personalized RM, ICL):
  ``eval_targets`` (``max_test_prompts`` × ``max_gen_users``), all at once, or in adaptive rounds
  (``runner/adaptive.py``) when the config has ``adaptive:``;
- decoders that read neither an RM nor the user (zero-shot): one generation per prompt, on every cell that any
  other system is evaluated on, so each paired difference to zero-shot uses every cell it can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perbench.config import Component
from perbench.data.records import Prompt, prompt_key
from perbench.progress import progress
from perbench.runner.methods import MethodHandle
from perbench.runner.pooled import Pooled
from perbench.runner.scoring import Scoring
from perbench.runner.state import RunState, guide_problem, seed_for
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
    plain: bool  # reads neither an RM nor the user: one generation per prompt

    @property
    def per_cell(self) -> bool:
        """Generates for each (user, prompt) cell on its own (adaptive rounds apply)."""
        return not self.pooled and not self.plain


class Downstream:
    def __init__(self, state: RunState) -> None:
        self.s = state
        self.scoring = Scoring(state)
        self.training = Training(state)
        self.pooled = Pooled(state, self.scoring)

    # ------------------------------------------------------------------ which cells
    def eval_targets(self) -> list[tuple[Prompt, str]]:
        """(prompt, user) cells of the per-cell decoders: test prompts × users with test pairs on them."""
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

    def pool_targets(self) -> list[tuple[Prompt, str]]:
        """Every (prompt, user) cell with ground truth on the test prompts (``max_pool_prompts`` of them): a user
        with a checkable rubric on every prompt (the checkers apply to any text); otherwise where the user has a
        reference for the prompt, or, with a judge, answer-key aspects and a test pair on it."""
        from perbench.metrics.judge import rubric_aspects

        bench = self.s.bench
        prompts: dict[str, Prompt] = {}
        asked: set[tuple[str, str]] = set()
        for p in bench.test_pairs():
            prompts.setdefault(prompt_key(p.prompt), p.prompt)
            asked.add((prompt_key(p.prompt), p.user_id))
        keys = sorted(prompts)
        limit = self.s.cfg.max_pool_prompts
        if limit is not None and len(keys) > limit:
            rng = np.random.default_rng([self.s.cfg.seed, 1])
            keys = sorted(rng.choice(keys, limit, replace=False).tolist())
        refs = {(prompt_key(r.prompt), r.user_id) for r in bench.references}
        judged = {u for u, rec in bench.users.items() if self.s.judge is not None and rubric_aspects(rec)}
        if bench.meta.get("ground_truth"):  # exact reward of any text (PersonalLLM's simulated users)
            judged |= {u for u, rec in bench.users.items() if (rec.answer_key or {}).get("weights")}
        return [
            (prompts[k], u)
            for k in keys
            for u in sorted(bench.users)
            if bench.users[u].rubric or (k, u) in refs or (u in judged and (k, u) in asked)
        ]

    def plain_targets(self, systems: list[System]) -> list[tuple[Prompt, str]]:
        """The cells of RM-free, user-free decoders: the union of every other system's cells."""
        cells = list(self.eval_targets())
        if any(sys.pooled for sys in systems):
            have = {(prompt_key(p), u) for p, u in cells}
            cells += [t for t in self.pool_targets() if (prompt_key(t[0]), t[1]) not in have]
        return cells

    # ------------------------------------------------------------------ systems
    def _decoder(self, spec: Component) -> Any:
        """Build a decoder; decoders that read the users' own data (ICL) get the benchmark's context view, decoders
        that keep sample pools (Best-of-N) this process's sample store."""
        from perbench import registry

        decoder = registry.decoders.get(spec.name)(**spec.params)
        if hasattr(decoder, "bind_context"):  # user views and allowed train pairs: no answer key reachable
            decoder.bind_context(self.s.bench.context_view(self.s.cfg.shots))
        if hasattr(decoder, "pool"):
            decoder.store = self.s.stores.samples
        return decoder

    def systems(self, handles: list[MethodHandle]) -> tuple[list[System], list[dict[str, str]]]:
        """Every (decoder, guiding RM) the config asks for, and the combinations that cannot run, with why.
        Pooled Best-of-N re-ranks with every system; ``guide_with`` limits the per-cell decoders."""
        from perbench import registry

        out: list[System] = []
        skipped: list[dict[str, str]] = []
        names = [d.name for d in self.s.cfg.decoders]
        for d in self.s.cfg.decoders:
            cls = registry.decoders.get(d.name)
            # cells name a decoder by its registry name unless the config lists that name twice (then its label)
            family = d.name if names.count(d.name) == 1 else d.label()
            if not cls.uses_rm:
                out.append(System(d, None, d.label(), family, False, not getattr(cls, "per_user", False)))
                continue
            pooled = bool(getattr(cls, "shared_seed", False) and hasattr(cls, "pool"))
            for h in handles:
                if not pooled and self.s.cfg.guide_with is not None and h.label not in self.s.cfg.guide_with:
                    continue
                if self.s.unfittable(h):
                    skipped.append({"decoder": d.label(), "method": h.label, "reason": "no train pairs"})
                    continue
                problem = guide_problem(cls, h.cls)
                if problem:
                    skipped.append({"decoder": d.label(), "method": h.label, "reason": problem})
                    continue
                out.append(System(d, h, f"{d.label()}[{h.label}]", family, pooled, False))
        return out, skipped

    def zero_shot(self, systems: list[System]) -> System | None:
        return next((sys for sys in systems if sys.plain and sys.label.startswith("zero_shot")), None)

    # ------------------------------------------------------------------ generation
    def _generate(
        self, decoder_spec: Component, h: MethodHandle | None, targets: list[tuple[Prompt, str]], label: str
    ) -> dict[tuple[str, str], str]:
        """Generate each (prompt, user) unit once; user-agnostic decoders generate once per prompt."""
        from perbench.models.chat import prompt_size
        from perbench.models.generation import GenRequest

        cfg = self.s.cfg
        decoder = self._decoder(decoder_spec)
        units, slot = self.unit_keys(decoder, h, targets)
        todo = self.s.units.missing(list(units), phase="generate")
        self.s.units.reused["generate"] += len(units) - len(todo)
        if todo:
            rm = h.adapted(h.shots) if h is not None else None
            reqs = [GenRequest(units[k][0], units[k][1], seed=seed_for(cfg.seed, k)) for k in todo]
            bar = progress(total=len(reqs), desc=f"decode {label}", unit="gen")

            def generate(batch: Sequence[tuple[str, GenRequest]]) -> list[None]:
                gens = decoder.generate(self.s.policy, [r for _, r in batch], rm, max_new_tokens=cfg.max_new_tokens)
                for (k, _), g in zip(batch, gens, strict=True):
                    self.s.units.put_generation("generate", k, g)
                bar.update(len(batch))
                return [None] * len(batch)

            policy, new = self.s.policy, cfg.max_new_tokens

            def length(item: tuple[str, GenRequest]) -> int:  # sizes (and, off a CPU, orders) the batches
                return prompt_size(policy, item[1].prompt) + new

            self.s.batcher("generate").run(list(zip(todo, reqs, strict=True)), generate, length)
            bar.close()
        texts = self.s.units.texts(units)
        return {s: texts[k] for s, k in slot.items()}

    def unit_keys(
        self, decoder: Any, h: MethodHandle | None, targets: list[tuple[Prompt, str]]
    ) -> tuple[dict[str, tuple[Prompt, str]], dict[tuple[str, str], str]]:
        """The generation units of ``targets`` (key -> (prompt, user or "*")) and each target's unit."""
        cfg = self.s.cfg
        own_data = bool(getattr(decoder, "per_user", False))  # the prompt depends on the user's own data
        per_user = (h is not None and not h.user_agnostic) or own_data
        extra = [self.s.bench_fingerprint()] if own_data else []
        units: dict[str, tuple[Prompt, str]] = {}
        slot: dict[tuple[str, str], str] = {}
        for prompt, user in targets:
            gen_user = user if per_user else "*"
            key = unit_key(
                "gen",
                decoder.config_key(),
                self.s.policy.fingerprint,
                h.key(h.shots) if h is not None else None,
                prompt_key(prompt),
                gen_user,
                cfg.seed,
                cfg.max_new_tokens,
                *extra,
            )
            units.setdefault(key, (prompt, gen_user))
            slot[(prompt_key(prompt), user)] = key
        return units, slot

    def generate(self, system: System, targets: list[tuple[Prompt, str]]) -> dict[tuple[str, str], str]:
        """The system's generations for the targets it can serve (users its RM can score)."""
        h = system.method
        if h is not None:
            na = self.s.not_applicable(h)
            targets = [t for t in targets if t[1] not in na]
        return self._generate(system.spec, h, targets, system.label)

    def targets_of(self, system: System, systems: list[System]) -> list[tuple[Prompt, str]]:
        """The cells a non-pooled system is evaluated on (before adaptive rounds)."""
        return self.plain_targets(systems) if system.plain else self.eval_targets()

    # ------------------------------------------------------------------ units of the plan
    def pool(self, spec: Component, handles: list[MethodHandle]) -> None:
        """The pool unit of Best-of-N decoder ``spec``: sample its pool, extract φ, compute its quality."""
        users = [h for h in handles if not self.s.unfittable(h)]
        self.pooled.prepare(self.pooled.decoder(spec), self.pool_targets(), users)

    def pooled_scores(self, system: System, systems: list[System]) -> None:
        """The unit of one pooled system: its scores of the pool (and of the zero-shot outputs)."""
        assert system.method is not None
        zero = self.zero_shot(systems)
        texts = self.generate(zero, self.plain_targets(systems)) if zero is not None else None
        pool = self.pooled.pool(self.pooled.decoder(system.spec), self.pool_targets())
        self.pooled.scores(system.method, pool, texts)

    def rounds(self, spec: Component, systems: list[System]) -> Any:
        """The adaptive rounds of per-cell decoder ``spec`` (computed, or read from the store)."""
        from perbench.runner.adaptive import Rounds

        mine = [sys for sys in systems if sys.per_cell and sys.spec == spec]
        return Rounds(self, spec, mine).run()

    def zero_outputs(self, systems: list[System]) -> tuple[str, dict[tuple[str, str], str]] | None:
        """The zero-shot decoder's label and outputs (what win rates compare against), None without one."""
        zero = self.zero_shot(systems)
        return None if zero is None else (zero.label, self.generate(zero, self.plain_targets(systems)))

    def system_unit(self, system: System, systems: list[System]) -> None:
        """The generate unit of ``system``: a pooled system's scores of the pool, else its generations on the
        cells it is evaluated on, their quality and (guided) its RM's win rate over zero-shot."""
        if system.pooled:
            self.pooled_scores(system, systems)
            return
        asked = self.targets_of(system, systems)
        texts = self.generate(system, asked)
        zero = self.zero_outputs(systems) if system.method is not None else None
        self.scoring.prepare(system.label, texts, asked, system.method, zero)
        zero_shot = self.zero_shot(systems)
        guided = any(sys.method is not None and sys.method.is_feature_rm for sys in systems)
        if zero_shot is not None and system.label == zero_shot.label and guided and self.s.extractor is not None:
            # φ of the zero-shot outputs, which every feature RM's win rate reads: computed once, here, and handed
            # with this unit to the units that depend on it (rather than extracted again in each of them)
            self.s.extractor.last([(p, texts[(prompt_key(p), u)]) for p, u in asked if (prompt_key(p), u) in texts])

    def adaptive_unit(self, spec: Component, systems: list[System]) -> None:
        """The adaptive unit of per-cell decoder ``spec``: its rounds, then each system's quality and win rate
        on the cells the rounds gave it."""
        rounds = self.rounds(spec, systems)
        mine = [sys for sys in systems if sys.per_cell and sys.spec == spec]
        zero = self.zero_outputs(systems) if any(sys.method is not None for sys in mine) else None
        for sys in mine:
            asked = rounds.cells_of(sys.label)
            self.scoring.prepare(sys.label, self.generate(sys, asked), asked, sys.method, zero)

    def training_unit(self, handles: list[MethodHandle], kind: str, name: str) -> None:
        """The unit of one RL run (``rl``, the job's name: trained and stored), of its evaluation (``rl_eval`` with
        the job's name: its generations, KL and KL-matched update), of the base policy's generations (``rl_eval:
        base``), or the RL summary (``rl_eval:rl``: the quality and RM scores of every evaluated text), each stored
        for the assembly to read."""
        targets = self.eval_targets()
        jobs = self.training.jobs(handles, targets)
        if kind == "rl":
            self.training.train(next(j for j in jobs if j.name == name), targets)
        elif name == "base":
            self.training.evaluate_base(jobs, targets)
        elif name != "rl":
            self.training.evaluate(next(j for j in jobs if j.name == name), targets)
        else:
            self.training.run(handles, targets)

    # ------------------------------------------------------------------ assembly
    def run(self, handles: list[MethodHandle]) -> dict[str, Any]:
        targets = self.eval_targets()
        systems, skipped = self.systems(handles)
        pool_targets = self.pool_targets() if any(sys.pooled for sys in systems) else []
        if not targets and not pool_targets:
            return {}
        self.s.skipped_combos += skipped
        self.s.families = {sys.label: (sys.family, sys.method.label if sys.method else sys.family) for sys in systems}
        asked: dict[str, list[tuple[Prompt, str]]] = {}
        outputs: dict[str, dict[tuple[str, str], str]] = {}
        adaptive: dict[str, Any] = {}
        for sys in systems:
            if sys.pooled:
                continue
            if sys.per_cell and self.s.cfg.adaptive is not None:
                label = sys.spec.label()
                if label not in adaptive:
                    adaptive[label] = self.rounds(sys.spec, systems)
                asked[sys.label] = adaptive[label].cells_of(sys.label)
            else:
                asked[sys.label] = self.targets_of(sys, systems)
            outputs[sys.label] = self.generate(sys, asked[sys.label])
        guides = {sys.label: sys.method for sys in systems if sys.method is not None and not sys.pooled}
        result = self.scoring.score_outputs(outputs, guides, asked)
        pooled = [sys for sys in systems if sys.pooled]
        if pooled and not pool_targets:
            for spec in dict.fromkeys(sys.spec.label() for sys in pooled):
                self.s.skipped_combos.append(
                    {"decoder": spec, "method": "*", "reason": "no (user, test prompt) cell has ground truth"}
                )
        elif pooled:
            zero = self.zero_shot(systems)
            result.update(self.pooled.evaluate(pooled, pool_targets, outputs[zero.label] if zero else None))
        self.scoring.add_vs(result)
        if self.s.cfg.rl is not None:  # policies fine-tuned against each RM, evaluated like decoders
            zero = self.zero_shot(systems)
            rows = {(r["prompt_id"], r["user_id"]): r for r in self.scoring.rows.get(zero.label, [])} if zero else {}
            rl_rows, self.s.rl_info = self.training.run(handles, targets, (zero.label, rows) if zero else None)
            result.update(rl_rows)
        for label, rounds in adaptive.items():
            self.s.adaptive[label] = rounds.record()
        order = [sys.label for sys in systems if sys.label in result] + list(result)  # systems first, then rl
        return {label: result[label] for label in dict.fromkeys(order)}
