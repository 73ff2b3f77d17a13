"""Shared machinery of the personalized frozen-feature reward models (MPU, LoRe, PAL, VPL, PReF, ranker).

:class:`PersonalFeatureRM` does what every such method repeats: bind the shared extractor, read φ for the
train pairs once (:func:`~perbench.rewards.base.pair_feature_arrays`), standardise them with the train
mean/std (as :class:`~perbench.rewards.global_bt.GlobalBT` does), seed the RNG from ``ctx.seed``, and keep
three kinds of per-user parameters apart:

- the **seen** users' table, learnt by ``fit`` (this is what ``state()`` saves);
- the **adapted** users, one entry per ``adapt(user, shots)`` call (each call replaces the entry; not part
  of ``state()``: adaptation is cheap and re-run from the shots);
- the **fallback** for any other user id (a documented "average user" per method), so that a reward for
  an unknown user never raises mid-decoding.

Training runs inside :func:`seeded`, which forks torch's global RNG: a fit is deterministic given
``ctx.seed`` and does not disturb the caller's random state.
"""

from __future__ import annotations

import contextlib
import zlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.data.records import PreferencePair
from perbench.rewards.base import FeatureRM, RMContext, pair_feature_arrays
from perbench.rewards.global_bt import Standardizer, small_ops

if TYPE_CHECKING:
    import torch

    from perbench.rewards.features import FeatureExtractor


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with torch's global RNG seeded, restoring the caller's RNG state afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def user_seed(seed: int, user_id: str) -> int:
    """A stable per-user seed (``hash()`` is salted per process, crc32 is not)."""
    return (seed * 1_000_003 + zlib.crc32(user_id.encode())) % (2**31)


def str_array(values: Sequence[str]) -> np.ndarray:
    """Strings as a fixed-width unicode array (savez-able without pickle)."""
    return np.asarray(list(values), dtype=str) if values else np.zeros(0, dtype="<U1")


def str_list(arr: np.ndarray) -> list[str]:
    return [str(v) for v in np.asarray(arr).tolist()]


def require_extractor(ctx: RMContext, name: str) -> FeatureExtractor:
    if ctx.features is None:
        raise ValueError(f"{name} needs a feature extractor (ctx.features)")
    return ctx.features


def adam_steps(
    params: Sequence[torch.Tensor],
    loss_fn: Callable[[int], torch.Tensor],
    steps: int,
    lr: float,
    weight_decay: float = 0.0,
    no_decay: Sequence[torch.Tensor] = (),
) -> float:
    """Plain full-batch Adam (L2 ``weight_decay`` on ``params``, none on ``no_decay``); ``loss_fn(step)`` ->
    scalar. Returns the last loss."""
    import torch

    groups: list[dict[str, Any]] = [{"params": list(params), "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": list(no_decay), "weight_decay": 0.0})
    opt = torch.optim.Adam(groups, lr=lr)
    last = float("nan")
    for t in range(steps):
        opt.zero_grad()
        loss = loss_fn(t)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        last = float(loss.detach())
    return last


def fit_logistic(
    X: np.ndarray | torch.Tensor,
    *,
    offset: np.ndarray | torch.Tensor | None = None,
    l2: float = 1e-2,
    center: np.ndarray | torch.Tensor | None = None,
    max_iter: int = 100,
) -> torch.Tensor:
    """argmin_w mean softplus(−(offset_i + X_i·w)) + l2‖w − center‖² (full-batch L-BFGS, deterministic).

    The rows of ``X`` are oriented so that a positive logit means "chosen preferred". ``center`` is the
    prior mean (MAP with a Gaussian prior): with few separable shots the pure MLE diverges.
    """
    import torch

    Xt = torch.as_tensor(X, dtype=torch.float32)
    c = torch.zeros(Xt.shape[1]) if center is None else torch.as_tensor(center, dtype=torch.float32).clone()
    off = torch.zeros(len(Xt)) if offset is None else torch.as_tensor(offset, dtype=torch.float32)
    w = c.clone().requires_grad_(True)
    if len(Xt) == 0:
        return w.detach()
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-7)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.softplus(-(off + Xt @ w)).mean() + l2 * ((w - c) ** 2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    return w.detach()


@dataclass
class PairData:
    """Standardised pair features, oriented chosen/rejected, with each pair's user index."""

    zw: torch.Tensor  # (P, d)
    zl: torch.Tensor  # (P, d)
    uidx: torch.Tensor  # (P,) long, index into ``users``
    users: list[str]
    pairs: list[PreferencePair]

    @property
    def diff(self) -> torch.Tensor:
        return self.zw - self.zl

    def pair_weights(self) -> torch.Tensor:
        """1 / (n_u · U) per pair: 'mean over users of the mean over their pairs'."""
        import torch

        counts = torch.bincount(self.uidx, minlength=len(self.users)).float()
        return 1.0 / (counts[self.uidx] * len(self.users))

    def by_user(self) -> list[torch.Tensor]:
        import torch

        return [torch.nonzero(self.uidx == i)[:, 0] for i in range(len(self.users))]


class PersonalFeatureRM(FeatureRM):
    """A frozen-feature RM with per-user parameters; subclasses give ``_fit``, ``_adapt``, ``_reward``."""

    #: Shown by ``fallback_rule()``; what an unknown user gets.
    fallback_doc: str = "the average seen user"

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.std = Standardizer()
        self.seed = 0
        self.users: list[str] = []
        self.adapted: dict[str, torch.Tensor] = {}
        self._index: dict[str, int] = {}

    # ---- fitting -----------------------------------------------------------------------------------
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        ext = require_extractor(ctx, self.name)
        self.bind(ext)
        self.seed = ctx.seed
        self.adapted = {}
        fw, fl = pair_feature_arrays(ext, pairs, desc=f"{self.name} features")
        self.std.fit(np.concatenate([fw, fl]))
        data = self._pair_data(pairs, fw, fl)
        self._set_users(data.users)
        self._extract_more(pairs)
        with seeded(ctx.seed), small_ops():
            self._fit(data, ctx)

    def _pair_data(self, pairs: Sequence[PreferencePair], fw: np.ndarray, fl: np.ndarray) -> PairData:
        import torch

        users = sorted({p.user_id for p in pairs})
        index = {u: i for i, u in enumerate(users)}
        return PairData(
            self.std(torch.from_numpy(fw)),
            self.std(torch.from_numpy(fl)),
            torch.tensor([index[p.user_id] for p in pairs], dtype=torch.long),
            users,
            list(pairs),
        )

    def _set_users(self, users: list[str]) -> None:
        self.users = list(users)
        self._index = {u: i for i, u in enumerate(self.users)}

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        """Fit this user's parameters from ``shots`` only (replaces any earlier adaptation of the user).
        Zero shots -> the user falls back to :attr:`fallback_doc`."""
        self.adapted.pop(user_id, None)
        if not shots:
            return
        fw, fl = pair_feature_arrays(self._require_extractor(), shots, desc=f"{self.name} shots")
        data = self._pair_data(shots, fw, fl)
        self._extract_more(shots)
        with seeded(user_seed(self.seed, user_id)), small_ops():
            self.adapted[user_id] = self._adapt(user_id, data)

    def _extract_more(self, pairs: Sequence[PreferencePair]) -> None:
        """Hook: extract (and cache) any other backbone features the method reads, *before* training enters
        :func:`small_ops` — the backbone should run with every thread."""

    @abstractmethod
    def _fit(self, data: PairData, ctx: RMContext) -> None: ...

    @abstractmethod
    def _adapt(self, user_id: str, data: PairData) -> torch.Tensor: ...

    # ---- scoring -----------------------------------------------------------------------------------
    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        """Heads live on the CPU (they are tiny); features from a GPU backbone come back as rewards on
        the features' device."""
        return self._reward(user_ids, self.std(feats.detach().float().cpu())).to(feats.device)

    @abstractmethod
    def _reward(self, user_ids: Sequence[str], z: torch.Tensor) -> torch.Tensor:
        """(N, d) standardised features -> (N,) rewards."""

    def user_rows(self, user_ids: Sequence[str], seen: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
        """Per-row user parameters: adapted entry, else seen-table row, else ``fallback``.

        ``seen`` is (U, ...) in ``self.users`` order; adapted entries and ``fallback`` have shape (...).
        """
        import torch

        uniq: dict[str, int] = {}
        rows = [uniq.setdefault(u, len(uniq)) for u in user_ids]
        table = []
        for u in uniq:
            if u in self.adapted:
                table.append(self.adapted[u])
            elif u in self._index:
                table.append(seen[self._index[u]])
            else:
                table.append(fallback)
        if not table:
            return fallback.new_zeros((0, *fallback.shape))
        return torch.stack(table)[torch.tensor(rows, dtype=torch.long)]

    def known(self, user_id: str) -> bool:
        """True when the user has its own parameters (seen in fit, or adapted)."""
        return user_id in self.adapted or user_id in self._index

    # ---- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        if self.std.mu is None or self.std.sd is None:
            raise RuntimeError(f"{self.name}: state() before fit")
        out = {
            "mu": self.std.mu,
            "sd": self.std.sd,
            "users": str_array(self.users),
            "seed": np.asarray(self.seed, dtype=np.int64),
        }
        out.update({f"m.{k}": v for k, v in self._state().items()})
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.std.mu, self.std.sd = state["mu"].astype(np.float32), state["sd"].astype(np.float32)
        self._set_users(str_list(state["users"]))
        self.seed = int(state["seed"])
        self.adapted = {}
        self._load_state({k[2:]: v for k, v in state.items() if k.startswith("m.")})

    @abstractmethod
    def _state(self) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _load_state(self, state: dict[str, np.ndarray]) -> None: ...


def module_state(module: torch.nn.Module, prefix: str) -> dict[str, np.ndarray]:
    return {f"{prefix}{k}": v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_state(module: torch.nn.Module, state: dict[str, np.ndarray], prefix: str) -> None:
    import torch

    sd = {k[len(prefix) :]: torch.from_numpy(np.array(v)) for k, v in state.items() if k.startswith(prefix)}
    module.load_state_dict(sd)


def np32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32).copy()
