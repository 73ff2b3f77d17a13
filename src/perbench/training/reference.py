"""The KL-matched reference of a trained run: a random LoRA update of the same shape whose KL from the base
policy equals the run's.

A trained policy that satisfies its users' rubrics less than the base policy may only have moved: any update
of that size changes greedy outputs. :func:`random_update` draws, for every adapted module, random factors
A′, B′ of the run's shapes and rescales B′ so that ‖B′A′‖_F = ``scale`` · ‖BA‖_F, the run's own update of
that module (``scale`` 1: the same size, module by module, in a random direction). :func:`kl_matched` then
sets ``scale`` so that the update's KL from the base policy, measured like the run's (:func:`~perbench.
training.policy.measure_kl` on the same requests), matches the run's: KL grows about as scale² for small
updates, so the scale is corrected by √(target / measured) a few times; the KL actually reached is what gets
reported next to the target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perbench.models.generate import GenRequest
from perbench.models.loader import LoadedLM
from perbench.training.policy import measure_kl
from perbench.training.records import RLRun


def _pairs(state: dict[str, np.ndarray]) -> list[tuple[str, str]]:
    """(lora_A key, lora_B key) of every adapted module."""
    out = []
    for key in sorted(state):
        if ".lora_A." in key:
            other = key.replace(".lora_A.", ".lora_B.")
            if other not in state:
                raise ValueError(f"LoRA state has {key} without {other}")
            out.append((key, other))
    if not out:
        raise ValueError("LoRA state holds no lora_A/lora_B pair")
    return out


def update_norms(state: dict[str, np.ndarray]) -> dict[str, float]:
    """‖B·A‖_F per adapted module (keyed by its lora_A key): the size of the run's weight update."""
    return {
        a: float(np.linalg.norm(state[b].astype(np.float64) @ state[a].astype(np.float64))) for a, b in _pairs(state)
    }


def random_update(run: RLRun, scale: float, seed: int) -> RLRun:
    """``run`` with its LoRA replaced by a random one of the same shapes and ``scale`` × its per-module size."""
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be a finite number ≥ 0, got {scale}")
    h = hashlib.sha256(json.dumps([run.fingerprint, seed]).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    state: dict[str, np.ndarray] = {}
    for a_key, b_key in _pairs(run.lora_state):
        A, B = run.lora_state[a_key].astype(np.float64), run.lora_state[b_key].astype(np.float64)
        A2, B2 = rng.standard_normal(A.shape), rng.standard_normal(B.shape)
        size, drawn = float(np.linalg.norm(B @ A)), float(np.linalg.norm(B2 @ A2))
        B2 *= scale * size / drawn if drawn > 0 else 0.0
        state[a_key], state[b_key] = A2.astype(np.float32), B2.astype(np.float32)
    tag = hashlib.sha256(json.dumps([run.fingerprint, "random", seed, repr(float(scale))]).encode()).hexdigest()[:16]
    return dataclasses.replace(
        run,
        fingerprint=tag,
        reward_identity=f"random-update:{run.reward_identity}",
        history=[],
        lora_state=state,
        runtime_s=0.0,
        notes=[f"random LoRA update: {scale:.4g} × the per-module size of run {run.fingerprint}, seed {seed}"],
    )


@dataclass(frozen=True)
class KLMatch:
    """How a random update was matched to a run: the run's KL (the target), the equal-norm update's KL, the
    scale applied, and the KL the rescaled update reached (all in nats per sequence, means over requests)."""

    target_kl: float
    kl_at_equal_norm: float
    scale: float
    kl: float
    note: str | None = None


def kl_matched(
    run: RLRun,
    base: LoadedLM,
    requests: Sequence[GenRequest],
    max_new_tokens: int,
    seed: int,
    *,
    target_kl: float | None = None,
    tolerance: float = 0.2,
    max_rescales: int = 2,
) -> tuple[RLRun, KLMatch]:
    """A random update (:func:`random_update`) rescaled to ``run``'s KL from ``base`` on ``requests`` (measured
    here unless ``target_kl`` is given): from the equal-norm update's KL, scale ← scale·√(target / KL), at most
    ``max_rescales`` times, stopping once the measured KL is within ``tolerance`` (relative) of the target."""
    T = run.spec.temperature

    def kl(policy: RLRun) -> float:
        return float(measure_kl(policy, base, requests, max_new_tokens, temperature=T).mean())

    target = kl(run) if target_kl is None else float(target_kl)
    matched = random_update(run, 1.0, seed)
    k1 = reached = kl(matched)
    scale, note = 1.0, None
    if target <= 0 or k1 <= 0:
        note = f"KL {'of the run' if target <= 0 else 'of the equal-norm update'} is 0: kept the equal-norm update"
        return matched, KLMatch(target, k1, scale, reached, note)
    for _ in range(max_rescales):
        if reached > 0 and abs(reached / target - 1) <= tolerance:
            break
        if reached <= 0:
            note = "the rescaled update's KL measured 0: kept the last scale"
            break
        scale *= math.sqrt(target / reached)
        matched = random_update(run, scale, seed)
        reached = kl(matched)
    return matched, KLMatch(target, k1, scale, reached, note)
