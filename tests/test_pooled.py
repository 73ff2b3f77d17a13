"""Best-of-N over shared pools: one pool per prompt serves every user, and every system scores it for each cell's
own user (tiny random models)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair
from perbench.decoding.best_of_n import BestOfN, bon_expected, bon_weights, sample_seed
from perbench.decoding.greedy import ZeroShot
from perbench.models.generate import GenRequest
from perbench.rewards.base import FeatureRM, RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor
from perbench.runner.pooled import Pool, Pooled
from perbench.runner.units import Units

PROMPT = "Give me one tip for keeping a plant alive."


def test_a_shared_pool_is_the_per_user_pools_drawn_with_the_same_seed(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    """The policy does not see the user, so one pool per prompt equals the pool each user would get from their own
    draws with the same seeds, and so does every Best-of-n value computed from it."""
    bon = BestOfN(n=2, pool=4)
    bon.store = store
    shared = bon.pool(tiny_lm, [GenRequest(PROMPT, "*", 11)], max_new_tokens=8)[0]
    assert bon.sampled == 4
    sampler = ZeroShot(sample=True, temperature=1.0, top_p=0.9)
    rng = np.random.default_rng(0)
    for user in ("u", "v"):
        own = sampler.generate(
            tiny_lm, [GenRequest(PROMPT, user, sample_seed(11, j)) for j in range(4)], None, max_new_tokens=8
        )
        assert [g.token_ids for g in own] == [g.token_ids for g in shared]
        rewards, quality = rng.random(4), rng.random(4)  # any per-user reward and quality of the same four texts
        assert bon_expected(rewards, quality, 2) == bon_expected(rewards[None], quality[None], 2)[0]
    # a pool asked for a user samples nothing new: the key has no user in it
    again = bon.pool(tiny_lm, [GenRequest(PROMPT, "v", 11)], max_new_tokens=8)[0]
    assert bon.sampled == 4 and [g.text for g in again] == [g.text for g in shared]


class OppositeRM(FeatureRM):
    """User ``a`` likes what user ``b`` dislikes: r_a = φ₀, r_b = −φ₀."""

    name: ClassVar[str] = "opposite"

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        sign = torch.tensor([1.0 if u == "a" else -1.0 for u in user_ids])
        return sign * feats[:, 0].float()


def _handle(rm: FeatureRM) -> Any:
    """What Pooled.scores reads of a run's method handle."""
    return SimpleNamespace(shots=0, key=lambda *parts: f"opposite|{parts}", adapted=lambda shots: rm)


def test_pooled_scores_read_each_cells_own_user(tiny_lm, store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Each cell's pool is scored for that cell's user: users with opposite preferences pick opposite samples.
    An implementation that scored every row for the first user would give both users the same pick."""
    ext = FeatureExtractor(tiny_lm, store)
    rm = OppositeRM()
    rm.bind(ext)
    texts = [["short answer", "a much longer answer with more words in it", "water it weekly", "sun", "ok"]]
    cells = [(0, "a"), (0, "b"), (0, "a")]
    pool = Pool([PROMPT], texts, cells, "pool-key")
    state = SimpleNamespace(units=Units(tmp_path / "units.sqlite"), extractor=ext)
    pooled = Pooled(state, SimpleNamespace())  # type: ignore[arg-type]
    zero = {(pool.prompt_id(0), "a"): "zero text", (pool.prompt_id(0), "b"): "zero text"}
    got = pooled.scores(_handle(rm), pool, zero)
    S, Z = got["pool"], got["zero"]
    assert S.shape == (3, 5) and Z.shape == (3,)
    # the same numbers as scoring each (user, prompt, text) on its own
    for c, (_, user) in enumerate(cells):
        want = rm.score([ScoreItem(user, PROMPT, t) for t in texts[0]])
        np.testing.assert_allclose(S[c], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(Z[c], rm.score([ScoreItem(user, PROMPT, "zero text")])[0], rtol=1e-5, atol=1e-6)
    assert np.argmax(S[0]) != np.argmax(S[1]) and np.argmax(S[0]) == np.argmin(S[1])
    # so the users' Best-of-n values differ too (quality: 1 for the sample user a prefers, 0 otherwise)
    quality = np.zeros((3, 5))
    quality[:, int(np.argmax(S[0]))] = 1.0
    values = bon_expected(S, quality, 5)
    assert values[0] == values[2] == pytest.approx(1.0) and values[1] == pytest.approx(0.0)
    assert pooled._expected_win(bon_weights(S, 2), S, Z)[0] == pytest.approx(
        (bon_weights(S, 2)[0] * (S[0] > Z[0])).sum()
    )
