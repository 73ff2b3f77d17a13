"""Decoders that lose the user are caught: on data where per-user guidance must change the output, a batch that
mixes users decodes each row exactly as that user's single-row decode does, and the users' outputs differ.

A decoder that guided every row of a batch with the first row's user, or with no user at all, would pass the
single-user tests elsewhere; here it fails — the mixed batch's rows then equal another user's single-row
decode (first-user bug), or the two users' single-row decodes coincide (a user-blind decoder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair
from perbench.decoding.args import ARGS
from perbench.decoding.best_of_n import BestOfN
from perbench.decoding.genarm import GenARMDecoder
from perbench.decoding.token_ranker import TokenRanker
from perbench.models.generate import GenRequest
from perbench.rewards.base import FeatureRM, RewardModel, RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor
from tests.fixtures_users import profiled_users

PROMPTS = ["How do I boil an egg?", "Name three colours.", "Why is the sky blue?"]
#: two users who want opposite things, and one the RM knows nothing about (no guidance)
SIGN = {"up": 1.0, "down": -1.0}
USERS = ("up", "down", "stranger")


pytestmark = pytest.mark.usefixtures("one_thread")


class OppositeUsersRM(FeatureRM):
    """r_u(h) = s_u · scale · w·h, s_up = +1, s_down = −1, 0 for anyone else: the users' rewards are opposite."""

    name: ClassVar[str] = "opposite_users"

    def __init__(self, extractor: FeatureExtractor, scale: float = 40.0, seed: int = 0) -> None:
        super().__init__()
        self.bind(extractor)
        g = torch.Generator().manual_seed(seed)
        self.w = scale * torch.randn(extractor.dim, generator=g) / extractor.dim**0.5

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        s = torch.tensor([SIGN.get(u, 0.0) for u in user_ids], dtype=torch.float32, device=feats.device)
        return s * (feats.float() @ self.w.to(feats.device))


class LengthRubricRM(RewardModel):
    """Opposite rubrics on length: "up" wants the longest response, "down" the shortest."""

    name: ClassVar[str] = "length_rubric"

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([SIGN.get(it.user_id, 0.0) * len(it.response) for it in items])


def mixed() -> list[GenRequest]:
    """Every prompt for every user, users interleaved, the first row belonging to "up"."""
    return [GenRequest(p, u, seed=i) for i, p in enumerate(PROMPTS) for u in USERS]


def single_rows(decoder: Any, policy: Any, rm: Any, requests: list[GenRequest], **kw: Any) -> list[list[int]]:
    return [decoder.generate(policy, [r], rm, **kw)[0].token_ids for r in requests]


def check_mixed_batch(decoder: Any, policy: Any, rm: Any, max_new_tokens: int = 8) -> None:
    reqs = mixed()
    batched = [g.token_ids for g in decoder.generate(policy, reqs, rm, max_new_tokens=max_new_tokens)]
    alone = single_rows(decoder, policy, rm, reqs, max_new_tokens=max_new_tokens)
    assert batched == alone  # each row decoded for its own user, whatever else is in the batch
    by = {(r.prompt, r.user_id): ids for r, ids in zip(reqs, alone, strict=True)}
    differ = [p for p in PROMPTS if by[(p, "up")] != by[(p, "down")]]
    assert len(differ) == len(PROMPTS), "the users' guidance must change the output for every prompt"


@pytest.mark.parametrize("shared", [True, False], ids=["shared_backbone", "separate_backbone"])
def test_batched_args_over_mixed_users_equals_each_users_own_decode(tiny_lm, tiny_lm_b, store, shared) -> None:  # type: ignore[no-untyped-def]
    rm = OppositeUsersRM(FeatureExtractor(tiny_lm if shared else tiny_lm_b, store))
    check_mixed_batch(ARGS(k=10, w=1.0), tiny_lm, rm)


def test_batched_args_with_a_token_ranker_over_mixed_users(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    rm = TokenRanker().init_random(FeatureExtractor(tiny_lm, store), users=["up", "down"], seed=3, scale=30.0)
    # opposite users, strong enough to decide the tokens (the stranger gets the mean embedding, 0)
    rm.E_users = 30.0 * torch.stack([rm.E_users[0], -rm.E_users[0]])
    check_mixed_batch(ARGS(k=10, w=3.0), tiny_lm, rm)


def sharp_copy(lm: Any, gain: float = 6.0) -> Any:
    """The tiny random backbone with its weights (norms aside) scaled by ``gain``: its next-token distribution
    then depends strongly on the context (the plain one is nearly uniform whatever the prompt)."""
    import copy

    from perbench.models.loader import LoadedLM

    model = copy.deepcopy(lm.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(gain)
    return LoadedLM(model, lm.tokenizer, f"{lm.fingerprint}+gain{gain}", f"{lm.name}-sharp", lm.policy)


def test_batched_genarm_over_mixed_users_equals_each_users_own_decode(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    """GenARM's π_r reads each user's own profile in its system message (no training: π_r is the backbone, so
    only the user conditioning moves it); a context-sensitive backbone makes that guidance decide the tokens."""
    from perbench.data.user_context import user_views
    from perbench.rewards.genarm import GenARM

    users = profiled_users(
        {
            "up": ("a", "I only ever want to hear about cats and kittens."),
            "down": ("b", "Engines, gearboxes and motor oil are all I care about."),
        }
    )
    rm = GenARM(steps=0)
    ctx = RMContext(features=FeatureExtractor(sharp_copy(tiny_lm), store), extra={"users": user_views(users)})
    rm.fit([PreferencePair("p", "up", "hi", "a", "b", "train")], ctx)
    check_mixed_batch(GenARMDecoder(alpha=3.0), tiny_lm, rm)


def test_best_of_n_picks_differ_between_users_with_opposite_rubrics(tiny_lm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from perbench.cache import Store

    decoder = BestOfN(n=6)
    decoder.store = Store(tmp_path / "samples.sqlite")
    rm = LengthRubricRM()
    # one pool per prompt (the runner seeds Best-of-N per prompt): every user re-ranks the same samples
    reqs = [GenRequest(p, u, seed=i) for i, p in enumerate(PROMPTS) for u in USERS]
    picks = [g.text for g in decoder.generate(tiny_lm, reqs, rm, max_new_tokens=12)]
    alone = [decoder.generate(tiny_lm, [r], rm, max_new_tokens=12)[0].text for r in reqs]
    assert picks == alone
    pool = decoder.pool(tiny_lm, reqs, max_new_tokens=12)
    for i, p in enumerate(PROMPTS):
        lengths = [len(g.text) for g in pool[3 * i]]
        up, down = picks[3 * i], picks[3 * i + 1]
        assert len(set(lengths)) > 1 and up != down, p  # opposite rubrics, different picks
        assert len(up) == max(lengths) and len(down) == min(lengths)
