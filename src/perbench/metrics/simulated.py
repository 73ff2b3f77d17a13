"""Exact per-user reward of any text for PersonalLLM's simulated users: their weights over reward models applied to
those reward models' own scores of the text (``personal_reward``), so Best-of-N and guided decoding are scored
downstream as exactly as on the rubric benchmark.

The benchmark carries the definition (``Benchmark.meta["ground_truth"]``, set by the ``personalllm`` loader when
``reward_model_paths`` names each reward model's hub id or local folder): the models, their order and the
standardisation (mean, sd) of each model's scores over the loaded rows. A user's weights are in their answer key.
r_u(x, y) = Σ_k w_uk · (s_k(x, y) − mean_k) / sd_k, with s_k the one-logit score of ``hub_rm`` (chat-templated).
Each distinct (prompt, text) is scored once per model, whatever the number of users."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.data.records import Benchmark, Prompt, User, prompt_key

PERSONAL_REWARD = "personal_reward"
KIND = "personalllm"


class SimulatedUsers:
    def __init__(self, truth: Mapping[str, Any], device: str | None = None) -> None:
        self.order: list[str] = list(truth["order"])
        self.paths: dict[str, str] = dict(truth["reward_models"])
        self.mean = np.array([truth["standardisation"][rm][0] for rm in self.order], np.float64)
        self.sd = np.array([truth["standardisation"][rm][1] for rm in self.order], np.float64)
        self.device = device
        self._models: dict[str, Any] = {}
        self._scores: dict[tuple[str, str], np.ndarray] = {}

    @staticmethod
    def of(bench: Benchmark, device: str | None = None) -> SimulatedUsers | None:
        truth = bench.meta.get("ground_truth")
        if not isinstance(truth, Mapping) or truth.get("kind") != KIND:
            return None
        return SimulatedUsers(truth, device)

    @staticmethod
    def weights(user: User) -> np.ndarray | None:
        w = (user.answer_key or {}).get("weights")
        return None if not isinstance(w, Mapping) else np.array(list(w.values()), np.float64)

    def _model(self, rm: str) -> Any:
        if rm not in self._models:
            from perbench.rewards.base import RMContext
            from perbench.rewards.hub_rm import HubRM

            model = HubRM(model=self.paths[rm], device=self.device)
            model.fit([], RMContext())
            self._models[rm] = model
        return self._models[rm]

    def standardised(self, items: Sequence[tuple[Prompt, str]]) -> np.ndarray:
        """(len(items), K) standardised scores, each distinct (prompt, text) scored once per model."""
        from perbench.rewards.base import ScoreItem

        keys = [(prompt_key(p), t) for p, t in items]
        todo = {k: it for k, it in zip(keys, items, strict=True) if k not in self._scores}
        if todo:
            raw = np.stack(
                [self._model(rm).score([ScoreItem("", p, t) for p, t in todo.values()]) for rm in self.order], axis=1
            )
            self._scores.update(zip(todo, (raw - self.mean) / self.sd, strict=True))
        return np.array([self._scores[k] for k in keys], np.float64).reshape(len(items), len(self.order))

    def score(
        self, texts: Sequence[str], targets: Sequence[tuple[Prompt, str]], users: Mapping[str, User]
    ) -> list[float | None]:
        """r_u of ``texts[i]`` for target i = (prompt, user); None for a user without weights."""
        which = [i for i, (_, u) in enumerate(targets) if self.weights(users[u]) is not None]
        out: list[float | None] = [None] * len(texts)
        if not which:
            return out
        z = self.standardised([(targets[i][0], texts[i]) for i in which])
        for row, i in zip(z, which, strict=True):
            w = self.weights(users[targets[i][1]])
            assert w is not None
            out[i] = float(row @ w)
        return out
