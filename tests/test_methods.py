"""Personalized frozen-feature reward models on synthetic features with a known answer.

Every method is fit on preset vectors (``tests/synthetic.py``) — no backbone — and must recover the
users' hidden preference directions, adapt to unseen users from their shots, fall back for unknown
users, round-trip its state and be deterministic. The conflict fixture checks that personalization is
real: a user-agnostic scorer cannot beat 0.5 on its mirrored pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair
from perbench.registry import reward_models
from perbench.rewards.base import RMContext, ScoreItem
from perbench.rewards.personal import PersonalFeatureRM
from tests.synthetic import FakeExtractor, Problem, accuracy, make_problem

FEATURE_METHODS = [
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
#: Methods whose unseen users are personalized from their shots (MPU-Avg gives them the average head).
ADAPTIVE = [m for m in FEATURE_METHODS if m != "mpu_avg"]
#: Methods with a shared structure learnt from the seen users: 10 shots suffice on the conflict fixture.
#: (MPU learns each new head from scratch: it gets 20 shots.)
SHARED = [m for m in ADAPTIVE if m != "mpu"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny full-batch problems run faster single-threaded on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


_PROBLEMS: dict[str, Problem] = {}
_FITS: dict[tuple[str, str, int], Any] = {}


def problem(kind: str) -> Problem:
    if kind not in _PROBLEMS:
        _PROBLEMS[kind] = make_problem(kind)
    return _PROBLEMS[kind]


def new(name: str, **kw: Any) -> Any:
    return reward_models.get(name)(**kw)


def fitted(name: str, kind: str, seed: int = 0) -> Any:
    """One fit per (method, fixture, seed), shared by the tests that only read it."""
    key = (name, kind, seed)
    if key not in _FITS:
        rm = new(name)
        prob = problem(kind)
        rm.fit(prob.train, RMContext(features=prob.ext, seed=seed))  # type: ignore[arg-type]
        _FITS[key] = rm
    return _FITS[key]


def adapted_accuracy(rm: Any, prob: Problem, n: int) -> float:
    for u in prob.unseen:
        rm.adapt(u, prob.shots[u][:n])
    return accuracy(rm, prob.test_unseen)


def items_for(pairs: list[PreferencePair], user: str | None = None) -> list[ScoreItem]:
    out = []
    for p in pairs:
        u = user or p.user_id
        out += [ScoreItem(u, p.prompt, p.chosen), ScoreItem(u, p.prompt, p.rejected)]
    return out


# ---- the known answer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_recovers_seen_users_preferences(name: str) -> None:
    rm = fitted(name, "lowrank")
    assert reward_models.get(name).name == name
    assert accuracy(rm, problem("lowrank").test_seen) > 0.9


@pytest.mark.parametrize("name", ADAPTIVE)
def test_adapts_to_unseen_users_from_shots(name: str) -> None:
    rm = fitted(name, "lowrank")
    prob = problem("lowrank")
    assert adapted_accuracy(rm, prob, 20) > 0.9


@pytest.mark.parametrize("name", ADAPTIVE)
def test_conflicting_users_personalized_beats_global(name: str) -> None:
    prob = problem("conflict")
    glob = new("global_bt")
    glob.fit(prob.train, RMContext(features=prob.ext))  # type: ignore[arg-type]
    agnostic = accuracy(glob, prob.test_unseen)
    assert agnostic <= 0.5 + 1e-9  # mirrored pairs: one of each pair right at best
    rm = fitted(name, "conflict")
    assert accuracy(rm, prob.test_seen) >= 0.9
    n = 10 if name in SHARED else 20
    assert adapted_accuracy(rm, prob, n) >= 0.8 > agnostic + 0.25


def test_mpu_avg_ignores_shots_so_cannot_personalize_new_users() -> None:
    rm = fitted("mpu_avg", "conflict")
    prob = problem("conflict")
    assert adapted_accuracy(rm, prob, 20) <= 0.5 + 1e-9


# ---- adaptation semantics -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_adapt_replaces_and_unknown_users_fall_back(name: str) -> None:
    rm = fitted(name, "conflict")
    prob = problem("conflict")
    u = prob.unseen[0]
    probe = items_for(prob.test_unseen[:6], user=u)
    rm.adapt(u, prob.shots[u][:1])
    one = rm.score(probe)
    rm.adapt(u, prob.shots[u][:20])
    rm.adapt(u, prob.shots[u][:1])  # replaces the 20-shot state
    np.testing.assert_allclose(rm.score(probe), one, rtol=1e-5, atol=1e-6)
    rm.adapt(u, [])  # zero shots -> back to the fallback
    unknown = rm.score(items_for(prob.test_unseen[:6], user="never-seen-user"))
    np.testing.assert_allclose(rm.score(probe), unknown, rtol=1e-5, atol=1e-6)
    assert np.isfinite(unknown).all()


@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_reward_from_any_hidden_state(name: str) -> None:
    """ARGS and per-token rewards hand over arbitrary hidden states, users mixed, unknown ids included."""
    rm = fitted(name, "lowrank")
    prob = problem("lowrank")
    feats = torch.randn(7, prob.ext.dim) * 3
    users = [prob.seen[0], "nobody", prob.seen[1], "nobody", prob.unseen[0], prob.seen[0], "x"]
    with torch.inference_mode():
        r = rm.reward_from_features(users, feats)
    assert r.shape == (7,) and torch.isfinite(r).all()
    with torch.inference_mode():
        single = torch.stack([rm.reward_from_features([u], feats[i : i + 1])[0] for i, u in enumerate(users)])
    torch.testing.assert_close(r, single, rtol=1e-4, atol=1e-5)


# ---- state and determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_state_round_trip(name: str) -> None:
    prob = problem("conflict")
    rm = fitted(name, "conflict")
    state = rm.state()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    again = new(name)
    again.load_state({k: v.copy() for k, v in state.items()})
    again.bind(prob.ext)
    probe = items_for(prob.test_seen[:10]) + items_for(prob.test_seen[:3], user="unknown")
    np.testing.assert_allclose(again.score(probe), rm.score(probe), rtol=1e-5, atol=1e-6)
    u = prob.unseen[1]
    rm.adapt(u, prob.shots[u][:10])
    again.adapt(u, prob.shots[u][:10])
    np.testing.assert_allclose(
        again.score(items_for(prob.test_unseen[:5], user=u)),
        rm.score(items_for(prob.test_unseen[:5], user=u)),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("name", FEATURE_METHODS)
def test_deterministic_given_seed(name: str) -> None:
    prob = problem("conflict")
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = new(name)
    a.fit(prob.train, RMContext(features=prob.ext, seed=0))  # type: ignore[arg-type]
    assert torch.equal(torch.rand(1), expected_next), "fit must not disturb the caller's RNG"
    b = fitted(name, "conflict")
    sa, sb = a.state(), b.state()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


# ---- method specifics ---------------------------------------------------------------------------------
def test_lore_reg_drops_unused_columns_and_keeps_simplex() -> None:
    rm = fitted("lore_reg", "conflict")
    assert rm.V.shape[1] <= 5 and rm.W.shape[1] == rm.V.shape[1]
    assert torch.all(rm.W.max(0).values >= 1e-2)
    torch.testing.assert_close(rm.W.sum(1), torch.ones(len(rm.W)))
    w = rm.user_weights("never-seen")
    assert abs(float(w.sum()) - 1) < 1e-5


def test_lore_loss_is_the_reference_objective() -> None:
    """r_u = φᵀ V w_u / τ: a reward difference equals the loss's logit."""
    rm = fitted("lore", "lowrank")
    prob = problem("lowrank")
    p = prob.train[0]
    c, r = rm.score_pairs([p])
    z = rm.std(torch.from_numpy(prob.ext.last([(p.prompt, p.chosen), (p.prompt, p.rejected)])))
    w = rm.W[rm.users.index(p.user_id)]
    logit = float((z[0] - z[1]) @ rm.V @ w) / rm.tau
    assert abs((c[0] - r[0]) - logit) < 1e-4


def test_pal_prompt_context_matches_score() -> None:
    rm = fitted("pal_b", "lowrank")
    prob = problem("lowrank")
    pairs = prob.test_seen[:4]
    items = items_for(pairs)
    feats = torch.from_numpy(prob.ext.last([(it.prompt, it.response) for it in items]))
    px = prob.ext.prompt_features([it.prompt for it in items])
    users = [it.user_id for it in items]
    rm.set_prompt_context(px)
    with torch.inference_mode():
        per_row = rm.reward_from_features(users, feats)
    np.testing.assert_allclose(per_row.numpy(), rm.score(items), rtol=1e-5, atol=1e-5)
    rm.set_prompt_context({users[0]: px[0]})  # one prompt per user (e.g. one decoding request each)
    with torch.inference_mode():
        by_user = rm.reward_from_features([*users[:2], "other"], feats[:3])
    np.testing.assert_allclose(by_user.numpy()[:2], per_row.numpy()[:2], rtol=1e-5, atol=1e-5)
    rm.set_prompt_context(None)
    with torch.inference_mode():  # users without a registered prompt use the mean prototypes
        alone = rm.reward_from_features(["other"], feats[2:3]).numpy()[0]
    np.testing.assert_allclose(by_user.numpy()[2], alone, rtol=1e-5, atol=1e-5)
    rm.set_prompt_context(None)  # fallback: mean prototypes, still a valid reward
    with torch.inference_mode():
        assert torch.isfinite(rm.reward_from_features(users, feats)).all()
    assert rm.net.logit_scale.clamp(max=np.log(100)).exp() <= 100


def test_vpl_adapts_without_gradient_steps() -> None:
    rm = fitted("vpl", "conflict")
    prob = problem("conflict")
    before = {k: v.clone() for k, v in rm.net.state_dict().items()}
    rm.adapt(prob.unseen[0], prob.shots[prob.unseen[0]][:5])
    after = rm.net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert rm.adapted[prob.unseen[0]].shape == (rm.z_dim,)


def test_pref_svd_init_separates_user_groups() -> None:
    rm = fitted("pref", "conflict")
    prob = problem("conflict")
    U0, A0 = rm.svd_init(rm._pair_data(prob.train, *_pair_arrays(prob)))
    assert U0.shape == (len(prob.seen), rm.J) and A0.shape == (rm.J, prob.ext.dim)
    assert rm.select_pairs([], 3) == []
    # Users who answer the *same* pairs in opposite ways: M has rank 1 and its top user factor has opposite
    # signs for the two groups; the init alone already orders those users' pairs correctly.
    shared = [p for p in prob.test_unseen]  # every unseen user answers the same pairs
    data = rm._pair_data(
        shared,
        prob.ext.last([(p.prompt, p.chosen) for p in shared]),
        prob.ext.last([(p.prompt, p.rejected) for p in shared]),
    )
    U0, A0 = rm.svd_init(data)
    sign = {u: float(np.sign(U0[i, 0])) for i, u in enumerate(data.users)}
    groups = {u: float(np.sign(prob.directions[u] @ prob.directions[data.users[0]])) for u in data.users}
    assert all(sign[u] * sign[data.users[0]] == groups[u] for u in data.users)
    logit = ((data.diff @ A0.T) * U0[data.uidx]).sum(-1)
    assert float((logit > 0).float().mean()) > 0.9


def test_pref_active_selection_prefers_new_directions() -> None:
    """Five copies of one pair (v = e1) and one pair along e2, u = 0 (σ' = 1/4 everywhere): the first pick
    is worth 0.25/λ either way; after it, a second copy is worth 0.25/(λ + 0.25) < 1 while e2 still gives
    0.25/λ — so the picks are one copy and the e2 pair."""
    ext = FakeExtractor(2)
    vecs = {"q0": (0, 0), "q1": (0, 0), "q0/a": (1, 0), "q0/b": (0, 0), "q1/a": (0, 1), "q1/b": (0, 0)}
    ext.table.update({k: np.asarray(v, np.float32) for k, v in vecs.items()})
    rm = new("pref", J=2, select_lambda=0.1)
    rm.load_state(
        {
            "mu": np.zeros(2, np.float32),
            "sd": np.ones(2, np.float32),
            "users": np.asarray(["s"]),
            "seed": np.asarray(0),
            "m.A": np.eye(2, dtype=np.float32),
            "m.U": np.zeros((1, 2), np.float32),
        }
    )
    rm.bind(ext)
    x = PreferencePair("x", "new", "q0", "q0/a", "q0/b")
    y = PreferencePair("y", "new", "q1", "q1/a", "q1/b")
    assert rm.select_pairs([x] * 5 + [y], 2) == [0, 5]
    assert rm.select_pairs([x, x, y], 3) == [0, 2, 1]
    rm.adapt("new", [x])  # answered pairs enter Σ first: e2 is now the most informative
    assert rm.select_pairs([x, y], 1) == [1]


def _pair_arrays(prob: Problem) -> tuple[np.ndarray, np.ndarray]:
    fw = prob.ext.last([(p.prompt, p.chosen) for p in prob.train])
    fl = prob.ext.last([(p.prompt, p.rejected) for p in prob.train])
    return fw, fl


def test_personal_base_keeps_seen_adapted_and_fallback_apart() -> None:
    rm = fitted("mpu", "conflict")
    assert isinstance(rm, PersonalFeatureRM)
    prob = problem("conflict")
    assert rm.known(prob.seen[0]) and not rm.known("nobody")
    assert "adapted" not in " ".join(rm.state())  # adaptation is not part of the fit state


def test_methods_need_a_feature_extractor() -> None:
    with pytest.raises(ValueError, match="feature extractor"):
        new("lore").fit(problem("lowrank").train, RMContext())


def test_fake_extractor_is_deterministic() -> None:
    a, b = FakeExtractor(8, seed=3), FakeExtractor(8, seed=3)
    np.testing.assert_array_equal(a.last([("p", "r")]), b.last([("p", "r")]))
