"""The decoder interface: one class per decoding strategy (see ``perbench list decoders``)."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from perbench.models.generation import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel


class Decoder(ABC):
    name: ClassVar[str] = "decoder"
    uses_rm: ClassVar[bool] = False
    #: whether it reads the policy's next-token logits or hidden states (then the policy must run in process; a
    #: decoder that only asks for generated text also runs on a policy served by an inference endpoint)
    needs_logits: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        self.params = params

    def config_key(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.params], sort_keys=True).encode()).hexdigest()[:16]

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.name}({extra})" if extra else self.name

    def reward_weight(self, rm: object) -> float | None:
        """The weight w this decoder puts on the guiding RM's reward r_u: the decoder approximates the tilted
        policy π(y | x)·exp(w·r_u(x, y)), and policy accuracy compares chosen and rejected under that same w.
        None: the decoder applies no weight (no RM, or a pick by r_u alone as in Best-of-N)."""
        return None

    @abstractmethod
    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]: ...
