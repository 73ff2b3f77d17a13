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
"""

from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.data.records import Prompt, prompt_key, prompt_text
from perbench.errors import PerbenchError
from perbench.progress import progress
from perbench.runner.methods import MethodHandle
from perbench.runner.state import RunState, seed_for
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.data.records import Benchmark
    from perbench.models.generate import GenRequest
    from perbench.models.loader import LoadedLM
    from perbench.training import BaseSample, PromptView, RewardFn, RLPhase, RLRun
    from perbench.training.evaluation import ArmValues

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
    from perbench.models.generate import GenRequest

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


class Training:
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

    # ------------------------------------------------------------------ evaluation
    def _sample_seed(self, kind: str, prompt: Prompt, user: str, j: int) -> int:
        """The seed of the j-th sample of a (prompt, user): the same for every arm and training seed."""
        return seed_for(self.s.cfg.seed, unit_key(kind, prompt_key(prompt), user, j))

    def _decode(self, fp: str, lm: Callable[[], LoadedLM], items: list[tuple[Prompt, str]]) -> dict[str, Any]:
        """Greedy and ``eval_samples`` sampled generations of one policy: mode -> (prompt key, user) -> texts."""
        from perbench.models.generate import GenRequest
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
        from perbench.models.generate import GenRequest

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
        return _Assemble(self, phase, targets, texts, by_label, reference).build(arms, self.notes())

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
        if len(phase.training_seeds) > 1:
            out.append(
                "the selection analysis sees one value per (user, prompt) for rl:* (the mean over training seeds), "
                "so its CIs leave the seed variance out; the CIs here and in the downstream rl rows include it"
            )
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


class _Assemble:
    """Quality, RM scores, per-arm values, summaries, comparisons, cells and samples of the rl phase."""

    def __init__(
        self,
        training: Training,
        phase: RLPhase,
        targets: list[tuple[Prompt, str]],
        texts: dict[str, Texts],
        arms: dict[str, Arm],
        reference: tuple[str, dict[tuple[str, str], dict[str, Any]]] | None,
    ) -> None:
        self.t, self.s, self.phase = training, training.s, phase
        self.texts, self.arms, self.reference = texts, arms, reference
        self.prompts = {prompt_key(p): p for p, _ in targets}
        self.n_boot, self.seed = self.s.cfg.bootstrap, self.s.cfg.seed

    def quality(self) -> dict[tuple[str, str, str], dict[str, float]]:
        """Ground-truth quality of every distinct (prompt key, user, text), computed once."""
        from perbench.runner.scoring import Scoring

        items = sorted(
            {
                (pk, u, t)
                for modes in self.texts.values()
                for seeds in modes.values()
                for cells in seeds.values()
                for (pk, u), ts in cells.items()
                for t in ts
            }
        )
        # content-keyed in the unit store: the rl_eval unit computes it, the assembly (and a rerun) reads it
        rows = Scoring(self.s).generation_quality(
            "rl", [t for _, _, t in items], [(self.prompts[pk], u) for pk, u, _ in items]
        )
        out = {}
        for (pk, u, t), q in zip(items, rows, strict=True):
            out[(pk, u, t)] = {**q, "words": float(len(t.split()))}
        return out

    def rm_scores(self, label: str) -> dict[tuple[str, str, str], float]:
        """The arm's RM's score of each of its texts and of the base policy's texts on its cells."""
        from perbench.rewards.base import ScoreItem

        h = self.arms[label].method
        assert h is not None
        shots = h.shots
        mine = self.texts[label]
        cells = {c for seeds in mine.values() for per in seeds.values() for c in per}
        items = {
            (pk, u, t) for seeds in mine.values() for per in seeds.values() for (pk, u), ts in per.items() for t in ts
        }
        items |= {
            (pk, u, t)
            for per in self.texts[BASE].values()
            for (pk, u), ts in per[0].items()
            if (pk, u) in cells
            for t in ts
        }
        order = sorted(items)
        key = h.key(shots, "rl-rm-scores", [unit_key(pk, u, t) for pk, u, t in order])

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(shots)
            return {"scores": rm.score_distinct([ScoreItem(u, self.prompts[pk], t) for pk, u, t in order])}

        scores = self.s.units.arrays("win_rate", key, compute)["scores"]
        return {it: float(v) for it, v in zip(order, scores, strict=True)}

    def values(self, label: str, mode: str, quality: dict[tuple[str, str, str], dict[str, float]]) -> ArmValues:
        """The arm's (S, n) matrix per metric in ``mode``: each entry the mean over the cell's samples."""
        from perbench.metrics.win_rate import win_outcomes
        from perbench.runner.scoring import QUALITY_METRICS
        from perbench.training.evaluation import ArmValues

        per_seed = self.texts[label][mode]
        seeds = tuple(sorted(per_seed))
        cells = sorted({c for s in seeds for c in per_seed[s]})
        for s in seeds:
            if set(per_seed[s]) != set(cells):
                raise PerbenchError(f"{label}: training seed {s} was evaluated on other cells than the others")
        metrics = [*QUALITY_METRICS, *EXTRA]
        vals = {m: np.full((len(seeds), len(cells)), np.nan) for m in metrics}
        scores = self.rm_scores(label) if self.arms[label].kind == "rm" else None
        if scores is not None:
            vals |= {m: np.full((len(seeds), len(cells)), np.nan) for m in ("rm_win", "rm_gain")}
        base = self.texts[BASE][mode][0]
        for i, s in enumerate(seeds):
            for c, (pk, u) in enumerate(cells):
                ts = per_seed[s][(pk, u)]
                for m in metrics:
                    got = [quality[(pk, u, t)].get(m, np.nan) for t in ts]
                    vals[m][i, c] = float(np.mean(got))
                if scores is not None:
                    mine = np.array([scores[(pk, u, t)] for t in ts])
                    ref = np.array([scores[(pk, u, t)] for t in base[(pk, u)]])
                    wins = win_outcomes(mine, ref)  # NaN: an invalid score, left out
                    vals["rm_win"][i, c] = float(wins[~np.isnan(wins)].mean()) if (~np.isnan(wins)).any() else np.nan
                    vals["rm_gain"][i, c] = float(np.mean(mine - ref))
        cell_ids = tuple((u, pk) for pk, u in cells)
        return ArmValues(label, seeds, cell_ids, {m: v for m, v in vals.items() if np.isfinite(v).any()})

    def placebo_of(self, label: str) -> str | None:
        arm = self.arms[label]
        if arm.kind != "rm":
            return None
        if self.phase.placebo == "random":
            return PLACEBO
        if self.phase.placebo == "shuffled" and arm.method is not None:
            return f"{SHUFFLED}[{arm.method.label}]"
        return None

    def build(self, arms_info: dict[str, dict[str, Any]], notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        from perbench.runner.scoring import QUALITY_METRICS
        from perbench.training.evaluation import compare, summarise

        quality = self.quality()
        seen = {u: rec.seen for u, rec in self.s.bench.users.items()}
        metrics = [*QUALITY_METRICS, *EXTRA, "rm_win", "rm_gain"]
        evaluation: dict[str, dict[str, Any]] = {}
        down: dict[str, Any] = {}
        modes = MODES if self.phase.eval_samples > 0 else ("greedy",)
        for mode in modes:
            values = {label: self.values(label, mode, quality) for label in self.texts}
            table: dict[str, Any] = {}
            for label, v in values.items():
                entry = summarise(v, seen, metrics=metrics, n_boot=self.n_boot, seed=self.seed)
                vs: dict[str, Any] = {}
                refs = {"base": BASE if label != BASE else None, "placebo": self.placebo_of(label)}
                if self.arms[label].kind == "rm" and self.phase.kl_matched and self.arms[label].method is not None:
                    refs["kl_matched"] = f"{RANDOM}[{self.arms[label].method.label}]"  # type: ignore[union-attr]
                for role, ref in refs.items():
                    if ref is not None and ref in values:
                        vs[role] = {"against": ref, **compare(v, values[ref], n_boot=self.n_boot, seed=self.seed)}
                table[label] = {"seeds": len(v.seeds), "cells": len(v.cells), **entry, "vs": vs}
                if self.arms[label].kind in ("rm", "placebo"):
                    down[mode_label(label, mode)] = self.downstream_entry(label, mode, v, entry)
                self.add_cells(label, mode, v)
            evaluation[mode] = table
        self.add_samples(quality)
        ctx = self.t.context
        spec = self.phase.spec
        info = {
            "design": {
                "algorithm": spec.algorithm,
                "group": spec.group,
                "seeds": list(self.phase.training_seeds),
                "placebo": self.phase.placebo,
                "kl_matched": self.phase.kl_matched,
                "evaluation": {"greedy": True, "samples": self.phase.eval_samples, "temperature": spec.temperature},
                "kl": {
                    "samples_per_cell": self.phase.kl_samples,
                    "estimator": "Σ_t KL(π(·|x,y<t) ‖ π_base(·|x,y<t)) along y ~ π, nats per sequence",
                },
                "user_context": None if ctx is None else ctx.record,
                "ci": (
                    "cells resampled as every downstream CI (users × prompts, or its fallback), and each arm's "
                    "training seeds resampled on top; comparisons are paired on the cells both arms cover"
                ),
            },
            "arms": arms_info,
            "evaluation": evaluation,
            "notes": notes,
        }
        return down, info

    def downstream_entry(self, label: str, mode: str, v: ArmValues, entry: dict[str, Any]) -> dict[str, Any]:
        """The arm as a downstream row (the decoders' format), with its paired gain over zero-shot (greedy)."""
        from perbench.training.evaluation import ArmValues, compare

        arm = self.arms[label]
        out: dict[str, Any] = {
            "n": len(v.cells),
            **copy.deepcopy(entry),  # its own dicts: a later pass over the downstream rows leaves ``rl`` as it is
            "users": len({u for u, _ in v.cells}),
            "prompts": len({p for _, p in v.cells}),
            "guide": arm.method.label if arm.kind == "rm" and arm.method is not None else None,
            "seeds": len(v.seeds),
        }
        if self.reference is not None and mode == "greedy":
            ref_label, rows = self.reference
            have = [(u, pk) for u, pk in v.cells if (pk, u) in rows]
            ref = ArmValues(
                ref_label,
                (0,),
                tuple(have),
                {m: np.array([[float(rows[(pk, u)].get(m, np.nan)) for u, pk in have]]) for m in v.values},
            )
            out["vs"] = {ref_label: compare(v, ref, n_boot=self.n_boot, seed=self.seed)}
        return out

    def add_cells(self, label: str, mode: str, v: ArmValues) -> None:
        """An RM arm's cells for the selection analysis: per (user, prompt), the mean over training seeds (and
        samples) of each quality metric and of the RM's win rate over the base policy."""
        from perbench.runner.scoring import QUALITY_METRICS

        arm = self.arms[label]
        if arm.kind != "rm" or arm.method is None:
            return
        family = "rl" if mode == "greedy" else "rl_sampled"
        for m in (*QUALITY_METRICS, "rm_win"):
            if m in v.values:
                per_cell = v.values[m].mean(0)
                for (u, pk), value in zip(v.cells, per_cell, strict=True):
                    self.s.cells.add(arm.method.label, f"{family}:{m}", u, pk, float(value))

    def add_samples(self, quality: dict[tuple[str, str, str], dict[str, float]]) -> None:
        """One samples.jsonl row per generation of every arm (training seed and sample index included)."""
        from perbench.metrics.rubric import aspect_report

        bench, ctx = self.s.bench, self.t.context
        for label, modes in self.texts.items():
            base = self.arms[label].kind == "base"
            for mode, per_seed in modes.items():
                for s, per in per_seed.items():
                    for (pk, u), ts in per.items():
                        user = bench.users[u]
                        for j, t in enumerate(ts):
                            row: dict[str, Any] = {
                                "kind": "generation",
                                "decoder": mode_label(label, mode),
                                "user_id": u,
                                "seen": user.seen,
                                "prompt_id": pk,
                                "prompt": prompt_text(self.prompts[pk]),
                                "text": t,
                                **quality[(pk, u, t)],
                                "rl_seed": None if base else s,
                                "sample": j if mode == "sampled" else None,
                            }
                            if ctx is not None:  # what the policy saw: the user's context, then the request
                                row["policy_prompt"] = prompt_text(ctx.view(self.prompts[pk], u))
                            if user.rubric:
                                row["rubric_aspects"] = aspect_report(t, user)
                                row["user_rubric"] = "; ".join(f"{ap.aspect}: {ap.pole}" for ap in user.rubric)
                            self.s.samples.append(row)
