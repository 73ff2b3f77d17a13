"""One method, one reward function: for every method that can guide decoding or be scored per prefix, the
reward a decoder (or policy accuracy) computes for a finished response equals ``score`` of that response
for the same user and prompt — on a tiny random backbone, with several users and prompts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair
from perbench.decoding.args import candidate_rewards
from perbench.models.chat import encode_prompt, encode_response
from perbench.models.stepper import CachedLM
from perbench.registry import reward_models
from perbench.rewards.base import FeatureRM, RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor
from tests.fixtures_users import opposite_pairs

WORDS = ["apple", "river", "stone", "cloud", "music", "paper", "window", "garden", "silver", "orange"]
#: Every registered frozen-feature method (each can guide ARGS); token_ranker is checked on its own path.
FEATURE_METHODS = [
    "global_bt",
    "mpu",
    "mpu_avg",
    "lore",
    "lore_reg",
    "lore_alt",
    "pal_a",
    "pal_b",
    "vpl",
    "pref",
    "factorized_ranker",
]
#: Methods that run a language model and define a per-prefix reward (policy accuracy).
LM_METHODS = {"genarm": {"steps": 2, "beta": 0.5}, "pdpo": {"steps": 2}, "global_bt_v2": {"steps": 2}}
ITEMS = [
    ScoreItem("u0", "Tell me about apple.", "Yes, stone and river!"),
    ScoreItem("u1", "Name a colour, please.", "No, silver."),
    ScoreItem("nobody", "Tell me about apple.", "Maybe a cloud"),
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _pairs() -> list[PreferencePair]:
    return opposite_pairs(
        [f"Tell me about {WORDS[i]}." for i in range(10)],
        [f"Yes, {WORDS[(i + 3) % 10]}!" for i in range(10)],
        [f"No, {WORDS[(i + 5) % 10]}." for i in range(10)],
    )


@pytest.fixture(scope="module")
def ctx(tiny_lm, tmp_path_factory) -> RMContext:  # type: ignore[no-untyped-def]
    from perbench.cache import Store

    store = Store(tmp_path_factory.mktemp("fidelity") / "features.sqlite")
    return RMContext(features=FeatureExtractor(tiny_lm, store), seed=0, extra={"policy": tiny_lm})


@pytest.fixture(scope="module")
def anchor(ctx: RMContext, tmp_path_factory: pytest.TempPathFactory) -> str:
    """lore_reg's reference RM on the tiny backbone's features: a head fit on none of these pairs."""
    from tests.synthetic import anchor_state

    assert ctx.features is not None
    return anchor_state(tmp_path_factory.mktemp("anchor"), ctx.features.dim)


def _fit(name: str, ctx: RMContext, **kw: Any) -> Any:
    rm = reward_models.get(name)(**kw)
    rm.fit(_pairs(), ctx)
    return rm


def _args_reward_of_last_token(rm: FeatureRM, item: ScoreItem) -> float:
    """What ARGS's scorer returns at the step that emits the response's last token: the RM backbone's KV
    cache stepped through y_<T, then y_T expanded as candidate 0 of 3, scored by ARGS's own function."""
    assert rm.extractor is not None
    lm = rm.extractor.lm
    y = encode_response(lm.tokenizer, item.response)
    state = CachedLM(lm, [encode_prompt(lm.tokenizer, item.prompt)])
    state.prefill()
    for t in y[:-1]:
        state.step(torch.tensor([t]))
    hc = state.expand(torch.tensor([[y[-1], 11, 12]]))
    return float(candidate_rewards(rm, [item.user_id], [item.prompt], hc)[0, 0])


def _check_prefix_consistency(rm: Any, item: ScoreItem, tokenizer: Any) -> None:
    """token_rewards end at ``score``; a teacher-forced candidate equal to y_t gets r(x, y_≤t)."""
    score = float(rm.score([item])[0])
    tok = rm.token_rewards([item])[0]
    np.testing.assert_allclose(tok[-1], score, rtol=1e-5, atol=1e-5)
    y = encode_response(tokenizer, item.response)
    cands = torch.tensor([[t, 11, 12] for t in y])
    cand = rm.teacher_forced_candidate_rewards(item, y, cands).double().numpy()
    np.testing.assert_allclose(cand[:, 0], tok, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_feature_rm_guides_with_the_reward_it_is_scored_with(name: str, ctx: RMContext, anchor: str) -> None:
    rm = _fit(name, ctx, **({"anchor_state": anchor} if name == "lore_reg" else {}))
    assert isinstance(rm, FeatureRM)
    for item in ITEMS:
        score = float(rm.score([item])[0])
        np.testing.assert_allclose(_args_reward_of_last_token(rm, item), score, rtol=1e-5, atol=1e-5)
        _check_prefix_consistency(rm, item, ctx.features.lm.tokenizer)  # type: ignore[union-attr]


def test_pal_b_reward_reads_the_prompt_and_cannot_be_called_without_it(ctx: RMContext) -> None:
    """The defect this file guards against: PAL-B's prompt-side prototypes must reach every consumer."""
    rm = _fit("pal_b", ctx)
    a, b = ScoreItem("u0", "Tell me about apple.", "Yes!"), ScoreItem("u0", "Name a colour, please.", "Yes!")
    assert abs(float(rm.score([a])[0]) - float(rm.score([b])[0])) > 1e-4  # the prompt matters
    feats = torch.randn(2, ctx.features.dim)  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="depends on the prompt"):
        rm.reward_from_features(["u0", "u1"], feats)
    with pytest.raises(ValueError, match="prompts"):
        rm.rewards(["u0", "u1"], ["only one prompt"], feats)


def test_token_ranker_guides_with_the_reward_it_is_scored_with(ctx: RMContext) -> None:
    from perbench.decoding.token_ranker import TokenRanker

    assert ctx.features is not None
    rm = TokenRanker().init_random(ctx.features, users=["u0", "u1"], seed=1)
    lm = ctx.features.lm
    for item in ITEMS:
        y = encode_response(lm.tokenizer, item.response)
        state = CachedLM(lm, [encode_prompt(lm.tokenizer, item.prompt)])
        h = state.prefill()
        for t in y[:-1]:
            h = state.step(torch.tensor([t]))
        before = float(rm.token_rewards([item])[0][-2]) if len(y) > 1 else 0.0
        last = float(rm.candidate_rewards([item.user_id], h, torch.tensor([[y[-1], 11]]))[0, 0])
        np.testing.assert_allclose(before + last, float(rm.score([item])[0]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(LM_METHODS))
def test_lm_methods_prefix_reward_ends_at_score(name: str, ctx: RMContext) -> None:
    rm = _fit(name, ctx, **LM_METHODS[name])
    assert rm.no_prefix_reward is None
    for item in ITEMS:
        _check_prefix_consistency(rm, item, ctx.features.lm.tokenizer)  # type: ignore[union-attr]


def test_genarm_decoder_reward_equals_score(ctx: RMContext) -> None:
    """GenARM decoding reads log π_r from a KV-cached stepper on π_r's user-conditioned prompt; summed over
    the response's tokens (times β) that is exactly the score of the finished response."""
    rm = _fit("genarm", ctx, **LM_METHODS["genarm"])
    for item in ITEMS:
        y = encode_response(rm.lm.tokenizer, item.response)
        stepper = rm.stepper([item.user_id], [item.prompt])
        total = 0.0
        for t in y:
            total += float(stepper.logprobs()[0, t])
            stepper.step(torch.tensor([t]))
        np.testing.assert_allclose(rm.beta * total, float(rm.score([item])[0]), rtol=1e-5, atol=1e-5)


# ---- PAL-A: the paper's ideal-point form --------------------------------------------------------------------
def test_pal_a_is_an_ideal_point_model_whose_new_users_learn_only_their_weights() -> None:
    from tests.synthetic import accuracy, make_problem

    prob = make_problem("lowrank")
    rm = reward_models.get("pal_a")()
    rm.fit(prob.train, RMContext(features=prob.ext))  # type: ignore[arg-type]
    assert not rm.prompt_conditioned and accuracy(rm, prob.test_seen) > 0.8
    net_before = {k: v.clone() for k, v in rm.net.state_dict().items()}
    W_before = rm.W.clone()
    new_user = prob.unseen[0]
    fallback = rm.user_weights(new_user)
    rm.adapt(new_user, prob.shots[new_user][:10])
    assert all(torch.equal(net_before[k], v) for k, v in rm.net.state_dict().items())  # f and P frozen
    assert torch.equal(W_before, rm.W)  # the seen users' weights untouched
    w_u = rm.user_weights(new_user)
    assert w_u.shape == (rm.K,) and abs(float(w_u.sum()) - 1) < 1e-5 and not np.allclose(w_u, fallback)
    # r = −‖f(z) − a_u‖ with a_u = f(Σ_k w_uk p_k): the user's ideal point is the mapped mixture of the free
    # prototypes, which live in the feature space (the reference's default f(Pw) user learner)
    assert rm.net.P.shape == (rm.K, prob.ext.dim)
    feats = torch.from_numpy(prob.ext.last([(p.prompt, p.chosen) for p in prob.test_seen[:6]]))
    users = [p.user_id for p in prob.test_seen[:6]]
    r = rm.rewards(users, ["prompt A"] * 6, feats)
    with torch.no_grad():
        fz = rm.net.f(rm.std(feats))
        points = torch.stack([rm.net.f(torch.from_numpy(rm.user_weights(u)) @ rm.net.P) for u in users])
    torch.testing.assert_close(r, -(fz - points).norm(dim=-1), rtol=1e-5, atol=1e-5)
    # the prompt reaches the reward only through φ(x, y): same features, other prompts, same rewards
    torch.testing.assert_close(rm.rewards(users, [f"prompt {i}" for i in range(6)], feats), r)


def test_pal_a_trains_on_the_reference_hinge_and_bounds_the_ideal_points() -> None:
    """The reference's PAL-A loss: hinge max(0, 1 − (d_l − d_w)) averaged over pairs, plus λ·Σ relu(‖a_u‖ − 4)
    over a batch's user ideal points (4 pairs) — the bound is on a_u, not on the prototypes."""
    rm = reward_models.get("pal_a")(bound_weight=1.0)
    fw = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    fl = torch.tensor([[3.0, 4.0], [0.0, 0.5]])  # distances to the ideal point (0, 0): d_w = 0, d_l = 5 / 0.5
    inside = torch.zeros(2, 2)
    # pair 1: margin 5 ≥ 1, no loss; pair 2: margin 0.5, hinge 0.5 -> mean 0.25; ideal points inside the bound
    assert float(rm.loss(fw, fl, inside)) == pytest.approx(0.25, abs=1e-5)
    outside = torch.tensor([[6.0, 8.0], [0.0, 0.0]])  # ‖a‖ = 10 for pair 1: relu(10 − 4) = 6, mean 3, × 4 pairs
    d = torch.linalg.norm(fl - outside, dim=-1) - torch.linalg.norm(fw - outside, dim=-1)
    hinge = float(torch.relu(1 - d).mean())
    assert float(rm.loss(fw, fl, outside)) == pytest.approx(hinge + 4 * 3.0, abs=1e-5)


# ---- lore_reg: the reference defaults ------------------------------------------------------------------------
def test_lore_reg_anchors_on_a_reference_rm_with_the_reference_alpha(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pull is toward a reference RM not fit on these pairs: a saved global_bt state fit elsewhere on the same
    features, read in this fit's standardisation (r_ref = w·(φ − μ_ref)/σ_ref = Σ_i w_i σ_i/σ_ref,i · z_i + c)."""
    from perbench.cache import pack_arrays, unpack_arrays
    from perbench.rewards.lore import save_anchor
    from tests.synthetic import make_problem

    prob = make_problem("lowrank")
    ref_pairs = make_problem("lowrank", seed=3, n_seen=4, n_unseen=2).train  # other texts, other users
    ref = reward_models.get("global_bt")()
    ref.fit(ref_pairs, RMContext(features=prob.ext))  # type: ignore[arg-type]
    path = save_anchor(ref, tmp_path / "ref.npz")
    assert reward_models.get("lore_reg")(anchor_state=str(path)).alpha is None  # by default α is validated
    rm = reward_models.get("lore_reg")(anchor_state=str(path), alpha=1e4)
    assert rm.alpha_used == 1e4
    rm.fit(prob.train, RMContext(features=prob.ext))  # type: ignore[arg-type]
    assert not np.allclose(ref.std.sd, rm.std.sd)  # the two standardisations differ: the conversion matters
    np.testing.assert_allclose(rm.v_global, ref.w * rm.std.sd / ref.std.sd, rtol=1e-5, atol=1e-6)
    Vp = torch.randn(rm.V.shape[0], 3)
    assert rm._penalty(Vp, 19, 100) is None  # the ramp starts at 20 %
    mid = float(rm._penalty(Vp, 50, 100))
    full = float(rm._penalty(Vp, 80, 100))
    assert full == pytest.approx(2 * mid, rel=1e-5) and full == pytest.approx(float(rm._penalty(Vp, 99, 100)))
    # an anchor fit on another backbone is refused
    other = tmp_path / "other.npz"
    state = unpack_arrays(path.read_bytes())
    assert str(state["backbone"]) == prob.ext.fingerprint
    other.write_bytes(pack_arrays(**{**state, "backbone": np.asarray("another-backbone")}))
    with pytest.raises(ValueError, match="backbone"):
        reward_models.get("lore_reg")(anchor_state=str(other)).fit(prob.train, RMContext(features=prob.ext))  # type: ignore[arg-type]


# ---- PReF: active shot selection ----------------------------------------------------------------------------
def test_pref_select_shots_follows_the_reference_rule() -> None:
    """First pick at random from the seed; then argmax σ'(uᵀv)²·vᵀΣ⁻¹v with Σ = λI + Σ_picked σ'(uᵀv) v vᵀ,
    λ = 1e-3, u re-estimated from the answers revealed so far."""
    from perbench.rewards.personal import fit_logistic, user_seed
    from tests.synthetic import make_problem

    prob = make_problem("lowrank")
    rm = reward_models.get("pref")()
    assert rm.select_lambda == 1e-3
    rm.fit(prob.train, RMContext(features=prob.ext, seed=4))  # type: ignore[arg-type]
    user = prob.unseen[0]
    pool = prob.shots[user]
    picks = rm.select_shots(user, pool, 5)
    assert len(picks) == 5 and len({p.pair_id for p in picks}) == 5 and all(p in pool for p in picks)
    assert rm.select_shots(user, pool, 5) == picks  # deterministic
    assert rm.select_shots(user, pool, 100)[:5] == picks and len(rm.select_shots(user, pool, 100)) == len(pool)
    assert rm.select_shots(user, [], 3) == [] and rm.select_shots(user, pool, 0) == []
    # first shot: drawn at random from the pool with the fit's seed and the user
    assert picks[0] is pool[int(np.random.default_rng(user_seed(4, user)).integers(len(pool)))]
    firsts = {rm.select_shots(u, prob.shots[u], 1)[0].pair_id.split(":")[1].split("-shot")[1] for u in prob.unseen}
    assert len(firsts) > 1  # not the same position for every user: a random draw, not a rule
    # second shot: the user's answer to the first is revealed, u is re-estimated, Σ includes the first pick
    fw, fl = prob.ext.last([(p.prompt, p.chosen) for p in pool]), prob.ext.last([(p.prompt, p.rejected) for p in pool])
    A = rm.A.double().numpy()
    z = lambda f: (f - rm.std.mu) / rm.std.sd  # noqa: E731
    V = (z(fw) - z(fl)) @ A.T
    i0 = pool.index(picks[0])
    u1 = fit_logistic(torch.from_numpy(V[[i0]]).float(), l2=rm.adapt_l2, center=rm.U.mean(0)).double().numpy()
    s1 = 1 / (1 + np.exp(-(V @ u1)))
    c1 = s1 * (1 - s1)
    sigma = 1e-3 * np.eye(rm.J) + c1[i0] * np.outer(V[i0], V[i0])
    info = c1**2 * np.einsum("ij,jk,ik->i", V, np.linalg.inv(sigma), V)
    info[i0] = -np.inf
    assert picks[1] is pool[int(np.argmax(info))]
