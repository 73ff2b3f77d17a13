"""What a generation is asked and what it gives, shared by the token loop (:mod:`perbench.models.generate`) and
a policy served by an inference endpoint (:mod:`perbench.models.endpoint`)."""

from __future__ import annotations

from dataclasses import dataclass

from perbench.data.records import Prompt


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    finished: bool  # stopped at EOS (else hit max_new_tokens)


@dataclass(frozen=True)
class GenRequest:
    prompt: Prompt
    user_id: str
    seed: int  # per-request seed: sampled outputs do not depend on how requests are batched
