"""The reward an RL run optimises: a perbench reward model called in process, z-scored per user.

The paper's reference reward server divides scores by 10 and answers 0.5 on a timeout; here the RM runs in
the training process (no timeouts, no fallback value) and each user's rewards are standardised with a mean
and sd measured once, before training, on the base policy's own samples for that user's training prompts.
Those statistics are recorded in the run (:class:`UserNorm`), so every logged reward can be mapped back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from perbench.data.records import Prompt, prompt_key
from perbench.models.generate import GenRequest, batched, generate_plain
from perbench.models.loader import LoadedLM
from perbench.rewards.base import FeatureRM, RewardModel, ScoreItem
from perbench.training.spec import RLSpec


class RewardFn(Protocol):
    """(user ids, prompts, completions) -> one raw reward per row."""

    def __call__(
        self, user_ids: Sequence[str], prompts: Sequence[Prompt], completions: Sequence[str]
    ) -> np.ndarray: ...


#: (prompt, user) -> the prompt the policy sees (e.g. with the user's context); the reward sees the original
PromptView = Callable[[Prompt, str], Prompt]


@dataclass(frozen=True)
class RMReward:
    """A perbench :class:`RewardModel` as a :class:`RewardFn`; ``identity`` names it in run fingerprints."""

    rm: RewardModel
    identity: str
    batch_size: int = 64

    def __call__(self, user_ids: Sequence[str], prompts: Sequence[Prompt], completions: Sequence[str]) -> np.ndarray:
        if not len(user_ids) == len(prompts) == len(completions):
            raise ValueError(
                f"{self.rm.name}: {len(user_ids)} users, {len(prompts)} prompts, {len(completions)} completions"
            )
        items = [ScoreItem(u, p, c) for u, p, c in zip(user_ids, prompts, completions, strict=True)]
        parts = [np.asarray(self.rm.score(chunk), np.float64) for chunk in batched(items, self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float64)


def rm_identity(rm: RewardModel) -> str:
    """Method, hyper-parameters, fitted state and (for feature RMs) backbone: what the RM computes."""
    h = hashlib.sha256()
    h.update(json.dumps([rm.name, rm.config_key()]).encode())
    for key, arr in sorted(rm.state().items()):
        a = np.ascontiguousarray(arr)
        h.update(f"{key}:{a.dtype}:{a.shape}".encode())
        h.update(a.tobytes())
    if isinstance(rm, FeatureRM) and rm.extractor is not None:
        h.update(rm.backbone_fingerprint.encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class RandomReward:
    """A placebo reward: a fixed random function of (user, prompt, completion), standard normal, drawn from a
    hash of them and ``seed``. The same completion always gets the same reward, every user and every seed a
    different function; after the per-user z-scoring it has an RM's scale and carries no information."""

    seed: int

    @property
    def identity(self) -> str:
        return f"placebo:random:{self.seed}"

    def __call__(self, user_ids: Sequence[str], prompts: Sequence[Prompt], completions: Sequence[str]) -> np.ndarray:
        out = []
        for u, p, c in zip(user_ids, prompts, completions, strict=True):
            h = hashlib.sha256(json.dumps([self.seed, u, prompt_key(p), c]).encode()).digest()
            out.append(float(np.random.default_rng(int.from_bytes(h[:8], "little")).standard_normal()))
        return np.array(out, np.float64)


@dataclass(frozen=True)
class ShuffledUsers:
    """A placebo reward: ``reward`` with its users permuted — user u is scored as ``mapping[u]``."""

    reward: RMReward
    mapping: Mapping[str, str]

    @property
    def identity(self) -> str:
        return shuffled_identity(self.reward.identity, self.mapping)

    def __call__(self, user_ids: Sequence[str], prompts: Sequence[Prompt], completions: Sequence[str]) -> np.ndarray:
        missing = sorted(set(user_ids) - set(self.mapping))
        if missing:
            raise ValueError(f"shuffled-user reward: no stand-in user for {missing[:5]}")
        return self.reward([self.mapping[u] for u in user_ids], prompts, completions)


def shuffled_identity(reward_identity: str, mapping: Mapping[str, str]) -> str:
    """The identity of :class:`ShuffledUsers` (computable before the RM is fitted)."""
    return f"placebo:shuffled:{reward_identity}:{json.dumps(sorted(mapping.items()))}"


def derangement(users: Sequence[str]) -> dict[str, str]:
    """Each user -> the next one in sorted order (the last -> the first): nobody keeps their own reward."""
    order = sorted(set(users))
    if len(order) < 2:
        raise ValueError(f"a shuffled-user placebo needs at least 2 users, got {order}")
    return {u: order[(i + 1) % len(order)] for i, u in enumerate(order)}


def rm_reward(rm: RewardModel, identity: str | None = None, batch_size: int = 64) -> RMReward:
    """The RM as a reward function: ``rm.score([ScoreItem(user, prompt, completion), ...])``.

    ``identity`` defaults to :func:`rm_identity` (hash of method, parameters, fitted state, backbone); a caller
    that already keys the fitted RM by content (the runner's method handle) can pass that key instead."""
    return RMReward(rm, identity or rm_identity(rm), batch_size)


@dataclass(frozen=True)
class BaseSample:
    """One base-policy sample for a training (prompt, user): what the per-user normalisation is measured on."""

    prompt: Prompt
    user_id: str
    text: str


@dataclass(frozen=True)
class UserNorm:
    """z = (r − mean) / sd for one user; ``note`` says why sd was replaced by 1 (all samples scored alike)."""

    mean: float
    sd: float
    n: int
    note: str | None = None

    def apply(self, r: float) -> float:
        return (r - self.mean) / self.sd


def sample_seed(seed: int, prompt: Prompt, user_id: str, j: int) -> int:
    h = hashlib.sha256(json.dumps([seed, prompt_key(prompt), user_id, j]).encode()).digest()
    return int.from_bytes(h[:4], "little")


def base_samples(
    policy: LoadedLM, prompts: Sequence[tuple[Prompt, str]], spec: RLSpec, view: PromptView | None = None
) -> list[BaseSample]:
    """``spec.norm_samples`` samples of the base policy per (prompt, user), drawn like the rollouts (temperature
    ``spec.temperature``, no top-k/top-p, ``spec.max_new_tokens``, the prompt as ``view`` shows it to the
    policy), each with its own seed. They depend on the policy and the prompts only, so one set serves every
    RM trained for the same users; each sample keeps the original prompt, the one the reward scores."""
    rows = [(p, u, j) for p, u in prompts for j in range(spec.norm_samples)]
    reqs = [
        GenRequest(view(p, u) if view is not None else p, u, seed=sample_seed(spec.seed, p, u, j)) for p, u, j in rows
    ]
    out: list[BaseSample] = []
    for batch in batched(list(zip(rows, reqs, strict=True)), max(spec.batch_size, 1)):
        gens = generate_plain(
            policy, [r for _, r in batch], spec.max_new_tokens, sample=True, temperature=spec.temperature
        )
        out += [BaseSample(p, u, g.text) for ((p, u, _), _), g in zip(batch, gens, strict=True)]
    return out


def user_norms(reward: RewardFn, samples: Sequence[BaseSample]) -> tuple[dict[str, UserNorm], np.ndarray]:
    """Per-user mean and sd (ddof 1) of the raw rewards of ``samples`` -> (norms, the raw rewards)."""
    raw = np.asarray(
        reward([s.user_id for s in samples], [s.prompt for s in samples], [s.text for s in samples]), np.float64
    )
    if raw.shape != (len(samples),) or not np.isfinite(raw).all():
        raise ValueError(f"the reward returned shape {raw.shape} for {len(samples)} base samples, or non-finite values")
    norms: dict[str, UserNorm] = {}
    users = np.array([s.user_id for s in samples])
    for user in sorted(set(users.tolist())):
        r = raw[users == user]
        if len(r) < 2 or bool((r == r[0]).all()):
            # exact centring (r[0], not a float mean of equal values): a constant reward normalises to exactly 0
            note = f"all {len(r)} base samples got the same reward: sd 0 replaced by 1 (rewards only centred)"
            norms[user] = UserNorm(float(r[0]), 1.0, len(r), note)
        else:
            norms[user] = UserNorm(float(r.mean()), float(r.std(ddof=1)), len(r))
    return norms, raw
