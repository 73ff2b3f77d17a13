"""Generation primitives shared by every consumer of a policy: requests, the batched token loop, sampling,
and plain (greedy or sampled) generation. Decoders (``perbench.decoding``), judges and LM-based reward
models all build on these, so nothing below ``decoding/`` has to import it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from perbench.models.chat import encode_prompt
from perbench.models.generation import Generation as Generation
from perbench.models.generation import GenRequest as GenRequest
from perbench.models.loader import LoadedLM
from perbench.models.stepper import CachedLM

T = TypeVar("T")


def row_generators(requests: Sequence[GenRequest], device: str = "cpu") -> list[torch.Generator]:
    """One generator per request, seeded by it, on the CPU whatever the model's device: a step draws one uniform per
    row (:func:`draw`), and B draws on a GPU generator are B kernel launches; on the CPU they are a few microseconds
    and one copy. (``device`` is kept for callers; the draws do not depend on it.)"""
    gens = []
    for r in requests:
        g = torch.Generator(device="cpu")
        g.manual_seed(r.seed)
        gens.append(g)
    return gens


def sample_rows(scores: torch.Tensor, temperature: float, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """One sample per row from softmax(scores / T) with that row's own generator -> (B,) indices."""
    return draw(torch.softmax(scores.float() / temperature, dim=-1), gens)


def draw(probs: torch.Tensor, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """One index per row of ``probs`` (B, V; rows need not sum to 1) by inverse CDF, from one uniform of the row's
    own generator -> (B,). ``torch.multinomial`` draws an exponential per vocabulary entry, which on a CPU cost a
    small model's decoding step a seventh of its time; this draws one number per row. A zero-probability entry
    is never drawn."""
    u = torch.stack([torch.rand((), generator=g, device=g.device, dtype=torch.float64) for g in gens])
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    # the first entry whose cumulative mass exceeds u·total (below total even after rounding): its own mass is > 0
    x = torch.minimum(u.to(cdf.device)[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).squeeze(-1)


def sample_top_p(logprobs: torch.Tensor, top_p: float, gens: Sequence[torch.Generator]) -> torch.Tensor:
    """One sample per row from the nucleus (smallest set with cumulative mass ≥ top_p) -> (B,) token ids.

    Each row draws one uniform (:func:`draw`) among its nucleus; tokens outside it get no mass."""
    if top_p >= 1.0:
        return sample_rows(logprobs, 1.0, gens)
    # The nucleus almost always lies in the top 256 tokens: take those (cheap), and sort the whole vocabulary
    # only for the rows whose top 256 hold less than top_p of the mass (exact either way; sorting every row of
    # a 128-row batch cost a small model's step more than its forward).
    lp = logprobs.float()
    top_lp, top_order = lp.topk(min(256, lp.shape[-1]), dim=-1)
    out = torch.empty(len(gens), dtype=torch.long, device=lp.device)
    wide = top_lp.exp().sum(-1) < top_p
    narrow = ~wide
    if bool(narrow.any()):
        picked = [g for g, n in zip(gens, narrow.tolist(), strict=True) if n]
        out[narrow] = _nucleus_draw(top_lp[narrow], top_order[narrow], top_p, picked)
    if bool(wide.any()):
        sorted_lp, order = lp[wide].sort(dim=-1, descending=True)
        out[wide] = _nucleus_draw(sorted_lp, order, top_p, [g for g, w in zip(gens, wide.tolist(), strict=True) if w])
    return out


def _nucleus_draw(
    sorted_lp: torch.Tensor, order: torch.Tensor, top_p: float, gens: Sequence[torch.Generator]
) -> torch.Tensor:
    """One draw per row among the tokens of its nucleus, from log-probs sorted high to low (``order``: their ids)."""
    probs = sorted_lp.exp()
    keep = (probs.cumsum(-1) - probs) < top_p  # keeps the token that crosses the threshold
    keep[:, 0] = True
    i = draw(torch.where(keep, probs, 0.0), gens)
    return order.gather(-1, i[:, None].to(order.device))[:, 0]


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
    return finish(policy, [[int(i) for i in out[b] if i >= 0] for b in range(B)])


def until_stop(rows: Sequence[Sequence[int]], stop: Sequence[int]) -> list[list[int]]:
    """Each row of token ids up to its first ``stop`` token, that token included."""
    ends = set(stop)
    out = []
    for row in rows:
        ids: list[int] = []
        for tok in row:
            ids.append(int(tok))
            if tok in ends:
                break
        out.append(ids)
    return out


def finish(policy: LoadedLM, rows: Sequence[Sequence[int]]) -> list[Generation]:
    """Generations from each row's new token ids (its stop token last, if it stopped)."""
    gens = []
    eos_set = set(policy.eos_ids)
    for ids in rows:
        finished = bool(ids) and ids[-1] in eos_set
        body = list(ids[:-1] if finished else ids)
        gens.append(Generation(policy.tokenizer.decode(body, skip_special_tokens=True).strip(), body, finished))
    return gens


def batched(items: Sequence[T], batch_size: int) -> list[Sequence[T]]:
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]


def generate_plain(
    policy: LoadedLM,
    requests: Sequence[GenRequest],
    max_new_tokens: int,
    *,
    sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[Generation]:
    """The policy alone: greedy, or sampled with temperature then nucleus (each row its own generator). Greedy on a
    GPU goes through transformers' static-cache ``generate`` (:mod:`perbench.models.library_generate`); a policy served
    by an inference server (:mod:`perbench.models.endpoint`) generates there, with the same sampling parameters."""
    from perbench.models.endpoint import EndpointLM

    if isinstance(policy, EndpointLM):
        return policy.generate(requests, max_new_tokens, sample=sample, temperature=temperature, top_p=top_p)
    if not sample:
        from perbench.models import library_generate

        rows = library_generate.try_greedy(
            policy, [encode_prompt(policy.tokenizer, r.prompt) for r in requests], max_new_tokens
        )
        if rows is not None:
            return finish(policy, until_stop(rows, policy.eos_ids))
    gens = row_generators(requests, policy.policy.device) if sample else []

    def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, None]:
        lp = state.logprobs(hidden)
        if not sample:
            return lp.argmax(-1), None
        lp = torch.log_softmax(lp / temperature, dim=-1)  # temperature first, then the nucleus
        return sample_top_p(lp, top_p, gens), None

    return decode_loop(policy, requests, max_new_tokens, choose)
