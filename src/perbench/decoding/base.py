"""The decoder interface and the shared token loop."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch

from perbench.data.records import Prompt
from perbench.decoding.stepper import CachedLM
from perbench.models.chat import encode_prompt
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel

T = TypeVar("T")


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


class Decoder(ABC):
    name: ClassVar[str] = "decoder"
    uses_rm: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = params

    def config_key(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.params], sort_keys=True).encode()).hexdigest()[:16]

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.name}({extra})" if extra else self.name

    @abstractmethod
    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]: ...


def row_generators(requests: Sequence[GenRequest], device: str) -> list[torch.Generator]:
    gens = []
    for r in requests:
        g = torch.Generator(device=device)
        g.manual_seed(r.seed)
        gens.append(g)
    return gens


def sample_rows(scores: torch.Tensor, temperature: float, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """One sample per row from softmax(scores / T) with that row's own generator -> (B,) indices."""
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    return torch.stack([torch.multinomial(probs[b], 1, generator=gens[b])[0] for b in range(len(gens))])


def top_p_filter(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask tokens outside the nucleus (smallest set with cumulative mass ≥ top_p) with -inf."""
    if top_p >= 1.0:
        return logprobs
    sorted_lp, order = logprobs.sort(dim=-1, descending=True)
    cum = sorted_lp.exp().cumsum(-1)
    drop = cum - sorted_lp.exp() >= top_p  # keep the token that crosses the threshold
    sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
    return torch.full_like(logprobs, float("-inf")).scatter(-1, order, sorted_lp)


def sample_top_p(logprobs: torch.Tensor, top_p: float, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """One sample per row from the nucleus (smallest set with cumulative mass ≥ top_p) -> (B,) token ids.

    Sorting once and drawing from each row's nucleus only keeps the multinomial small (a full-vocabulary
    draw per row costs more than a small model's forward on a CPU)."""
    if top_p >= 1.0:
        return sample_rows(logprobs, 1.0, gens)
    # The nucleus almost always lies in the top 256 tokens: take those (cheap), and sort the whole
    # vocabulary only for rows whose top 256 hold less than top_p of the mass (exact either way).
    lp = logprobs.float()
    sorted_lp, order = lp.topk(min(256, lp.shape[-1]), dim=-1)
    if bool((sorted_lp.exp().sum(-1) < top_p).any()):
        sorted_lp, order = lp.sort(dim=-1, descending=True)
    probs = sorted_lp.exp()
    keep = (probs.cumsum(-1) - probs) < top_p  # keeps the token that crosses the threshold
    out = []
    for b in range(len(gens)):
        n = max(int(keep[b].sum()), 1)
        i = torch.multinomial(probs[b, :n], 1, generator=gens[b])[0]
        out.append(order[b, i])
    return torch.stack(out)


def decode_loop(
    policy: LoadedLM,
    requests: Sequence[GenRequest],
    max_new_tokens: int,
    choose: Callable[[CachedLM, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor | None]],
) -> list[Generation]:
    """Run a batched token loop. ``choose(state, hidden, t)`` returns (next tokens (B,), hidden at those
    tokens or None); when it returns a hidden state it has already advanced the cache itself (ARGS with a
    shared backbone), otherwise the loop appends the tokens with one ``step``."""
    state = CachedLM(policy, [encode_prompt(policy.tokenizer, r.prompt) for r in requests])
    eos = torch.tensor(policy.eos_ids, dtype=torch.long, device=state.device)
    hidden = state.prefill()
    B = len(requests)
    out = torch.full((B, max_new_tokens), -1, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool, device=state.device)
    for t in range(max_new_tokens):
        tokens, next_hidden = choose(state, hidden, t)
        out[:, t] = torch.where(done, -1, tokens).cpu()
        done |= torch.isin(tokens, eos)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        hidden = next_hidden if next_hidden is not None else state.step(tokens)
    gens = []
    eos_set = set(policy.eos_ids)
    for b in range(B):
        ids = [int(i) for i in out[b] if i >= 0]
        finished = bool(ids) and ids[-1] in eos_set
        body = ids[:-1] if finished else ids
        gens.append(Generation(policy.tokenizer.decode(body, skip_special_tokens=True).strip(), body, finished))
    return gens


def batched(items: Sequence[T], batch_size: int) -> list[Sequence[T]]:
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
