"""The torch modules of the frozen-feature methods that train networks (PAL-A, PAL-B, VPL), apart from the methods
so that naming a method (a config check, ``perbench validate``, a rerun that fits nothing) does not import torch:
a method imports its network when it fits or loads one."""

from __future__ import annotations

import math

import torch

#: VPL's clamp of the posterior's log-variance
LOGVAR_MIN, LOGVAR_MAX = -6.0, 2.0


def mlp(d: int, hidden: int, out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, out))


class PalBNet(torch.nn.Module):
    """f (response side), g_1..g_K (prompt-side prototypes), and the logit scale."""

    def __init__(self, d: int, K: int, hidden: int, m: int) -> None:
        super().__init__()
        self.f = mlp(d, hidden, m)
        self.g = torch.nn.ModuleList([mlp(d, hidden, m) for _ in range(K)])
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def protos(self, zx: torch.Tensor) -> torch.Tensor:
        return torch.stack([g(zx) for g in self.g], dim=1)  # (N, K, m)


class PalANet(torch.nn.Module):
    """f (the projector of responses and ideal points) and K free prototypes P (K, d) in the feature space."""

    def __init__(self, d: int, K: int, hidden: int, m: int) -> None:
        super().__init__()
        self.f = mlp(d, hidden, m)
        self.P = torch.nn.Parameter(torch.randn(K, d))

    def ideal_points(self, w: torch.Tensor) -> torch.Tensor:
        """a_u = f(Σ_k w_uk p_k) for simplex weights w (..., K) -> (..., m)."""
        out: torch.Tensor = self.f(w @ self.P)
        return out


class VPLNet(torch.nn.Module):
    def __init__(self, d: int, hidden: int, z_dim: int, heads: int = 4) -> None:
        super().__init__()
        self.pair = torch.nn.Sequential(
            torch.nn.Linear(2 * d, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden)
        )
        self.attn = torch.nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, 2 * z_dim)
        self.reward = torch.nn.Sequential(
            torch.nn.Linear(d + z_dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1)
        )

    def encode(self, cw: torch.Tensor, cl: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, C, d) context pairs, (U, C) bool validity -> μ, log σ² of shape (U, z)."""
        h = self.pair(torch.cat([cw, cl], -1))
        a, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        h = self.norm(h + a)
        m = mask[..., None].float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        mu, logvar = self.head(pooled).chunk(2, dim=-1)
        return mu, logvar.clamp(LOGVAR_MIN, LOGVAR_MAX)

    def r(self, zy: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.reward(torch.cat([zy, z], -1))[..., 0]  # type: ignore[no-any-return]
