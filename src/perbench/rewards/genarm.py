"""GenARM — autoregressive reward model (Xu et al., ICLR 2025).

π_r is a causal LM (the backbone + LoRA); the reward is token-factorised, r(x, y) = β·log π_r(y | x) =
β·Σ_t log π_r(y_t | x, y_<t) (no length normalisation). Loss: −log σ(β[log π_r(y_w | x) − log π_r(y_l | x)]).
One forward of π_r gives log π_r over the **whole vocabulary** for the next token: that is what the
GenARM decoder combines with the policy, log π_base + α·log π_r with α the decoder's own coefficient
(default 1.0; see :mod:`perbench.decoding.genarm` and :meth:`stepper`).

Per-prefix reward (policy accuracy): r(x, y_≤t) = β·Σ_{s≤t} log π_r(y_s | x, y_<s), and a candidate v after
y_<t gets β·(Σ_{s<t} log π_r(y_s | …) + log π_r(v | x, y_<t)) — all from one forward of π_r over x ⊕ y. The
full response's value is ``score``.

User conditioning (our reading; GenARM itself is not personalised): the user's context text — their first
``profile_k`` profile items (:func:`perbench.data.user_context.user_text`, never the answer key) — from
``ctx.extra["users"]`` (dict user_id -> :class:`~perbench.data.user_context.UserView`, never the full record
with its answer key) goes into the system message
of π_r's prompt.
Users without any text, unseen users without text and unknown ids get the plain prompt (the generic
user). ``adapt`` takes no gradient step; an unseen user is conditioned on their own text, which the runner
passes in ``ctx.extra["users"]`` at fit time or later through :meth:`set_users`. The shots are not used
(``uses_shots = False``): results do not depend on the shot count.

Defaults: β = 0.1 (ours; the paper sweeps it), LoRA r = 8, ``steps`` = 30 (CPU-sized).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import PreferencePair, Prompt
from perbench.data.user_context import UserView, require_views, user_text
from perbench.models.chat import encode_prompt
from perbench.models.loader import LoadedLM
from perbench.models.stepper import CachedLM
from perbench.progress import track
from perbench.rewards.base import RewardModel, RMContext, ScoreItem
from perbench.rewards.lm_utils import (
    Seq,
    TokenMemo,
    add_lora,
    backbone_from_state,
    backbone_state,
    encode_items,
    load_lora_state,
    lora_digest,
    lora_state,
    merged_lm,
    minibatches,
    resolve_backbone,
    response_logprobs,
    response_token_logprobs,
    response_vocab_logprobs,
    token_factorised_prefix_rewards,
    with_system,
)
from perbench.rewards.personal import seeded, str_array, str_list

USER_HEADER = "You are helping one specific user. What we know about this user:"


class GenARMStepper:
    """KV-cached π_r over a batch of prompts: ``logprobs()`` is (B, V) log π_r of the next token;
    ``step(tokens)`` appends one token per row (one forward)."""

    def __init__(self, lm: LoadedLM, prompt_ids: Sequence[Sequence[int]]) -> None:
        self.state = CachedLM(lm, prompt_ids)
        self._lp = self.state.logprobs(self.state.prefill())

    def logprobs(self) -> torch.Tensor:
        return self._lp

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self._lp = self.state.logprobs(self.state.step(tokens))
        return self._lp


class GenARM(RewardModel):
    stochastic_fit = True  # LoRA training on shuffled minibatches: one fit is one draw
    name: ClassVar[str] = "genarm"
    no_prefix_reward: ClassVar[str | None] = None
    uses_shots: ClassVar[bool] = False  # conditioned on the user's profile text; ``adapt`` ignores the shots

    def __init__(
        self,
        backbone: str | None = None,
        beta: float = 0.1,
        user_context: str = "auto",
        profile_k: int = 5,
        lora_r: int = 8,
        lora_alpha: int = 16,
        target_modules: list[str] | None = None,
        steps: int = 30,
        batch_size: int = 4,
        lr: float = 2e-4,
        max_length: int = 512,
        batch_eval: int = 16,
        **params: Any,
    ) -> None:
        super().__init__(
            backbone=backbone,
            beta=beta,
            user_context=user_context,
            profile_k=profile_k,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            target_modules=target_modules,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            max_length=max_length,
            **params,
        )
        self.backbone, self.beta, self.user_context, self.profile_k = backbone, beta, user_context, profile_k
        self.lora_r, self.lora_alpha, self.target_modules = lora_r, lora_alpha, target_modules
        self.steps, self.batch_size, self.lr, self.max_length, self.batch_eval = (
            steps,
            batch_size,
            lr,
            max_length,
            batch_eval,
        )
        self.base: LoadedLM | None = None
        self.lm: LoadedLM | None = None  # merged π_r
        self.texts: dict[str, str] = {}
        self.lora: dict[str, np.ndarray] = {}
        self.losses: list[float] = []
        self.memo = TokenMemo()

    def bind_backbone(self, lm: LoadedLM) -> None:
        """Use this (already loaded) backbone when restoring a saved state."""
        self.base = lm

    def set_users(self, users: Mapping[str, UserView]) -> None:
        """Add/replace the conditioning text of these users (e.g. unseen users after fit); user views only."""
        for uid, u in require_views(users, self.name).items():
            self.memo.drop_user(uid)
            t = user_text(u, self.user_context, self.profile_k)
            if t:
                self.texts[uid] = t
            else:
                self.texts.pop(uid, None)

    def user_prompt(self, user_id: str, prompt: Prompt) -> Prompt:
        """π_r's prompt for this user: the user's text in the system message (unchanged if none)."""
        t = self.texts.get(user_id)
        return with_system(prompt, f"{USER_HEADER}\n{t}" if t else None)

    def prompt_ids(self, user_ids: Sequence[str], prompts: Sequence[Prompt]) -> list[list[int]]:
        tok = self._lm().tokenizer
        return [encode_prompt(tok, self.user_prompt(u, p)) for u, p in zip(user_ids, prompts, strict=True)]

    def _lm(self) -> LoadedLM:
        if self.lm is None:
            raise RuntimeError(f"{self.name} used before fit")
        return self.lm

    def _seqs(self, user_ids: Sequence[str], prompts: Sequence[Prompt], responses: Sequence[str]) -> list[Seq]:
        assert self.base is not None
        return encode_items(
            self.base.tokenizer,
            [(self.user_prompt(u, p), r) for u, p, r in zip(user_ids, prompts, responses, strict=True)],
            self.max_length,
        )

    # ---- training --------------------------------------------------------------------------------------
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        self.base = base = resolve_backbone(self.backbone, ctx)
        self.texts = {}
        self.memo.clear()
        self.set_users(ctx.extra.get("users") or {})
        users = [p.user_id for p in pairs]
        sw = self._seqs(users, [p.prompt for p in pairs], [p.chosen for p in pairs])
        sl = self._seqs(users, [p.prompt for p in pairs], [p.rejected for p in pairs])
        pad, dev = int(base.tokenizer.pad_token_id), base.policy.device
        with seeded(ctx.seed):
            model = add_lora(base, self.lora_r, self.lora_alpha, self.target_modules)
            inner = model.get_base_model()
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=self.lr)
            self.losses = []
            batches = minibatches(len(pairs), self.batch_size, self.steps, torch.Generator().manual_seed(ctx.seed))
            for batch in track(batches, f"{self.name}: LoRA training"):
                lp = response_logprobs(inner, [sw[i] for i in batch] + [sl[i] for i in batch], pad, device=dev)
                n = len(batch)
                loss = torch.nn.functional.softplus(-self.beta * (lp[:n] - lp[n:])).mean()
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                self.losses.append(float(loss.detach()))
        model.eval()
        self.lora = lora_state(model)
        self.lm = merged_lm(model, base, f"{self.name}:{lora_digest(self.lora)}")

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        """No gradient step: an unseen user is conditioned on their own text (see :meth:`set_users`)."""

    # ---- scoring ---------------------------------------------------------------------------------------
    def _token_lp(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """(T,) log π_r(y_t | user, x, y_<t) of each item, each distinct item computed once (memoised)."""
        lm = self._lm()

        def compute(batch: Sequence[ScoreItem]) -> list[np.ndarray]:
            seqs = self._seqs([it.user_id for it in batch], [it.prompt for it in batch], [it.response for it in batch])
            return response_token_logprobs(lm.model, seqs, int(lm.tokenizer.pad_token_id), device=lm.policy.device)

        return self.memo.get(items, compute, self.batch_eval, f"{self.name} scoring")

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([self.beta * float(v.sum()) for v in self._token_lp(items)], dtype=np.float64)

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """β·Σ_{s≤t} log π_r(y_s | user, x, y_<s) for every response token t (the last one is ``score``)."""
        return [self.beta * np.cumsum(v) for v in self._token_lp(items)]

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        """(T, k) β·(log π_r(y_<t | user, x) + log π_r(v | user, x, y_<t)) from one forward of π_r."""
        lm = self._lm()
        ids = [*self.prompt_ids([item.user_id], [item.prompt])[0], *response_ids]
        ids = ids[-self.max_length :]  # as encode_pair truncates: the prompt's head goes first
        with torch.inference_mode():
            per = response_vocab_logprobs(lm.model, ids, len(response_ids), device=lm.policy.device)
            _, cand = token_factorised_prefix_rewards(per, response_ids, cands, self.beta)
        assert cand is not None
        return cand

    def stepper(self, user_ids: Sequence[str], prompts: Sequence[Prompt]) -> GenARMStepper:
        """A KV-cached π_r for guided decoding: one forward per generated token gives log π_r over the full
        vocabulary for every row (the user-conditioned prompt is built here)."""
        return GenARMStepper(self._lm(), self.prompt_ids(user_ids, prompts))

    def next_token_logprobs(
        self,
        user_ids: Sequence[str],
        prompts: Sequence[Prompt],
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> torch.Tensor:
        """(B, V) log π_r(· | user, x, prefix), uncached: one full forward (reference for the stepper)."""
        lm = self._lm()
        ids = self.prompt_ids(user_ids, prompts)
        if prefixes is not None:
            ids = [p + list(x) for p, x in zip(ids, prefixes, strict=True)]
        state = CachedLM(lm, ids)
        return state.logprobs(state.prefill())

    # ---- state -----------------------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        if self.base is None or not self.lora:
            raise RuntimeError(f"{self.name}: state() before fit")
        uids = sorted(self.texts)
        return {
            **backbone_state(self.base),
            **self.lora,
            "text_users": str_array(uids),
            "texts": str_array([self.texts[u] for u in uids]),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.base = backbone_from_state(state, self.base)
        self.memo.clear()
        self.lora = {k: v for k, v in state.items() if k.startswith("lora.")}
        self.texts = dict(zip(str_list(state["text_users"]), str_list(state["texts"]), strict=True))
        model = add_lora(self.base, self.lora_r, self.lora_alpha, self.target_modules)
        load_lora_state(model, self.lora)
        model.eval()
        self.lm = merged_lm(model, self.base, f"{self.name}:{lora_digest(self.lora)}")
