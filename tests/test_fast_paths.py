"""The fast paths give what the plain ones give: the shared prefill, inverse-CDF sampling, the vectorised
user bootstrap, stacked per-token rewards and the in-memory feature cache. Each test compares against the
straightforward computation it replaces, so it fails if the fast path changes a number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perbench.data.records import Message
from tests.conftest import random_linear_rm


def _prompts() -> list[tuple[Message, ...]]:
    return [(Message("user", "Write a haiku about rain."),), (Message("user", "Name three colours, please now."),)]


# ------------------------------------------------------------------------------------------- the KV cache
def test_the_tree_step_keeps_the_committed_candidate(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    """ARGS's tree step: expand k candidates, commit one per row; the next step must see exactly the committed
    token's keys, as a cache that appended that token directly does (70 steps, two prompts)."""
    from perbench.models.chat import encode_prompt
    from perbench.models.stepper import CachedLM

    ids = [encode_prompt(tiny_lm.tokenizer, p) for p in _prompts()]
    tree, plain = CachedLM(tiny_lm, ids), CachedLM(tiny_lm, ids)
    h_tree, h_plain = tree.prefill(), plain.prefill()
    for _ in range(70):
        cands = tree.logprobs(h_tree).topk(4, -1).indices
        pick = torch.tensor([1, 3])
        h_tree = tree.expand(cands)[torch.arange(2), pick]  # the hidden state at each committed candidate
        tree.commit(pick)
        h_plain = plain.step(cands.gather(1, pick[:, None])[:, 0])
        torch.testing.assert_close(h_tree, h_plain, rtol=1e-4, atol=1e-4)


def test_rows_with_one_prompt_share_its_prefill_and_decode_as_alone(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    from perbench.models.generate import GenRequest, generate_plain

    a, b = _prompts()
    reqs = [GenRequest(p, "u", seed=s) for s, p in enumerate([a, b, a, a, b])]
    together = generate_plain(tiny_lm, reqs, 20, sample=True)
    alone = [generate_plain(tiny_lm, [r], 20, sample=True)[0] for r in reqs]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert len({tuple(g.token_ids) for g in together}) > 1  # the seeds differ, so the samples do


# --------------------------------------------------------------------------------------------- sampling
def test_inverse_cdf_draws_follow_the_distribution_and_skip_zero_mass() -> None:
    from perbench.models.generate import draw

    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    gens = [torch.Generator().manual_seed(i) for i in range(4000)]
    got = draw(probs.expand(len(gens), -1), gens)
    freq = np.bincount(got.numpy(), minlength=5) / len(gens)
    assert freq[1] == 0 and freq[4] == 0
    assert np.abs(freq - probs.numpy()).max() < 0.03  # 4000 draws: sd ≤ 0.008
    # unnormalised rows and a row with all its mass on its last entry
    assert draw(torch.tensor([[0.0, 0.0, 2.0]]), [torch.Generator().manual_seed(0)]).item() == 2


def test_a_rows_draw_does_not_depend_on_its_batch() -> None:
    from perbench.models.generate import GenRequest, row_generators, sample_top_p

    # 1000 tokens: the flat rows (even) hold less than top_p in their top 256 and take the full sort, the
    # peaked rows (odd) do not; a batch mixes both
    scale = torch.tensor([0.1, 8.0] * 3)[:, None]
    lp = torch.log_softmax(scale * torch.randn(6, 1000, generator=torch.Generator().manual_seed(1)), -1)
    reqs = [GenRequest("x", "u", seed=s) for s in range(6)]
    for top_p in (1.0, 0.8):
        together = sample_top_p(lp, top_p, row_generators(reqs, "cpu"))
        alone = [sample_top_p(lp[i : i + 1], top_p, row_generators(reqs[i : i + 1], "cpu"))[0] for i in range(6)]
        assert together.tolist() == [int(a) for a in alone]


def test_nucleus_draws_stay_in_the_nucleus() -> None:
    from perbench.models.generate import sample_top_p

    lp = torch.log(torch.tensor([[0.6, 0.25, 0.1, 0.05]]))
    gens = [torch.Generator().manual_seed(i) for i in range(300)]
    got = {int(sample_top_p(lp, 0.8, [g])[0]) for g in gens}
    assert got == {0, 1}  # 0.6 < 0.8, 0.6 + 0.25 ≥ 0.8: the nucleus is the first two


# ------------------------------------------------------------------------------------------- bootstrap
@pytest.mark.parametrize("name", ["pair_weighted", "macro"])
def test_vectorised_user_bootstrap_equals_the_loop(name: str) -> None:
    from perbench.stats import intervals as stats

    fast = getattr(stats, name)
    rng = np.random.default_rng(3)
    for trial in range(10):
        n, G = int(rng.integers(5, 300)), int(rng.integers(2, 30))
        values = rng.integers(0, 3, n) / 2.0
        users = [f"u{int(g)}" for g in rng.integers(0, G, n)]
        a = stats.bootstrap_by_group(values, users, fast, n_boot=200, seed=trial)
        # a wrapper is not the same function object, so it takes the per-replicate loop
        b = stats.bootstrap_by_group(values, users, lambda v, g, f=fast: f(v, g), n_boot=200, seed=trial)
        assert a == pytest.approx(b, abs=1e-12)


# ---------------------------------------------------------------------------------- per-token rewards
def test_stacked_token_rewards_equal_one_call_per_response(tiny_lm, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from perbench.rewards import base
    from perbench.rewards.base import ScoreItem
    from perbench.rewards.features import FeatureExtractor

    rm = random_linear_rm(FeatureExtractor(tiny_lm, store))
    items = [
        ScoreItem(f"u{i}", p, r) for i, (p, r) in enumerate((p, r) for p in _prompts() for r in ("a b", "c d e f"))
    ]
    monkeypatch.setattr(base, "TOKEN_ROWS", 3)  # several stacked calls, and responses longer than one call
    got = rm.token_rewards(items)
    toks = rm.extractor.tokens([(it.prompt, it.response) for it in items])
    for it, tf, g in zip(items, toks, got, strict=True):
        h = torch.from_numpy(np.array(tf.hidden))
        want = rm.rewards([it.user_id] * len(h), [it.prompt] * len(h), h).double().numpy()
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------- the feature memo
def test_features_are_read_once_from_the_store_and_kept_read_only(tiny_lm, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from perbench.rewards import features
    from perbench.rewards.features import FeatureExtractor

    items = [(p, r) for p in _prompts() for r in ("one", "two three")]
    first = FeatureExtractor(tiny_lm, store).tokens(items)
    ext = FeatureExtractor(tiny_lm, store)  # a new extractor: its memo is empty, the store has everything
    reads: list[int] = []
    real = store.get_many_bytes
    monkeypatch.setattr(store, "get_many_bytes", lambda keys: reads.append(len(keys)) or real(keys))
    again = ext.tokens(items)
    third = ext.tokens(items)
    assert reads == [len(items), 0]  # the second call is answered from memory
    for a, b, c in zip(first, again, third, strict=True):
        np.testing.assert_array_equal(a.hidden, b.hidden)
        assert c.hidden is b.hidden and not c.hidden.flags.writeable
    assert ext.stats.computed == 0
    # over the budget, the least recently used entries leave memory (and are read from the store again)
    monkeypatch.setattr(features, "MEMO_BYTES", 1)
    ext.tokens(items[:1])
    assert len(ext._memo) <= 1
