"""Factorized ranker (Ma, Zhang, Zhao 2026): a small MLP on the **policy's own** hidden states.

Give it the policy's feature extractor as ``ctx.features`` (the runner does so when the RM backbone is
the policy): the reward then costs one tiny MLP on a hidden state the policy computes anyway — Best-of-N
and ARGS scoring at almost no extra cost.

Model (our reading; the paper gives the idea and the budget, not the layer layout):
h = GELU(W z + b) with z the standardised hidden state, r_u = (v + A e_u)ᵀ h, e_u ∈ R^m a per-user
embedding that modulates the output weights (m = 8). Loss −log σ(r_w − r_l), full-batch Adam, L2 on the
network and on the embeddings. The parameter count is kept under ``max_fraction`` (0.4 %) of the
backbone's when the backbone is known: ``hidden`` shrinks if needed (see :attr:`n_params`).

New user: only e_u is fit from the shots — with the MLP frozen, r_u is linear in e_u, so this is a convex
logistic regression (L-BFGS, Gaussian prior centred at the mean seen embedding). Unknown user: the mean
seen embedding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.rewards.base import RMContext
from perbench.rewards.personal import (
    PairData,
    PersonalFeatureRM,
    adam_steps,
    fit_logistic,
    load_module_state,
    module_state,
    np32,
)


class RankerNet(torch.nn.Module):
    def __init__(self, d: int, hidden: int, emb: int) -> None:
        super().__init__()
        self.body = torch.nn.Linear(d, hidden)
        self.v = torch.nn.Parameter(torch.zeros(hidden))
        self.A = torch.nn.Linear(emb, hidden, bias=False)

    def h(self, z: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.body(z))

    def r(self, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.h(z)
        out: torch.Tensor = h @ self.v + (h * self.A(e)).sum(-1)
        return out


def ranker_param_count(d: int, hidden: int, emb: int, n_users: int) -> int:
    return d * hidden + 2 * hidden + emb * hidden + emb * n_users


class FactorizedRanker(PersonalFeatureRM):
    stochastic_fit = True  # random network weights at initialisation: one fit is one draw
    name: ClassVar[str] = "factorized_ranker"
    fallback_doc = "the mean seen user embedding"

    def __init__(
        self,
        hidden: int = 128,
        emb: int = 8,
        steps: int = 300,
        lr: float = 3e-3,
        weight_decay: float = 1e-2,
        emb_l2: float = 1e-3,
        adapt_l2: float = 0.05,
        max_fraction: float = 0.004,
        **params: Any,
    ) -> None:
        super().__init__(
            hidden=hidden,
            emb=emb,
            steps=steps,
            lr=lr,
            weight_decay=weight_decay,
            emb_l2=emb_l2,
            adapt_l2=adapt_l2,
            max_fraction=max_fraction,
            **params,
        )
        self.hidden, self.emb, self.steps, self.lr = hidden, emb, steps, lr
        self.weight_decay, self.emb_l2, self.adapt_l2, self.max_fraction = (
            weight_decay,
            emb_l2,
            adapt_l2,
            max_fraction,
        )
        self.net: RankerNet | None = None
        self.E: torch.Tensor | None = None  # (U, emb)
        self.backbone_params: int | None = None
        self.hidden_used = hidden

    @property
    def n_params(self) -> int:
        return (
            0 if self.net is None or self.E is None else sum(p.numel() for p in self.net.parameters()) + self.E.numel()
        )

    def _hidden_for_budget(self, d: int, n_users: int) -> int:
        lm = getattr(self._require_extractor(), "lm", None)
        model = getattr(lm, "model", None)
        if model is None:
            return self.hidden
        self.backbone_params = int(sum(p.numel() for p in model.parameters()))
        budget = self.max_fraction * self.backbone_params
        h = self.hidden
        while h > 4 and ranker_param_count(d, h, self.emb, n_users) > budget:
            h = h * 3 // 4
        return h

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        d = data.zw.shape[1]
        self.hidden_used = self._hidden_for_budget(d, len(data.users))
        self.net = net = RankerNet(d, self.hidden_used, self.emb)
        E = (0.1 * torch.randn(len(data.users), self.emb)).requires_grad_(True)
        wt = data.pair_weights()

        def loss_fn(t: int) -> torch.Tensor:
            e = E[data.uidx]
            bt = (torch.nn.functional.softplus(-(net.r(data.zw, e) - net.r(data.zl, e))) * wt).sum()
            return bt + self.emb_l2 * (E**2).sum(-1).mean()

        adam_steps(list(net.parameters()), loss_fn, self.steps, self.lr, self.weight_decay, no_decay=[E])
        net.eval()
        self.E = E.detach()

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        assert self.net is not None and self.E is not None, "fit first"
        with torch.no_grad():
            dh = self.net.h(data.zw) - self.net.h(data.zl)  # (n, hidden)
            X = dh @ self.net.A.weight  # (n, emb): r_w − r_l = dh·v + X·e
            off = dh @ self.net.v
        return fit_logistic(X, offset=off, l2=self.adapt_l2, center=self.E.mean(0))

    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.net is None or self.E is None:
            raise RuntimeError(f"{self.name} used before fit")
        return self.net.r(z, self.user_rows(user_ids, self.E, self.E.mean(0)))

    def _state(self) -> dict[str, np.ndarray]:
        assert self.net is not None and self.E is not None
        return {"E": np32(self.E), **module_state(self.net, "net.")}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.E = torch.from_numpy(state["E"].astype(np.float32))
        hidden, d = state["net.body.weight"].shape
        self.hidden_used = int(hidden)
        self.net = RankerNet(int(d), int(hidden), self.emb)
        load_module_state(self.net, state, "net.")
        self.net.eval()
