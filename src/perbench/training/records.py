"""The record of one RL run (:class:`RLRun`): LoRA weights, per-user reward normalisation, per-step history,
content fingerprint; storable as (JSON metadata, arrays)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perbench.training.reward import UserNorm
from perbench.training.spec import RLSpec


@dataclass
class RLRun:
    """One trained (RM, user group): the LoRA weights and how training went.

    ``history`` has one row per optimizer step: ``reward_raw`` (mean RM score of the step's rollouts),
    ``reward_norm`` (mean per-user z-score: the base policy averages 0), ``kl`` (TRL's per-token estimate
    exp(q) − q − 1, q = log π_ref − log π, averaged over the step's completion tokens; computed by a probe
    forward when ``beta`` is 0), ``loss``, ``entropy``, ``completion_tokens``, ``grad_norm``, ``seconds`` (the
    step's wall time)."""

    spec: RLSpec
    fingerprint: str
    base_fingerprint: str
    reward_identity: str
    users: list[str]
    n_prompts: int
    skipped_prompts: int
    normalisation: dict[str, UserNorm]
    history: list[dict[str, float | None]]
    lora_state: dict[str, np.ndarray]
    runtime_s: float
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self, tail: int = 3) -> dict[str, float | None]:
        """Start vs end of training: raw and normalised reward of the first step and of the last ``tail``
        steps, their gains, and the last steps' KL (the training batches' view; held-out numbers come from
        :func:`~perbench.training.policy.generate_with` and :func:`~perbench.training.policy.measure_kl`)."""

        def mean(key: str, rows: list[dict[str, float | None]]) -> float | None:
            vals = [float(v) for r in rows if (v := r.get(key)) is not None]
            return float(np.mean(vals)) if vals else None

        first, last = self.history[:1], self.history[-tail:]
        out = {
            "reward_raw_start": mean("reward_raw", first),
            "reward_raw_end": mean("reward_raw", last),
            "reward_norm_start": mean("reward_norm", first),
            "reward_norm_end": mean("reward_norm", last),
            "kl_end": mean("kl", last),
        }
        for k in ("raw", "norm"):
            a, b = out[f"reward_{k}_start"], out[f"reward_{k}_end"]
            out[f"reward_{k}_gain"] = None if a is None or b is None else b - a
        return out

    def to_record(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able metadata, arrays): what a content-keyed store needs to rebuild the run."""
        keys = sorted(self.lora_state)
        meta: dict[str, Any] = {
            "spec": self.spec.to_dict(),
            "fingerprint": self.fingerprint,
            "base_fingerprint": self.base_fingerprint,
            "reward_identity": self.reward_identity,
            "users": self.users,
            "n_prompts": self.n_prompts,
            "skipped_prompts": self.skipped_prompts,
            "normalisation": {u: vars(n) for u, n in self.normalisation.items()},
            "history": self.history,
            "runtime_s": self.runtime_s,
            "versions": self.versions,
            "notes": self.notes,
            "lora_keys": keys,
        }
        arrays = {f"lora{i}": self.lora_state[k] for i, k in enumerate(keys)}
        return meta, arrays

    @classmethod
    def from_record(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> RLRun:
        return cls(
            spec=RLSpec.from_dict(meta["spec"]),
            fingerprint=meta["fingerprint"],
            base_fingerprint=meta["base_fingerprint"],
            reward_identity=meta["reward_identity"],
            users=list(meta["users"]),
            n_prompts=int(meta["n_prompts"]),
            skipped_prompts=int(meta["skipped_prompts"]),
            normalisation={u: UserNorm(**n) for u, n in meta["normalisation"].items()},
            history=list(meta["history"]),
            lora_state={k: arrays[f"lora{i}"] for i, k in enumerate(meta["lora_keys"])},
            runtime_s=float(meta["runtime_s"]),
            versions=dict(meta["versions"]),
            notes=list(meta["notes"]),
        )
