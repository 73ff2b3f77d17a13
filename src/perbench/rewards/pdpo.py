"""P-DPO — personalized DPO with user soft tokens (Li et al. 2024), "individual" user model.

A user u is a block of ``n_tokens`` soft embeddings e_0 + o_u (e_0 shared by everyone, o_u the user's own
offset) prepended to the embedded prompt; the generic user is e_0 alone. The policy π_θ is the backbone
with LoRA; π_ref is the frozen backbone without user tokens. With
DPO_u = −log σ(β[(log π_θ(y_w | u, x) − log π_ref(y_w | x)) − (log π_θ(y_l | u, x) − log π_ref(y_l | x))]):
loss = α·DPO(user tokens) + (1 − α)·DPO(generic user), α = β = 0.5 (paper defaults).

Reward (implicit): r_u(x, y) = β·(log π_θ(y | u, x) − log π_ref(y | x)), sums over response tokens. It is
token-factorised, so it has a per-prefix reward r_u(x, y_≤t) = β·Σ_{s≤t} (log π_θ(y_s | u, x, y_<s) −
log π_ref(y_s | x, y_<s)), and a candidate v after y_<t adds β·(log π_θ(v | …) − log π_ref(v | …)) to the
prefix's value: one forward of π_θ and one of π_ref over x ⊕ y give both (policy accuracy).

Unseen / unknown users: the generic user (e_0 only), as in the paper. ``adapt_steps`` > 0 (off by default,
our addition) instead fits the new user's o_u on their shots with π_θ frozen.

The backbone is ``backbone=`` if given, else the RM backbone ``ctx.features.lm``
(``prefer_policy=True``: ``ctx.extra["policy"]`` first). Defaults are CPU-sized (``steps`` = 30).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import PreferencePair
from perbench.models.loader import LoadedLM
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
    lora_state,
    minibatches,
    resolve_backbone,
    response_logprobs,
    response_token_logprobs,
    response_vocab_logprobs,
    token_factorised_prefix_rewards,
)
from perbench.rewards.personal import seeded, str_array, str_list, user_seed


class PDPO(RewardModel):
    stochastic_fit = True  # LoRA training on shuffled minibatches: one fit is one draw
    name: ClassVar[str] = "pdpo"
    no_prefix_reward: ClassVar[str | None] = None

    def __init__(
        self,
        backbone: str | None = None,
        prefer_policy: bool = False,
        n_tokens: int = 2,
        alpha: float = 0.5,
        beta: float = 0.5,
        lora_r: int = 8,
        lora_alpha: int = 16,
        target_modules: list[str] | None = None,
        steps: int = 30,
        batch_size: int = 4,
        lr: float = 2e-4,
        token_lr: float = 1e-2,
        adapt_steps: int = 0,
        max_length: int = 512,
        batch_eval: int = 16,
        **params: Any,
    ) -> None:
        super().__init__(
            backbone=backbone,
            prefer_policy=prefer_policy,
            n_tokens=n_tokens,
            alpha=alpha,
            beta=beta,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            target_modules=target_modules,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            token_lr=token_lr,
            adapt_steps=adapt_steps,
            max_length=max_length,
            **params,
        )
        self.backbone, self.prefer_policy, self.n_tokens = backbone, prefer_policy, n_tokens
        self.alpha, self.beta, self.lora_r, self.lora_alpha = alpha, beta, lora_r, lora_alpha
        self.target_modules, self.steps, self.batch_size, self.lr = target_modules, steps, batch_size, lr
        self.token_lr, self.adapt_steps, self.max_length, self.batch_eval = (
            token_lr,
            adapt_steps,
            max_length,
            batch_eval,
        )
        self.base: LoadedLM | None = None
        self.model: Any = None  # peft model
        self.e0: torch.Tensor | None = None  # (T, d)
        self.O: torch.Tensor | None = None  # (U, T, d)
        self.users: list[str] = []
        self.adapted: dict[str, torch.Tensor] = {}
        self.lora: dict[str, np.ndarray] = {}
        self.losses: list[float] = []
        self.seed = 0
        self.memo = TokenMemo()
        self.ref_memo = TokenMemo()  # log π_ref, keyed without a user

    def bind_backbone(self, lm: LoadedLM) -> None:
        """Use this (already loaded) backbone when restoring a saved state."""
        self.base = lm

    # ---- log-probabilities -----------------------------------------------------------------------------
    def _encode(self, items: Sequence[tuple[Any, str]]) -> list[Seq]:
        assert self.base is not None
        return encode_items(self.base.tokenizer, items, self.max_length)

    @property
    def _pad(self) -> int:
        assert self.base is not None
        return int(self.base.tokenizer.pad_token_id)

    def _policy_lp(self, seqs: Sequence[Seq], offsets: torch.Tensor | None) -> torch.Tensor:
        """log π_θ(y | e_0 + offset, x); ``offsets`` (B, T, d) or None for the generic user."""
        assert self.e0 is not None and self.base is not None
        prefix = self.e0.expand(len(seqs), -1, -1)
        if offsets is not None:
            prefix = prefix + offsets
        return response_logprobs(
            self.model.get_base_model(), seqs, self._pad, prefix=prefix, device=self.base.policy.device
        )

    def _reference(self, pairs: Sequence[tuple[Any, str]]) -> list[np.ndarray]:
        """(T,) log π_ref(y_t | x, y_<t) of each (prompt, response): it does not depend on the user, so it is
        kept once per distinct (prompt, response) for the model's lifetime (batched, length-sorted)."""
        assert self.base is not None
        base = self.base

        def reference(batch: Sequence[ScoreItem]) -> list[np.ndarray]:
            seqs = self._encode([(it.prompt, it.response) for it in batch])
            return response_token_logprobs(base.model, seqs, self._pad, device=base.policy.device)

        items = [ScoreItem("", p, r) for p, r in pairs]
        return self.ref_memo.get(items, reference, self.batch_eval, f"{self.name} reference")

    def _ref_lp(self, pairs: Sequence[tuple[Any, str]]) -> torch.Tensor:
        """(B,) Σ_t log π_ref(y_t | x, y_<t)."""
        return torch.tensor([float(v.sum()) for v in self._reference(pairs)], dtype=torch.float32)

    def _dpo(self, lw: torch.Tensor, ll: torch.Tensor, rw: torch.Tensor, rl: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(-self.beta * ((lw - rw) - (ll - rl))).mean()

    # ---- training --------------------------------------------------------------------------------------
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        self.base = base = resolve_backbone(self.backbone, ctx, prefer_policy=self.prefer_policy)
        self.memo.clear()
        self.ref_memo.clear()
        self.seed = ctx.seed
        self.users = sorted({p.user_id for p in pairs})
        index = {u: i for i, u in enumerate(self.users)}
        uidx = torch.tensor([index[p.user_id] for p in pairs])
        sw = self._encode([(p.prompt, p.chosen) for p in pairs])
        sl = self._encode([(p.prompt, p.rejected) for p in pairs])
        batches = minibatches(len(pairs), self.batch_size, self.steps, torch.Generator().manual_seed(ctx.seed))
        # the reference term of the pairs the steps visit (not of every train pair: 5 steps read 20 pairs)
        used = sorted({i for b in batches for i in b})
        ref_w, ref_l = torch.zeros(len(pairs)), torch.zeros(len(pairs))
        if used:
            ref_w[used] = self._ref_lp([(pairs[i].prompt, pairs[i].chosen) for i in used])
            ref_l[used] = self._ref_lp([(pairs[i].prompt, pairs[i].rejected) for i in used])
        dev = base.policy.device
        with seeded(ctx.seed):
            self.model = add_lora(base, self.lora_r, self.lora_alpha, self.target_modules)
            emb = base.model.get_input_embeddings().weight
            e0 = torch.nn.Parameter(emb.detach().float().std() * torch.randn(self.n_tokens, emb.shape[1]).to(dev))
            offsets = torch.nn.Parameter(emb.new_zeros(len(self.users), self.n_tokens, emb.shape[1]).float())
            self.e0 = e0
            opt = torch.optim.AdamW(
                [
                    {"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.lr},
                    {"params": [e0, offsets], "lr": self.token_lr, "weight_decay": 0.0},
                ]
            )
            self.losses = []
            for batch in track(batches, f"{self.name}: LoRA training"):
                both = [sw[i] for i in batch] + [sl[i] for i in batch]
                off = offsets[uidx[batch]]
                lp_user = self._policy_lp(both, torch.cat([off, off]))
                lp_gen = self._policy_lp(both, None)
                rw, rl = ref_w[batch].to(dev), ref_l[batch].to(dev)
                n = len(batch)
                loss = self.alpha * self._dpo(lp_user[:n], lp_user[n:], rw, rl) + (1 - self.alpha) * self._dpo(
                    lp_gen[:n], lp_gen[n:], rw, rl
                )
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                self.losses.append(float(loss.detach()))
        self.model.eval()
        self.e0, self.O = e0.detach(), offsets.detach()
        self.lora = lora_state(self.model)
        self.adapted = {}

    @property
    def adapts_from_shots(self) -> bool:
        """Without adaptation steps an unseen user is the generic user: the shots change nothing."""
        return self.adapt_steps > 0

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        """Default (``adapt_steps`` = 0): nothing — unseen users are the generic user. Otherwise fit o_u on
        the shots (π_θ and e_0 frozen). Each call replaces the user's earlier adaptation."""
        if self.adapted.pop(user_id, None) is not None:
            self.memo.drop_user(user_id)
        if self.adapt_steps <= 0 or not shots or self.e0 is None:
            return
        sw = self._encode([(p.prompt, p.chosen) for p in shots])
        sl = self._encode([(p.prompt, p.rejected) for p in shots])
        rw = self._ref_lp([(p.prompt, p.chosen) for p in shots])
        rl = self._ref_lp([(p.prompt, p.rejected) for p in shots])
        with seeded(user_seed(self.seed, user_id)):
            o = torch.nn.Parameter(torch.zeros_like(self.e0))
            opt = torch.optim.Adam([o], lr=self.token_lr)
            n = len(shots)
            for _ in range(self.adapt_steps):
                lp = self._policy_lp(sw + sl, o.expand(2 * n, -1, -1))
                loss = self._dpo(lp[:n], lp[n:], rw.to(lp.device), rl.to(lp.device))
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
        self.adapted[user_id] = o.detach()
        self.memo.drop_user(user_id)

    # ---- scoring ---------------------------------------------------------------------------------------
    def _offset(self, user_id: str) -> torch.Tensor:
        assert self.e0 is not None and self.O is not None
        if user_id in self.adapted:
            return self.adapted[user_id]
        if user_id in self.users:
            return self.O[self.users.index(user_id)]
        return torch.zeros_like(self.e0)  # generic user

    def _token_diff(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """(T,) log π_θ(y_t | u, x, y_<t) − log π_ref(y_t | x, y_<t) of each item, each distinct item computed
        once (memoised); the reference term, which does not depend on the user, once per distinct (prompt, response)."""
        if self.model is None or self.e0 is None or self.base is None:
            raise RuntimeError(f"{self.name} used before fit")
        dev = self.base.policy.device

        def compute(batch: Sequence[ScoreItem]) -> list[np.ndarray]:
            assert self.e0 is not None
            seqs = self._encode([(it.prompt, it.response) for it in batch])
            prefix = self.e0 + torch.stack([self._offset(it.user_id) for it in batch])
            pol = response_token_logprobs(self.model.get_base_model(), seqs, self._pad, prefix=prefix, device=dev)
            ref = self._reference([(it.prompt, it.response) for it in batch])
            return [p - r for p, r in zip(pol, ref, strict=True)]

        self._reference([(it.prompt, it.response) for it in items])  # every reference term first, in one pass
        return self.memo.get(items, compute, self.batch_eval, f"{self.name} scoring")

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([self.beta * float(v.sum()) for v in self._token_diff(items)], dtype=np.float64)

    def _per_token_table(self, user_id: str, ids: Sequence[int], n_resp: int) -> torch.Tensor:
        """(T, V) log π_θ(· | u, x, y_<t) − log π_ref(· | x, y_<t) at every response position."""
        if self.model is None or self.e0 is None or self.base is None:
            raise RuntimeError(f"{self.name} used before fit")
        dev = self.base.policy.device
        prefix = (self.e0 + self._offset(user_id))[None]
        with torch.inference_mode():
            lt = response_vocab_logprobs(self.model.get_base_model(), ids, n_resp, prefix=prefix, device=dev)
            lr = response_vocab_logprobs(self.base.model, ids, n_resp, device=dev)
        return lt - lr

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """β·Σ_{s≤t} (log π_θ − log π_ref)(y_s) for every response token t (the last one is ``score``)."""
        return [self.beta * np.cumsum(v) for v in self._token_diff(items)]

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        assert self.base is not None
        from perbench.models.chat import encode_prompt

        ids = [*encode_prompt(self.base.tokenizer, item.prompt), *response_ids][-self.max_length :]
        per = self._per_token_table(item.user_id, ids, len(response_ids))
        _, cand = token_factorised_prefix_rewards(per, response_ids, cands, self.beta)
        assert cand is not None
        return cand

    # ---- state -----------------------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        if self.e0 is None or self.O is None or self.base is None:
            raise RuntimeError(f"{self.name}: state() before fit")
        return {
            "e0": self.e0.cpu().numpy(),
            "O": self.O.cpu().numpy(),
            "users": str_array(self.users),
            "seed": np.asarray(self.seed),
            **backbone_state(self.base),
            **self.lora,
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.base = backbone_from_state(state, self.base)
        self.memo.clear()
        self.ref_memo.clear()
        dev = self.base.policy.device
        self.e0 = torch.from_numpy(np.array(state["e0"])).to(dev)
        self.O = torch.from_numpy(np.array(state["O"])).to(dev)
        self.users, self.seed, self.adapted = str_list(state["users"]), int(state["seed"]), {}
        self.lora = {k: v for k, v in state.items() if k.startswith("lora.")}
        self.model = add_lora(self.base, self.lora_r, self.lora_alpha, self.target_modules)
        load_lora_state(self.model, self.lora)
        self.model.eval()
