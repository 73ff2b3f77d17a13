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

#: candidates per tree forward of :func:`tree_candidate_hidden`: each attends to the whole cache and the chunk's
#: n × n block (its diagonal only counts), so a smaller chunk wastes less attention, and a forward's fixed cost
#: bounds it from below
TREE_CHUNK = 256


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
    chunk_tokens: int = TREE_CHUNK,
    cache: Any = None,
    own: torch.Tensor | None = None,
) -> torch.Tensor:
    """(T, k, d) last hidden state of ``lm`` at x ⊕ y_<t ⊕ v for every response position t and candidate
    v = ``cands[t, j]``, with ``ids`` = x ⊕ y (the first ``P`` ids are the prompt, T = len(ids) − P).

    One forward over x ⊕ y fills a KV cache (or pass ``cache``, already holding at least x ⊕ y_<T), then
    the candidates go in as tree batches of ``chunk_tokens`` candidates: candidate (t, v) sits at position
    P + t and attends to x ⊕ y_<t and itself only; the cache is cropped back after each chunk. A candidate that
    is y_t itself is the state at y_t of the forward over x ⊕ y, so it is copied from there instead of going
    through the tree (the same value up to float rounding); with ``cache`` given, pass those states as ``own``
    (T, d) for this (without them every candidate goes through the tree)."""
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
    if own is not None and own.shape[0] != T:
        raise ValueError(f"tree_candidate_hidden: {own.shape[0]} own states for {T} response tokens")
    if cache is None:  # x ⊕ y in full: y_T is never a prefix, but its state is candidate y_T's
        cache = DynamicCache(config=model.config)
        x = torch.tensor([list(ids)], dtype=torch.long, device=dev)
        own = dec(input_ids=x, cache=cache, use_cache=True).last_hidden_state[0, P:]
    cands = cands.to(dev)
    todo = torch.ones(T, k, dtype=torch.bool, device=dev)
    if own is not None:
        y = torch.tensor(list(ids)[P:], dtype=torch.long, device=dev)
        todo = cands != y[:, None]
    t_idx = todo.nonzero()[:, 0]  # row-major: candidates in position order, so a chunk's prefixes are nested
    toks = cands[todo]
    Lc = cache.get_seq_length()
    neg = torch.finfo(dtype).min
    keys = torch.arange(Lc, device=dev)
    parts = []
    for c0 in range(0, len(toks), max(1, chunk_tokens)):
        c1 = min(len(toks), c0 + max(1, chunk_tokens))
        n = c1 - c0
        pos = P + t_idx[c0:c1]
        cached = torch.where(keys[None, :] < pos[:, None], 0.0, neg)
        tree = torch.full((n, n), neg, device=dev).fill_diagonal_(0.0)
        mask = torch.cat([cached, tree], 1).to(dtype)[None, None]
        h = dec(
            input_ids=toks[c0:c1].view(1, n),
            attention_mask=mask,
            position_ids=pos[None],
            cache=cache,
            use_cache=True,
        ).last_hidden_state[0]
        cache.crop(-n)
        parts.append(h)
    base = parts[0] if parts else own
    assert base is not None  # no tree candidate left: every candidate was y_t (``own`` given)
    out = torch.empty(T, k, base.shape[-1], dtype=base.dtype, device=dev)
    if parts:
        out[todo] = torch.cat(parts)
    if own is not None and not bool(todo.all()):
        hit = ~todo
        out[hit] = own.to(out.dtype)[hit.nonzero()[:, 0]]
    return out
