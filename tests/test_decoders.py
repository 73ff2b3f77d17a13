"""GenARM, Best-of-N, ICL / ICL-RAG and the token-level ranker (tiny random models; the encoder is real)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perbench.data.records import Message, PreferencePair, ProfileItem, User
from perbench.data.user_context import UserView
from perbench.decoding.args import ARGS
from perbench.decoding.best_of_n import BestOfN, bon_curve, bon_expected, bon_ns, bon_weights, pick_best, sample_seed
from perbench.decoding.genarm import GenARMDecoder
from perbench.decoding.greedy import ZeroShot
from perbench.decoding.icl import ICL, ICLRAG
from perbench.decoding.token_ranker import TokenRanker
from perbench.models.chat import encode_prompt
from perbench.models.generate import GenRequest
from perbench.models.loader import LoadedLM, tiny_random_lm
from perbench.rewards.base import RMContext, ScoreItem
from perbench.rewards.baselines import LengthRM
from perbench.rewards.features import FeatureExtractor

PROMPTS = [
    "How do I boil an egg?",
    "Name three colours.",
    "Why is the sky blue? Explain briefly please.",
    "hi",
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():  # type: ignore[no-untyped-def]
    """Tiny models: one thread is faster, and immune to a busy machine's descheduled OpenMP workers."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def reqs(users: list[str] | None = None) -> list[GenRequest]:
    return [GenRequest(p, (users or ["u"] * 4)[i], seed=100 + i) for i, p in enumerate(PROMPTS)]


def ids_of(gens):  # type: ignore[no-untyped-def]
    return [g.token_ids for g in gens]


@pytest.fixture(scope="module")
def uniform_rm() -> LoadedLM:
    """π_r with a zeroed LM head: log π_r is uniform over the vocabulary at every step."""
    lm = tiny_random_lm(seed=7)
    with torch.no_grad():
        lm.model.get_output_embeddings().weight.zero_()
    return lm


# ---------------------------------------------------------------------------------------------- GenARM
def test_genarm_with_uniform_rm_equals_base_decoding(tiny_lm, uniform_rm):  # type: ignore[no-untyped-def]
    greedy = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=10)
    guided = GenARMDecoder(alpha=2.0).generate(tiny_lm, reqs(), uniform_rm, max_new_tokens=10)
    assert ids_of(guided) == ids_of(greedy)
    sampler = ZeroShot(sample=True, temperature=0.8, top_p=0.9)
    sampled = sampler.generate(tiny_lm, reqs(), None, max_new_tokens=10)
    gs = GenARMDecoder(alpha=2.0, sample=True, temperature=0.8, top_p=0.9).generate(
        tiny_lm, reqs(), uniform_rm, max_new_tokens=10
    )
    assert ids_of(gs) == ids_of(sampled)


class FakeGenARM:
    """The AutoregressiveRM interface: π_r and user-conditioned prompt ids (its training β is not read)."""

    def __init__(self, lm: LoadedLM, beta: float) -> None:
        self.lm, self.beta = lm, beta

    def prompt_ids(self, user_ids, prompts):  # type: ignore[no-untyped-def]
        return [
            encode_prompt(self.lm.tokenizer, (Message("system", f"user {u}"), Message("user", str(p))))
            for u, p in zip(user_ids, prompts, strict=True)
        ]


def _uncached_genarm(policy, rm, req, alpha, steps):  # type: ignore[no-untyped-def]
    base = encode_prompt(policy.tokenizer, req.prompt)
    r_ids = rm.prompt_ids([req.user_id], [req.prompt])[0]
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            lp = torch.log_softmax(policy.model(input_ids=torch.tensor([base + out])).logits[0, -1], -1)
            lr = torch.log_softmax(rm.lm.model(input_ids=torch.tensor([r_ids + out])).logits[0, -1], -1)
            out.append(int((lp + alpha * lr).argmax()))
            if out[-1] in policy.eos_ids:
                break
    return [t for t in out if t not in policy.eos_ids]


def test_genarm_cached_matches_uncached_and_changes_output(tiny_lm):  # type: ignore[no-untyped-def]
    r_lm = tiny_random_lm(seed=8)
    g = torch.Generator().manual_seed(0)
    head = r_lm.model.get_output_embeddings()
    # untied and small: log π_r's gaps are a fraction of the policy's, so α decides how much π_r moves the tokens
    head.weight = torch.nn.Parameter(0.05 * torch.randn(head.weight.shape, generator=g))
    rm = FakeGenARM(r_lm, beta=0.05)
    users = ["a", "b", "a", "c"]
    guided = GenARMDecoder(alpha=20.0).generate(tiny_lm, reqs(users), rm, max_new_tokens=8)
    for r, g in zip(reqs(users), guided, strict=True):
        assert g.token_ids == _uncached_genarm(tiny_lm, rm, r, 20.0, 8)
    default = GenARMDecoder().generate(tiny_lm, reqs(users), rm, max_new_tokens=8)  # α = 1, not 1/β = 20
    for r, g in zip(reqs(users), default, strict=True):
        assert g.token_ids == _uncached_genarm(tiny_lm, rm, r, 1.0, 8)
    # α changes the tokens on this fixture: a decoder that ignored α would decode both alike
    assert ids_of(guided) != ids_of(default)
    mid = GenARMDecoder(alpha=5.0).generate(tiny_lm, reqs(users), rm, max_new_tokens=8)
    assert [g.token_ids for g in mid] == [_uncached_genarm(tiny_lm, rm, r, 5.0, 8) for r in reqs(users)]
    # and policy accuracy's weight on r = β·log π_r is α/β, the decoder's own α
    assert GenARMDecoder(alpha=20.0).reward_weight(rm) == pytest.approx(20.0 / 0.05)
    assert GenARMDecoder(alpha=5.0).reward_weight(rm) == pytest.approx(5.0 / 0.05)
    assert GenARMDecoder().params == {"alpha": 1.0} and "alpha=1.0" in GenARMDecoder().label()
    assert GenARMDecoder(alpha=2.0).config_key() != GenARMDecoder().config_key()
    with pytest.raises(TypeError, match="alpha"):
        GenARMDecoder(beta=0.5)
    greedy = ZeroShot().generate(tiny_lm, reqs(users), None, max_new_tokens=8)
    assert ids_of(guided) != ids_of(greedy)
    with pytest.raises(TypeError, match="autoregressive RM"):
        GenARMDecoder().generate(tiny_lm, reqs(), LengthRM(), max_new_tokens=2)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- Best-of-N
def test_best_of_1_is_a_plain_sample_and_pool_is_cached(tiny_lm, store):  # type: ignore[no-untyped-def]
    sampler = ZeroShot(sample=True, temperature=1.0, top_p=0.9)
    plain = sampler.generate(tiny_lm, reqs(), None, max_new_tokens=8)
    bo1 = BestOfN(n=1)
    bo1.store = store
    assert ids_of(bo1.generate(tiny_lm, reqs(), LengthRM(), max_new_tokens=8)) == ids_of(plain)

    bon = BestOfN(n=4)
    bon.store = store
    pool = bon.pool(tiny_lm, reqs(), max_new_tokens=8)
    assert bon.sampled == 12 and bon.reused == 4  # sample 0 of each prompt came from the N=1 run
    assert [row[0].token_ids for row in pool] == ids_of(plain)
    assert sample_seed(5, 0) == 5 and sample_seed(5, 1) != sample_seed(5, 2)
    # every RM re-ranks the same pool: no new samples, and the pick is the argmax of the RM's scores
    picked = bon.generate(tiny_lm, reqs(), LengthRM(), max_new_tokens=8)
    assert bon.sampled == 12
    for row, g in zip(pool, picked, strict=True):
        lens = [len(s.text.split()) for s in row]
        assert g.text == row[int(np.argmax(lens))].text
    # requests differing only in the user share the pool
    other = BestOfN(n=4)
    other.store = store
    other.pool(tiny_lm, reqs(["v"] * 4), max_new_tokens=8)
    assert other.sampled == 0


def test_bon_curve_hand_checked() -> None:
    rewards = [np.array([0.1, 0.9, 0.5, 2.0]), np.array([1.0, np.nan, 3.0, 0.0])]
    quality = [np.array([0.0, 1.0, 0.2, 0.4]), np.array([0.5, 1.0, 0.0, 1.0])]
    c = bon_curve(rewards, quality)
    assert c["n"] == [1, 2, 4] == bon_ns(4)
    # n = 2 from a pool of 4: the items ranked 1..4 by reward win with probability 3/6, 2/6, 1/6, 0 (NaN ranks last)
    # row 1: .5·.4 + 1/3·1 + 1/6·.2 = .5667; row 2: .5·0 + 1/3·.5 + 1/6·1 = .3333. n = 1: the pool means .4, .625
    assert c["quality"] == pytest.approx([0.5125, 0.45, 0.2])
    # the oracle ranks by quality: row 2's two 1.0s tie at the top and share (3/6 + 2/6) / 2 each
    assert c["oracle"] == pytest.approx([0.5125, (0.5 + 0.4 / 3 + 0.2 / 6 + 5 / 6 + 0.5 / 6) / 2, 1.0])
    assert c["sample_mean"] == pytest.approx([0.5125] * 3)
    assert pick_best(np.array([1.0, 1.0])) == 0  # a single decode: ties pick the earliest sample
    assert bon_ns(6) == [1, 2, 4, 6]
    # tied rewards are ordered at random: each gets half of the winning chance
    assert bon_expected(np.array([1.0, 1.0, 0.0]), np.array([0.0, 1.0, 1.0]), 3) == pytest.approx(0.5)


def test_exact_best_of_n_equals_the_monte_carlo_mean_over_random_subsets() -> None:
    """The exact expectation over random n-subsets of a pool equals the mean of simulated Best-of-n draws (ties
    broken uniformly at random), for every n, with tied and NaN rewards in the pool."""
    rng = np.random.default_rng(7)
    N, draws = 12, 40_000
    rewards = rng.integers(0, 5, size=(3, N)).astype(float)  # many ties
    rewards[0, 3] = np.nan
    quality = rng.random((3, N))
    for n in (1, 2, 3, 5, 8, 12):
        exact = bon_expected(rewards, quality, n)
        assert bon_weights(rewards, n).sum(1) == pytest.approx(np.ones(3))
        for row in range(3):
            r = np.where(np.isnan(rewards[row]), -np.inf, rewards[row])
            subsets = np.argsort(rng.random((draws, N)), axis=1)[:, :n]
            sub_r = r[subsets] + rng.random((draws, n)) * 1e-9  # random order among ties
            picks = subsets[np.arange(draws), np.argmax(sub_r, axis=1)]
            mc = quality[row][picks]
            assert abs(mc.mean() - exact[row]) < 4.5 * mc.std() / np.sqrt(draws) + 1e-12, (n, row)


# ---------------------------------------------------------------------------------------------- ICL
PROFILE = (
    ProfileItem("p0", "I repaired the gearbox of my old road bicycle and replaced the chain."),
    ProfileItem("p1", "Baking sourdough bread needs a lively starter and a long cold proof."),
    ProfileItem("p2", "My tomato plants on the balcony need watering twice a day in summer."),
    ProfileItem("p3", "Quantum computers use qubits that can be in superposition."),
)


def _icl_users() -> tuple[dict[str, User], list[PreferencePair]]:
    users = {"u": UserView("u", profile=PROFILE), "v": UserView("v")}
    pairs = [
        PreferencePair(f"t{i}", "v", f"question {i} about {topic}", f"good answer {i}", f"bad answer {i}", "train")
        for i, topic in enumerate(["cats", "sourdough baking", "cars"])
    ]
    pairs.append(PreferencePair("test0", "v", "secret test question", "SECRET CHOSEN", "SECRET REJECTED", "test"))
    return users, pairs


@pytest.mark.parametrize("retrieval", ["bm25", "dense"])
def test_icl_rag_retrieves_the_planted_item(retrieval: str) -> None:
    users, pairs = _icl_users()
    # LaMP-style RAG over the whole profile (profile_pool="all"): the retrieval picks the relevant item
    dec = ICLRAG(profile_k=1, profile_pool="all", retrieval=retrieval)
    dec.bind(users, pairs)
    q = "How long should I proof my sourdough bread, and how do I keep the starter lively?"
    assert [it.item_id for it in dec.retrieve(GenRequest(q, "u", 0))] == ["p1"]
    q2 = "What do qubits in a quantum computer do?"
    assert dec.retrieve(GenRequest(q2, "u", 0))[0].item_id == "p3"
    # by default every profile item every method reads is shown, the relevant one first
    default = ICLRAG(retrieval=retrieval)
    default.bind(users, pairs)
    assert default.retrieve(GenRequest(q, "u", 0))[0].item_id == "p1"
    assert default.shown("u") == {"pairs": 0, "profile_items": 4}
    # preference pairs: the user's train pairs (never the test pair), the relevant one first
    dec_pairs = ICLRAG(k=1, retrieval=retrieval)
    dec_pairs.bind(users, pairs)
    got = dec_pairs.retrieve(GenRequest("any tips for sourdough baking?", "v", 0))
    assert [it.item_id for it in got] == ["t1"] and "bad answer 1" in got[0].text
    chat = (Message("system", "s"), Message("user", "sourdough?"))
    prompt = dec_pairs.build_prompt(GenRequest(chat, "v", 0))
    assert isinstance(prompt, tuple) and prompt[0] == Message("system", "s")
    assert "good answer 1" in prompt[1].content and prompt[1].content.endswith("sourdough?")
    assert "SECRET" not in prompt[1].content


def test_icl_random_is_seeded_and_generates(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    users, pairs = _icl_users()
    dec = ICL(k=2, format="chosen")
    assert dec.retrieval == "random" and ICLRAG().retrieval == "bm25" and ICL().format == "pairs"
    dec.bind(users, pairs)
    a = [it.item_id for it in dec.retrieve(GenRequest("q", "v", 3))]
    assert a == [it.item_id for it in dec.retrieve(GenRequest("q", "v", 3))] and len(set(a)) == 2
    assert len({tuple(it.item_id for it in dec.retrieve(GenRequest("q", "v", s))) for s in range(8)}) > 1
    chosen_only = dec.build_prompt(GenRequest("a question", "v", 0))  # no profile: own pairs, chosen only
    assert isinstance(chosen_only, str) and "good answer" in chosen_only and "bad answer" not in chosen_only
    assert dec.build_prompt(GenRequest("q", "nobody", 0)) == "q"  # no items: the plain prompt
    both = ICL()
    both.bind({**users, "v": UserView("v", profile=PROFILE[:2])}, pairs)
    prompt = both.build_prompt(GenRequest("q", "v", 0))  # profile items and all pairs, with both responses
    assert isinstance(prompt, str) and prompt.index("profile") < prompt.index("Preferred response")
    assert all(f"good answer {i}" in prompt and f"bad answer {i}" in prompt for i in range(3))
    assert both.shown("v") == {"pairs": 3, "profile_items": 2}
    gens = dec.generate(tiny_lm, [GenRequest("q", "u", 0), GenRequest("q", "v", 0)], None, max_new_tokens=3)
    assert len(gens) == 2
    with pytest.raises(RuntimeError, match="bind"):
        ICL().retrieve(GenRequest("q", "u", 0))


# ---------------------------------------------------------------------------------------------- token ranker
def test_token_ranker_args(tiny_lm, store):  # type: ignore[no-untyped-def]
    ex = FeatureExtractor(tiny_lm, store)
    rm = TokenRanker().init_random(ex, users=["u"], seed=0, scale=30.0)
    greedy = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=8)
    assert ids_of(ARGS(k=1, w=5.0).generate(tiny_lm, reqs(), rm, max_new_tokens=8)) == ids_of(greedy)
    guided = ARGS(k=10, w=5.0).generate(tiny_lm, reqs(), rm, max_new_tokens=8)
    assert ids_of(guided) != ids_of(greedy)
    # brute force: full forward, top-k, candidate rewards from the same hidden state
    for r, g in zip(reqs(), guided, strict=True):
        ids, out = encode_prompt(tiny_lm.tokenizer, r.prompt), []
        for _ in range(8):
            with torch.no_grad():
                h = tiny_lm.model.get_decoder()(input_ids=torch.tensor([ids + out])).last_hidden_state[0, -1]
                lp = torch.log_softmax(tiny_lm.model.get_output_embeddings()(h), -1)
            top, c = lp.topk(10)
            out.append(int(c[(top + 5.0 * rm.candidate_rewards(["u"], h[None], c[None])[0]).argmax()]))
            if out[-1] in tiny_lm.eos_ids:
                break
        assert g.token_ids == [t for t in out if t not in tiny_lm.eos_ids]
    # the sequence reward is the sum of the token rewards; token_rewards are its prefix sums
    items = [ScoreItem("u", PROMPTS[0], "a short answer")]
    assert rm.token_rewards(items)[0][-1] == pytest.approx(rm.score(items)[0], rel=1e-5)


def test_token_ranker_fits_and_adapts(tiny_lm, store):  # type: ignore[no-untyped-def]
    good, bad = "yes, certainly, here you go", "no"
    pairs = [
        PreferencePair(f"p{i}", f"u{i % 2}", PROMPTS[i % 4], good if i % 3 else good + " indeed", bad, "train")
        for i in range(8)
    ]
    rm = TokenRanker(steps=60, batch_pairs=8, lr=1e-2)
    rm.fit(pairs, RMContext(features=FeatureExtractor(tiny_lm, store), seed=0))
    assert rm.losses[-1] < rm.losses[0]
    s_w, s_l = rm.score_pairs(pairs)
    assert (s_w > s_l).mean() >= 0.75
    rm.adapt("new", pairs[:3])
    assert "new" in rm.adapted
    clone = TokenRanker(steps=60, batch_pairs=8, lr=1e-2)
    clone.bind(FeatureExtractor(tiny_lm, store))
    clone.load_state(rm.state())
    assert np.allclose(clone.score_pairs(pairs)[0], s_w, atol=1e-5)
