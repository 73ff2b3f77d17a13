"""Policy accuracy: the headline is the sequence tilt log π(y|x) + w·r_u(x, y) (r on the whole response), which
a constant added to the reward cannot move; the labelled prefix-sum variant can; on a hand-computed pair the
old prefix-sum / length reading and the tilt disagree, and the headline follows the tilt; w = 0 is the policy
alone; tokens outside the top-k are misses of the top-k RGD-induced-policy variant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair
from perbench.metrics.policy_accuracy import (
    HEADLINE,
    policy_accuracy_from_scores,
    policy_accuracy_problem,
    policy_accuracy_scores,
    sequence_tilt,
    teacher_forced_scores,
)
from perbench.models.chat import encode_response
from perbench.rewards.base import RewardModel, RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor
from tests.fixtures_users import train_and_test

PAIRS_SIDES = ("chosen", "rejected")
PAIRS = [  # chosen and rejected differ in length, in both directions
    PreferencePair("a", "u", "How do I boil an egg?", "Boil it.", "Put the egg in boiling water for seven minutes."),
    PreferencePair("b", "u", "Name three colours.", "Red, green, blue, yellow, purple and orange too.", "Red."),
    PreferencePair("c", "v", "hi", "Hello there, how are you doing today?", "Hey"),
    PreferencePair("d", "v", "Why is the sky blue?", "Scattering.", "Because of Rayleigh scattering of sunlight."),
]


pytestmark = pytest.mark.usefixtures("one_thread")


class TokenTableRM(RewardModel):
    """r(x, y_≤t) = Σ_{s≤t} a[y_s] + c: a per-token table plus a constant ``shift`` on every prefix."""

    name: ClassVar[str] = "token_table"
    no_prefix_reward: ClassVar[str | None] = None

    def __init__(self, lm: Any, shift: float = 0.0, scale: float = 0.01) -> None:
        super().__init__(shift=shift)
        self.lm, self.shift = lm, shift
        V = int(lm.model.get_output_embeddings().weight.shape[0])
        self.a = torch.from_numpy(np.random.default_rng(0).standard_normal(V) * scale)

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        return [
            (self.a[encode_response(self.lm.tokenizer, it.response)].cumsum(0) + self.shift).numpy() for it in items
        ]

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.array([r[-1] if len(r) else self.shift for r in self.token_rewards(items)])

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        cum = self.a[list(response_ids)].cumsum(0)
        before = torch.cat([torch.zeros(1, dtype=cum.dtype), cum[:-1]])
        return before[:, None] + self.a[cands] + self.shift


def _scores(policy: Any, rm: RewardModel, *, w: float, k: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    sides = []
    for side in ("chosen", "rejected"):
        items = [ScoreItem(p.user_id, p.prompt, getattr(p, side)) for p in PAIRS]
        sides.append(policy_accuracy_scores(policy, rm, items, w=w, k=k))
    return sides[0], sides[1]


def test_headline_cannot_be_moved_by_a_constant_but_sum_can(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    V = int(tiny_lm.model.get_output_embeddings().weight.shape[0])
    w = 10.0  # large enough that c·w·T outweighs the log-probability gap between lengths
    out = {c: _scores(tiny_lm, TokenTableRM(tiny_lm, shift=c), w=w, k=V) for c in (0.0, 2.0, -2.0)}
    base_w, base_l = out[0.0]
    assert np.isfinite(base_w[HEADLINE]).all() and (base_w["misses"] == 0).all()  # k = V: nothing missed
    assert HEADLINE == "tilt"
    for c in (2.0, -2.0):
        sw, sl = out[c]
        for v in ("rgd_mean", "rgd_sum", "w0_mean", "policy_sum"):
            np.testing.assert_allclose(sw[v], base_w[v], rtol=1e-9, atol=1e-9)
            np.testing.assert_array_equal(sw[v] > sl[v], base_w[v] > base_l[v])
        for v in ("tilt", "prefix_mean"):  # move by w·c on both sides: the comparison stays
            np.testing.assert_allclose(sw[v] - sl[v], base_w[v] - base_l[v], rtol=1e-9, atol=1e-9)
    # the prefix-sum variant's per-pair outcomes flip with the sign of the constant (so the test is meaningful)
    up = out[2.0][0]["prefix_sum"] > out[2.0][1]["prefix_sum"]
    down = out[-2.0][0]["prefix_sum"] > out[-2.0][1]["prefix_sum"]
    assert (up != down).any()
    users = [p.user_id for p in PAIRS]
    acc = {c: policy_accuracy_from_scores(*out[c], users, w, V, n_boot=0) for c in out}
    assert acc[2.0][HEADLINE]["accuracy"] == acc[-2.0][HEADLINE]["accuracy"] == acc[0.0][HEADLINE]["accuracy"]
    # chosen is the longer response in half of the pairs: +2 makes "prefix_sum" pick the longer one, −2 the shorter
    assert acc[2.0]["prefix_sum"]["accuracy"] + acc[-2.0]["prefix_sum"]["accuracy"] == pytest.approx(1.0)
    assert acc[0.0]["headline"] == HEADLINE and acc[0.0]["w0"] == acc[0.0]["policy_sum"]
    # the headline is log π(y|x) + w·r(x, y) with r the RM's score of the whole response
    for side, sc in zip(PAIRS_SIDES, (base_w, base_l), strict=True):
        items = [ScoreItem(p.user_id, p.prompt, getattr(p, side)) for p in PAIRS]
        r = TokenTableRM(tiny_lm).score(items)
        np.testing.assert_allclose(sc["tilt"], sc["policy_sum"] + w * r, rtol=1e-9, atol=1e-9)
    for c in (2.0, -2.0):  # the top-k RGD-induced policy's variant cannot be moved either
        assert acc[c]["rgd_mean"]["accuracy"] == acc[0.0]["rgd_mean"]["accuracy"]


def test_w0_is_the_policy_alone(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    V = int(tiny_lm.model.get_output_embeddings().weight.shape[0])
    items = [ScoreItem(p.user_id, p.prompt, p.chosen) for p in PAIRS]
    s = policy_accuracy_scores(tiny_lm, TokenTableRM(tiny_lm, scale=1.0), items, w=0.0, k=V)
    own = np.array(
        [
            float(t.logprobs.sum())
            for t in FeatureExtractor(tiny_lm, store).tokens([(i.prompt, i.response) for i in items])
        ]
    )
    np.testing.assert_allclose(s["policy_sum"], own, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(s["rgd_sum"], own, rtol=1e-5, atol=1e-4)  # w = 0, full vocabulary: π itself
    np.testing.assert_allclose(s["w0_sum"], own, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(s["prefix_sum"], own, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(s["tilt"], own, rtol=1e-5, atol=1e-4)  # the headline at w = 0: log π(y|x)
    guided = policy_accuracy_scores(tiny_lm, TokenTableRM(tiny_lm, scale=1.0), items, w=1.0, k=V)
    np.testing.assert_allclose(guided["w0_sum"], own, rtol=1e-5, atol=1e-4)  # reported beside the headline
    assert not np.allclose(guided["rgd_sum"], own, atol=1e-2)  # and the reward does move the RGD variant
    assert not np.allclose(guided["tilt"], own, atol=1e-2)  # and the headline


def test_tokens_outside_the_top_k_are_misses(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    from perbench.models.chat import encode_pair

    items = [ScoreItem(p.user_id, p.prompt, p.rejected) for p in PAIRS]
    s = policy_accuracy_scores(tiny_lm, TokenTableRM(tiny_lm), items, w=1.0, k=1)
    for it, misses, g in zip(items, s["misses"], s["rgd_sum"], strict=True):
        ids, T, _ = encode_pair(tiny_lm.tokenizer, it.prompt, it.response, 1024)
        with torch.no_grad():
            logits = tiny_lm.model(input_ids=torch.tensor([ids])).logits[0, len(ids) - T - 1 : len(ids) - 1]
        expected = int((logits.argmax(-1) != torch.tensor(ids[len(ids) - T :])).sum())
        assert misses == expected
        assert (g == float("-inf")) == (expected > 0)
    assert s["misses"].sum() > 0


def test_methods_without_a_prefix_reward_are_not_applicable(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    from perbench.rewards.baselines import LengthRM

    reason = policy_accuracy_problem(tiny_lm, LengthRM())
    assert reason is not None and "partial response" in reason
    with pytest.raises(TypeError, match="partial response"):
        policy_accuracy_scores(tiny_lm, LengthRM(), [ScoreItem("u", "hi", "hello")], w=1.0, k=5)
    assert policy_accuracy_problem(tiny_lm, TokenTableRM(tiny_lm)) is None


def test_the_headline_is_the_sequence_tilt_where_the_prefix_mean_reading_disagrees() -> None:
    """Two responses of equal length (T = 2), w = 1, by hand:

    chosen:   log π = (−1, −1), r(x, y_≤1) = 0, r(x, y_≤2) = r(x, y) = 3
              tilt = −2 + 3 = 1;            prefix-sum / length = (−2 + 0 + 3) / 2 = 0.5
    rejected: log π = (−1, −1), r(x, y_≤1) = 2, r(x, y_≤2) = r(x, y) = 2
              tilt = −2 + 2 = 0;            prefix-sum / length = (−2 + 2 + 2) / 2 = 1.0

    The tilted policy π·exp(w·r) prefers the chosen response (e^1 vs e^0); the old prefix-sum / length
    headline preferred the rejected one. The headline must be the tilt."""
    lp = [np.array([-1.0, -1.0])]
    cw = teacher_forced_scores(lp, [np.array([0.0, 3.0])], 1.0)
    cl = teacher_forced_scores(lp, [np.array([2.0, 2.0])], 1.0)
    assert (float(cw["tilt"][0]), float(cl["tilt"][0])) == (1.0, 0.0)
    assert (float(cw["prefix_mean"][0]), float(cl["prefix_mean"][0])) == (0.5, 1.0)
    acc = policy_accuracy_from_scores(cw, cl, ["u"], 1.0, 10, n_boot=0)
    assert acc["headline"] == "tilt" and acc[acc["headline"]]["accuracy"] == 1.0
    assert acc["prefix_mean"]["accuracy"] == 0.0  # the labelled variant keeps its own (opposite) answer
    assert acc["w0"]["accuracy"] == 0.0  # equal log π(y|x): a tie, wrong under the strict rule
    # the tilt is the sequence-level weight of the RGD-adapted policy: log π(y|x) + w·r_u(x, y)
    np.testing.assert_allclose(sequence_tilt(np.array([-2.0, -2.0]), np.array([3.0, 2.0]), 1.0), [1.0, 0.0])


def test_each_guided_decoder_pairs_with_the_policy_accuracy_at_its_own_weight(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One weight per RM: the w of a method's policy accuracy is the weight its decoder applies to the reward
    (ARGS's w; GenARM's α on log π_r = α/β on r), one per guiding decoder, the first being the headline's;
    a method no weighted decoder uses falls back to ``pa_weight``."""
    from perbench.config import RunConfig
    from perbench.runner.state import PAWeight, RunState
    from perbench.runner.stores import Stores

    bench = train_and_test(PAIRS)
    cfg = RunConfig(
        methods=[{"name": "global_bt"}, {"name": "genarm", "beta": 0.25}],
        baselines=["length"],
        decoders=[
            "zero_shot",
            {"name": "args", "k": 5, "w": 2.0},
            {"name": "args", "w": 0.5},
            {"name": "genarm", "alpha": 0.5},
            {"name": "best_of_n", "n": 2},
        ],
        pa_weight=3.0,
    )
    state = RunState(cfg, tmp_path, bench, Stores.in_memory())
    h = {x.label: x for x in state.method_handles()}
    assert state.pa_weights(h["global_bt"]) == [
        PAWeight(2.0, 5, "args(k=5,w=2.0)"),
        PAWeight(0.5, 10, "args(w=0.5)"),
    ]
    assert state.pa_weights(h["genarm(beta=0.25)"]) == [PAWeight(0.5 / 0.25, 5, "genarm(alpha=0.5)")]
    assert state.pa_weights(h["length"]) == [PAWeight(3.0, 5, None)]  # Best-of-N applies no weight
    only = RunState(cfg.override(guide_with=["length"]), tmp_path, bench, Stores.in_memory())
    assert only.pa_weights(h["global_bt"]) == [PAWeight(3.0, 5, None)]  # guides nothing in that run


def _upstream_state(tmp_path, decoders: list[Any]):  # type: ignore[no-untyped-def]
    from perbench.config import RunConfig
    from perbench.runner.state import RunState, load_benchmark
    from perbench.runner.stores import Stores
    from perbench.runner.upstream import Upstream

    cfg = RunConfig.from_dict(
        {
            "benchmark": {"name": "rubrics", "max_train_prompts": 3, "max_test_prompts": 3},
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "methods": ["global_bt"],
            "baselines": [],
            "decoders": decoders,
            "bootstrap": 0,
            "device": "cpu",
            "out_dir": str(tmp_path),
        }
    )
    state = RunState(cfg, tmp_path, load_benchmark(cfg), Stores.in_memory())
    state.load_models()
    return state, state.method_handles()[0], Upstream(state)


def test_the_headline_is_policy_sum_plus_the_decoders_weight_times_the_score(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """At the weight of the decoder the RM guides, taken where the reward has flipped pairs that w = 1 leaves alone,
    the headline is exactly mean 1[log π(y_w) + w·r(y_w) > log π(y_l) + w·r(y_l)]: a headline computed at w = 1 while
    reporting the decoder's w fails here. Its curve runs from the policy alone to past the last flip."""
    from perbench.metrics.rm_accuracy import pair_outcomes
    from perbench.runner.state import PAWeight
    from tests.conftest import random_linear_rm

    state, h, up = _upstream_state(tmp_path, [{"name": "args", "k": 4, "w": 2.5}])
    assert state.pa_headline(h) == PAWeight(2.5, 4, "args(k=4,w=2.5)")  # the deployed decoder's weight
    h._rm = random_linear_rm(state.extractor, seed=3)  # a head whose rewards differ on every pair (no fit needed)
    # a user-agnostic head flips a pair and its mirror (another user's reverse pair) at one w, leaving the
    # accuracy where it was: three users' pairs, whose mirrors are other users'
    few = state.bench.seen_users[:3]
    pairs = [p for p in state.bench.test_pairs(seen=True) if p.user_id in few]
    sc, sr = h.adapted(h.shots).score_pairs(pairs)
    toks = state.policy_extractor.tokens([(p.prompt, y) for p in pairs for y in (p.chosen, p.rejected)])
    lp = np.array([float(np.sum(t.logprobs)) for t in toks])
    lc, lr = lp[0::2], lp[1::2]

    def acc(w: float) -> float:
        return float(np.mean(pair_outcomes(lc + w * sc, lr + w * sr, "strict")))

    curve = up._policy_accuracy(h, pairs, "seen", variants=False)["curve"]
    by_w = {p["w"]: p["accuracy"] for p in curve["points"]}
    assert all(by_w[w] == pytest.approx(acc(w)) for w in by_w) and 2.5 in by_w and by_w[0.0] == acc(0.0)
    assert curve["pairs_that_flip"] > 0 and max(by_w) > curve["flip_w"]["max"]
    assert curve["points"][-1]["accuracy"] == pytest.approx(float(np.mean(pair_outcomes(sc, sr, "strict"))))
    # a weight at which the reward has changed the answer (past some pairs' flip weights): the headline there is
    # pinned to the formula
    from perbench.metrics.pa_curve import flip_weights

    w = next(float(f) * 1.001 for f in flip_weights(lc, lr, sc, sr) if acc(float(f) * 1.001) != acc(1.0))
    got = up._policy_accuracy(h, pairs, "seen", PAWeight(w, 4, "args(k=4,w=big)"), variants=False)
    assert got["w"] == w and got["decoder"] == "args(k=4,w=big)"
    assert got["tilt"]["accuracy"] == pytest.approx(acc(w)) != pytest.approx(acc(1.0))
    assert got["w0"]["accuracy"] == pytest.approx(acc(0.0))


def test_without_a_weighted_decoder_the_headline_is_not_applicable_and_the_curve_is_shown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state, h, up = _upstream_state(tmp_path, ["zero_shot", {"name": "best_of_n", "n": 2}])
    assert state.pa_headline(h) is None
    got = up._policy_accuracy(h, state.bench.test_pairs(seen=True), "seen")
    assert (
        set(got) == {"not_applicable", "curve"} and "no decoder of this run applies a weight" in got["not_applicable"]
    )
    assert got["curve"]["points"][0]["w"] == 0.0
    assert not [c for c in state.cells.rows if c["metric"].startswith("pa")]  # out of the analysis and the report


def test_every_variant_from_one_policy_forward_equals_the_separate_passes(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    """On the policy's own backbone, log π(y_t) and the response's per-token rewards come from the forward that
    gives the top-k (no second and third pass): the same numbers as the extractor's forward and the RM's own
    ``token_rewards`` / ``score``."""
    from perbench.metrics.policy_accuracy import rgd_policy_inputs
    from tests.conftest import random_linear_rm

    rm = random_linear_rm(FeatureExtractor(tiny_lm, store), scale=0.5)
    items = [ScoreItem(p.user_id, p.prompt, getattr(p, sd)) for p in PAIRS for sd in PAIRS_SIDES]
    inputs = rgd_policy_inputs(tiny_lm, rm, items, k=4)
    assert all(i.token_rewards is not None and i.lp_y is not None for i in inputs)
    got = policy_accuracy_scores(tiny_lm, rm, items, w=2.0, k=4)
    toks = rm.extractor.tokens([(i.prompt, i.response) for i in items])
    ref = teacher_forced_scores([t.logprobs for t in toks], rm.token_rewards(items), 2.0)
    for v in ("prefix_sum", "prefix_mean", "policy_sum", "policy_mean"):
        np.testing.assert_allclose(got[v], ref[v], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got["tilt"], ref["policy_sum"] + 2.0 * rm.score(items), rtol=1e-4, atol=1e-3)
