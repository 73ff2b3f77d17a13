"""MPU / MPU-Avg ("multi per-user" heads) — **our interpretation**: Rezk et al. name these baselines but do
not define them publicly.

- One Bradley–Terry linear head per seen user on the shared standardised features:
  r_u(x, y) = w_uᵀ z(x, y), w_u = argmin mean −log σ(w·(z_w − z_l)) + l2‖w‖² over that user's pairs only.
- MPU: an unseen user gets a head fit on their few-shot pairs only (same objective and l2).
- MPU-Avg: an unseen user gets the average of the seen users' heads (its shots are ignored).
- Unknown user (never fit nor adapted), both variants: the average seen head.
- No train pairs at all (an evaluation-only benchmark): no seen head, features are left unstandardised, the
  average head is zero (every unknown user's reward is 0, a tie); adaptation still fits a head from shots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.rewards.base import RMContext
from perbench.rewards.personal import PairData, PersonalFeatureRM, fit_logistic, np32

if TYPE_CHECKING:
    import torch


class MPU(PersonalFeatureRM):
    name: ClassVar[str] = "mpu"
    average_for_new_users: ClassVar[bool] = False
    fallback_doc = "the average of the seen users' heads"

    def __init__(self, l2: float = 1e-2, max_iter: int = 100, **params: Any) -> None:
        super().__init__(l2=l2, max_iter=max_iter, **params)
        self.l2, self.max_iter = l2, max_iter
        self.heads: torch.Tensor | None = None  # (U, d)
        self.avg: torch.Tensor | None = None  # (d,)

    def _fit(self, data: PairData, ctx: RMContext) -> None:
        import torch

        diff = data.diff
        if not data.users:
            d = diff.shape[1]
            self.std.mu, self.std.sd = np.zeros(d, np.float32), np.ones(d, np.float32)
            self.heads, self.avg = torch.zeros(0, d), torch.zeros(d)
            return
        heads = [fit_logistic(diff[idx], l2=self.l2, max_iter=self.max_iter) for idx in data.by_user()]
        self.heads = torch.stack(heads)
        self.avg = self.heads.mean(0)

    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor:
        assert self.avg is not None, "fit first"
        if self.average_for_new_users:
            return self.avg.clone()
        return fit_logistic(data.diff, l2=self.l2, max_iter=self.max_iter)

    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        if self.heads is None or self.avg is None:
            raise RuntimeError(f"{self.name} used before fit")
        return (z * self.user_rows(user_ids, self.heads, self.avg)).sum(-1)

    def _state(self) -> dict[str, np.ndarray]:
        assert self.heads is not None
        return {"heads": np32(self.heads)}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        import torch

        self.heads = torch.from_numpy(state["heads"].astype(np.float32))
        self.avg = self.heads.mean(0) if len(self.heads) else torch.zeros(self.heads.shape[1])


class MPUAvg(MPU):
    name: ClassVar[str] = "mpu_avg"
    average_for_new_users: ClassVar[bool] = True
