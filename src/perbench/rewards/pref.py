"""PReF — personalized reward factorisation (Shenfeld et al. 2025), on frozen features.

A linear map A: R^d → R^J (J = 5) embeds responses; a user is a vector u ∈ R^J;
P(y1 ≻ y2 | u) = σ(uᵀ A (z(y1) − z(y2))), so r_u(x, y) = uᵀ A z(x, y). Loss: BCE on the observed choices
+ l2 (0.02) on A and the user vectors; full-batch Adam.

Initialisation: SVD of the user × pair preference matrix M (M[u, p] = +1 / −1 when u preferred the first /
second response of pair p in a canonical order, 0 when unobserved): user factors U_J·√S, pair factors
√S·V_Jᵀ; A starts as the ridge regression of the pair factors on the pair feature differences.
(When seen users share no pair — e.g. every user has their own prompts — M is block-diagonal and the
SVD only seeds the J most active users; the Adam fit does the rest.)

New user: logistic regression of u on their shots with A frozen. The paper's MLE diverges on separable
shots (always the case with 1–2 shots), so we take the MAP with a Gaussian prior centred at the mean seen
user (``adapt_l2`` = 0.1). Unknown user: the mean seen user vector.

Active elicitation, as the reference code does it (``discover_user.py``'s "max_dist" loop with
``utils/inference.py::max_norm_vector``, the derivative used in the norm and in Σ): the first pick at random,
then the next pair maximises σ'(uᵀv)²·vᵀΣ⁻¹v — the delta-method variance of the predicted preference σ(uᵀv)
under the Laplace posterior of u — with Σ = λI + Σ_{pairs chosen so far} σ'(uᵀv) v vᵀ (the logistic Fisher
information), λ = 1e-3, v = A(z(y1) − z(y2)) ∈ R^J and u the user's current estimate.

- :meth:`select_shots` (what the few-shot curves use): the elicitation loop on a pool of the user's
  labelled pairs. The first pick is drawn at random from the pool (seeded by the fit's seed and the user,
  so it is reproducible); after each pick the user's answer is revealed and u is re-estimated from the
  picks so far (the same MAP as ``adapt``; the reference re-fits u by unregularised maximum likelihood,
  ``MLE_user_weight``), then Σ and the criterion are recomputed under the new u. Ties
  go to the earliest pool position. Any earlier ``adapt`` of the user is ignored (elicitation starts from
  scratch).
- :meth:`select_pairs`: the same criterion with u fixed at the user's current estimate (no answers
  revealed, no random first pick: a ranking of the candidates), pairs the user already answered in
  ``adapt`` entering Σ first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair, prompt_key
from perbench.rewards.base import RMContext, pair_feature_arrays
from perbench.rewards.personal import PairData, PersonalFeatureRM, adam_steps, fit_logistic, np32, user_seed

if TYPE_CHECKING:
    import torch


class PReF(PersonalFeatureRM):
    name: ClassVar[str] = "pref"
    fallback_doc = "the mean seen user vector"

    def __init__(
        self,
        J: int = 5,
        l2: float = 0.02,
        steps: int = 300,
        lr: float = 0.02,
        adapt_l2: float = 0.1,
        ridge: float = 1.0,
        select_lambda: float = 1e-3,
        **params: Any,
    ) -> None:
        super().__init__(
            J=J,
            l2=l2,
            steps=steps,
            lr=lr,
            adapt_l2=adapt_l2,
            ridge=ridge,
            select_lambda=select_lambda,
            **params,
        )
        self.J, self.l2, self.steps, self.lr = J, l2, steps, lr
        self.adapt_l2, self.ridge, self.select_lambda = adapt_l2, ridge, select_lambda
        self.A: torch.Tensor | None = None  # (J, d)
        self.U: torch.Tensor | None = None  # (n_users, J)
        self.shots: dict[str, list[PreferencePair]] = {}

    # ---- training --------------------------------------------------------------------------------------
    def svd_init(self, data: PairData) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (U0 (n_users, J), A0 (J, d)) from the user × pair preference matrix."""
        import torch

        keys: dict[tuple[str, str, str], int] = {}
        col, sign = [], []
        for p in data.pairs:
            a, b = sorted((p.chosen, p.rejected))
            col.append(keys.setdefault((prompt_key(p.prompt), a, b), len(keys)))
            sign.append(1.0 if p.chosen == a else -1.0)
        n_users, n_pairs = len(data.users), len(keys)
        M = torch.zeros(n_users, n_pairs)
        M[data.uidx, torch.tensor(col)] = torch.tensor(sign)
        Uf, S, Vh = torch.linalg.svd(M, full_matrices=False)
        J = min(self.J, len(S))
        root = S[:J].sqrt()
        U0 = torch.zeros(n_users, self.J)
        U0[:, :J] = Uf[:, :J] * root
        pair_f = torch.zeros(self.J, n_pairs)
        pair_f[:J] = root[:, None] * Vh[:J]
        # canonical-order feature differences of each unique pair (chosen − rejected, flipped by sign)
        d = data.zw.shape[1]
        delta = torch.zeros(n_pairs, d)
        sgn = torch.tensor(sign)[:, None]
        delta[torch.tensor(col)] = sgn * (data.zw - data.zl)
        gram = delta.T @ delta + self.ridge * torch.eye(d)
        A0 = torch.linalg.solve(gram, delta.T @ pair_f.T).T  # (J, d)
        return U0, A0

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        U0, A0 = self.svd_init(data)
        A = A0.clone().requires_grad_(True)
        U = U0.clone().requires_grad_(True)
        diff, wt = data.diff, data.pair_weights()

        def loss_fn(t: int) -> torch.Tensor:
            logit = ((diff @ A.T) * U[data.uidx]).sum(-1)
            bce = (torch.nn.functional.softplus(-logit) * wt).sum()
            return bce + self.l2 * ((A**2).sum() + (U**2).sum(-1).mean())

        adam_steps([A, U], loss_fn, self.steps, self.lr)
        self.A, self.U = A.detach(), U.detach()
        self.shots = {}

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        assert self.A is not None and self.U is not None, "fit first"
        self.shots[user_id] = list(data.pairs)
        return fit_logistic(data.diff @ self.A.T, l2=self.adapt_l2, center=self.U.mean(0))

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        self.shots.pop(user_id, None)
        super().adapt(user_id, shots)

    # ---- active selection ------------------------------------------------------------------------------
    @staticmethod
    def curvature(V: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """σ'(uᵀv) = σ(uᵀv)(1 − σ(uᵀv)) per row v of V."""
        import torch

        s = torch.sigmoid(V @ u)
        return s * (1 - s)

    def information(self, V: torch.Tensor, u: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """The criterion σ'(uᵀv)²·vᵀΣ⁻¹v per row v of V (float64)."""
        import torch

        info: torch.Tensor = self.curvature(V, u) ** 2 * ((V @ torch.linalg.inv(sigma)) * V).sum(-1)
        return info

    def select_pairs(self, user_pool: Sequence[PreferencePair], n: int, user_id: str | None = None) -> list[int]:
        """Greedy active elicitation: indices into ``user_pool`` of the ``n`` pairs to ask this user next.

        The user is ``user_id`` (default: the pool's first pair's user). Pairs the user already answered
        in ``adapt`` enter Σ first. Which response is "first" does not matter (the criterion is even in v).
        """
        import torch

        if self.A is None or self.U is None:
            raise RuntimeError(f"{self.name} used before fit")
        if not user_pool or n <= 0:
            return []
        uid = user_id if user_id is not None else user_pool[0].user_id
        u = self.user_rows([uid], self.U, self.U.mean(0))[0]
        ext = self._require_extractor()

        def embed(pairs: Sequence[PreferencePair]) -> torch.Tensor:
            fw, fl = pair_feature_arrays(ext, pairs, desc=f"{self.name} pool")
            assert self.A is not None
            return (self.std(torch.from_numpy(fw)) - self.std(torch.from_numpy(fl))) @ self.A.T

        sigma = self.select_lambda * torch.eye(self.J, dtype=torch.float64)
        u64 = u.double()
        done = self.shots.get(uid, [])
        if done:
            vd = embed(done).double()
            sigma += (vd * self.curvature(vd, u64)[:, None]).T @ vd
        V = embed(user_pool).double()
        c = self.curvature(V, u64)
        chosen: list[int] = []
        free = torch.ones(len(V), dtype=torch.bool)
        for _ in range(min(n, len(V))):
            info = self.information(V, u64, sigma)
            info[~free] = -torch.inf
            k = int(info.argmax())
            chosen.append(k)
            free[k] = False
            sigma += c[k] * torch.outer(V[k], V[k])
        return chosen

    def _pool_embedding(self, pool: Sequence[PreferencePair]) -> torch.Tensor:
        """(n, J) float64 v = A(z(chosen) − z(rejected)) of each pool pair."""
        import torch

        assert self.A is not None
        fw, fl = pair_feature_arrays(self._require_extractor(), pool, desc=f"{self.name} pool")
        return ((self.std(torch.from_numpy(fw)) - self.std(torch.from_numpy(fl))) @ self.A.T).double()

    def select_shots(self, user_id: str, pool: Sequence[PreferencePair], n: int) -> list[PreferencePair]:
        """The ``n`` pairs of ``pool`` (the user's labelled pairs) that active elicitation asks, in the order
        asked: a seeded random first pick, then greedy σ'(uᵀv)²·vᵀΣ⁻¹v with u re-estimated after every revealed
        answer (see the module docstring)."""
        import torch

        if self.A is None or self.U is None:
            raise RuntimeError(f"{self.name} used before fit")
        if n < 0:
            raise ValueError(f"{self.name}.select_shots: n must be ≥ 0, got {n}")
        if not pool or n == 0:
            return []
        V = self._pool_embedding(pool)
        center = self.U.mean(0)
        first = int(np.random.default_rng(user_seed(self.seed, user_id)).integers(len(V)))
        chosen: list[int] = [first]  # the reference's first pick: at random, from the seed
        for _ in range(min(n, len(V)) - 1):
            # u: the MAP estimate from the answers revealed so far; Σ: λI + their Fisher information
            u = fit_logistic(V[chosen].float(), l2=self.adapt_l2, center=center).double()
            Vc = V[chosen]
            sigma = self.select_lambda * torch.eye(self.J, dtype=torch.float64)
            sigma = sigma + (Vc * self.curvature(Vc, u)[:, None]).T @ Vc
            info = self.information(V, u, sigma).numpy()
            info[chosen] = -np.inf
            chosen.append(int(np.argmax(info)))  # first maximum: the earliest pool position wins ties
        return [pool[i] for i in chosen]

    # ---- scoring / state -------------------------------------------------------------------------------
    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.A is None or self.U is None:
            raise RuntimeError(f"{self.name} used before fit")
        return ((z @ self.A.T) * self.user_rows(user_ids, self.U, self.U.mean(0))).sum(-1)

    def user_vector(self, user_id: str) -> np.ndarray:
        assert self.U is not None
        return np32(self.user_rows([user_id], self.U, self.U.mean(0))[0])

    def _state(self) -> dict[str, np.ndarray]:
        assert self.A is not None and self.U is not None
        return {"A": np32(self.A), "U": np32(self.U)}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        self.A = torch.from_numpy(state["A"].astype(np.float32))
        self.U = torch.from_numpy(state["U"].astype(np.float32))
        self.shots = {}
