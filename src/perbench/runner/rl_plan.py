"""Planning of the ``rl`` phase (:mod:`perbench.runner.training`): the arms, the run groups and training seeds
of every job, the prompt view of ``context_items``, each run's reward and content key, and the trained run itself
(one unit per run)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.data.records import Prompt, prompt_key
from perbench.errors import PerbenchError
from perbench.runner.methods import MethodHandle
from perbench.runner.state import RunState
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.data.records import Benchmark
    from perbench.training import BaseSample, PromptView, RewardFn, RLPhase, RLRun

LABEL = "rl"
PLACEBO = "rl_placebo"
SHUFFLED = "rl_shuffled"
RANDOM = "rl_random"
BASE = "rl_base"
MODES = ("greedy", "sampled")
#: metrics every arm is summarised and compared on (the quality metrics plus length)
EXTRA = ("rubric_all", "words")


def mode_label(label: str, mode: str) -> str:
    """An arm's label in an evaluation mode: ``rl[mpu]`` (greedy), ``rl_sampled[mpu]`` (sampled)."""
    if mode == "greedy":
        return label
    head, sep, tail = label.partition("[")
    return f"{head}_sampled{sep}{tail}"


@dataclass(frozen=True)
class Arm:
    """What a group of runs is trained with: an RM (``kind`` "rm"), or a placebo reward (the RM it permutes, or
    None for the random reward)."""

    label: str
    kind: str
    method: MethodHandle | None


@dataclass(frozen=True)
class RLJob:
    """One training run: an arm, the (prompt, user) pairs of one user (or of all users), a training seed."""

    arm: Arm
    group: str
    rows: tuple[tuple[Prompt, str], ...]
    seed: int

    @property
    def label(self) -> str:
        return self.arm.label

    @property
    def method(self) -> MethodHandle | None:
        return self.arm.method

    @property
    def name(self) -> str:
        return f"{self.label}:{self.group}:seed{self.seed}"

    @property
    def users(self) -> list[str]:
        return sorted({u for _, u in self.rows})


@dataclass(frozen=True)
class UserContext:
    """The prompt view of ``context_items``: each user's first k profile items and train pairs in every policy
    prompt, the prompts of the pairs shown (never trained on), and what the benchmark declares as user context."""

    view: PromptView
    shown: dict[str, frozenset[str]]
    record: dict[str, Any]


def user_context(bench: Benchmark, k: int, shots: int) -> UserContext:
    """The ICL decoder's prompt with ``k`` items of each kind, the same for every prompt of a user: their first ``k``
    profile items and their first ``k`` train pairs (request + preferred response) in front of the request. The
    decoder is bound like every decoder that reads users' own data (:meth:`Benchmark.context_view` at the run's
    ``shots``): it holds user views, never the answer key, and an unseen user's pairs are among the shots every
    RM adapts from."""
    from perbench.decoding.icl import ICL
    from perbench.models.generation import GenRequest

    allowed = bench.context_view(shots)
    first = {u: pairs[:k] for u, pairs in allowed.pairs.items()}
    icl = ICL(k=k, retrieval="random", format="chosen", profile_k=k)
    icl.bind(allowed.users, [p for pairs in first.values() for p in pairs])
    memo: dict[tuple[str, str], Prompt] = {}

    def view(prompt: Prompt, user: str) -> Prompt:
        key = (prompt_key(prompt), user)
        if key not in memo:  # seed 0 for every prompt: one order of the items per user
            memo[key] = icl.build_prompt(GenRequest(prompt, user, seed=0))
        return memo[key]

    # the prompts of the pairs shown are not trained on
    shown = {u: frozenset(prompt_key(p.prompt) for p in pairs) for u, pairs in first.items() if pairs}
    declared = dict(bench.meta.get("user_context") or {})
    record = {
        "items": k,
        "shows": "each user's first k profile items and first k train pairs (an unseen user's among their shots)",
        "declared_policy": declared.get("policy"),
        "declared": declared.get("description"),
    }
    return UserContext(view, shown, record)


#: texts of one arm: mode -> training seed -> (prompt key, user) -> one text per sample (greedy: one)
Texts = dict[str, dict[int, dict[tuple[str, str], list[str]]]]


class Planning:
    """What the rl phase trains: its arms, groups and jobs, each run's reward and key, and the trained runs."""

    def __init__(self, state: RunState) -> None:
        self.s = state
        self._samples: dict[tuple[str, int], list[BaseSample]] = {}

    @cached_property
    def phase(self) -> RLPhase | None:
        """The config's ``rl:`` key, parsed once (None: the phase is off)."""
        from perbench.training import RLPhase

        return None if self.s.cfg.rl is None else RLPhase.from_dict(self.s.cfg.rl)

    # ------------------------------------------------------------------ what to train
    @cached_property
    def context(self) -> UserContext | None:
        """The prompt view of ``context_items`` (None: prompts as they are)."""
        phase = self.phase
        if phase is None or phase.context_items == 0:
            return None
        return user_context(self.s.bench, phase.context_items, self.s.cfg.shots)

    def _shown(self, prompt: Prompt, user: str) -> Prompt:
        ctx = self.context
        return prompt if ctx is None else ctx.view(prompt, user)

    def arms(self, handles: list[MethodHandle]) -> list[Arm]:
        """The RM arms (``rl.methods``, default every method that fits) and the placebo arm(s)."""
        phase = self.phase
        if phase is None:
            return []
        chosen = set(phase.check_methods([h.label for h in handles]))
        rms = [h for h in handles if h.label in chosen and not self.s.unfittable(h)]
        arms = [Arm(f"{LABEL}[{h.label}]", "rm", h) for h in rms]
        if rms and phase.placebo == "random":
            arms.append(Arm(PLACEBO, "placebo", None))
        elif phase.placebo == "shuffled":
            arms += [Arm(f"{SHUFFLED}[{h.label}]", "placebo", h) for h in rms]
        return arms

    def groups(self, targets: list[tuple[Prompt, str]]) -> dict[str, list[tuple[Prompt, str]]]:
        """The training (prompt, user) pairs of each run group, one plan for every arm and seed: each evaluated
        user's train prompts (an unseen user: the prompts of its shots), less the prompts shown in context."""
        from perbench.training import plan_groups

        phase = self.phase
        assert phase is not None
        bench, ctx = self.s.bench, self.context
        users = sorted({u for _, u in targets})
        rows: list[tuple[Prompt, str]] = []
        for u in users:
            pairs = bench.fewshot(u, self.s.cfg.shots) if u in bench.unseen_users else None
            mine = pairs if pairs is not None else [p for p in bench.train_pairs() if p.user_id == u]
            skip = ctx.shown.get(u, frozenset()) if ctx is not None else frozenset()
            rows += [(p.prompt, u) for p in mine if prompt_key(p.prompt) not in skip]
        return plan_groups(dataclasses.replace(phase.spec, seed=phase.plan_seed), rows, users)

    def jobs(self, handles: list[MethodHandle], targets: list[tuple[Prompt, str]]) -> list[RLJob]:
        """Every (arm, group, training seed) to train."""
        phase = self.phase
        if phase is None:
            return []
        groups = self.groups(targets)
        return [
            RLJob(a, g, tuple(r), s)
            for a in self.arms(handles)
            for g, r in groups.items()
            for s in phase.training_seeds
        ]

    def _stand_ins(self, targets: list[tuple[Prompt, str]]) -> dict[str, str]:
        """The shuffled placebo's user permutation: over the trained users, or every evaluated user when fewer
        than two are trained."""
        from perbench.training import derangement

        planned = sorted({u for rows in self.groups(targets).values() for _, u in rows})
        pool = planned if len(planned) > 1 else sorted({u for _, u in targets})
        if len(pool) < 2:
            raise PerbenchError("rl.placebo: shuffled needs at least 2 evaluated users (one's RM rewards another)")
        return derangement(pool)

    def _identity(self, job: RLJob, targets: list[tuple[Prompt, str]]) -> str:
        from perbench.training.reward import RandomReward, shuffled_identity

        if job.method is None:
            return RandomReward(job.seed).identity
        shots = job.method.shots
        if job.arm.kind == "rm":
            return job.method.key(shots)
        stand_in = self._stand_ins(targets)
        return shuffled_identity(job.method.key(shots), {u: stand_in[u] for u in job.users})

    def _reward(self, job: RLJob, targets: list[tuple[Prompt, str]]) -> RewardFn:
        from perbench.training import RandomReward, ShuffledUsers, rm_reward

        if job.method is None:
            return RandomReward(job.seed)
        rm = rm_reward(job.method.adapted(job.method.shots), identity=job.method.key(job.method.shots))
        if job.arm.kind == "rm":
            return rm
        stand_in = self._stand_ins(targets)
        return ShuffledUsers(rm, {u: stand_in[u] for u in job.users})

    def key(self, job: RLJob, targets: list[tuple[Prompt, str]]) -> str:
        """The content key of a training run (the unit its trained weights are stored under)."""
        phase = self.phase
        assert phase is not None
        spec = dataclasses.replace(phase.spec, seed=job.seed)
        rows = sorted((prompt_key(p), u) for p, u in job.rows)
        shown = [prompt_key(self._shown(p, u)) for p, u in job.rows] if self.context is not None else None
        identity = self._identity(job, targets)
        return unit_key("rl", identity, spec.to_dict(), self.s.policy.fingerprint, job.group, rows, shown)

    def train(self, job: RLJob, targets: list[tuple[Prompt, str]]) -> RLRun:
        """The trained run of ``job``: trained once, stored as one unit (metadata travels as JSON bytes)."""
        from perbench.training import RLRun, base_samples, train_policy

        phase = self.phase
        assert phase is not None
        spec = dataclasses.replace(phase.spec, seed=job.seed)
        ctx = self.context
        view = ctx.view if ctx is not None else None
        identity = self._identity(job, targets)
        key = self.key(job, targets)

        def compute() -> dict[str, np.ndarray]:
            sample_key = (job.group, job.seed)
            if sample_key not in self._samples:  # the normalisation's base samples serve every arm of a group
                self._samples[sample_key] = base_samples(self.s.policy, list(job.rows), spec, view)
            with tempfile.TemporaryDirectory(prefix="perbench-rl-") as scratch:  # the trainer's; nothing is kept
                run = train_policy(
                    self.s.policy,
                    self._reward(job, targets),
                    list(job.rows),
                    spec,
                    Path(scratch),
                    reward_identity=identity,
                    samples=[s for s in self._samples[sample_key] if s.user_id in job.users],
                    view=view,
                )
            meta, arrays = run.to_record()
            return {**arrays, "meta_json": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}

        got = self.s.units.arrays("rl", key, compute)
        meta = json.loads(bytes(got["meta_json"]).decode())
        return RLRun.from_record(meta, {k: v for k, v in got.items() if k != "meta_json"})
