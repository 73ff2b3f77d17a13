"""The ``rl`` phase: fine-tune the policy against each chosen reward model with GRPO (one run per (RM, user),
or per RM with every user pooled), then evaluate the trained policy exactly like a decoder.

Its generations join the downstream table as ``rl[METHOD]`` (cells ``rl:QUALITY``), so the selection analysis
ranks RMs by their RL outcome next to their inference-time outcomes. Each trained run (LoRA weights, the
per-user reward normalisation, reward and KL per step) is a content-keyed unit; so is each generation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.data.records import Prompt, prompt_key
from perbench.runner.methods import MethodHandle
from perbench.runner.state import RunState
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.training import BaseSample, RLPhase, RLRun

LABEL = "rl"


@dataclass(frozen=True)
class RLJob:
    """One training run: a reward model and the (prompt, user) pairs of one user (or of all users)."""

    method: MethodHandle
    group: str
    rows: tuple[tuple[Prompt, str], ...]

    @property
    def label(self) -> str:
        return f"{LABEL}[{self.method.label}]"

    @property
    def users(self) -> list[str]:
        return sorted({u for _, u in self.rows})


class Training:
    def __init__(self, state: RunState) -> None:
        self.s = state
        self._samples: dict[str, list[BaseSample]] = {}

    @cached_property
    def phase(self) -> RLPhase | None:
        """The config's ``rl:`` key, parsed once (None: the phase is off)."""
        from perbench.training import RLPhase

        return None if self.s.cfg.rl is None else RLPhase.from_dict(self.s.cfg.rl)

    def jobs(self, handles: list[MethodHandle], targets: list[tuple[Prompt, str]]) -> list[RLJob]:
        """Every (RM, group) to train: the configured RMs (``rl.methods``, default all that fit) × the users
        evaluated downstream, each trained on their own train prompts (an unseen user: their shots' prompts)."""
        from perbench.training import plan_groups

        phase = self.phase
        if phase is None:
            return []
        chosen = set(phase.check_methods([h.label for h in handles]))
        users = sorted({u for _, u in targets})
        rows: list[tuple[Prompt, str]] = []
        for u in users:
            pairs = self.s.bench.fewshot(u, self.s.cfg.shots) if u in self.s.bench.unseen_users else None
            mine = pairs if pairs is not None else [p for p in self.s.bench.train_pairs() if p.user_id == u]
            rows += [(p.prompt, u) for p in mine]
        groups = plan_groups(phase.spec, rows, users)
        return [
            RLJob(h, g, tuple(r))
            for h in handles
            if h.label in chosen and not self.s.unfittable(h)
            for g, r in groups.items()
        ]

    def _key(self, job: RLJob) -> str:
        phase = self.phase
        assert phase is not None
        rows = sorted((prompt_key(p), u) for p, u in job.rows)
        return job.method.key(job.method.shots, "rl", phase.spec.to_dict(), self.s.policy.fingerprint, job.group, rows)

    def train(self, job: RLJob) -> RLRun:
        """The trained run of ``job``: trained once, stored as one unit (metadata travels as JSON bytes)."""
        from perbench.training import RLRun, base_samples, rm_reward, train_policy

        phase = self.phase
        assert phase is not None

        def compute() -> dict[str, np.ndarray]:
            rows = list(job.rows)
            if job.group not in self._samples:  # the normalisation's base samples serve every RM of a group
                self._samples[job.group] = base_samples(self.s.policy, rows, phase.spec)
            reward = rm_reward(job.method.adapted(job.method.shots), identity=job.method.key(job.method.shots))
            run = train_policy(
                self.s.policy,
                reward,
                rows,
                phase.spec,
                self.s.run_dir / "rl",
                samples=[s for s in self._samples[job.group] if s.user_id in job.users],
            )
            meta, arrays = run.to_record()
            return {**arrays, "meta_json": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}

        got = self.s.units.arrays("rl", self._key(job), compute)
        meta = json.loads(bytes(got["meta_json"]).decode())
        return RLRun.from_record(meta, {k: v for k, v in got.items() if k != "meta_json"})

    def run(
        self, handles: list[MethodHandle], targets: list[tuple[Prompt, str]]
    ) -> tuple[dict[str, dict[tuple[str, str], str]], dict[str, MethodHandle], dict[str, Any]]:
        """Generations of every trained policy for its users' targets, the RM behind each label, and the
        training record per label (runs by group: summary, reward/KL history, normalisation, notes)."""
        from perbench.models.generate import GenRequest
        from perbench.training import generate_with

        outputs: dict[str, dict[tuple[str, str], str]] = {}
        guides: dict[str, MethodHandle] = {}
        info: dict[str, Any] = {}
        for job in self.jobs(handles, targets):
            run = self.train(job)
            mine = [(p, u) for p, u in targets if u in job.users]
            keys = {
                unit_key("rl-gen", run.fingerprint, prompt_key(p), u, self.s.cfg.max_new_tokens): (p, u)
                for p, u in mine
            }
            todo = self.s.units.missing(list(keys), phase="generate_rl")
            if todo:
                reqs = [GenRequest(keys[k][0], keys[k][1], seed=0) for k in todo]
                gens = generate_with(run, self.s.policy, reqs, self.s.cfg.max_new_tokens)
                for k, g in zip(todo, gens, strict=True):
                    self.s.units.put_generation("generate_rl", k, g)
            texts = self.s.units.texts(keys)
            outputs.setdefault(job.label, {}).update({(prompt_key(p), u): texts[k] for k, (p, u) in keys.items()})
            guides[job.label] = job.method
            self.s.families[job.label] = (LABEL, job.method.label)
            info.setdefault(job.label, {"method": job.method.label, "runs": {}})["runs"][job.group] = {
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
        return outputs, guides, info
