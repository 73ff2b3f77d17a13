"""The ``rl`` phase: fine-tune the policy against each chosen reward model with GRPO or RLOO (one run per
(reward, user) or per reward with every user pooled, once per training seed), then evaluate every trained
policy exactly like a decoder, next to references trained and evaluated the same way.

Arms: ``rl[METHOD]`` (trained with the RM), the placebo (``rl_placebo``: a random reward, or
``rl_shuffled[METHOD]``: the RM with its users permuted), ``rl_random[METHOD]`` (a random LoRA update of the
size and KL of each ``rl[METHOD]`` run) and ``rl_base`` (the untrained policy). Each is decoded greedily and,
with ``eval_samples``, sampled, on the same (prompt, user) cells, with the same prompts (the user's context
in them with ``context_items``). Values, CIs (cells and training seeds resampled) and paired comparisons go
to results.json's ``rl``; the RM arms and the placebo join the downstream table (``rl[METHOD]``,
``rl_sampled[METHOD]``, …), and the RM arms' cells (``rl:QUALITY``, ``rl_sampled:QUALITY``) the selection
analysis. Each trained run, generation, KL measurement and KL match is a content-keyed unit.

The phase in three modules: :mod:`perbench.runner.rl_plan` (arms, jobs, rewards, the trained runs),
this module (the evaluation units: each trained run's generations, KL and KL-matched update), and
:mod:`perbench.runner.rl_assembly` (values, summaries, comparisons, cells and samples).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from perbench.data.records import Prompt, prompt_key
from perbench.progress import progress
from perbench.runner.methods import MethodHandle
from perbench.runner.rl_assembly import Assemble
from perbench.runner.rl_plan import (
    BASE,
    EXTRA,
    LABEL,
    MODES,
    PLACEBO,
    RANDOM,
    SHUFFLED,
    Arm,
    Planning,
    RLJob,
    Texts,
    UserContext,
    mode_label,
    user_context,
)
from perbench.runner.state import seed_for
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.models.generation import GenRequest
    from perbench.models.loader import LoadedLM
    from perbench.training import RLRun

__all__ = [
    "BASE",
    "EXTRA",
    "LABEL",
    "MODES",
    "PLACEBO",
    "RANDOM",
    "SHUFFLED",
    "Arm",
    "RLJob",
    "Texts",
    "Training",
    "UserContext",
    "mode_label",
    "user_context",
]


class Training(Planning):
    """The rl phase: :class:`Planning`'s jobs, trained, evaluated and assembled."""

    # ------------------------------------------------------------------ evaluation
    def _sample_seed(self, kind: str, prompt: Prompt, user: str, j: int) -> int:
        """The seed of the j-th sample of a (prompt, user): the same for every arm and training seed."""
        return seed_for(self.s.cfg.seed, unit_key(kind, prompt_key(prompt), user, j))

    def _decode(self, fp: str, lm: Callable[[], LoadedLM], items: list[tuple[Prompt, str]]) -> dict[str, Any]:
        """Greedy and ``eval_samples`` sampled generations of one policy: mode -> (prompt key, user) -> texts."""
        from perbench.models.generation import GenRequest
        from perbench.training import generate_with

        phase = self.phase
        assert phase is not None
        T, n_new = phase.spec.temperature, self.s.cfg.max_new_tokens
        plan = [("greedy", 0)] + [("sampled", j) for j in range(phase.eval_samples)]
        keys: dict[str, tuple[str, Prompt, str, GenRequest]] = {}
        for mode, j in plan:
            for p, u in items:
                shown = self._shown(p, u)
                seed = self._sample_seed("rl-eval", p, u, j) if mode == "sampled" else 0
                temp = T if mode == "sampled" else None
                k = unit_key("rl-gen", fp, prompt_key(shown), u, mode, j, seed, temp, n_new)
                keys[k] = (mode, p, u, GenRequest(shown, u, seed))
        todo = self.s.units.missing(list(keys), phase="generate_rl")
        self.s.units.reused["generate_rl"] += len(keys) - len(todo)
        for mode in MODES:
            mine = [k for k in todo if keys[k][0] == mode]
            if mine:
                gens = generate_with(
                    lm(), self.s.policy, [keys[k][3] for k in mine], n_new, sample=mode == "sampled", temperature=T
                )
                for k, g in zip(mine, gens, strict=True):
                    self.s.units.put_generation("generate_rl", k, g)
        texts = self.s.units.texts(keys)
        out: dict[str, dict[tuple[str, str], list[str]]] = {m: {} for m in MODES}
        for k, (mode, p, u, _) in keys.items():  # in sample order
            out[mode].setdefault((prompt_key(p), u), []).append(texts[k])
        return out

    def _kl_requests(self, items: list[tuple[Prompt, str]]) -> list[GenRequest]:
        from perbench.models.generation import GenRequest

        phase = self.phase
        assert phase is not None
        return [
            GenRequest(self._shown(p, u), u, self._sample_seed("rl-kl", p, u, j))
            for p, u in items
            for j in range(phase.kl_samples)
        ]

    def _kl(self, run: RLRun, lm: Callable[[], LoadedLM], items: list[tuple[Prompt, str]]) -> float:
        """The run's KL from the base policy on the evaluated prompts (nats per sequence, mean over requests)."""
        from perbench.training import measure_kl

        reqs = self._kl_requests(items)
        n_new = self.s.cfg.max_new_tokens
        key = unit_key("rl-kl", run.fingerprint, [(prompt_key(r.prompt), r.user_id, r.seed) for r in reqs], n_new)
        got = self.s.units.arrays(
            "rl_kl", key, lambda: {"kl": measure_kl(lm(), self.s.policy, reqs, n_new, temperature=run.spec.temperature)}
        )
        return float(got["kl"].mean())

    def _matched(self, run: RLRun, target: float, items: list[tuple[Prompt, str]]) -> tuple[RLRun, dict[str, Any]]:
        """The random update of the run's size, rescaled to its KL (:func:`perbench.training.kl_matched`)."""
        from perbench.training import kl_matched, random_update

        reqs = self._kl_requests(items)
        n_new = self.s.cfg.max_new_tokens
        key = unit_key("rl-match", run.fingerprint, [(prompt_key(r.prompt), r.user_id, r.seed) for r in reqs], n_new)
        rec = self.s.units.json(
            "rl_match",
            key,
            lambda: dataclasses.asdict(kl_matched(run, self.s.policy, reqs, n_new, run.spec.seed, target_kl=target)[1]),
        )
        return random_update(run, float(rec["scale"]), run.spec.seed), dict(rec)

    def run(
        self,
        handles: list[MethodHandle],
        targets: list[tuple[Prompt, str]],
        reference: tuple[str, dict[tuple[str, str], dict[str, Any]]] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Train every job, evaluate every arm, and return (downstream entries of the RM and placebo arms,
        results.json's ``rl`` record). ``reference`` = (label, quality rows by (prompt key, user)) of the
        zero-shot decoder, for the ``vs`` entry of the greedy rows."""
        phase = self.phase
        jobs = self.jobs(handles, targets)
        if phase is None or not jobs:
            return {}, {}
        texts: dict[str, Texts] = {}
        arms: dict[str, dict[str, Any]] = {}
        by_label = {j.label: j.arm for j in jobs}
        bar = progress(total=len(jobs), desc="rl evaluate (greedy, sampled, KL, KL-matched)", unit="run")
        for job in jobs:
            self.evaluate(job, targets, texts, arms, by_label)
            bar.update(1)
        bar.close()
        order = {"rm": 0, "placebo": 1, "kl_matched": 2}
        arms = dict(sorted(arms.items(), key=lambda kv: order.get(str(kv[1]["kind"]), 3)))
        texts[BASE] = {mode: {0: got} for mode, got in self.evaluate_base(jobs, targets).items()}
        by_label[BASE] = Arm(BASE, "base", None)
        return Assemble(self, phase, targets, texts, by_label, reference).build(arms, self.notes())

    def evaluate(
        self,
        job: RLJob,
        targets: list[tuple[Prompt, str]],
        texts: dict[str, Texts] | None = None,
        arms: dict[str, dict[str, Any]] | None = None,
        by_label: dict[str, Arm] | None = None,
    ) -> None:
        """One trained run's evaluation (its greedy and sampled generations, its KL, and for an RM arm the
        KL-matched random update and its generations), every part content-keyed in the unit store: the
        ``rl_eval:JOB`` unit computes it (one per run, in parallel with the others), :meth:`run` reads it. What it
        found goes into ``texts``, ``arms`` and ``by_label`` when given."""
        from perbench.training import trained_lm

        phase = self.phase
        assert phase is not None
        texts = {} if texts is None else texts
        arms = {} if arms is None else arms
        by_label = {} if by_label is None else by_label
        run = self.train(job, targets)
        mine = [(p, u) for p, u in targets if u in job.users]
        lm = _Lazy(partial(trained_lm, run, self.s.policy))
        decoded = self._decode(run.fingerprint, lm, mine)
        info = _run_info(run, job)
        info["kl_eval"] = self._kl(run, lm, mine)
        for mode, got in decoded.items():
            texts.setdefault(job.label, {}).setdefault(mode, {}).setdefault(job.seed, {}).update(got)
        if job.arm.kind == "rm" and phase.kl_matched:
            rand, match = self._matched(run, info["kl_eval"], mine)
            info["kl_match"] = match
            rlabel = f"{RANDOM}[{job.method.label if job.method else ''}]"
            by_label[rlabel] = Arm(rlabel, "kl_matched", job.method)
            got_r = self._decode(rand.fingerprint, _Lazy(partial(trained_lm, rand, self.s.policy)), mine)
            for mode, got in got_r.items():
                texts.setdefault(rlabel, {}).setdefault(mode, {}).setdefault(job.seed, {}).update(got)
            arms.setdefault(rlabel, {"kind": "kl_matched", "method": job.method.label if job.method else None})
            arms[rlabel].setdefault("runs", {})[f"{job.group}|seed{job.seed}"] = {"of": job.label, **match}
        arms.setdefault(job.label, {"kind": job.arm.kind, "method": job.method.label if job.method else None})
        arms[job.label].setdefault("runs", {})[f"{job.group}|seed{job.seed}"] = info

    def evaluate_base(self, jobs: list[RLJob], targets: list[tuple[Prompt, str]]) -> dict[str, Any]:
        """The base policy's greedy and sampled generations on every cell a run trains for (``rl_eval:base``)."""
        cells = [(p, u) for p, u in targets if any(u in j.users for j in jobs)]
        return self._decode(self.s.policy.fingerprint, lambda: self.s.policy, cells)

    def notes(self) -> list[str]:
        """What the design leaves out, stated next to its numbers."""
        phase = self.phase
        assert phase is not None
        out = []
        if phase.spec.group == "all" and self.context is None:
            out.append(
                "group: all without context_items: one policy for every user with nothing about the user in its "
                "prompt, so it cannot personalise"
            )
        if phase.placebo == "none":
            out.append("placebo: none — no row shows what the same training does with an uninformative reward")
        if phase.eval_samples == 0:
            out.append("eval_samples: 0 — the trained policies are evaluated greedily only")
        return out


class _Lazy:
    """A policy built on first use (a run whose generations are all cached never builds its LoRA copy)."""

    def __init__(self, build: Callable[[], LoadedLM]) -> None:
        self.build = build
        self.lm: LoadedLM | None = None

    def __call__(self) -> LoadedLM:
        if self.lm is None:
            self.lm = self.build()
        return self.lm


def _run_info(run: RLRun, job: RLJob) -> dict[str, Any]:
    return {
        "group": job.group,
        "seed": job.seed,
        "users": run.users,
        "prompts": run.n_prompts,
        "skipped_prompts": run.skipped_prompts,
        "summary": run.summary(),
        "history": run.history,
        "normalisation": {u: vars(n) for u, n in run.normalisation.items()},
        "notes": run.notes,
        "runtime_s": round(run.runtime_s, 2),
        "spec": run.spec.to_dict(),
    }
