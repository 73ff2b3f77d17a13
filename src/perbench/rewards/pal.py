"""PAL — pluralistic alignment with K user prototypes (Chen et al., ICLR 2025), on frozen features.

A user is a point on the simplex over K prototypes (K = 2 default): w_u = softmax(W_u). With z_y the
standardised features of (x, y) and z_x the standardised *prompt* features
(:meth:`~perbench.rewards.features.FeatureExtractor.prompt_features`), f and g_1..g_K small MLPs:

- PAL-B: r_u(x, y) = s · cos(f(z_y), Σ_k w_uk g_k(z_x)), s = exp(logit_scale) clamped at 100;
- PAL-A (ideal point): r_u(x, y) = −‖f(z_y) − Σ_k w_uk g_k(z_x)‖², the distance of the response to the
  user's mixture of prototype points.

Loss: cross-entropy over [r_w, r_l] (= −log σ(r_w − r_l)) plus a bound penalty
mean relu(‖g_k(z_x)‖ − 4)² that keeps prototype norms ≤ 4. Full-batch Adam.

New user: only W_u is learnt from their pairs (Adam, networks frozen). Unknown user: the mean of the seen
users' simplex weights.

Prompt side outside ``score`` (our reading, kept simple): ARGS and per-token policy accuracy only hand
over φ(x, y-prefix). :meth:`set_prompt_context` lets a caller register the prompt features of the rows
of the next ``reward_from_features`` calls (raw φ, one row per reward row, or one row per *user* via a
dict); without it, the prompt side is the user's mixture of the *mean* prototype vectors ḡ_k over the
train prompts (learnt at fit time). ``score`` and ``token_rewards`` always use the real prompt features.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import PreferencePair
from perbench.rewards.base import RMContext, ScoreItem
from perbench.rewards.global_bt import Standardizer
from perbench.rewards.personal import (
    PairData,
    PersonalFeatureRM,
    adam_steps,
    load_module_state,
    module_state,
    np32,
)

LOGIT_SCALE_MAX = math.log(100.0)
PROTO_NORM_BOUND = 4.0


def _mlp(d: int, hidden: int, out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, out))


class PalNet(torch.nn.Module):
    """f (response side), g_1..g_K (prompt-side prototypes), and PAL-B's logit scale."""

    def __init__(self, d: int, K: int, hidden: int, m: int) -> None:
        super().__init__()
        self.f = _mlp(d, hidden, m)
        self.g = torch.nn.ModuleList([_mlp(d, hidden, m) for _ in range(K)])
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def protos(self, zx: torch.Tensor) -> torch.Tensor:
        return torch.stack([g(zx) for g in self.g], dim=1)  # (N, K, m)


class PAL(PersonalFeatureRM):
    name: ClassVar[str] = "pal_b"
    form: ClassVar[str] = "B"
    fallback_doc = "the mean of the seen users' prototype weights"

    def __init__(
        self,
        K: int = 2,
        hidden: int = 64,
        dim: int = 16,
        steps: int = 300,
        lr: float = 5e-3,
        weight_decay: float = 1e-2,
        bound_weight: float = 1.0,
        adapt_steps: int = 200,
        adapt_lr: float = 0.1,
        **params: Any,
    ) -> None:
        super().__init__(
            K=K,
            hidden=hidden,
            dim=dim,
            steps=steps,
            lr=lr,
            weight_decay=weight_decay,
            bound_weight=bound_weight,
            adapt_steps=adapt_steps,
            adapt_lr=adapt_lr,
            **params,
        )
        self.K, self.hidden, self.m, self.steps, self.lr = K, hidden, dim, steps, lr
        self.weight_decay, self.bound_weight = weight_decay, bound_weight
        self.adapt_steps, self.adapt_lr = adapt_steps, adapt_lr
        self.std_x = Standardizer()
        self.net: PalNet | None = None
        self.W: torch.Tensor | None = None  # (U, K) simplex weights
        self.gbar: torch.Tensor | None = None  # (K, m) mean prototype vectors over train prompts
        self._prompt_ctx: torch.Tensor | dict[str, torch.Tensor] | None = None

    # ---- the model -------------------------------------------------------------------------------------
    def _protos(self, zx: torch.Tensor) -> torch.Tensor:
        assert self.net is not None
        return self.net.protos(zx)

    def _r(self, fy: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
        """(N, m) response embeddings, (N, m) user prompt-side points -> (N,) rewards."""
        assert self.net is not None
        if self.form == "A":
            return -((fy - point) ** 2).sum(-1)
        s = self.net.logit_scale.clamp(max=LOGIT_SCALE_MAX).exp()
        return s * torch.nn.functional.cosine_similarity(fy, point, dim=-1)

    def _bound(self, protos: torch.Tensor) -> torch.Tensor:
        return torch.relu(protos.norm(dim=-1) - PROTO_NORM_BOUND).pow(2).mean()

    def _extract_more(self, pairs: Sequence[PreferencePair]) -> None:
        self._require_extractor().prompt_features([p.prompt for p in pairs], desc=f"{self.name} prompts")

    def _prompt_z(self, data: PairData) -> torch.Tensor:
        px = self._require_extractor().prompt_features([p.prompt for p in data.pairs], desc=f"{self.name} prompts")
        return self.std_x(torch.from_numpy(px))

    # ---- training --------------------------------------------------------------------------------------
    def _fit(self, data: PairData, ctx: RMContext) -> None:
        px = self._require_extractor().prompt_features([p.prompt for p in data.pairs], desc=f"{self.name} prompts")
        self.std_x.fit(px)
        zx = self.std_x(torch.from_numpy(px))
        d = data.zw.shape[1]
        self.net = net = PalNet(d, self.K, self.hidden, self.m)
        theta = torch.zeros(len(data.users), self.K, requires_grad=True)
        wt = data.pair_weights()

        def loss_fn(t: int) -> torch.Tensor:
            protos = self._protos(zx)
            point = (torch.softmax(theta, -1)[data.uidx, :, None] * protos).sum(1)
            margin = self._r(net.f(data.zw), point) - self._r(net.f(data.zl), point)
            bt = (torch.nn.functional.softplus(-margin) * wt).sum()
            return bt + self.bound_weight * self._bound(protos)

        adam_steps(list(net.parameters()), loss_fn, self.steps, self.lr, self.weight_decay, no_decay=[theta])
        net.eval()
        with torch.no_grad():
            self.W = torch.softmax(theta.detach(), -1)
            self.gbar = self._protos(zx).mean(0)

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        assert self.net is not None, "fit first"
        with torch.no_grad():
            protos = self._protos(self._prompt_z(data))
            fw, fl = self.net.f(data.zw), self.net.f(data.zl)
        theta = torch.zeros(self.K, requires_grad=True)

        def loss_fn(t: int) -> torch.Tensor:
            point = (torch.softmax(theta, 0)[None, :, None] * protos).sum(1)
            return torch.nn.functional.softplus(-(self._r(fw, point) - self._r(fl, point))).mean()

        adam_steps([theta], loss_fn, self.adapt_steps, self.adapt_lr)
        return torch.softmax(theta.detach(), 0)

    # ---- scoring ---------------------------------------------------------------------------------------
    def set_prompt_context(
        self, prompt_feats: torch.Tensor | np.ndarray | Mapping[str, torch.Tensor | np.ndarray] | None
    ) -> None:
        """Register raw prompt features φ(x) for the next ``reward_from_features`` calls: an (N, d) array
        (one row per reward row; used only when N matches) or a dict user_id -> (d,) (one prompt per user,
        e.g. one decoding request per user). ``None`` clears it (back to the mean prototypes ḡ)."""
        if prompt_feats is None:
            self._prompt_ctx = None
        elif isinstance(prompt_feats, Mapping):
            self._prompt_ctx = {u: torch.as_tensor(v, dtype=torch.float32).cpu() for u, v in prompt_feats.items()}
        else:
            self._prompt_ctx = torch.as_tensor(prompt_feats, dtype=torch.float32).cpu()

    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        ctx = self._prompt_ctx
        if isinstance(ctx, dict):  # rows of users with a registered prompt use it, the others ḡ
            rows = [i for i, u in enumerate(user_ids) if u in ctx]
            if rows:
                px = torch.stack([ctx[user_ids[i]] for i in rows])
                return self._reward_with_prompt(user_ids, z, self.std_x(px), rows)
        elif ctx is not None and len(ctx) == len(z):
            return self._reward_with_prompt(user_ids, z, self.std_x(ctx))
        return self._reward_with_prompt(user_ids, z, None)

    def _reward_with_prompt(
        self, user_ids: Sequence[str], z: torch.Tensor, zx: torch.Tensor | None, rows: list[int] | None = None
    ) -> torch.Tensor:
        """Rewards with the prototypes of prompt features ``zx`` (for ``rows``, default all rows; the other
        rows use the mean prototypes ḡ)."""
        if self.net is None or self.W is None or self.gbar is None:
            raise RuntimeError(f"{self.name} used before fit")
        w = self.user_rows(user_ids, self.W, self.W.mean(0))  # (N, K)
        if zx is None:
            protos = self.gbar.expand(len(z), -1, -1)
        elif rows is None:
            protos = self._protos(zx)
        else:
            protos = self.gbar.expand(len(z), -1, -1).clone()
            protos[rows] = self._protos(zx)
        point = (w[:, :, None] * protos).sum(1)
        return self._r(self.net.f(z), point)

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        ext = self._require_extractor()
        feats = ext.last([(it.prompt, it.response) for it in items], desc=f"{self.name} features")
        px = ext.prompt_features([it.prompt for it in items], desc=f"{self.name} prompts")
        with torch.no_grad():
            r = self._reward_with_prompt(
                [it.user_id for it in items],
                self.std(torch.from_numpy(feats)),
                self.std_x(torch.from_numpy(px)),
            )
        return r.double().numpy()

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        ext = self._require_extractor()
        toks = ext.tokens([(it.prompt, it.response) for it in items])
        px = self.std_x(torch.from_numpy(ext.prompt_features([it.prompt for it in items])))
        out = []
        with torch.no_grad():
            for i, (it, tf) in enumerate(zip(items, toks, strict=True)):
                h = self.std(torch.from_numpy(tf.hidden))
                out.append(
                    self._reward_with_prompt([it.user_id] * len(h), h, px[i : i + 1].expand(len(h), -1))
                    .double()
                    .numpy()
                )
        return out

    # ---- state -----------------------------------------------------------------------------------------
    def _state(self) -> dict[str, np.ndarray]:
        assert self.net is not None and self.W is not None and self.gbar is not None
        assert self.std_x.mu is not None and self.std_x.sd is not None
        return {
            "W": np32(self.W),
            "gbar": np32(self.gbar),
            "mux": self.std_x.mu,
            "sdx": self.std_x.sd,
            **module_state(self.net, "net."),
        }

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.W = torch.from_numpy(state["W"].astype(np.float32))
        self.gbar = torch.from_numpy(state["gbar"].astype(np.float32))
        self.std_x.mu, self.std_x.sd = state["mux"].astype(np.float32), state["sdx"].astype(np.float32)
        d = len(self.std_x.mu)
        self.net = PalNet(d, self.K, self.hidden, self.m)
        load_module_state(self.net, state, "net.")
        self.net.eval()


class PALB(PAL):
    name: ClassVar[str] = "pal_b"
    form: ClassVar[str] = "B"


class PALA(PAL):
    name: ClassVar[str] = "pal_a"
    form: ClassVar[str] = "A"
