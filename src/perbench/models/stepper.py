"""Batched, KV-cached stepping of one causal LM, with a *tree* step for scoring k candidates at once.

State: a left-padded batch of prompts, a ``DynamicCache``, the 2-D padding mask and each row's next
position. ``step(tokens)`` appends one token per row. ``expand(cands)`` feeds k candidate tokens per row
in **one** row of the forward: every candidate sits at the same position and attends to the prefix and
itself only (a custom 4-D mask), so k candidates cost one k-token forward and no cache copies.
``commit(idx)`` then keeps only the chosen candidate's keys/values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from perbench.models.loader import LoadedLM


class CachedLM:
    def __init__(self, lm: LoadedLM, prompt_ids: Sequence[Sequence[int]]) -> None:
        from transformers import DynamicCache

        self.lm = lm
        self.decoder = lm.model.get_decoder()
        self.head = lm.model.get_output_embeddings()
        self.device = lm.policy.device
        self.dtype = lm.policy.torch_dtype()
        pad = int(lm.tokenizer.pad_token_id)
        B, L = len(prompt_ids), max(len(p) for p in prompt_ids)
        ids = torch.full((B, L), pad, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        first: dict[tuple[int, ...], int] = {}
        #: the row of the first copy of each row's prompt: rows with one prompt (a Best-of-N pool's samples, users
        #: of a policy that does not see them) share its prefill
        self.copy_of = torch.tensor([first.setdefault(tuple(p), i) for i, p in enumerate(prompt_ids)])
        for i, p in enumerate(prompt_ids):
            ids[i, L - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, L - len(p) :] = 1
        self.prompt = ids.to(self.device)
        self.mask = mask.to(self.device)
        self.next_pos = self.mask.sum(1)  # (B,) position of the next token
        self.cache: Any = DynamicCache(config=lm.model.config)
        self._pending: int = 0  # candidate entries in the cache awaiting commit

    @torch.inference_mode()
    def prefill(self) -> torch.Tensor:
        """-> (B, d) last hidden state of each prompt. A prompt that several rows share is run once and its
        keys and values copied to those rows."""
        pos = (self.mask.cumsum(1) - 1).clamp(min=0)
        uniq = torch.unique(self.copy_of)
        shared = len(uniq) < len(self.copy_of)
        rows = uniq.to(self.device) if shared else slice(None)
        out = self.decoder(
            input_ids=self.prompt[rows],
            attention_mask=self.mask[rows],
            position_ids=pos[rows],
            cache=self.cache,
            use_cache=True,
        )
        last = out.last_hidden_state[:, -1]
        if not shared:
            return last  # type: ignore[no-any-return]
        where = torch.searchsorted(uniq, self.copy_of).to(self.device)  # each row's place among the run rows
        self.cache.batch_select_indices(where)
        return last[where]  # type: ignore[no-any-return]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row -> (B, d) hidden state at that token."""
        assert self._pending == 0, "commit() the expanded candidates first"
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], 1)
        out = self.decoder(
            input_ids=tokens.view(-1, 1).to(self.device),
            attention_mask=self._mask4(1),
            position_ids=self.next_pos[:, None],
            cache=self.cache,
            use_cache=True,
        )
        self.next_pos = self.next_pos + 1
        return out.last_hidden_state[:, -1]  # type: ignore[no-any-return]

    @torch.inference_mode()
    def expand(self, cands: torch.Tensor) -> torch.Tensor:
        """Feed k candidates per row side by side -> (B, k, d) hidden state at each candidate."""
        B, k = cands.shape
        neg = torch.finfo(self.dtype).min
        eye = torch.full((k, k), neg, dtype=self.dtype, device=self.device).fill_diagonal_(0.0)
        mask4 = torch.cat([self._mask4(k), eye.expand(B, 1, k, k)], dim=-1)
        pos = self.next_pos[:, None].expand(B, k)
        out = self.decoder(
            input_ids=cands.to(self.device),
            attention_mask=mask4,
            position_ids=pos,
            cache=self.cache,
            use_cache=True,
        )
        self._pending = k
        return out.last_hidden_state  # type: ignore[no-any-return]

    def _mask4(self, q: int) -> torch.Tensor:
        """The padding mask as an additive 4-D float mask (B, 1, q, L): built once per step by us, which is
        much cheaper on CPU than letting the model re-derive a causal mask from the 2-D one."""
        neg = torch.finfo(self.dtype).min
        B, L = self.mask.shape
        return torch.where(self.mask.bool(), 0.0, neg).to(self.dtype)[:, None, None, :].expand(B, 1, q, L)

    @torch.inference_mode()
    def commit(self, idx: torch.Tensor) -> None:
        """Keep only candidate ``idx[b]`` of each row in the cache."""
        L = self.mask.shape[1]
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)  # (B, H, L + k, D)
                B, H, _, D = t.shape
                sel = (L + idx.to(t.device)).view(B, 1, 1, 1).expand(B, H, 1, D)
                t[:, :, L : L + 1] = t.gather(2, sel)  # chosen candidate -> slot L, then drop the rest (a view)
                setattr(layer, name, t[:, :, : L + 1])
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], 1)
        self.next_pos = self.next_pos + 1
        self._pending = 0

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, d) hidden -> (…, V) next-token log-probabilities (fp32)."""
        with torch.inference_mode():
            return torch.log_softmax(self.head(hidden).float(), dim=-1)


def tree_candidate_hidden(
    lm: LoadedLM,
    ids: Sequence[int],
    P: int,
    cands: torch.Tensor,
    *,
    chunk_tokens: int = 512,
    cache: Any = None,
) -> torch.Tensor:
    """(T, k, d) last hidden state of ``lm`` at x ⊕ y_<t ⊕ v for every response position t and candidate
    v = ``cands[t, j]``, with ``ids`` = x ⊕ y (the first ``P`` ids are the prompt, T = len(ids) − P).

    One forward over x ⊕ y_<T fills a KV cache (or pass ``cache``, already holding at least that), then
    the candidates go in as tree batches of ``chunk_tokens``: candidate (t, v) sits at position P + t and
    attends to x ⊕ y_<t and itself only; the cache is cropped back after each chunk."""
    from transformers import DynamicCache

    model = lm.model
    dec = model.get_decoder()
    dev = lm.policy.device
    dtype = lm.policy.torch_dtype()
    T, k = cands.shape
    if T == 0:
        return torch.zeros(0, k, int(lm.hidden_size))
    if len(ids) - P != T:
        raise ValueError(f"tree_candidate_hidden: {T} candidate rows for {len(ids) - P} response tokens")
    per = max(1, chunk_tokens // max(k, 1))
    if cache is None:
        cache = DynamicCache(config=model.config)
        x = torch.tensor([list(ids)[: len(ids) - 1]], dtype=torch.long, device=dev)  # y_T is never a prefix
        dec(input_ids=x, cache=cache, use_cache=True)
    Lc = cache.get_seq_length()
    neg = torch.finfo(dtype).min
    out = []
    for t0 in range(0, T, per):
        t1 = min(T, t0 + per)
        n = (t1 - t0) * k
        pos = P + torch.arange(t0, t1, device=dev).repeat_interleave(k)
        cached = torch.where(torch.arange(Lc, device=dev)[None, :] < pos[:, None], 0.0, neg)
        tree = torch.full((n, n), neg, device=dev).fill_diagonal_(0.0)
        mask = torch.cat([cached, tree], 1).to(dtype)[None, None]
        h = dec(
            input_ids=cands[t0:t1].reshape(1, n).to(dev),
            attention_mask=mask,
            position_ids=pos[None],
            cache=cache,
            use_cache=True,
        ).last_hidden_state[0]
        cache.crop(-n)
        out.append(h.view(t1 - t0, k, -1))
    return torch.cat(out)
