"""Helpers shared by the reward models that run a language model themselves (LoRA fine-tuning, implicit
DPO rewards, GenARM, judges): batched response log-probabilities, LoRA set-up and (de)serialisation, and
where the backbone comes from.

Sequences are ids(x, y) from :func:`perbench.models.chat.encode_pair` — the same definition features and
decoding use — padded on the right (positions stay 0..n−1). The LM head runs only on response positions,
so a batch never materialises (B, L, V) logits.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from perbench.data.records import Message, Prompt
from perbench.device import no_hub_kernels
from perbench.models.chat import encode_pair
from perbench.models.loader import LoadedLM, load_lm, model_copy
from perbench.models.stepper import tree_candidate_hidden as tree_candidate_hidden  # re-exported: it lived here
from perbench.rewards.base import RMContext, ScoreItem, item_key


@dataclass(frozen=True)
class Seq:
    ids: list[int]
    n_resp: int  # response tokens at the end of ``ids``


def encode_items(tokenizer: Any, items: Sequence[tuple[Prompt, str]], max_length: int) -> list[Seq]:
    out = []
    for p, r in items:
        ids, n, _ = encode_pair(tokenizer, p, r, max_length)
        out.append(Seq(ids, n))
    return out


def pad_right(seqs: Sequence[Seq], pad: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(s.ids) for s in seqs)
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s.ids)] = torch.tensor(s.ids, dtype=torch.long)
        mask[i, : len(s.ids)] = 1
    return ids.to(device), mask.to(device)


def _decoder_hidden(model: Any, ids: torch.Tensor, mask: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
    """Last-layer hidden states (B, P + L, d); ``prefix`` (B, P, d) soft embeddings go before the ids."""
    dec = model.get_decoder()
    if prefix is None:
        return dec(input_ids=ids, attention_mask=mask).last_hidden_state  # type: ignore[no-any-return]
    emb = model.get_input_embeddings()(ids)
    embeds = torch.cat([prefix.to(emb.dtype), emb], dim=1)
    full = torch.cat([torch.ones(prefix.shape[:2], dtype=mask.dtype, device=mask.device), mask], dim=1)
    return dec(inputs_embeds=embeds, attention_mask=full).last_hidden_state  # type: ignore[no-any-return]


def _response_token_lp(
    model: Any, seqs: Sequence[Seq], pad: int, prefix: torch.Tensor | None, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (row of each response token, log π(y_t | x, y_<t) of each), response tokens in sequence order."""
    ids, mask = pad_right(seqs, pad, device)
    h = _decoder_hidden(model, ids, mask, prefix)
    P = 0 if prefix is None else prefix.shape[1]
    rows, cols, tgt = [], [], []
    for i, s in enumerate(seqs):
        n, T = len(s.ids), s.n_resp
        rows += [i] * T
        cols += list(range(P + n - T - 1, P + n - 1))  # hidden at j predicts token j + 1
        tgt += s.ids[n - T :]
    r = torch.tensor(rows, dtype=torch.long, device=h.device)
    if not rows:
        return r, h.new_zeros(0, dtype=torch.float32)
    hs = h[r, torch.tensor(cols, device=h.device)]
    return r, token_logprobs(model.get_output_embeddings(), hs, torch.tensor(tgt, device=h.device))


def response_logprobs(
    model: Any,
    seqs: Sequence[Seq],
    pad: int,
    *,
    prefix: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """(B,) Σ_t log π(y_t | x, y_<t) over each sequence's response tokens (differentiable)."""
    r, tok_lp = _response_token_lp(model, seqs, pad, prefix, device)
    out = torch.zeros(len(seqs), device=tok_lp.device, dtype=torch.float32)
    return out.index_add(0, r, tok_lp) if len(r) else out


def response_token_logprobs(
    model: Any,
    seqs: Sequence[Seq],
    pad: int,
    *,
    prefix: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
) -> list[np.ndarray]:
    """(T_i,) log π(y_t | x, y_<t) at every response token of each sequence, one batched forward (no grad)."""
    with torch.inference_mode():
        _, tok_lp = _response_token_lp(model, seqs, pad, prefix, device)
    flat = tok_lp.double().cpu().numpy()
    return list(np.split(flat, np.cumsum([s.n_resp for s in seqs])[:-1])) if seqs else []


class TokenMemo:
    """Per-token values of scored items, keyed by (user, prompt, response): a reward model that runs the LM
    computes each item once and serves both ``score`` (the sum) and ``token_rewards`` (the running sum) from
    it, so upstream scoring and policy accuracy share one forward per distinct item. Clear it whenever the
    model or a user's conditioning changes."""

    def __init__(self) -> None:
        self._vals: dict[tuple[str, ...], np.ndarray] = {}  # item_key(per_user=True): (user, prompt, response)

    def clear(self) -> None:
        self._vals.clear()

    def drop_user(self, user_id: str) -> None:
        for k in [k for k in self._vals if k[0] == user_id]:
            del self._vals[k]

    def get(self, items: Sequence[ScoreItem], compute: Any, batch: int, desc: str = "scoring") -> list[np.ndarray]:
        """Each item's values; the missing ones come from ``compute(items) -> list of arrays``, called on the
        distinct missing items in length-sorted batches of ``batch`` (little padding)."""
        from perbench.progress import progress

        keys = [item_key(it, per_user=True) for it in items]
        todo: dict[tuple[str, ...], ScoreItem] = {}
        for k, it in zip(keys, items, strict=True):
            if k not in self._vals:
                todo.setdefault(k, it)
        order = sorted(todo, key=lambda k: len(k[-2]) + len(k[-1]))
        bar = progress(total=len(order), desc=desc, unit="seq")
        for s in range(0, len(order), batch):
            chunk = order[s : s + batch]
            for k, v in zip(chunk, compute([todo[k] for k in chunk]), strict=True):
                self._vals[k] = np.asarray(v, np.float64)
            bar.update(len(chunk))
        bar.close()
        return [self._vals[k] for k in keys]


def _chunk_logprobs(head: Any, hs: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    logits: torch.Tensor = head(hs).float()
    return logits.gather(-1, tgt[:, None])[:, 0] - torch.logsumexp(logits, -1)


def token_logprobs(head: Any, hs: torch.Tensor, tgt: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """(N,) log softmax(head(hs))[tgt], ``chunk`` positions at a time. Under autograd each chunk is
    checkpointed: its (chunk, V) logits are recomputed in the backward pass instead of being kept, so a
    training step holds one chunk's logits rather than (N, V) of them (with SmolLM2's 49,152-token
    vocabulary, 64 sequences of 150 response tokens would keep ~1.9 GB per copy)."""
    from torch.utils.checkpoint import checkpoint

    parts = []
    for s in range(0, hs.shape[0], chunk):
        h, t = hs[s : s + chunk], tgt[s : s + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(checkpoint(_chunk_logprobs, head, h, t, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(head, h, t))
    return torch.cat(parts) if parts else hs.new_zeros(0, dtype=torch.float32)


def last_hidden(model: Any, seqs: Sequence[Seq], pad: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """(B, d) hidden state at each sequence's last token (differentiable) — φ(x, y) of a live model."""
    ids, mask = pad_right(seqs, pad, device)
    h = _decoder_hidden(model, ids, mask, None)
    return h[
        torch.arange(len(seqs), device=h.device),
        torch.tensor([len(s.ids) - 1 for s in seqs], device=h.device),
    ]


# ---- where the backbone comes from ------------------------------------------------------------------------
def resolve_backbone(spec: str | None, ctx: RMContext | None, *, prefer_policy: bool = False) -> LoadedLM:
    """``spec`` if given; else ctx.extra["policy"] (when ``prefer_policy``) or the RM backbone
    (ctx.features.lm); else ctx.extra["policy"]."""
    if spec:
        return load_lm(spec)
    extra = ctx.extra if ctx is not None else {}
    policy = extra.get("policy")
    feats_lm = getattr(ctx.features, "lm", None) if ctx is not None else None
    order = [policy, feats_lm] if prefer_policy else [feats_lm, policy]
    for cand in order:
        if isinstance(cand, LoadedLM):
            return cand
        if isinstance(cand, str):
            return load_lm(cand)
    raise ValueError("no backbone: pass backbone=<model spec> or provide ctx.features / ctx.extra['policy']")


def backbone_state(lm: LoadedLM) -> dict[str, np.ndarray]:
    return {"backbone": np.asarray(lm.name), "backbone_fingerprint": np.asarray(lm.fingerprint)}


def backbone_from_state(state: dict[str, np.ndarray], current: LoadedLM | None) -> LoadedLM:
    """The saved backbone: ``current`` if it has the saved fingerprint, else reloaded by its name."""
    name, fp = str(state["backbone"]), str(state["backbone_fingerprint"])
    lm = current if current is not None and current.fingerprint == fp else load_lm(name)
    if lm.fingerprint != fp:
        raise ValueError(f"saved state was trained on {fp}, but {name!r} now loads {lm.fingerprint}")
    return lm


# ---- LoRA -------------------------------------------------------------------------------------------------
def add_lora(lm: LoadedLM, r: int, alpha: int, target_modules: Sequence[str] | str | None) -> Any:
    """A LoRA-wrapped **copy** of the backbone (the shared, memoised model is never modified), with gradient
    checkpointing while it trains: each layer's activations are recomputed in the backward pass rather than
    kept: the same numbers for a second forward pass per layer. Without it, all_methods sat at 11.3 GB from
    global_bt_v2's LoRA fit on (eager attention keeps (B, H, L, L) scores for every layer)."""
    from peft import LoraConfig, get_peft_model

    base = model_copy(lm)
    if getattr(base, "supports_gradient_checkpointing", False):
        if hasattr(base, "activation_checkpointing_enable"):  # transformers ≥ 5.25; the old name warns there
            base.activation_checkpointing_enable({"use_reentrant": False})
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tm: Any = list(target_modules) if isinstance(target_modules, (list, tuple)) else target_modules
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=tm, bias="none")
    with warnings.catch_warnings():  # peft reads the deprecated ``is_gradient_checkpointing`` property
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(base, cfg)
    no_hub_kernels(model, lm.policy)
    model.train()
    return model


def lora_state(model: Any) -> dict[str, np.ndarray]:
    from peft import get_peft_model_state_dict

    return {f"lora.{k}": v.detach().float().cpu().numpy() for k, v in get_peft_model_state_dict(model).items()}


def load_lora_state(model: Any, state: dict[str, np.ndarray]) -> None:
    from peft import set_peft_model_state_dict

    sd = {k[5:]: torch.from_numpy(np.array(v)) for k, v in state.items() if k.startswith("lora.")}
    res = set_peft_model_state_dict(model, sd)
    bad = [k for k in getattr(res, "unexpected_keys", []) if "lora" in k]
    if bad:
        raise ValueError(f"LoRA state does not fit the backbone: {bad[:3]}")


def lora_digest(state: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(np.ascontiguousarray(state[k]).tobytes())
    return h.hexdigest()[:16]


def merged_lm(peft_model: Any, base: LoadedLM, tag: str) -> LoadedLM:
    """Merge the LoRA weights into a plain model (a fresh copy) and wrap it as a LoadedLM whose fingerprint
    names the adapter, so feature caches never mix it up with the base model."""
    merged = copy.deepcopy(peft_model).merge_and_unload()
    merged = merged.to(device=base.policy.device, dtype=base.policy.torch_dtype()).eval()
    for p in merged.parameters():
        p.requires_grad_(False)
    return LoadedLM(merged, base.tokenizer, f"{base.fingerprint}+{tag}", f"{base.name}+{tag}", base.policy)


def with_system(prompt: Prompt, text: str | None) -> Prompt:
    """The prompt with ``text`` as (the start of) its system message; unchanged when ``text`` is empty."""
    if not text:
        return prompt
    msgs = (Message("user", prompt),) if isinstance(prompt, str) else tuple(prompt)
    if msgs and msgs[0].role == "system":
        return (Message("system", f"{text}\n\n{msgs[0].content}"), *msgs[1:])
    return (Message("system", text), *msgs)


def minibatches(n: int, batch_size: int, steps: int, gen: torch.Generator) -> list[list[int]]:
    """``steps`` minibatches of indices: epochs of a fresh permutation drawn from ``gen`` (deterministic)."""
    out: list[list[int]] = []
    while len(out) < steps and n > 0:
        perm = torch.randperm(n, generator=gen).tolist()
        for s in range(0, n, batch_size):
            out.append(perm[s : s + batch_size])
            if len(out) == steps:
                break
    return out


# ---- per-prefix quantities, teacher-forced ----------------------------------------------------------------
def response_vocab_logprobs(
    model: Any,
    ids: Sequence[int],
    n_resp: int,
    *,
    prefix: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """(T, V) log π(· | x, y_<t) at every response position t of one sequence ``ids`` = x ⊕ y (T = ``n_resp``),
    from one forward; ``prefix`` (1, P, d) soft embeddings go before the ids (P-DPO's user tokens)."""
    x = torch.tensor([list(ids)], dtype=torch.long, device=device)
    h = _decoder_hidden(model, x, torch.ones_like(x), prefix)[0]
    P = 0 if prefix is None else prefix.shape[1]
    n = len(ids)
    hs = h[P + n - n_resp - 1 : P + n - 1]  # hidden at j predicts token j + 1
    return torch.log_softmax(model.get_output_embeddings()(hs).float(), -1)


def token_factorised_prefix_rewards(
    per_token: torch.Tensor, response_ids: Sequence[int], cands: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """For a reward r(x, y) = scale · Σ_t ℓ_t(y_t) with ℓ_t a (T, V) table of per-position token values
    (GenARM: log π_r; P-DPO: log π_θ − log π_ref): -> ((T,) r(x, y_≤t), (T, k) r(x, y_<t ⊕ v) or None)."""
    T = len(response_ids)
    tgt = torch.tensor(list(response_ids), dtype=torch.long, device=per_token.device)
    own = per_token[torch.arange(T, device=per_token.device), tgt] if T else per_token.new_zeros(0)
    cum = own.cumsum(0)
    token = scale * cum
    if cands is None:
        return token, None
    before = torch.cat([cum.new_zeros(1), cum[:-1]]) if T else cum
    cand = scale * (before[:, None] + per_token.gather(1, cands.to(per_token.device)))
    return token, cand
