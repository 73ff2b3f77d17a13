"""PAL — pluralistic alignment with K user prototypes (Chen et al., ICLR 2025), on frozen features.

A user is a point on the simplex over K prototypes (K = 2 default): w_u = softmax(W_u). z_y are the
standardised features φ(x, y) of a (prompt, response); f is a small MLP into an m-dimensional preference
space.

**PAL-A** (``pal_a``, the paper's ideal-point model; the reference code's default PAL-A configuration: the
``f(Pw)`` user learner with the ``dist`` preference learner): K **free** prototypes p_k live in the input
(standardised feature) space, no prompt input; the user's ideal point is the mixture mapped by the same f
as the responses, a_u = f(Σ_k w_uk p_k), and

    r_u(x, y) = −‖f(z_y) − a_u‖₂  (the Euclidean distance, not squared, as the reference trains with).

The prompt reaches the reward only through φ(x, y). Loss, as the reference's PAL-A loss configs: the hinge
loss on the difference of distances, max(0, 1 − (d(y_l) − d(y_w))), a plain mean over pairs (no per-user
weighting), plus the bound on the **user ideal points** (not on the prototypes) λ·Σ relu(‖a_u‖ − 4) over the
ideal points of a batch, λ = 1. Where we depart: full-batch Adam on frozen features (the reference fine-tunes
or fixes an LLM, uses minibatches of 4, and weights the hinge over the tokens after the responses diverge —
with last-token features only the last token exists); the bound is therefore 4 × its mean over the pairs'
ideal points (its expected value on a batch of 4); W_u starts at 0 (uniform weights; the reference draws it
from N(0, I)). New user: W_u only, on the same hinge + bound loss (the reference's new-user mode).

**PAL-B** (``pal_b``): the prototypes are functions of the prompt, g_1..g_K small MLPs of the standardised
prompt features z_x (:meth:`~perbench.rewards.features.FeatureExtractor.prompt_features`):
r_u(x, y) = s · cos(f(z_y), Σ_k w_uk g_k(z_x)), s = exp(logit_scale) clamped at 100; cross-entropy over
[r_w, r_l] (= −log σ(r_w − r_l)), a plain mean over the pairs, as the reference's PAL-B loss (which also
computes a prototype-norm penalty but never adds it to the loss it back-propagates, so there is none here;
an earlier version added it, squared, and weighted pairs per user). PAL-B is
``prompt_conditioned``: every consumer (``score``, ``token_rewards``, ARGS, the RGD-induced policy) passes
each row's prompt through :meth:`~perbench.rewards.base.FeatureRM.rewards`, and ``reward_from_features``
without the prompt raises.

New user (both forms): only W_u is learnt from their pairs (Adam, everything else frozen). Unknown user:
the mean of the seen users' simplex weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair, Prompt, prompt_key
from perbench.rewards.base import RMContext
from perbench.rewards.global_bt import Standardizer
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

    from perbench.rewards.nets import PalANet, PalBNet

LOGIT_SCALE_MAX = math.log(100.0)
PROTO_NORM_BOUND = 4.0


#: the reference's PAL-A minibatch: its ideal-point bound is a sum over a batch of this many pairs
REFERENCE_BATCH = 4


class _PALBase(PersonalFeatureRM):
    stochastic_fit = True  # random prototypes and network weights at initialisation: one fit is one draw
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
        self.W: torch.Tensor | None = None  # (U, K) simplex weights

    def user_weights(self, user_id: str) -> np.ndarray:
        """The user's simplex weights over the K prototypes."""
        if self.W is None:
            raise RuntimeError(f"{self.name} used before fit")
        return np32(self.user_rows([user_id], self.W, self.W.mean(0))[0])

    def _adapt_theta(self, margin_of: Any) -> torch.Tensor:
        """Learn only W_u: ``margin_of(w)`` -> (n,) r_w − r_l of the user's shots under weights w."""
        import torch

        theta = torch.zeros(self.K, requires_grad=True)
        adam_steps(
            [theta],
            lambda t: torch.nn.functional.softplus(-margin_of(torch.softmax(theta, 0))).mean(),
            self.adapt_steps,
            self.adapt_lr,
        )
        return torch.softmax(theta.detach(), 0)


class PALA(_PALBase):
    """PAL-A: ideal point a_u = f(Σ_k softmax(W_u)_k p_k) of K free prototypes; r = −‖f(z_y) − a_u‖."""

    name: ClassVar[str] = "pal_a"

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.net: PalANet | None = None

    def _distance(self, fy: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
        d: torch.Tensor = ((fy - point) ** 2).sum(-1).clamp(min=1e-12).sqrt()  # ‖·‖₂, finite gradient at 0
        return d

    def loss(self, fw: torch.Tensor, fl: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """The reference's PAL-A loss on pairs (f(z_w), f(z_l)) and each pair's ideal point: the hinge
        max(0, 1 − (d_l − d_w)) averaged over pairs, plus λ × the ideal-point bound on a reference batch."""
        import torch

        margin = self._distance(fl, points) - self._distance(fw, points)
        hinge = torch.relu(1.0 - margin).mean()
        bound = REFERENCE_BATCH * torch.relu(points.norm(dim=-1) - PROTO_NORM_BOUND).mean()
        return hinge + self.bound_weight * bound

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        from perbench.rewards.nets import PalANet

        d = data.zw.shape[1]
        self.net = net = PalANet(d, self.K, self.hidden, self.m)
        theta = torch.zeros(len(data.users), self.K, requires_grad=True)

        def loss_fn(t: int) -> torch.Tensor:
            points = net.ideal_points(torch.softmax(theta, -1)[data.uidx])  # (P, m)
            return self.loss(net.f(data.zw), net.f(data.zl), points)

        adam_steps(list(net.f.parameters()), loss_fn, self.steps, self.lr, self.weight_decay, no_decay=[theta, net.P])
        net.eval()
        self.W = torch.softmax(theta.detach(), -1)

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        import torch

        assert self.net is not None, "fit first"
        net = self.net
        with torch.no_grad():
            fw, fl = net.f(data.zw), net.f(data.zl)
        for q in net.parameters():
            q.requires_grad_(False)
        theta = torch.zeros(self.K, requires_grad=True)
        try:
            adam_steps(
                [theta],
                lambda t: self.loss(fw, fl, net.ideal_points(torch.softmax(theta, 0))[None].expand(len(fw), -1)),
                self.adapt_steps,
                self.adapt_lr,
            )
        finally:
            for q in net.parameters():
                q.requires_grad_(True)
        return torch.softmax(theta.detach(), 0)

    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.net is None or self.W is None:
            raise RuntimeError(f"{self.name} used before fit")
        point = self.net.ideal_points(self.user_rows(user_ids, self.W, self.W.mean(0)))
        return -self._distance(self.net.f(z), point)

    def ideal_point(self, user_id: str) -> np.ndarray:
        """a_u in the preference space (m,)."""
        import torch

        assert self.net is not None
        with torch.no_grad():
            return np32(self.net.ideal_points(torch.from_numpy(self.user_weights(user_id))))

    def _state(self) -> dict[str, np.ndarray]:
        assert self.net is not None and self.W is not None
        return {"W": np32(self.W), **module_state(self.net, "net.")}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        from perbench.rewards.nets import PalANet

        self.W = torch.from_numpy(state["W"].astype(np.float32))
        d = int(state["net.f.0.weight"].shape[1])
        self.net = PalANet(d, self.K, self.hidden, self.m)
        load_module_state(self.net, state, "net.")
        self.net.eval()


class PALB(_PALBase):
    """PAL-B: prompt-conditioned prototypes g_k(z_x), cosine reward with a learnt scale."""

    name: ClassVar[str] = "pal_b"
    prompt_conditioned: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.std_x = Standardizer()
        self.net: PalBNet | None = None
        self._zx: dict[str, torch.Tensor] = {}  # prompt key -> standardised prompt features (memo)

    # ---- the model -------------------------------------------------------------------------------------
    def _r(self, fy: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
        import torch

        assert self.net is not None
        s = self.net.logit_scale.clamp(max=LOGIT_SCALE_MAX).exp()
        return s * torch.nn.functional.cosine_similarity(fy, point, dim=-1)

    def _extract_more(self, pairs: Sequence[PreferencePair]) -> None:
        self._require_extractor().prompt_features([p.prompt for p in pairs], desc=f"{self.name} prompts")

    def _prompt_z(self, prompts: Sequence[Prompt]) -> torch.Tensor:
        """(N, d) standardised prompt features, each distinct prompt extracted once (memoised)."""
        import torch

        keys = [prompt_key(p) for p in prompts]
        todo = {k: p for k, p in zip(keys, prompts, strict=True) if k not in self._zx}
        if todo:
            px = self._require_extractor().prompt_features(list(todo.values()), desc=f"{self.name} prompts")
            zx = self.std_x(torch.from_numpy(px))
            self._zx.update({k: zx[i] for i, k in enumerate(todo)})
        if not keys:
            return torch.zeros(0, len(self.std_x.mu) if self.std_x.mu is not None else 0)
        return torch.stack([self._zx[k] for k in keys])

    # ---- training --------------------------------------------------------------------------------------
    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        from perbench.rewards.nets import PalBNet

        px = self._require_extractor().prompt_features([p.prompt for p in data.pairs], desc=f"{self.name} prompts")
        self.std_x.fit(px)
        self._zx = {}
        zx = self.std_x(torch.from_numpy(px))
        self.net = net = PalBNet(data.zw.shape[1], self.K, self.hidden, self.m)
        theta = torch.zeros(len(data.users), self.K, requires_grad=True)

        def loss_fn(t: int) -> torch.Tensor:
            # as the reference's PAL-B loss: a plain mean over the batch's pairs (no per-user weighting, like our
            # PAL-A); its prototype-norm penalty is computed there but never added to the loss it back-propagates,
            # so it is left out here too (``bound_weight`` is PAL-A's)
            protos = net.protos(zx)
            point = (torch.softmax(theta, -1)[data.uidx, :, None] * protos).sum(1)
            margin = self._r(net.f(data.zw), point) - self._r(net.f(data.zl), point)
            return torch.nn.functional.softplus(-margin).mean()

        adam_steps(list(net.parameters()), loss_fn, self.steps, self.lr, self.weight_decay, no_decay=[theta])
        net.eval()
        self.W = torch.softmax(theta.detach(), -1)

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        import torch

        assert self.net is not None, "fit first"
        net = self.net
        with torch.no_grad():
            protos = net.protos(self._prompt_z([p.prompt for p in data.pairs]))
            fw, fl = net.f(data.zw), net.f(data.zl)

        def margin_of(w: torch.Tensor) -> torch.Tensor:
            point = (w[None, :, None] * protos).sum(1)
            return self._r(fw, point) - self._r(fl, point)

        return self._adapt_theta(margin_of)

    # ---- scoring ---------------------------------------------------------------------------------------
    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        raise TypeError(
            f"{self.name}'s reward depends on the prompt: call rewards(user_ids, prompts, feats), not "
            "reward_from_features"
        )

    def prompt_rewards(self, user_ids: Sequence[str], prompts: Sequence[Prompt], feats: torch.Tensor) -> torch.Tensor:
        if self.net is None or self.W is None:
            raise RuntimeError(f"{self.name} used before fit")
        z = self.std(feats.detach().float().cpu())
        w = self.user_rows(user_ids, self.W, self.W.mean(0))  # (N, K)
        point = (w[:, :, None] * self.net.protos(self._prompt_z(prompts))).sum(1)
        return self._r(self.net.f(z), point).to(feats.device)

    # ---- state -----------------------------------------------------------------------------------------
    def _state(self) -> dict[str, np.ndarray]:
        assert self.net is not None and self.W is not None
        assert self.std_x.mu is not None and self.std_x.sd is not None
        return {"W": np32(self.W), "mux": self.std_x.mu, "sdx": self.std_x.sd, **module_state(self.net, "net.")}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        from perbench.rewards.nets import PalBNet

        self.W = torch.from_numpy(state["W"].astype(np.float32))
        self.std_x.mu, self.std_x.sd = state["mux"].astype(np.float32), state["sdx"].astype(np.float32)
        self._zx = {}
        self.net = PalBNet(len(self.std_x.mu), self.K, self.hidden, self.m)
        load_module_state(self.net, state, "net.")
        self.net.eval()


#: Backwards-compatible name of the PAL-B class.
PAL = PALB
