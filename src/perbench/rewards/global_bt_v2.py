"""Global RM-v2 — **our reading** (Rezk et al. do not define it publicly): the global Bradley–Terry
objective −log σ(r_w − r_l) with r(x, y) = wᵀ standardize(φ_θ(x, y)) where the backbone itself is
fine-tuned by LoRA (peft), jointly with the head.

- Start: the frozen-feature global BT solution (same standardiser and head as ``global_bt``), so v2 starts
  where v1 ends; then ``steps`` AdamW minibatch steps on the LoRA weights (lr) and the head (head_lr).
- Scoring runs the adapted backbone: the LoRA weights are merged into a copy of the backbone, which gets
  its own fingerprint (``<base>+global_bt_v2:<digest>``), so its features are cached apart from the
  base model's. Not a FeatureRM (its features are not the shared ``ctx.features``).
- The backbone is ``backbone=`` if given, else the RM backbone ``ctx.features.lm``.
- User-agnostic: ``adapt`` does nothing; every user gets the same reward.
- Per-prefix reward (policy accuracy): the same head on the adapted backbone's hidden state at every
  response token, r(x, y_≤t) = wᵀ standardize(h_t), from one forward over x ⊕ y; a candidate v after y_<t
  is scored on the adapted backbone's state at x ⊕ y_<t ⊕ v (tree batches of candidates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.cache import Store
from perbench.data.records import PreferencePair
from perbench.models.loader import LoadedLM
from perbench.progress import track
from perbench.rewards.base import RewardModel, RMContext, ScoreItem, pair_feature_arrays, per_token_rewards
from perbench.rewards.features import FeatureExtractor
from perbench.rewards.global_bt import Standardizer, fit_linear_bt
from perbench.rewards.lm_utils import (
    add_lora,
    backbone_from_state,
    backbone_state,
    encode_items,
    last_hidden,
    load_lora_state,
    lora_digest,
    lora_state,
    merged_lm,
    minibatches,
    resolve_backbone,
)
from perbench.rewards.personal import seeded


class GlobalBTv2(RewardModel):
    stochastic_fit = True  # LoRA training on shuffled minibatches: one fit is one draw
    name: ClassVar[str] = "global_bt_v2"
    user_agnostic: ClassVar[bool] = True
    no_prefix_reward: ClassVar[str | None] = None

    def __init__(
        self,
        backbone: str | None = None,
        lora_r: int = 8,
        lora_alpha: int = 16,
        target_modules: list[str] | None = None,
        steps: int = 30,
        batch_size: int = 8,
        lr: float = 2e-4,
        head_lr: float = 1e-3,
        l2: float = 1e-2,
        max_length: int = 512,
        **params: Any,
    ) -> None:
        super().__init__(
            backbone=backbone,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            target_modules=target_modules,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            head_lr=head_lr,
            l2=l2,
            max_length=max_length,
            **params,
        )
        self.backbone, self.lora_r, self.lora_alpha, self.target_modules = (
            backbone,
            lora_r,
            lora_alpha,
            target_modules,
        )
        self.steps, self.batch_size, self.lr, self.head_lr, self.l2 = steps, batch_size, lr, head_lr, l2
        self.max_length = max_length
        self.std = Standardizer()
        self.w: np.ndarray | None = None
        self.base: LoadedLM | None = None
        self.store: Store | None = None
        self.extractor: FeatureExtractor | None = None  # on the merged (adapted) backbone
        self.lora: dict[str, np.ndarray] = {}
        self.losses: list[float] = []

    def bind_backbone(self, lm: LoadedLM, store: Store | None = None) -> None:
        """Use this (already loaded) backbone and feature store when restoring a saved state."""
        self.base, self.store = lm, store

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        base = resolve_backbone(self.backbone, ctx)
        self.base = base
        self.store = ctx.features.store if isinstance(ctx.features, FeatureExtractor) else self.store
        frozen = (
            ctx.features
            if isinstance(ctx.features, FeatureExtractor) and ctx.features.fingerprint == base.fingerprint
            else FeatureExtractor(base, self.store)
        )
        fw, fl = pair_feature_arrays(frozen, pairs, desc=f"{self.name} init features")
        self.std.fit(np.concatenate([fw, fl]))
        w0 = fit_linear_bt(self.std(torch.from_numpy(fw)).numpy() - self.std(torch.from_numpy(fl)).numpy(), l2=self.l2)
        tok, pad = base.tokenizer, int(base.tokenizer.pad_token_id)
        sw = encode_items(tok, [(p.prompt, p.chosen) for p in pairs], self.max_length)
        sl = encode_items(tok, [(p.prompt, p.rejected) for p in pairs], self.max_length)
        dev = base.policy.device
        mu = torch.from_numpy(self.std.mu).to(dev)  # type: ignore[arg-type]
        sd = torch.from_numpy(self.std.sd).to(dev)  # type: ignore[arg-type]
        with seeded(ctx.seed):
            model = add_lora(base, self.lora_r, self.lora_alpha, self.target_modules)
            inner = model.get_base_model()
            w = torch.nn.Parameter(torch.from_numpy(w0).to(dev))
            opt = torch.optim.AdamW(
                [
                    {"params": [p for p in model.parameters() if p.requires_grad], "lr": self.lr},
                    {"params": [w], "lr": self.head_lr, "weight_decay": 0.0},
                ]
            )
            self.losses = []
            batches = minibatches(len(pairs), self.batch_size, self.steps, torch.Generator().manual_seed(ctx.seed))
            for batch in track(batches, f"{self.name}: LoRA training"):
                h = last_hidden(inner, [sw[i] for i in batch] + [sl[i] for i in batch], pad, dev).float()
                r = ((h - mu) / sd) @ w
                margin = r[: len(batch)] - r[len(batch) :]
                loss = torch.nn.functional.softplus(-margin).mean() + self.l2 * (w * w).sum()
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                self.losses.append(float(loss.detach()))
        model.eval()
        self.w = w.detach().cpu().numpy().astype(np.float32)
        self.lora = lora_state(model)
        self._finish(model)

    def _finish(self, model: Any) -> None:
        assert self.base is not None
        merged = merged_lm(model, self.base, f"{self.name}:{lora_digest(self.lora)}")
        self.extractor = FeatureExtractor(merged, self.store)

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        if self.extractor is None or self.w is None:
            raise RuntimeError(f"{self.name} used before fit")
        feats = self.extractor.last([(it.prompt, it.response) for it in items], desc=f"{self.name} features")
        with torch.no_grad():
            r = self.std(torch.from_numpy(feats)) @ torch.from_numpy(self.w)
        return r.double().numpy()

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.w is not None
        return self.std(hidden.float().cpu()) @ torch.from_numpy(self.w)

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """wᵀ standardize(h_t) at every response token t of the adapted backbone (the last one is ``score``)."""
        if self.extractor is None or self.w is None:
            raise RuntimeError(f"{self.name} used before fit")
        toks = self.extractor.tokens([(it.prompt, it.response) for it in items], desc=f"{self.name} token features")
        return per_token_rewards(items, [tf.hidden for tf in toks], lambda _u, _p, h: self._head(h))

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        if self.extractor is None or self.w is None:
            raise RuntimeError(f"{self.name} used before fit")
        from perbench.models.chat import encode_prompt
        from perbench.rewards.lm_utils import tree_candidate_hidden

        lm = self.extractor.lm
        ids = [*encode_prompt(lm.tokenizer, item.prompt), *response_ids][-self.extractor.max_length :]
        T, k = cands.shape
        with torch.inference_mode():
            h = tree_candidate_hidden(lm, ids, len(ids) - len(response_ids), cands)
            return self._head(h.reshape(T * k, -1)).view(T, k)

    def state(self) -> dict[str, np.ndarray]:
        if self.w is None or self.base is None or self.std.mu is None or self.std.sd is None:
            raise RuntimeError(f"{self.name}: state() before fit")
        return {"w": self.w, "mu": self.std.mu, "sd": self.std.sd, **backbone_state(self.base), **self.lora}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Rebuild the adapted backbone: the saved base model (see :meth:`bind_backbone`) + LoRA weights."""
        self.base = backbone_from_state(state, self.base)
        self.w, self.std.mu, self.std.sd = state["w"], state["mu"], state["sd"]
        self.lora = {k: v for k, v in state.items() if k.startswith("lora.")}
        model = add_lora(self.base, self.lora_r, self.lora_alpha, self.target_modules)
        load_lora_state(model, self.lora)
        model.eval()
        self._finish(model)
