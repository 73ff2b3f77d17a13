from __future__ import annotations

import torch

from perbench.decoding.args import ARGS
from perbench.decoding.greedy import ZeroShot
from perbench.models.chat import encode_prompt
from perbench.models.generate import GenRequest
from perbench.rewards.features import FeatureExtractor
from tests.conftest import random_linear_rm

PROMPTS = [
    "How do I boil an egg?",
    "Name three colours.",
    "Why is the sky blue? Explain briefly please.",
    "hi",
]


def reqs(users=None):  # type: ignore[no-untyped-def]
    return [GenRequest(p, (users or ["u"] * 4)[i], seed=i) for i, p in enumerate(PROMPTS)]


def test_greedy_matches_hf_generate(tiny_lm):  # type: ignore[no-untyped-def]
    ours = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=12)
    for r, g in zip(reqs(), ours, strict=True):
        ids = torch.tensor([encode_prompt(tiny_lm.tokenizer, r.prompt)])
        ref = tiny_lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
        ref_ids = [int(i) for i in ref[0, ids.shape[1] :] if int(i) not in tiny_lm.eos_ids]
        assert g.token_ids == ref_ids[: len(g.token_ids)] and len(g.token_ids) == len(ref_ids)


def test_args_k1_and_w0_reduce_to_greedy(tiny_lm, tiny_lm_b, store):  # type: ignore[no-untyped-def]
    greedy = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=10)
    for backbone in (tiny_lm, tiny_lm_b):  # shared backbone and separate RM
        rm = random_linear_rm(FeatureExtractor(backbone, store), scale=5.0)
        k1 = ARGS(k=1, w=3.0).generate(tiny_lm, reqs(), rm, max_new_tokens=10)
        w0 = ARGS(k=10, w=0.0).generate(tiny_lm, reqs(), rm, max_new_tokens=10)
        assert [g.token_ids for g in k1] == [g.token_ids for g in greedy]
        assert [g.token_ids for g in w0] == [g.token_ids for g in greedy]


def test_args_reward_changes_output(tiny_lm, store):  # type: ignore[no-untyped-def]
    greedy = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=10)
    rm = random_linear_rm(FeatureExtractor(tiny_lm, store), scale=50.0)
    guided = ARGS(k=10, w=5.0).generate(tiny_lm, reqs(), rm, max_new_tokens=10)
    assert [g.token_ids for g in guided] != [g.token_ids for g in greedy]


def _uncached_args(lm, rm_lm, rm, prompt, k, w, steps, prune=None):  # type: ignore[no-untyped-def]
    """Reference: one prompt, no KV cache, every candidate re-scored from scratch (``prune``: only the
    candidates within ``prune`` nats of the best log π)."""
    ids = encode_prompt(lm.tokenizer, prompt)
    out: list[int] = []
    dec, rdec = lm.model.get_decoder(), rm_lm.model.get_decoder()
    with torch.no_grad():
        for _ in range(steps):
            h = dec(input_ids=torch.tensor([ids + out])).last_hidden_state[0, -1]
            lp = torch.log_softmax(lm.model.get_output_embeddings()(h), -1)
            top, cands = lp.topk(k)
            if prune is not None:
                keep = top >= top[0] - prune
                top, cands = top[keep], cands[keep]
            feats = torch.stack(
                [rdec(input_ids=torch.tensor([ids + out + [int(c)]])).last_hidden_state[0, -1] for c in cands]
            )
            r = rm.reward_from_features(["u"] * len(cands), feats)
            out.append(int(cands[(top + w * r).argmax()]))
            if out[-1] in lm.eos_ids:
                break
    return [t for t in out if t not in lm.eos_ids]


def test_cached_tree_scoring_matches_uncached(tiny_lm, tiny_lm_b, store):  # type: ignore[no-untyped-def]
    for backbone in (tiny_lm, tiny_lm_b):
        rm = random_linear_rm(FeatureExtractor(backbone, store), scale=20.0)
        batched = ARGS(k=5, w=2.0).generate(tiny_lm, reqs(), rm, max_new_tokens=8)
        for r, g in zip(reqs(), batched, strict=True):
            assert g.token_ids == _uncached_args(tiny_lm, backbone, rm, r.prompt, 5, 2.0, 8)


def test_sampled_args_is_seeded_per_request(tiny_lm, store):  # type: ignore[no-untyped-def]
    rm = random_linear_rm(FeatureExtractor(tiny_lm, store), scale=5.0)
    dec = ARGS(k=10, w=1.0, sample=True)
    a = dec.generate(tiny_lm, reqs(), rm, max_new_tokens=8)
    b = dec.generate(tiny_lm, reqs()[::-1], rm, max_new_tokens=8)[::-1]  # other batch order
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_pruned_args_matches_an_uncached_pruned_reference(tiny_lm, tiny_lm_b, store):  # type: ignore[no-untyped-def]
    """Rows keep different numbers of candidates; the forward is as wide as the widest and the rest masked."""
    for backbone in (tiny_lm, tiny_lm_b):
        rm = random_linear_rm(FeatureExtractor(backbone, store), scale=20.0)
        dec = ARGS(k=5, w=2.0, prune=0.5)
        pruned = dec.generate(tiny_lm, reqs(), rm, max_new_tokens=8)
        assert 0 < dec.candidates_scored < dec.candidates_offered  # something was pruned
        for r, g in zip(reqs(), pruned, strict=True):
            assert g.token_ids == _uncached_args(tiny_lm, backbone, rm, r.prompt, 5, 2.0, 8, prune=0.5)


def test_prune_beyond_the_largest_reward_gap_is_exact(tiny_lm, store):  # type: ignore[no-untyped-def]
    """A linear head on final-RMSNorm states: |r| ≤ √d·‖w ⊙ g‖, so two candidates' rewards differ by at most
    twice that; pruning at w times that gap cannot drop a winner. prune = 0 scores the policy's best only."""
    rm = random_linear_rm(FeatureExtractor(tiny_lm, store), scale=0.05)
    d = tiny_lm.hidden_size
    g = tiny_lm.model.model.norm.weight.detach().abs()
    assert rm.w is not None
    gap = 2 * float(d**0.5 * (torch.as_tensor(rm.w) * g).norm())
    exact = ARGS(k=10, w=1.0).generate(tiny_lm, reqs(), rm, max_new_tokens=10)
    safe = ARGS(k=10, w=1.0, prune=gap).generate(tiny_lm, reqs(), rm, max_new_tokens=10)
    assert [x.token_ids for x in safe] == [x.token_ids for x in exact]
    top_only = ARGS(k=10, w=1.0, prune=0.0)
    greedy = ZeroShot().generate(tiny_lm, reqs(), None, max_new_tokens=10)
    assert [x.token_ids for x in top_only.generate(tiny_lm, reqs(), rm, max_new_tokens=10)] == [
        x.token_ids for x in greedy
    ]
    assert top_only.candidates_scored * 10 == top_only.candidates_offered


def test_prune_is_recorded_only_when_set() -> None:
    assert ARGS(k=10, w=1.0).config_key() == ARGS(k=10, w=1.0, prune=None).config_key()
    assert "prune=2.0" in ARGS(k=10, w=1.0, prune=2.0).label()
