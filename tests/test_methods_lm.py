"""Reward models that run a language model: LoRA methods (global_bt_v2, pdpo, genarm), the ICL judge,
hub sequence-classifier RMs and DPO implicit rewards — all on tiny random models, offline.

Also: the frozen-feature methods on a *real* (tiny random) backbone: prompt features, per-token rewards
and ARGS decoding with a personalized RM.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from perbench.data.records import PreferencePair, ProfileItem, User
from perbench.data.user_context import UserView, user_views
from perbench.models.chat import encode_pair, encode_prompt
from perbench.registry import reward_models
from perbench.rewards.base import RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor
from perbench.rewards.icl_judge import parse_choice
from tests.synthetic import accuracy

WORDS = ["apple", "river", "stone", "cloud", "music", "paper", "window", "garden", "silver", "orange"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pair(i: int, user: str, split: str = "train") -> PreferencePair:
    """u0 prefers the 'Yes' answer, u1 the 'No' answer (the same texts: conflicting users)."""
    yes, no = f"Yes, {WORDS[(i + 3) % 10]}!", f"No, {WORDS[(i + 5) % 10]}."
    c, r = (yes, no) if user == "u0" else (no, yes)
    return PreferencePair(f"p{i}{user}", user, f"Tell me about {WORDS[i % 10]}.", c, r, split)  # type: ignore[arg-type]


TRAIN = [pair(i, u) for i in range(12) for u in ("u0", "u1")]
TEST = [pair(i, u, "test") for i in range(12, 18) for u in ("u0", "u1")]
USERS = {
    "u0": User("u0", profile=(ProfileItem("likes", "Likes a clear yes."),)),
    "u1": User("u1", profile=(ProfileItem("likes", "Likes a firm no."),)),
    "u2": User("u2", seen=False),
}


def ctx_for(lm: Any, store: Any, seed: int = 0) -> RMContext:
    return RMContext(features=FeatureExtractor(lm, store), seed=seed, extra={"users": user_views(USERS), "policy": lm})


def new(name: str, **kw: Any) -> Any:
    return reward_models.get(name)(**kw)


def probe() -> list[ScoreItem]:
    return [ScoreItem(p.user_id, p.prompt, y) for p in TEST[:3] for y in (p.chosen, p.rejected)] + [
        ScoreItem("stranger", "hi", "hello there")
    ]


# ---- global_bt_v2 -------------------------------------------------------------------------------------
def test_global_bt_v2_starts_at_global_bt_then_trains(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    ctx = ctx_for(tiny_lm, store)
    v1 = new("global_bt")
    v1.fit(TRAIN, ctx)
    v2 = new("global_bt_v2", steps=0)
    v2.fit(TRAIN, ctx)  # no LoRA step: the merged model is the base model, the head is v1's
    np.testing.assert_allclose(v2.score(probe()), v1.score(probe()), rtol=1e-4, atol=1e-4)
    assert v2.extractor.fingerprint != ctx.features.fingerprint  # adapted features are cached apart

    a = new("global_bt_v2", steps=12, lr=1e-3)
    a.fit(TRAIN[::2], ctx)  # u0 only: a learnable, consistent preference
    assert np.mean(a.losses[-3:]) < np.mean(a.losses[:3])
    b = new("global_bt_v2", steps=12, lr=1e-3)
    b.bind_backbone(tiny_lm, store)
    b.load_state(a.state())
    np.testing.assert_allclose(b.score(probe()), a.score(probe()), rtol=1e-5, atol=1e-5)
    c = new("global_bt_v2", steps=12, lr=1e-3)
    c.fit(TRAIN[::2], ctx)
    assert all(np.array_equal(a.state()[k], c.state()[k]) for k in a.state())
    assert new("global_bt_v2").user_agnostic


# ---- P-DPO --------------------------------------------------------------------------------------------
def test_pdpo_learns_conflicting_users_and_falls_back_to_generic(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    ctx = ctx_for(tiny_lm, store)
    rm = new("pdpo", steps=30, lr=3e-3, token_lr=3e-2)
    rm.fit(TRAIN, ctx)
    assert np.mean(rm.losses[-5:]) < np.mean(rm.losses[:5])
    assert accuracy(rm, TEST) >= 0.9  # same texts, opposite labels: only the user tokens can do this
    # unseen / unknown users are the generic user (e_0 alone)
    gen = rm.score([ScoreItem("stranger", p.prompt, p.chosen) for p in TEST[:4]])
    rm.adapt("u2", TRAIN[:4])
    unseen = rm.score([ScoreItem("u2", p.prompt, p.chosen) for p in TEST[:4]])
    np.testing.assert_allclose(unseen, gen, rtol=1e-5)
    # implicit reward: β·(log π_θ(y | user, x) − log π_ref(y | x)); both from the same ids
    again = new("pdpo", steps=30, lr=3e-3, token_lr=3e-2)
    again.bind_backbone(tiny_lm)
    again.load_state(rm.state())
    np.testing.assert_allclose(again.score(probe()), rm.score(probe()), rtol=1e-5, atol=1e-5)
    twin = new("pdpo", steps=30, lr=3e-3, token_lr=3e-2)
    twin.fit(TRAIN, ctx)
    assert all(np.array_equal(rm.state()[k], twin.state()[k]) for k in rm.state())


def test_pdpo_optional_user_offset_adaptation(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    rm = new("pdpo", steps=4, adapt_steps=3, token_lr=1e-1)
    rm.fit(TRAIN, ctx_for(tiny_lm, store))
    generic = rm.score([ScoreItem("u2", p.prompt, p.chosen) for p in TEST[:2]])
    rm.adapt("u2", [pair(0, "u1")])
    assert not np.allclose(rm.score([ScoreItem("u2", p.prompt, p.chosen) for p in TEST[:2]]), generic)
    rm.adapt("u2", [])
    np.testing.assert_allclose(rm.score([ScoreItem("u2", p.prompt, p.chosen) for p in TEST[:2]]), generic)


# ---- GenARM -------------------------------------------------------------------------------------------
def test_genarm_reward_is_token_factorised_and_stepper_is_exact(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    ctx = ctx_for(tiny_lm, store)
    rm = new("genarm", steps=30, lr=3e-3, beta=1.0)
    rm.fit(TRAIN, ctx)
    assert np.mean(rm.losses[-5:]) < np.mean(rm.losses[:5])
    assert accuracy(rm, TEST) >= 0.9  # the user's rubric text in π_r's prompt tells the users apart
    # the user's text conditions π_r; users without text (and strangers) get the plain prompt
    assert rm.prompt_ids(["u0"], ["x"]) != rm.prompt_ids(["u2"], ["x"]) == rm.prompt_ids(["zz"], ["x"])
    # r = β Σ_t log π_r(y_t | x, y_<t): replay the response through the KV-cached stepper
    it = ScoreItem("u0", TEST[0].prompt, TEST[0].chosen)
    ids, n, _ = encode_pair(tiny_lm.tokenizer, rm.user_prompt(it.user_id, it.prompt), it.response, 512)
    resp = ids[len(ids) - n :]
    st = rm.stepper([it.user_id], [it.prompt])
    total = 0.0
    for t, tok in enumerate(resp):
        lp = st.logprobs()
        ref = rm.next_token_logprobs([it.user_id], [it.prompt], [resp[:t]])
        torch.testing.assert_close(lp, ref, rtol=1e-4, atol=1e-4)
        total += float(lp[0, tok])
        st.step(torch.tensor([tok]))
    assert abs(rm.beta * total - float(rm.score([it])[0])) < 1e-3
    again = new("genarm", steps=30, lr=3e-3, beta=1.0)
    again.bind_backbone(tiny_lm)
    again.load_state(rm.state())
    np.testing.assert_allclose(again.score(probe()), rm.score(probe()), rtol=1e-5, atol=1e-5)
    twin = new("genarm", steps=30, lr=3e-3, beta=1.0)
    twin.fit(TRAIN, ctx)
    assert twin.losses == rm.losses
    assert all(np.array_equal(rm.state()[k], twin.state()[k]) for k in rm.state())


# ---- ICL judge ----------------------------------------------------------------------------------------
def test_parse_choice() -> None:
    assert parse_choice("**Result:** B") == "B"
    assert parse_choice("I think A is better") == "A"
    assert parse_choice("Answer: (B)") == "B"
    assert parse_choice("Both are fine.") is None
    assert parse_choice("ABBA") is None


def test_icl_judge_order_mapping_and_parse_failures(tiny_lm, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    judge = new("icl_judge")
    judge.fit(TRAIN, ctx_for(tiny_lm, store))
    swaps = [judge.swapped(p) for p in TRAIN]
    assert 0 < sum(swaps) < len(swaps)  # shuffled, seeded by content: same pair, same order
    assert swaps == [new("icl_judge").swapped(p) for p in TRAIN]
    assert "Likes a clear yes." in judge.judge_prompt(TRAIN[0])[1].content
    assert "nothing is known" in judge.judge_prompt(pair(0, "u2"))[1].content
    out = judge.prefer(TEST)  # real logprob mode: every answer is A, B or a tie
    assert set(np.unique(out)) <= {0.0, 0.5, 1.0} and judge.parse_failures == 0
    monkeypatch.setattr(type(judge), "_logprob_picks", lambda self, lm, prompts, users: ["A"] * len(prompts))
    always_a = judge.prefer(TEST)  # "A" means chosen exactly when the pair was not swapped
    np.testing.assert_array_equal(always_a, [0.0 if judge.swapped(p) else 1.0 for p in TEST])
    gen = new("icl_judge", mode="generate", max_new_tokens=2)
    gen.fit(TRAIN, ctx_for(tiny_lm, store))
    res = gen.prefer(TEST[:4])  # a random model rarely says A/B: failures are NaN and counted
    assert gen.parse_failures == int(np.isnan(res).sum())
    with pytest.raises(TypeError):
        gen.score(probe())


def test_icl_judge_shared_head_gives_the_full_forward_answer(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    """One user's prompts run their shared head once (cached) and only their own tails on top of it: the
    answers equal those of one full forward per prompt."""
    judge = new("icl_judge")
    judge.fit(TRAIN, ctx_for(tiny_lm, store))
    pairs = [*TEST, pair(20, "u2", "test"), pair(21, "stranger", "test")]
    tok = tiny_lm.tokenizer
    a_id, b_id = (tok.encode(x, add_special_tokens=False)[0] for x in ("A", "B"))
    want = []
    with torch.inference_mode():
        for p in pairs:
            ids = torch.tensor([encode_prompt(tok, judge.judge_prompt(p))])
            lp = torch.log_softmax(tiny_lm.model(input_ids=ids).logits[0, -1].float(), -1)
            want.append("A" if lp[a_id] > lp[b_id] else "B" if lp[b_id] > lp[a_id] else "tie")
    got = judge._logprob_picks(tiny_lm, [judge.judge_prompt(p) for p in pairs], [p.user_id for p in pairs])
    assert got == want


def test_lm_rms_forward_each_distinct_item_once(tiny_lm, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """GenARM and P-DPO serve score and token_rewards from one forward per distinct (user, prompt, response);
    a change of a user's conditioning recomputes that user's items."""
    import perbench.rewards.genarm as genarm_mod
    import perbench.rewards.pdpo as pdpo_mod

    items = probe() + probe()[:3]
    for mod, name in ((genarm_mod, "genarm"), (pdpo_mod, "pdpo")):
        rm = new(name, steps=2, batch_eval=2)
        rm.fit(TRAIN, ctx_for(tiny_lm, store))
        seen: list[int] = []
        real = mod.response_token_logprobs

        def counting(model: Any, seqs: Any, *a: Any, _real: Any = real, _seen: list[int] = seen, **kw: Any) -> Any:
            _seen.append(0 if model is tiny_lm.model else len(seqs))  # P-DPO's π_ref is the frozen backbone
            return _real(model, seqs, *a, **kw)

        monkeypatch.setattr(mod, "response_token_logprobs", counting)
        s = rm.score(items)
        tr = rm.token_rewards(items)
        np.testing.assert_allclose([t[-1] for t in tr], s, rtol=1e-9, atol=1e-12)
        assert sum(seen) == len({(it.user_id, str(it.prompt), it.response) for it in items})
        fresh = new(name, steps=2, batch_eval=16)
        fresh.bind_backbone(tiny_lm)
        fresh.load_state(rm.state())
        np.testing.assert_allclose(fresh.score(items), s, rtol=1e-4, atol=1e-5)  # batching changes nothing
    genarm = new("genarm", steps=2)
    genarm.fit(TRAIN, ctx_for(tiny_lm, store))
    before = genarm.score(probe()[:2])  # u0, conditioned on their profile
    genarm.set_users({"u0": UserView("u0")})  # u0 now has no text: the plain prompt, like a stranger
    after = genarm.score(probe()[:2])
    plain = genarm.score([ScoreItem("zz", it.prompt, it.response) for it in probe()[:2]])
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, plain, rtol=1e-9)


# ---- hub RMs and DPO implicit rewards -----------------------------------------------------------------
def _save_tiny(tiny_lm, path: Path, kind: str, seed: int) -> str:  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    tok = tiny_lm.tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        num_labels=1,
    )
    torch.manual_seed(seed)
    model = (LlamaForSequenceClassification if kind == "cls" else LlamaForCausalLM)(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_hub_rm_batched_scores_match_single_sequences(tiny_lm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = _save_tiny(tiny_lm, tmp_path / "rm", "cls", 0)
    rm = new("hub_rm", model=folder, batch_size=4)
    rm.fit([], RMContext())
    items = probe()
    batched = rm.score(items)
    for it, s in zip(items, batched, strict=True):
        ids = torch.tensor([rm.encode(it)])  # the chat template ends with <|im_end|> = the pad token
        with torch.inference_mode():
            ref = float(rm.model(input_ids=ids).logits[0, 0])
        assert abs(ref - s) < 1e-4
    assert rm.tokenizer.decode(rm.encode(items[0])).count("<|im_start|>assistant") == 1
    assert rm.model.config.pad_token_id == tiny_lm.tokenizer.pad_token_id  # restored


def test_hub_rm_refuses_a_checkpoint_without_its_score_head(tiny_lm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A language model folder read as a reward model gets a random score head from transformers: its scores are
    noise, so it is refused unless the config says allow_untrained_head: true."""
    from perbench.errors import ConfigError

    folder = _save_tiny(tiny_lm, tmp_path / "lm", "lm", 0)
    with pytest.raises(ConfigError, match=r"has no trained weights for score\.weight.*allow_untrained_head: true"):
        new("hub_rm", model=folder).fit([], RMContext())
    rm = new("hub_rm", model=folder, allow_untrained_head=True)
    rm.fit([], RMContext())
    assert rm.score(probe()).shape == (len(probe()),) and rm.params["allow_untrained_head"] is True


def test_dpo_implicit_variants(tiny_lm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pol = _save_tiny(tiny_lm, tmp_path / "pol", "lm", 1)
    ref = _save_tiny(tiny_lm, tmp_path / "ref", "lm", 2)
    items = probe()
    scores = {}
    for v in ("sum", "mean", "ref_free", "ref_free_mean"):
        rm = new("dpo_implicit", model=pol, ref=ref, variant=v)
        rm.fit([], RMContext())
        scores[v] = rm.score(items)
    n = np.asarray(
        [
            len(encode_pair(tiny_lm.tokenizer, it.prompt, it.response, 1024)[0])
            - len(encode_prompt(tiny_lm.tokenizer, it.prompt))
            for it in items
        ],
        dtype=float,
    )
    ref_lp = scores["ref_free"] - scores["sum"]  # Σ log π_ref
    np.testing.assert_allclose(scores["mean"], scores["ref_free"] / n - ref_lp / n, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(scores["ref_free_mean"], scores["ref_free"] / n, rtol=1e-6)
    assert (scores["ref_free"] < 0).all()
    same = new("dpo_implicit", model=pol, ref=pol)
    np.testing.assert_allclose(same.score(items), 0.0, atol=1e-6)
    with pytest.raises(ValueError):
        new("dpo_implicit", model=pol)  # 'sum' needs a reference model


# ---- frozen-feature methods on a real backbone ----------------------------------------------------------
def test_prompt_features_are_the_last_prompt_token(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    ext = FeatureExtractor(tiny_lm, store)
    prompts = ["Tell me about rivers.", "hi"]
    pf = ext.prompt_features(prompts)
    for p, row in zip(prompts, pf, strict=True):
        ids = torch.tensor([encode_prompt(tiny_lm.tokenizer, p)])
        with torch.inference_mode():
            h = tiny_lm.model.get_decoder()(input_ids=ids).last_hidden_state[0, -1]
        np.testing.assert_allclose(row, h.numpy(), rtol=1e-4, atol=1e-5)
    computed = ext.stats.computed
    np.testing.assert_array_equal(ext.prompt_features(prompts), pf)
    assert ext.stats.computed == computed  # cached


FAST = {
    "lore": {"steps": 30, "adapt_steps": 20},
    "lore_reg": {"steps": 30, "adapt_steps": 20},
    "lore_alt": {"steps": 30, "adapt_steps": 20},
    "pal_a": {"steps": 30, "adapt_steps": 20},
    "pal_b": {"steps": 30, "adapt_steps": 20},
    "vpl": {"steps": 30},
    "pref": {"steps": 30},
    "factorized_ranker": {"steps": 30},
    "mpu": {},
    "mpu_avg": {},
}


def test_feature_methods_on_a_real_backbone(tiny_lm, store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every frozen-feature method fits on real hidden states, scores per token (partial responses) and
    stays under its parameter budget (factorized ranker)."""
    from tests.synthetic import anchor_state

    ctx = ctx_for(tiny_lm, store)
    items = probe()
    anchor = {"anchor_state": anchor_state(tmp_path, tiny_lm.hidden_size)}
    for name, kw in FAST.items():
        rm = new(name, **kw, **(anchor if name == "lore_reg" else {}))
        rm.fit(TRAIN, ctx)
        rm.adapt("u2", TRAIN[:3])
        s = rm.score(items)
        toks = rm.token_rewards(items[:2])
        assert np.isfinite(s).all(), name
        assert abs(toks[0][-1] - s[0]) < 1e-4, name  # the last token's reward is the response's reward
        if name == "factorized_ranker":
            assert rm.n_params < 0.004 * rm.backbone_params


def test_args_decodes_with_a_personalized_rm(tiny_lm, store) -> None:  # type: ignore[no-untyped-def]
    from perbench.decoding.args import ARGS
    from perbench.models.generate import GenRequest

    rm = new("lore", steps=30)
    rm.fit(TRAIN, ctx_for(tiny_lm, store))
    reqs = [GenRequest("Tell me about apples.", u, seed=0) for u in ("u0", "u1", "never-seen")]
    out = ARGS(k=4, w=2.0).generate(tiny_lm, reqs, rm, max_new_tokens=4)
    assert len(out) == 3 and all(g.token_ids for g in out)


# ---- personalization only: mirrored pairs, seen and unseen ----------------------------------------------
def mirrored_pair(i: int, user: str, split: str = "train") -> PreferencePair:
    """u0 and n0 prefer the 'Yes' answer, u1 and n1 the 'No' answer: every pair is mirrored by a user who
    disagrees, so a scorer that ignores the user gets exactly half of them right."""
    yes, no = f"Yes, {WORDS[(i + 3) % 10]}!", f"No, {WORDS[(i + 5) % 10]}."
    c, r = (yes, no) if user in ("u0", "n0") else (no, yes)
    return PreferencePair(f"m{i}{user}", user, f"Tell me about {WORDS[i % 10]}.", c, r, split)  # type: ignore[arg-type]


M_TRAIN = [mirrored_pair(i, u) for i in range(12) for u in ("u0", "u1")]
M_TEST = [mirrored_pair(i, u, "test") for i in range(12, 18) for u in ("u0", "u1")]
M_SHOTS = {u: [mirrored_pair(i, u) for i in range(20, 26)] for u in ("n0", "n1")}
M_TEST_UNSEEN = [mirrored_pair(i, u, "test") for i in range(30, 36) for u in ("n0", "n1")]
M_USERS = {"u0": User("u0"), "u1": User("u1"), "n0": User("n0", seen=False), "n1": User("n1", seen=False)}


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("token_ranker", {"steps": 60, "batch_pairs": 8, "lr": 1e-2}),
        ("pdpo", {"steps": 30, "lr": 3e-3, "token_lr": 3e-2, "adapt_steps": 20}),
        ("global_bt_v2", {"steps": 12, "lr": 1e-3}),
    ],
)
def test_lm_methods_personalize_only_through_the_user(tiny_lm, store, monkeypatch, name, kw) -> None:  # type: ignore[no-untyped-def]
    """Seen ≥ 0.8 and unseen ≥ 0.8 after ``adapt``; ≈ 0.5 on unseen users while ``adapt`` is a no-op. The
    user-agnostic global_bt_v2 scores exactly 0.5 everywhere (ties ½)."""
    from tests.synthetic import pair_accuracy

    ctx = RMContext(
        features=FeatureExtractor(tiny_lm, store), seed=0, extra={"users": user_views(M_USERS), "policy": tiny_lm}
    )
    rm = new(name, **kw)
    rm.fit(M_TRAIN, ctx)
    with monkeypatch.context() as m:
        m.setattr(type(rm), "adapt", lambda self, user_id, shots: None)
        for u, shots in M_SHOTS.items():
            rm.adapt(u, shots)
        no_adapt = pair_accuracy(rm, M_TEST_UNSEEN)
    for u, shots in M_SHOTS.items():
        rm.adapt(u, shots)
    seen, unseen = pair_accuracy(rm, M_TEST), pair_accuracy(rm, M_TEST_UNSEEN)
    if rm.user_agnostic:
        assert (seen, unseen, no_adapt) == (0.5, 0.5, 0.5)
    else:
        assert seen >= 0.8 and unseen >= 0.8 and abs(no_adapt - 0.5) <= 0.1


def test_chunked_token_logprobs_match_log_softmax_with_gradients() -> None:
    """The checkpointed, chunked log-probabilities (which keep one chunk of logits per training step) equal
    log_softmax's, and so do their gradients."""
    import torch

    from perbench.rewards.lm_utils import token_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 1000, bias=False)
    hs = torch.randn(1200, 16, requires_grad=True)
    tgt = torch.randint(0, 1000, (1200,))
    ref = torch.log_softmax(head(hs), -1).gather(-1, tgt[:, None])[:, 0]
    got = token_logprobs(head, hs, tgt, chunk=500)
    assert torch.allclose(ref, got, atol=1e-5)
    (g_ref,) = torch.autograd.grad(ref.sum(), hs)
    (g_got,) = torch.autograd.grad(got.sum(), hs)
    assert torch.allclose(g_ref, g_got, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(token_logprobs(head, hs, tgt, chunk=7), ref, atol=1e-5)


def test_lore_reg_anchored_on_a_hub_rm_follows_its_scores(tiny_lm, store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """anchor_rm: the reference hub RM's scores of the train responses, regressed on their standardised features
    (labels unread), give the direction lore_reg is pulled toward: it reproduces those scores."""
    folder = _save_tiny(tiny_lm, tmp_path / "rm", "cls", 3)
    rm = new("lore_reg", anchor_rm=folder, steps=20, adapt_steps=5, anchor_ridge=1e-3)
    ctx = ctx_for(tiny_lm, store)
    rm.fit(TRAIN, ctx)
    texts = sorted({(p.prompt, y) for p in TRAIN for y in (p.chosen, p.rejected)})
    hub = new("hub_rm", model=folder)
    ref = hub.score([ScoreItem("u0", x, y) for x, y in texts])
    z = rm.std(torch.from_numpy(ctx.features.last(texts))).double().numpy()  # type: ignore[union-attr]
    fit = z @ rm.v_global.astype(np.float64)
    assert np.corrcoef(fit, ref)[0, 1] > 0.99  # few texts, many dims: the regression reproduces the reference
