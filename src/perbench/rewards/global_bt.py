"""Global Bradley–Terry RM: r(x, y) = wᵀ standardize(φ(x, y)); loss −log σ(r_w − r_l) + λ‖w‖².

The bias of the usual form cancels in every pairwise comparison, so it is left out. Features are
standardised with the train set's mean and std so that one weight ``w`` in guided decoding means the
same thing across backbones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair
from perbench.rewards.base import FeatureRM, RMContext, pair_feature_arrays

if TYPE_CHECKING:
    import torch


class Standardizer:
    def __init__(self) -> None:
        self.mu: np.ndarray | None = None
        self.sd: np.ndarray | None = None

    def fit(self, feats: np.ndarray) -> None:
        self.mu = feats.mean(0).astype(np.float32)
        self.sd = (feats.std(0) + 1e-6).astype(np.float32)

    def __call__(self, feats: torch.Tensor) -> torch.Tensor:
        import torch

        if self.mu is None or self.sd is None:
            raise RuntimeError("standardizer used before fit")
        mu, sd = torch.from_numpy(self.mu).to(feats.device), torch.from_numpy(self.sd).to(feats.device)
        return (feats.float() - mu) / sd


@contextlib.contextmanager
def small_ops() -> Iterator[None]:
    """Run a block of many tiny tensor ops single-threaded, restoring the thread count afterwards.

    The heads here are small (d ≤ a few thousand, ~1000 pairs): multi-threading buys nothing per op, and on
    a busy machine every parallel region waits for a descheduled worker (measured on a loaded 2-core box:
    a PAL fit on 288 pairs of 64-d features took 173 s with 2 threads, 0.65 s with 1). One thread also makes a
    fit independent of the process's thread count (a Ray worker's 1, a local run's 2): a matrix-vector product
    sums in another order with two threads, and an optimiser's 200 steps carry that difference into the weights.
    """
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def fit_linear_bt(
    diff: np.ndarray,
    *,
    l2: float = 1e-2,
    max_iter: int = 200,
    init: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Minimise mean −log σ(w·diff_i) + l2‖w‖² (full-batch L-BFGS, deterministic: one thread, :func:`small_ops`)."""
    with small_ops():
        return _fit_linear_bt(diff, l2, max_iter, init, weights)


def _fit_linear_bt(
    diff: np.ndarray, l2: float, max_iter: int, init: np.ndarray | None, weights: np.ndarray | None
) -> np.ndarray:
    import torch

    X = torch.from_numpy(np.ascontiguousarray(diff, dtype=np.float32))
    wt = torch.ones(len(X)) if weights is None else torch.from_numpy(weights.astype(np.float32))
    w = torch.zeros(X.shape[1]) if init is None else torch.from_numpy(init.astype(np.float32)).clone()
    w.requires_grad_(True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-7)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (torch.nn.functional.softplus(-(X @ w)) * wt).sum() / wt.sum() + l2 * (w * w).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    return w.detach().numpy().astype(np.float32)


class GlobalBT(FeatureRM):
    name: ClassVar[str] = "global_bt"
    user_agnostic: ClassVar[bool] = True

    def __init__(self, l2: float = 1e-2, max_iter: int = 200, **params: Any) -> None:
        super().__init__(l2=l2, max_iter=max_iter, **params)
        self.l2, self.max_iter = l2, max_iter
        self.std = Standardizer()
        self.w: np.ndarray | None = None

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        if ctx.features is None:
            raise ValueError(f"{self.name} needs a feature extractor")
        self.bind(ctx.features)
        fw, fl = pair_feature_arrays(ctx.features, pairs)
        self.std.fit(np.concatenate([fw, fl]))
        import torch

        zw, zl = self.std(torch.from_numpy(fw)).numpy(), self.std(torch.from_numpy(fl)).numpy()
        self.w = fit_linear_bt(zw - zl, l2=self.l2, max_iter=self.max_iter)

    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        import torch

        if self.w is None:
            raise RuntimeError(f"{self.name} used before fit")
        return self.std(feats) @ torch.from_numpy(self.w).to(feats.device)

    def state(self) -> dict[str, np.ndarray]:
        assert self.w is not None and self.std.mu is not None and self.std.sd is not None
        return {"w": self.w, "mu": self.std.mu, "sd": self.std.sd}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.w, self.std.mu, self.std.sd = state["w"], state["mu"], state["sd"]
