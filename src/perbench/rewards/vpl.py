"""VPL — variational preference learning (Poddar et al. 2024), on frozen features.

Encoder: each context pair (z_w, z_l) of a user goes through a pair MLP; a self-attention layer (with a
residual and LayerNorm) mixes the set; the mean over the set gives (μ, log σ²) (log σ² clamped to
[−6, 2]). Latent z = μ + σ·ε during training, z = μ at evaluation. Reward r(y, z) = MLP([z_y; z]).
Loss: −log σ(r_w − r_l) (mean over users of the mean over their pairs) + β·KL(q(z | context) ‖ N(0, I)),
β = 3e-6 reached by linear annealing over the first half of training.

Our readings: each step draws, for every seen user, a random context of 1..``ctx_max`` of their own
pairs (so the encoder sees every context size the few-shot curve will ask for) and scores all of that
user's pairs; a seen user's z at evaluation is μ of all their train pairs.

New user: z = μ(encoder(their shots)) — no gradient step. Unknown user: the mean of the seen users' μ.
No train pairs at all (an evaluation-only benchmark): the networks keep their seeded initialisation, features
are left unstandardised, an unknown user's z is 0; rewards are finite but carry no learnt preference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.rewards.base import RMContext
from perbench.rewards.personal import (
    PairData,
    PersonalFeatureRM,
    adam_steps,
    load_module_state,
    module_state,
    np32,
)

if TYPE_CHECKING:
    import torch

    from perbench.rewards.nets import VPLNet


class VPL(PersonalFeatureRM):
    stochastic_fit = True  # random weights, sampled contexts and latent draws: one fit is one draw
    name: ClassVar[str] = "vpl"
    fallback_doc = "the mean of the seen users' latent μ"

    def __init__(
        self,
        hidden: int = 64,
        z_dim: int = 8,
        ctx_max: int = 20,
        steps: int = 300,
        lr: float = 3e-3,
        weight_decay: float = 1e-2,
        beta: float = 3e-6,
        anneal: float = 0.5,
        **params: Any,
    ) -> None:
        super().__init__(
            hidden=hidden,
            z_dim=z_dim,
            ctx_max=ctx_max,
            steps=steps,
            lr=lr,
            weight_decay=weight_decay,
            beta=beta,
            anneal=anneal,
            **params,
        )
        self.hidden, self.z_dim, self.ctx_max, self.steps, self.lr = hidden, z_dim, ctx_max, steps, lr
        self.weight_decay, self.beta, self.anneal = weight_decay, beta, anneal
        self.net: VPLNet | None = None
        self.Z: torch.Tensor | None = None  # (U, z) seen users' μ

    def _context(
        self, zw: torch.Tensor, zl: torch.Tensor, groups: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pad per-user index lists into (U, C, d) context tensors and a (U, C) mask."""
        import torch

        C = max([1, *(len(g) for g in groups)])
        idx = torch.zeros(len(groups), C, dtype=torch.long)
        mask = torch.zeros(len(groups), C, dtype=torch.bool)
        for i, g in enumerate(groups):
            idx[i, : len(g)] = g
            mask[i, : len(g)] = True
        return zw[idx], zl[idx], mask

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        from perbench.rewards.nets import VPLNet

        d = data.zw.shape[1]
        self.net = net = VPLNet(d, self.hidden, self.z_dim)
        by_user = data.by_user()
        wt = data.pair_weights()
        gen = torch.Generator().manual_seed(ctx.seed)

        def loss_fn(t: int) -> torch.Tensor:
            groups = []
            for g in by_user:
                c = int(torch.randint(1, min(self.ctx_max, len(g)) + 1, (1,), generator=gen))
                groups.append(g[torch.randperm(len(g), generator=gen)[:c]])
            cw, cl, mask = self._context(data.zw, data.zl, groups)
            mu, logvar = net.encode(cw, cl, mask)
            z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)
            zu = z[data.uidx]
            bt = (torch.nn.functional.softplus(-(net.r(data.zw, zu) - net.r(data.zl, zu))) * wt).sum()
            kl = 0.5 * (mu**2 + logvar.exp() - logvar - 1).sum(-1).mean()
            beta = self.beta * min(1.0, (t + 1) / max(1.0, self.anneal * self.steps))
            return bt + beta * kl

        if not data.users:  # nothing to learn from: seeded initial networks, no seen user
            self.std.mu, self.std.sd = np.zeros(d, np.float32), np.ones(d, np.float32)
            self.Z = torch.zeros(0, self.z_dim)
            net.eval()
            return
        adam_steps(list(net.parameters()), loss_fn, self.steps, self.lr, self.weight_decay)
        net.eval()
        with torch.no_grad():
            cw, cl, mask = self._context(data.zw, data.zl, by_user)
            self.Z = net.encode(cw, cl, mask)[0]

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        import torch

        assert self.net is not None, "fit first"
        with torch.no_grad():
            cw, cl, mask = self._context(data.zw, data.zl, [torch.arange(len(data.zw))])
            return self.net.encode(cw, cl, mask)[0][0]

    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.net is None or self.Z is None:
            raise RuntimeError(f"{self.name} used before fit")
        return self.net.r(z, self.user_rows(user_ids, self.Z, self._fallback()))

    def _fallback(self) -> torch.Tensor:
        assert self.Z is not None
        return self.Z.mean(0) if len(self.Z) else self.Z.new_zeros(self.z_dim)

    def _state(self) -> dict[str, np.ndarray]:
        assert self.net is not None and self.Z is not None
        return {"Z": np32(self.Z), **module_state(self.net, "net.")}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        from perbench.rewards.nets import VPLNet

        self.Z = torch.from_numpy(state["Z"].astype(np.float32))
        d = state["net.reward.0.weight"].shape[1] - self.z_dim
        self.net = VPLNet(d, self.hidden, self.z_dim)
        load_module_state(self.net, state, "net.")
        self.net.eval()
