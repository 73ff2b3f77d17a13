"""Zero-shot decoding: the policy alone, greedy (default) or sampled (temperature, top-p)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from perbench.decoding.base import Decoder, Generation, GenRequest, decode_loop, row_generators, sample_top_p
from perbench.decoding.stepper import CachedLM
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel


class ZeroShot(Decoder):
    name: ClassVar[str] = "zero_shot"

    def __init__(self, sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, **params: Any) -> None:
        super().__init__(**({"sample": True, "temperature": temperature, "top_p": top_p} if sample else {}), **params)
        self.sample, self.temperature, self.top_p = sample, temperature, top_p

    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]:
        gens = row_generators(requests, policy.policy.device) if self.sample else []

        def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, None]:
            lp = state.logprobs(hidden)
            if not self.sample:
                return lp.argmax(-1), None
            lp = torch.log_softmax(lp / self.temperature, dim=-1)  # temperature first, then the nucleus
            return sample_top_p(lp, self.top_p, gens), None

        return decode_loop(policy, requests, max_new_tokens, choose)
