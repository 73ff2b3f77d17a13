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
  α(t)·mean_k(1 − cos(V_k, v_ref)) with α(t) ramped linearly from 0 at 20 % to ``alpha`` at 80 % of the
  iterations; at the end, basis columns no user weights above 1e-2 are dropped and the weights
  renormalised over the kept columns. The reference sets α = 1e4 (its PRISM setting); there every user's
  direction ended up the anchor's (cos 1.0000 on 4 of 4 synthetic problems: user-agnostic but counted as a
  personalized system), so by default (``alpha`` None) α is chosen from 1e4, 1e2, 1, 0.1 by the
  Bradley–Terry loss on each user's last fifth of train pairs (fit on the rest), ties to the larger α; a
  given ``alpha`` is used as is. A fit whose seen users all point within cos 0.999 of the anchor is
  labelled "anchor + per-user scale" (``fit_notes``, results.json). v_ref is the
  direction of a **reference reward model that was not fit on these pairs**, as the reference anchors on
  an external RM's score head (its embeddings are that RM's own). Ours, in the standardised feature space
  (:attr:`LoReReg.v_global`):

  * ``anchor_state``: a saved ``global_bt`` state (``w``, ``mu``, ``sd``; :func:`save_anchor`) fit elsewhere on
    this backbone's features — its head in our standardisation, w·sd/sd_ref, exactly;
  * ``anchor_rm``: a hub reward model (``hub_rm``'s ``model``: a hub id or a local folder) — its scores of the
    train responses regressed on their standardised features (ridge, λ = 1): the reference's judgement as a
    direction of this feature space. It reads the train texts, never their labels.

  Without either the method is refused (a :class:`~perbench.errors.ConfigError` naming both keys): anchored
  on ``global_bt`` fit on the same pairs, every basis column became parallel to it at α = 1e4, and lore_reg
  ranked exactly like global_bt — a copy of a baseline counted twice in the selection analysis.
- ``lore_alt``: alternating minimisation without the penalty: blocks of ``inner_steps`` Adam steps on θ,
  then on V, repeated.
- New user: V frozen, θ_u fit on their shots (Adam, ``adapt_steps`` = 500, from uniform weights).
- Unknown user: the mean of the seen users' simplex weights.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import prompt_key
from perbench.errors import ConfigError
from perbench.rewards.base import RMContext
from perbench.rewards.personal import PairData, PersonalFeatureRM, adam_steps, np32

if TYPE_CHECKING:
    import torch

    from perbench.rewards.global_bt import GlobalBT


class LoRe(PersonalFeatureRM):
    stochastic_fit = True  # a random initialisation of V: one fit is one draw
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


#: the pull strengths ``lore_reg`` chooses among by validation (``alpha`` None): the reference's 1e4 first
ALPHA_GRID: tuple[float, ...] = (1e4, 1e2, 1.0, 0.1)
#: every seen user's direction V·w_u at least this cosine from the anchor's: the fit is the anchor, rescaled
DEGENERATE_COS = 0.999
DEGENERATE_LABEL = "anchor + per-user scale"


class LoReReg(LoReAlt):
    """Alternating single steps on θ and V, cosine pull of V's columns toward a reference RM's direction
    (α ramped from 0 at 20 % to ``alpha`` at 80 % of iterations), unused columns (< 1e-2) dropped. ``alpha``
    None (the default) chooses α from :data:`ALPHA_GRID` by validation on the train pairs; a fit whose users all
    point along the anchor is labelled :data:`DEGENERATE_LABEL` (:meth:`fit_notes`)."""

    name: ClassVar[str] = "lore_reg"
    mode: ClassVar[str] = "reg"

    def __init__(
        self,
        alpha: float | None = None,
        inner_steps: int = 1,
        anchor_state: str | None = None,
        anchor_rm: str | None = None,
        anchor_ridge: float = 1.0,
        **params: Any,
    ) -> None:
        if (anchor_state is None) == (anchor_rm is None):
            raise ConfigError(
                "lore_reg needs a reference reward model that was not fit on these pairs, given as exactly one "
                "of anchor_state (a saved global_bt state, .npz, on this RM backbone's features) or anchor_rm "
                "(a hub reward model id or folder); "
                + ("both were given" if anchor_state else "neither was given")
                + ". Anchored on global_bt fit on the same pairs it becomes a copy of global_bt."
            )
        digest: dict[str, str] = {}
        if anchor_state is not None:
            path = Path(anchor_state).expanduser()
            if not path.is_file():
                raise ConfigError(f"lore_reg: anchor_state: no such file: {anchor_state}")
            digest["anchor_digest"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        super().__init__(
            alpha=alpha,
            inner_steps=inner_steps,
            **({"anchor_state": anchor_state} if anchor_state is not None else {"anchor_rm": anchor_rm}),
            **({"anchor_ridge": anchor_ridge} if anchor_ridge != 1.0 else {}),
            **digest,
            **params,
        )
        self.alpha, self.anchor_state, self.anchor_rm, self.anchor_ridge = alpha, anchor_state, anchor_rm, anchor_ridge
        self._v_global: torch.Tensor | None = None
        #: the α the fit used (``alpha``, or the validated one), the held-out loss per α tried, and the smallest
        #: cosine between a seen user's direction V·w_u and the anchor's
        self.alpha_used: float = 1e4 if alpha is None else float(alpha)
        self.validation: dict[str, float] = {}
        self.min_cos: float | None = None

    @property
    def v_global(self) -> np.ndarray | None:
        """The reference direction the basis is pulled toward, in the standardised feature space (None before
        fit or after a state reload)."""
        return None if self._v_global is None else np32(self._v_global)

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        self._v_global = self._anchor_direction(data)
        if self.alpha is None:
            self.alpha_used = self._choose_alpha(data, ctx)
        super()._fit(data, ctx)
        assert self.V is not None and self.W is not None
        dirs = (self.V @ self.W.T).T  # (U, d): each seen user's direction in the standardised space
        cos = torch_cos(dirs, self._v_global)
        self.min_cos = float(cos.min()) if len(cos) else None

    def _choose_alpha(self, data: PairData, ctx: RMContext) -> float:
        """The α of :data:`ALPHA_GRID` with the lowest Bradley–Terry loss on held-out train pairs (each user's last
        fifth, for users with 5 pairs or more), fit on the rest with the run's seed; ties go to the larger α. With
        no user to hold pairs out of, the reference's 1e4."""
        import torch

        from perbench.rewards.personal import seeded

        fit_idx, val_idx = [], []
        for rows in data.by_user():
            n = len(rows)
            cut = n - n // 5 if n >= 5 else n
            fit_idx += rows[:cut].tolist()
            val_idx += rows[cut:].tolist()
        if not val_idx:
            self.validation = {}
            return ALPHA_GRID[0]

        def part(idx: list[int]) -> PairData:
            t = torch.tensor(idx, dtype=torch.long)
            return PairData(data.zw[t], data.zl[t], data.uidx[t], data.users, [data.pairs[i] for i in idx])

        train, held = part(fit_idx), part(val_idx)
        losses: dict[float, float] = {}
        for a in ALPHA_GRID:
            self.alpha_used = a
            with seeded(ctx.seed):
                super()._fit(train, ctx)
            assert self.V is not None and self.W is not None
            logit = ((held.diff @ self.V) * self.W[held.uidx]).sum(-1) / self.tau
            losses[a] = float((torch.nn.functional.softplus(-logit) * held.pair_weights()).sum())
        self.validation = {f"{a:g}": round(v, 6) for a, v in losses.items()}
        return min(ALPHA_GRID, key=lambda a: (round(losses[a], 6), -a))

    @property
    def degenerate(self) -> bool:
        """Every seen user's direction within :data:`DEGENERATE_COS` of the anchor's: user-agnostic in all but scale."""
        return self.min_cos is not None and self.min_cos >= DEGENERATE_COS

    def fit_notes(self) -> dict[str, Any]:
        """What results.json records of the fit: the α used (and how it was chosen), the users' smallest cosine to
        the anchor, and the degenerate label when it applies."""
        out: dict[str, Any] = {
            "alpha": self.alpha_used,
            "alpha_source": "alpha" if self.alpha is not None else "validation on held-out train pairs",
            "min_cos_to_anchor": self.min_cos,
        }
        if self.validation:
            out["validation_loss"] = self.validation
        if self.degenerate:
            out["label"] = DEGENERATE_LABEL
            out["degenerate"] = (
                f"every seen user's direction is within cos {DEGENERATE_COS} of the anchor's: this fit ranks like the "
                "anchor, rescaled per user"
            )
            # the analysis lists it as a reference line, not among the personalized systems it may recommend
            out["reference_line"] = f"{DEGENERATE_LABEL}: not a personalized system"
        return out

    def _state(self) -> dict[str, np.ndarray]:
        out = super()._state()
        out["alpha_used"] = np.asarray(self.alpha_used, np.float64)
        out["min_cos"] = np.asarray(np.nan if self.min_cos is None else self.min_cos, np.float64)
        return out

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        super()._load_state(state)
        if "alpha_used" in state:
            self.alpha_used = float(state["alpha_used"])
            mc = float(state["min_cos"])
            self.min_cos = None if math.isnan(mc) else mc

    def _anchor_direction(self, data: PairData) -> torch.Tensor:
        import torch

        from perbench.cache import unpack_arrays

        d = data.zw.shape[1]
        assert self.std.mu is not None and self.std.sd is not None
        if self.anchor_state is not None:
            state = unpack_arrays(Path(self.anchor_state).expanduser().read_bytes())
            missing = sorted({"w", "mu", "sd"} - set(state))
            if missing:
                raise ValueError(f"lore_reg: anchor_state {self.anchor_state} is not a global_bt state (no {missing})")
            if state["w"].shape != (d,):
                raise ValueError(
                    f"lore_reg: anchor_state {self.anchor_state} has a {state['w'].shape[0]}-dim head; this RM "
                    f"backbone's features have {d} dims"
                )
            ext = self._require_extractor()
            if "backbone" in state and str(state["backbone"]) != ext.fingerprint:
                raise ValueError(
                    f"lore_reg: anchor_state {self.anchor_state} was fit on backbone {state['backbone']}, not on "
                    f"this run's {ext.fingerprint}"
                )
            # r_ref = w·(φ − mu_ref)/sd_ref and φ = z·sd + mu: linear in our z with weights w·sd/sd_ref
            v = state["w"].astype(np.float64) * self.std.sd / state["sd"].astype(np.float64)
            return torch.from_numpy(v.astype(np.float32))
        from perbench.rewards.base import ScoreItem
        from perbench.rewards.hub_rm import HubRM

        texts: dict[tuple[str, str], int] = {}
        rows: list[torch.Tensor] = []
        items: list[ScoreItem] = []
        for i, p in enumerate(data.pairs):
            for resp, z in ((p.chosen, data.zw[i]), (p.rejected, data.zl[i])):
                key = (prompt_key(p.prompt), resp)
                if key not in texts:
                    texts[key] = len(items)
                    items.append(ScoreItem(p.user_id, p.prompt, resp))
                    rows.append(z)
        ref = HubRM(model=str(self.anchor_rm))
        y = torch.from_numpy(np.asarray(ref.score(items), np.float64))
        Z = torch.stack(rows).double()
        y = y - y.mean()
        gram = Z.T @ Z + self.anchor_ridge * torch.eye(d, dtype=torch.float64)
        sol: torch.Tensor = torch.linalg.solve(gram, Z.T @ y)
        return sol.float()

    def _penalty(self, Vp: torch.Tensor, t: int, total: int) -> torch.Tensor | None:
        import torch

        assert self._v_global is not None
        frac = t / max(1, total)
        a = self.alpha_used * min(1.0, max(0.0, (frac - 0.2) / 0.6))
        if a == 0.0 or float(self._v_global.norm()) == 0.0:
            return None
        cos = torch.nn.functional.cosine_similarity(Vp, self._v_global[:, None], dim=0)
        return a * (1 - cos).mean()


def torch_cos(rows: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Cosine of each row of ``rows`` with ``v`` (0 where either is zero)."""
    import torch

    return torch.nn.functional.cosine_similarity(rows, v[None, :].expand_as(rows), dim=1, eps=1e-12)


def save_anchor(rm: GlobalBT, path: str | Path) -> Path:
    """Write a fitted ``global_bt`` as a ``lore_reg`` anchor (``anchor_state``): its head, standardisation and the
    backbone fingerprint (checked when it is read). Fit it on pairs other than those lore_reg is fit on."""
    from perbench.cache import pack_arrays
    from perbench.io import atomic_write_bytes

    state = rm.state()
    if rm.extractor is not None:
        state["backbone"] = np.asarray(rm.extractor.fingerprint)
    out = Path(path)
    atomic_write_bytes(out, pack_arrays(**state))
    return out
