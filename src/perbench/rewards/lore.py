"""LoRe — low-rank reward modelling (Bose et al. 2025), three training variants.

r_u(x, y) = z(x, y)ᵀ V w_u / τ with z the standardised frozen features, V ∈ R^{d×K} a shared basis and
w_u = softmax(θ_u) on the simplex. Loss: mean over users of the mean over their pairs of
−log σ((z_w − z_l)ᵀ V w_u / τ), τ = 100 as in the reference code.

Our readings (the paper/code leave these open or tie them to their own scales):

- The reward we return includes the 1/τ, so a reward difference is a Bradley–Terry log-odds like every
  other head in perbench (ARGS weights mean the same thing across methods).
- V is optimised in units of τ/√d (V = τ/√d · V′, V′ ~ N(0, 1) at init): a pure reparametrisation of the
  same objective that lets one Adam learning rate work for every feature width.
- ``lore`` (plain): joint full-batch Adam on (V, θ).
- ``lore_reg``: alternating Adam steps on θ (V fixed) and V (θ fixed); V's step adds
  α(t)·mean_k(1 − cos(V_k, v_global)) with α(t) ramped linearly from 0 at 20 % to ``alpha`` at 80 % of the
  iterations; at the end, basis columns no user weights above 1e-2 are dropped and the weights
  renormalised over the kept columns. α = 1e4 by default (the reference's PRISM setting). v_global is the
  **global RM** direction: the ``global_bt`` head (:func:`~perbench.rewards.global_bt.fit_linear_bt`, its
  default l2 = 1e-2 and 200 L-BFGS iterations) fit on all seen users' pairs pooled, each pair counted once
  (not the per-user weighting the LoRe loss uses), on the same standardised features — the very head the
  ``global_bt`` method deploys. :attr:`LoReReg.v_global` keeps it for inspection.
- ``lore_alt``: alternating minimisation without the penalty: blocks of ``inner_steps`` Adam steps on θ,
  then on V, repeated.
- New user: V frozen, θ_u fit on their shots (Adam, ``adapt_steps`` = 500, from uniform weights).
- Unknown user: the mean of the seen users' simplex weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.rewards.base import RMContext
from perbench.rewards.personal import PairData, PersonalFeatureRM, adam_steps, np32

if TYPE_CHECKING:
    import torch


class LoRe(PersonalFeatureRM):
    name: ClassVar[str] = "lore"
    mode: ClassVar[str] = "joint"
    fallback_doc = "the mean of the seen users' basis weights"

    def __init__(
        self,
        K: int = 5,
        tau: float = 100.0,
        steps: int = 300,
        lr: float = 0.05,
        adapt_steps: int = 500,
        adapt_lr: float = 0.05,
        **params: Any,
    ) -> None:
        super().__init__(K=K, tau=tau, steps=steps, lr=lr, adapt_steps=adapt_steps, adapt_lr=adapt_lr, **params)
        self.K, self.tau, self.steps, self.lr = K, tau, steps, lr
        self.adapt_steps, self.adapt_lr = adapt_steps, adapt_lr
        self.V: torch.Tensor | None = None  # (d, K) in reward units (τ included in the formula)
        self.W: torch.Tensor | None = None  # (U, K) simplex weights

    # ---- training --------------------------------------------------------------------------------------
    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        d = data.zw.shape[1]
        unit = self.tau / math.sqrt(d)
        Vp = torch.randn(d, self.K).requires_grad_(True)
        theta = torch.zeros(len(data.users), self.K).requires_grad_(True)
        diff, wt = data.diff, data.pair_weights()

        def bt_loss(Vp_: torch.Tensor, th: torch.Tensor) -> torch.Tensor:
            w = torch.softmax(th, -1)[data.uidx]  # (P, K)
            logit = ((diff @ Vp_) * w).sum(-1) * (unit / self.tau)
            return (torch.nn.functional.softplus(-logit) * wt).sum()

        if self.mode == "joint":
            adam_steps([Vp, theta], lambda t: bt_loss(Vp, theta), self.steps, self.lr)
        else:
            self._alternate(Vp, theta, bt_loss, data)
        W = torch.softmax(theta.detach(), -1)
        V = Vp.detach() * unit
        if self.mode == "reg":
            keep = W.max(0).values >= self.drop_below
            if not bool(keep.any()):
                keep[W.sum(0).argmax()] = True
            V, W = V[:, keep], W[:, keep]
            W = W / W.sum(1, keepdim=True)
        self.V, self.W = V, W

    drop_below: ClassVar[float] = 1e-2

    def _alternate(self, Vp: torch.Tensor, theta: torch.Tensor, bt_loss: Any, data: PairData) -> None:
        raise NotImplementedError  # pragma: no cover - only the alternating subclasses use it

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        import torch

        assert self.V is not None, "fit first"
        proj = (data.diff @ self.V) / self.tau  # (n, K): V frozen
        theta = torch.zeros(self.V.shape[1]).requires_grad_(True)
        adam_steps(
            [theta],
            lambda t: torch.nn.functional.softplus(-(proj @ torch.softmax(theta, 0))).mean(),
            self.adapt_steps,
            self.adapt_lr,
        )
        return torch.softmax(theta.detach(), 0)

    # ---- scoring / state -------------------------------------------------------------------------------
    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.V is None or self.W is None:
            raise RuntimeError(f"{self.name} used before fit")
        w = self.user_rows(user_ids, self.W, self.W.mean(0))
        return ((z @ self.V) * w).sum(-1) / self.tau

    def user_weights(self, user_id: str) -> np.ndarray:
        """The user's weights over the basis (what an analysis of the learnt structure reads)."""
        assert self.V is not None and self.W is not None
        return np32(self.user_rows([user_id], self.W, self.W.mean(0))[0])

    def _state(self) -> dict[str, np.ndarray]:
        assert self.V is not None and self.W is not None
        return {"V": np32(self.V), "W": np32(self.W)}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        self.V = torch.from_numpy(state["V"].astype(np.float32))
        self.W = torch.from_numpy(state["W"].astype(np.float32))


class LoReAlt(LoRe):
    """Alternating minimisation: ``inner_steps`` Adam steps on θ (V fixed), then on V (θ fixed), repeated."""

    name: ClassVar[str] = "lore_alt"
    mode: ClassVar[str] = "alt"

    def __init__(self, inner_steps: int = 10, **params: Any) -> None:
        super().__init__(inner_steps=inner_steps, **params)
        self.inner_steps = inner_steps

    def _penalty(self, Vp: torch.Tensor, t: int, total: int) -> torch.Tensor | None:
        return None

    def _alternate(self, Vp: torch.Tensor, theta: torch.Tensor, bt_loss: Any, data: PairData) -> None:
        import torch

        opt_v = torch.optim.Adam([Vp], lr=self.lr)
        opt_t = torch.optim.Adam([theta], lr=self.lr)
        inner = max(1, self.inner_steps)
        total = max(1, self.steps // (2 * inner)) * inner  # V steps
        t_v = 0
        for _ in range(max(1, self.steps // (2 * inner))):
            for _ in range(inner):  # θ block, V fixed
                opt_t.zero_grad()
                bt_loss(Vp.detach(), theta).backward()
                opt_t.step()
            for _ in range(inner):  # V block, θ fixed
                opt_v.zero_grad()
                loss = bt_loss(Vp, theta.detach())
                pen = self._penalty(Vp, t_v, total)
                if pen is not None:
                    loss = loss + pen
                loss.backward()
                opt_v.step()
                t_v += 1


class LoReReg(LoReAlt):
    """Alternating single steps on θ and V, cosine pull of V's columns toward the global BT direction
    (α ramped from 0 at 20 % to ``alpha`` at 80 % of iterations), unused columns (< 1e-2) dropped."""

    name: ClassVar[str] = "lore_reg"
    mode: ClassVar[str] = "reg"

    def __init__(
        self,
        alpha: float = 1e4,
        inner_steps: int = 1,
        global_l2: float = 1e-2,
        global_max_iter: int = 200,
        **params: Any,
    ) -> None:
        super().__init__(
            alpha=alpha, inner_steps=inner_steps, global_l2=global_l2, global_max_iter=global_max_iter, **params
        )
        self.alpha, self.global_l2, self.global_max_iter = alpha, global_l2, global_max_iter
        self._v_global: torch.Tensor | None = None

    @property
    def v_global(self) -> np.ndarray | None:
        """The global RM direction the basis is pulled toward (None before fit or after a state reload)."""
        return None if self._v_global is None else np32(self._v_global)

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        from perbench.rewards.global_bt import fit_linear_bt

        # The global RM: every seen pair pooled, each counted once — as the ``global_bt`` method fits it.
        w = fit_linear_bt(data.diff.numpy(), l2=self.global_l2, max_iter=self.global_max_iter)
        self._v_global = torch.from_numpy(w)
        super()._fit(data, ctx)

    def _penalty(self, Vp: torch.Tensor, t: int, total: int) -> torch.Tensor | None:
        import torch

        assert self._v_global is not None
        frac = t / max(1, total)
        a = self.alpha * min(1.0, max(0.0, (frac - 0.2) / 0.6))
        if a == 0.0 or float(self._v_global.norm()) == 0.0:
            return None
        cos = torch.nn.functional.cosine_similarity(Vp, self._v_global[:, None], dim=0)
        return a * (1 - cos).mean()
