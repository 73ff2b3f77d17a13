"""Zero-shot decoding: the policy alone, greedy (default) or sampled (temperature, top-p)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from perbench.decoding.base import Decoder
from perbench.models.generation import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel


class ZeroShot(Decoder):
    name: ClassVar[str] = "zero_shot"
    needs_logits: ClassVar[bool] = False

    def __init__(self, sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, **params: Any) -> None:
        super().__init__(**({"sample": True, "temperature": temperature, "top_p": top_p} if sample else {}), **params)
        self.sample, self.temperature, self.top_p = sample, temperature, top_p

    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]:
        from perbench.models.generate import generate_plain  # torch: imported when something is generated

        return generate_plain(
            policy, requests, max_new_tokens, sample=self.sample, temperature=self.temperature, top_p=self.top_p
        )
