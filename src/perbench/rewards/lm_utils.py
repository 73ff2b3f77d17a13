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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from perbench.data.records import Message, Prompt
from perbench.models.chat import encode_pair
from perbench.models.loader import LoadedLM, load_lm
from perbench.rewards.base import RMContext


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


def response_logprobs(
    model: Any,
    seqs: Sequence[Seq],
    pad: int,
    *,
    prefix: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """(B,) Σ_t log π(y_t | x, y_<t) over each sequence's response tokens (differentiable)."""
    ids, mask = pad_right(seqs, pad, device)
    h = _decoder_hidden(model, ids, mask, prefix)
    P = 0 if prefix is None else prefix.shape[1]
    rows, cols, tgt = [], [], []
    for i, s in enumerate(seqs):
        n, T = len(s.ids), s.n_resp
        rows += [i] * T
        cols += list(range(P + n - T - 1, P + n - 1))  # hidden at j predicts token j + 1
        tgt += s.ids[n - T :]
    out = torch.zeros(len(seqs), device=h.device, dtype=torch.float32)
    if not rows:
        return out
    r = torch.tensor(rows, device=h.device)
    hs = h[r, torch.tensor(cols, device=h.device)]
    lp = torch.log_softmax(model.get_output_embeddings()(hs).float(), -1)
    tok_lp = lp.gather(-1, torch.tensor(tgt, device=h.device)[:, None])[:, 0]
    return out.index_add(0, r, tok_lp)


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
    """A LoRA-wrapped **copy** of the backbone (the shared, memoised model is never modified)."""
    from peft import LoraConfig, get_peft_model

    base = copy.deepcopy(lm.model)
    tm: Any = list(target_modules) if isinstance(target_modules, (list, tuple)) else target_modules
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=tm, bias="none")
    model = get_peft_model(base, cfg)
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
