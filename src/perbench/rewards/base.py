"""The reward-model interface every method implements.

- ``fit(pairs, ctx)`` on the seen users' train pairs;
- ``adapt(user_id, shots)`` to an unseen user from their few-shot pairs only;
- ``score(items)`` for (user, prompt, response) in batches.

Frozen-feature methods subclass :class:`FeatureRM` and implement ``reward_from_features``: a reward for
*any* backbone hidden state, which is what gives them per-token rewards (policy accuracy) and ARGS
candidate scoring for free.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair, Prompt, prompt_key

if TYPE_CHECKING:
    import torch

    from perbench.rewards.features import FeatureExtractor


@dataclass(frozen=True)
class ScoreItem:
    user_id: str
    prompt: Prompt
    response: str


@dataclass
class RMContext:
    """What a method may use while fitting: the shared feature extractor (may be None for baselines)."""

    features: FeatureExtractor | None = None
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)


class RewardModel(ABC):
    name: ClassVar[str] = "reward_model"
    #: True when the score ignores the user (global RMs, baselines): decoding runs once per prompt.
    user_agnostic: ClassVar[bool] = False
    #: False when ``adapt`` ignores the shots (e.g. an in-context judge reads the user's rubric instead):
    #: results then do not depend on the shot count and are computed once.
    uses_shots: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        self.params = params

    def config_key(self) -> str:
        """Identity of (method, hyper-parameters) for cache keys."""
        return hashlib.sha256(json.dumps([self.name, self.params], sort_keys=True, default=str).encode()).hexdigest()[
            :16
        ]

    @abstractmethod
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None: ...

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:  # noqa: B027 - optional hook
        """Adapt to a new user from their few-shot pairs. User-agnostic methods ignore it."""

    @abstractmethod
    def score(self, items: Sequence[ScoreItem]) -> np.ndarray: ...

    # Trained state, so finished fits are reused across runs (keyed by content).
    def state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:  # noqa: B027 - stateless default
        pass

    def score_pairs(self, pairs: Sequence[PreferencePair]) -> tuple[np.ndarray, np.ndarray]:
        chosen = self.score([ScoreItem(p.user_id, p.prompt, p.chosen) for p in pairs])
        rejected = self.score([ScoreItem(p.user_id, p.prompt, p.rejected) for p in pairs])
        return chosen, rejected


class FeatureRM(RewardModel):
    """A reward that is a function of frozen backbone features φ (and the user)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.extractor: FeatureExtractor | None = None

    def bind(self, extractor: FeatureExtractor) -> None:
        self.extractor = extractor

    @property
    def backbone_fingerprint(self) -> str:
        return self._require_extractor().fingerprint

    def _require_extractor(self) -> FeatureExtractor:
        if self.extractor is None:
            raise RuntimeError(f"{self.name}: no feature extractor bound (call fit or bind first)")
        return self.extractor

    @abstractmethod
    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        """(N, d) features -> (N,) rewards; must accept partial-response features too."""

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        import torch

        feats = self._require_extractor().last([(it.prompt, it.response) for it in items], desc=f"{self.name} features")
        with torch.no_grad():
            r = self.reward_from_features([it.user_id for it in items], torch.from_numpy(feats))
        return r.double().numpy()

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """r(x, y_≤t) for every response token t, from one (cached) forward per response."""
        import torch

        toks = self._require_extractor().tokens([(it.prompt, it.response) for it in items])
        out = []
        with torch.no_grad():
            for it, tf in zip(items, toks, strict=True):
                h = torch.from_numpy(tf.hidden)
                out.append(self.reward_from_features([it.user_id] * len(h), h).double().numpy())
        return out


def pair_feature_arrays(
    extractor: FeatureExtractor, pairs: Sequence[PreferencePair], desc: str = "pair features"
) -> tuple[np.ndarray, np.ndarray]:
    """φ(x, y_w), φ(x, y_l) for pairs; unique texts are extracted once."""
    texts: dict[tuple[str, str], tuple[Prompt, str]] = {}
    for p in pairs:
        for y in (p.chosen, p.rejected):
            texts.setdefault((prompt_key(p.prompt), y), (p.prompt, y))
    order = list(texts)
    feats = extractor.last([texts[k] for k in order], desc=desc)
    index = {k: i for i, k in enumerate(order)}
    fw = feats[[index[(prompt_key(p.prompt), p.chosen)] for p in pairs]]
    fl = feats[[index[(prompt_key(p.prompt), p.rejected)] for p in pairs]]
    return fw, fl


class PairwiseJudge(RewardModel):
    """Methods that compare two responses instead of scoring one (e.g. an in-context LLM judge).

    ``prefer`` returns, per pair, 1.0 (chosen preferred), 0.0 (rejected preferred), 0.5 (tie) or NaN (the
    judge's output could not be parsed: counted and reported, scored as wrong).
    """

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        raise TypeError(f"{self.name} is a pairwise judge: use prefer(pairs)")

    @abstractmethod
    def prefer(self, pairs: Sequence[PreferencePair]) -> np.ndarray: ...
