"""What a GPU run takes that a CPU run does not, checked on a CPU: transformers' static-cache greedy generation gives
the token loop's tokens; batch sizes come from a memory budget by the documented estimate; out-of-memory splits a
scoring forward; and no model is ever kernelized from the Hugging Face hub unless asked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from perbench.data.records import Message
from perbench.models.memory import ModelShape, row_bytes, rows_that_fit

GB = 1 << 30


def _prompts() -> list[tuple[Message, ...]]:
    return [
        (Message("user", "Write a haiku about rain."),),
        (Message("user", "Name three colours, please, and say which one you like best and why."),),
        (Message("user", "Hi"),),
    ]


# ----------------------------------------------------------------------------------------- generation paths
@pytest.fixture(scope="module")
def sharp_lm():  # type: ignore[no-untyped-def]
    """tiny-random with its weights ×4 (its greedy picks then depend on the prompt) and two extra stop tokens that
    its greedy continuations reach at different steps."""
    from perbench.device import DevicePolicy
    from perbench.models.loader import tiny_random_lm

    lm = tiny_random_lm(0, DevicePolicy("cpu", "float32"))
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
    lm.model.generation_config.eos_token_id = [lm.tokenizer.eos_token_id, 45362, 4314]
    return lm


@pytest.mark.parametrize("static", [True, False])
def test_library_greedy_gives_the_token_loops_tokens(sharp_lm, static: bool) -> None:  # type: ignore[no-untyped-def]
    """transformers' generate (static KV cache: what a GPU run compiles) against perbench's token loop: the same
    tokens, prompts of different lengths in one left-padded batch, rows stopping at different steps."""
    from perbench.models.chat import encode_prompt
    from perbench.models.generate import GenRequest, generate_plain, until_stop
    from perbench.models.library_generate import greedy_ids

    reqs = [GenRequest(p, "u", seed=0) for p in _prompts()]
    loop = generate_plain(sharp_lm, reqs, 24)
    raw = greedy_ids(sharp_lm, [encode_prompt(sharp_lm.tokenizer, r.prompt) for r in reqs], 24, static=static)
    ids = until_stop(raw, sharp_lm.eos_ids)
    assert [i[:-1] if g.finished else i for g, i in zip(loop, ids, strict=True)] == [g.token_ids for g in loop]
    assert len({tuple(g.token_ids) for g in loop}) == 3
    assert sorted(len(g.token_ids) for g in loop) == [1, 4, 24] and [g.finished for g in loop] == [True, False, True]


def test_greedy_generation_takes_the_library_path_where_supported(sharp_lm, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """generate_plain on a (forced) supported device goes through transformers and returns what the loop returns;
    a failure of that path falls back to the loop, once, with a warning."""
    from perbench.models import library_generate
    from perbench.models.generate import GenRequest, generate_plain

    tiny_lm = sharp_lm
    reqs = [GenRequest(p, "u", seed=0) for p in _prompts()]
    loop = generate_plain(tiny_lm, reqs, 16)
    calls: list[int] = []
    real = library_generate.greedy_ids

    def counted(*a: Any, **k: Any) -> list[list[int]]:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(library_generate, "supported", lambda lm: lm.fingerprint not in library_generate._FAILED)
    monkeypatch.setattr(library_generate, "greedy_ids", counted)
    fast = generate_plain(tiny_lm, reqs, 16)
    assert calls and [(g.text, g.token_ids, g.finished) for g in fast] == [
        (g.text, g.token_ids, g.finished) for g in loop
    ]

    def broken(*a: Any, **k: Any) -> list[list[int]]:
        raise ValueError("static cache unsupported")

    monkeypatch.setattr(library_generate, "greedy_ids", broken)
    monkeypatch.setattr(library_generate, "_FAILED", set())
    assert [g.token_ids for g in generate_plain(tiny_lm, reqs, 16)] == [g.token_ids for g in loop]
    assert tiny_lm.fingerprint in library_generate._FAILED

    def oom(*a: Any, **k: Any) -> list[list[int]]:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(library_generate, "greedy_ids", oom)
    monkeypatch.setattr(library_generate, "_FAILED", set())
    with pytest.raises(torch.OutOfMemoryError):  # the batcher halves on it; no fallback
        generate_plain(tiny_lm, reqs, 16)


def test_the_library_path_is_off_on_a_cpu(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    from perbench.models.library_generate import supported

    assert not supported(tiny_lm)


# ------------------------------------------------------------------------------------------ memory estimate
SMOLLM2_135M = ModelShape(30, 576, 1536, 49152, 9, 3, 64, 134_515_008)
LLAMA_8B = ModelShape(32, 4096, 14336, 128256, 32, 8, 128, 8_030_261_248)


def test_the_estimates_parts_follow_their_formulas() -> None:
    assert SMOLLM2_135M.kv_bytes_per_token(2) == 2 * 30 * 3 * 64 * 2 == 23_040
    assert LLAMA_8B.kv_bytes_per_token(2) == 131_072  # 128 KiB per token: Llama-3-8B's published figure
    assert LLAMA_8B.activation_bytes_per_token(2) == (4 * 4096 + 3 * 14336) * 2
    assert row_bytes(LLAMA_8B, 100, 2, "generate") == 100 * (131_072 + 118_784) + 3 * 128256 * 4
    assert row_bytes(SMOLLM2_135M, 100, 2, "score") == 100 * (4 * 576 + 3 * 1536) * 2 + 100 * 100 * 2


@pytest.mark.parametrize(
    ("shape", "free", "seq", "kind", "resident", "rows"),
    [
        (SMOLLM2_135M, 80 * GB, 160, "generate", True, 1024),  # capped
        (SMOLLM2_135M, 1 * GB, 160, "generate", True, 136),
        (SMOLLM2_135M, 1 * GB, 1024, "score", True, 56),
        (LLAMA_8B, 80 * GB, 2048, "generate", True, 136),
        (LLAMA_8B, 80 * GB, 2048, "generate", False, 104),  # the weights still to load take 15 GiB
        (LLAMA_8B, 1 * GB, 2048, "generate", True, 1),
        (LLAMA_8B, 1 * GB, 2048, "generate", False, 1),  # nothing fits: one row, and out-of-memory decides
    ],
)
def test_batch_sizes_from_a_memory_budget(
    shape: ModelShape, free: int, seq: int, kind: Any, resident: bool, rows: int
) -> None:
    got = rows_that_fit(free, shape, seq, 2, kind, weights_resident=resident)
    assert got == rows
    budget = int(free * 0.85) - (0 if resident else shape.weight_bytes(2))
    if 1 < got < 1024:  # the largest multiple of 8 that fits
        assert got * row_bytes(shape, seq, 2, kind) <= budget < (got + 8) * row_bytes(shape, seq, 2, kind)


def test_the_estimate_reads_a_transformers_config() -> None:
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    shape = ModelShape.from_config(cfg)
    assert shape.kv_bytes_per_token(2) == SMOLLM2_135M.kv_bytes_per_token(2)
    assert abs(shape.params - SMOLLM2_135M.params) / SMOLLM2_135M.params < 0.01  # norms are not counted


class _CpuLM:
    from perbench.device import DevicePolicy

    policy = DevicePolicy("cpu", "float32")


def test_an_auto_batcher_sizes_from_the_estimate_sorts_off_a_cpu_and_never_regrows() -> None:
    from perbench.models.batching import AdaptiveBatcher
    from perbench.models.memory import Estimate

    asked: list[int] = []

    def fit(seq: int) -> Estimate:
        asked.append(seq)
        return Estimate(rows=4, free_bytes=GB, seq_len=seq, row_bytes=GB // 8, kind="generate")

    seen: list[list[int]] = []

    def fn(batch: Sequence[int]) -> list[int]:
        seen.append(list(batch))
        if len(batch) > 2 and len(seen) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return [10 * x for x in batch]

    b = AdaptiveBatcher("auto", "cuda:0", fit)
    items = [3, 9, 1, 7, 5]
    assert b.run(items, fn, length=lambda x: x) == [30, 90, 10, 70, 50]  # the items' order
    assert asked == [9] and seen[0] == [9, 7, 5, 3] and seen[1] == [9, 7]  # longest first, halved
    assert b.record() == {
        "requested": "auto",
        "used": 2,
        "halvings": 1,
        "estimate": {"rows": 4, "free_bytes": GB, "seq_len": 9, "row_bytes": GB // 8, "kind": "generate"},
    }
    b.run(items, fn, length=lambda x: x)
    assert b.size == 2  # the estimate again says 4; the size that ran out of memory stays the ceiling

    from perbench.decoding.best_of_n import CPU_SAMPLE_BATCH, pool_batcher

    assert pool_batcher(_CpuLM(), "auto").record() == {"requested": "auto", "used": CPU_SAMPLE_BATCH, "halvings": 0}
    assert pool_batcher(_CpuLM(), 16).size == 16
    cpu = AdaptiveBatcher("auto", "cpu", None)
    order: list[list[int]] = []
    cpu.run(items, lambda batch: order.append(list(batch)) or list(batch), length=lambda x: x)
    assert order == [items]  # a CPU keeps the callers' order and its size of 8


def test_a_scoring_forward_that_runs_out_of_memory_is_split(tiny_lm, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from perbench.cache import Store
    from perbench.device import DevicePolicy
    from perbench.models.loader import LoadedLM
    from perbench.rewards.features import FeatureExtractor

    items = [(p, f"answer number {i} " * (i + 1)) for i, p in enumerate(_prompts() * 3)]
    want = FeatureExtractor(tiny_lm, store, share_prompt=False).last(items)
    # "cpu:0": batched as on a GPU (several rows per forward), computed on the CPU
    gpu_like = LoadedLM(tiny_lm.model, tiny_lm.tokenizer, tiny_lm.fingerprint, "t", DevicePolicy("cpu:0", "float32"))
    ext = FeatureExtractor(gpu_like, Store(store.path.parent / "other.sqlite"), share_prompt=False, batch_size=8)
    real = ext._forward
    sizes: list[int] = []

    def small_only(rows: Any, kind: str) -> Any:
        sizes.append(len(rows))
        if len(rows) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(rows, kind)

    monkeypatch.setattr(ext, "_forward", small_only)
    got = ext.last(items)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert sizes[:3] == [8, 4, 2] and max(sizes[3:]) <= 2  # split on out-of-memory; the next forwards stay small
    assert ext.record() == {"requested": 8, "used": 2, "halvings": 2}


# ------------------------------------------------------------------------------------------------ hub kernels
@pytest.fixture
def no_kernel_hub(monkeypatch):  # type: ignore[no-untyped-def]
    """Kernelizing from the hub raises: what an offline GPU machine does (``not available in the local cache``)."""
    import kernels
    import transformers.integrations.hub_kernels as hk

    calls: list[Any] = []

    def refuse(*a: Any, **k: Any) -> None:
        calls.append(k)
        raise ValueError("kernels-community/rotary is not available in the local cache and the hub is offline")

    monkeypatch.setattr(hk, "_kernels_kernelize", refuse)
    monkeypatch.setattr(kernels, "kernelize", refuse)
    return calls


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):  # type: ignore[no-untyped-def]
    """tiny-random saved as a model folder, so that it loads through ``from_pretrained`` like any real model."""
    from perbench.models.loader import tiny_random_lm

    lm = tiny_random_lm(3)
    folder = tmp_path_factory.mktemp("tiny3")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


def test_no_model_is_kernelized_from_the_hub_on_load_or_train(saved_tiny, no_kernel_hub, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``from_pretrained`` kernelizes by default when ``kernels`` is installed, and ``model.train()`` kernelizes again
    in training mode (on CUDA that fetches ``kernels-community/rotary``): perbench's loads and LoRA fits must do
    neither."""
    from perbench.models import loader
    from perbench.rewards.lm_utils import add_lora

    monkeypatch.setattr(loader, "_LOADED", {})
    lm = loader.load_lm(str(saved_tiny), device="cpu")
    assert not lm.model.use_kernels
    peft = add_lora(lm, 2, 4, ["q_proj"])
    peft.train()
    lm.model.train()
    lm.model.eval()
    assert no_kernel_hub == []


def test_hub_kernels_when_asked_and_undone_for_training(saved_tiny, no_kernel_hub, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``hub_kernels`` asks for them (the load then reaches the hub: here it refuses); a model kernelized anyway (a
    caller's own) loses its hub layers in the copy perbench trains."""
    from perbench.device import DevicePolicy
    from perbench.models import loader
    from perbench.rewards.lm_utils import add_lora

    monkeypatch.setattr(loader, "_LOADED", {})
    with pytest.raises(Exception, match="not available in the local cache"):
        loader.load_lm(str(saved_tiny), device="cpu", hub_kernels=True)
    assert no_kernel_hub

    lm = loader.load_lm(str(saved_tiny), device="cpu")
    lm.model._use_kernels = True  # as transformers' default load leaves it
    # transformers resets hub layers to torch's by kernelizing with an empty mapping: no fetch (stood in for here)
    monkeypatch.setattr(type(lm.model), "reset_kernels", lambda self: setattr(self, "_use_kernels", False))
    no_kernel_hub.clear()
    add_lora(lm, 2, 4, ["q_proj"]).train()
    assert no_kernel_hub == []
    assert lm.model.use_kernels  # the shared model itself is untouched
    copy = loader.model_copy(loader.LoadedLM(lm.model, lm.tokenizer, "fp", "n", DevicePolicy("cpu", "float32")))
    assert not copy.use_kernels


def test_hub_kernels_is_a_config_key_off_by_default_outside_the_hash() -> None:
    from perbench.config import RunConfig

    cfg = RunConfig.default()
    assert cfg.hub_kernels is False
    assert cfg.override("test", hub_kernels=True).result_hash() == cfg.result_hash()


def test_batch_size_flags_reach_the_config() -> None:
    import argparse

    from perbench.cli.run import add_parser
    from perbench.cli.shared import size_or_auto

    assert size_or_auto("auto") == "auto" and size_or_auto("64") == 64
    with pytest.raises(argparse.ArgumentTypeError):
        size_or_auto("0")
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers(), argparse.ArgumentParser(add_help=False))
    args = p.parse_args(["run", "--batch-size", "256", "--feature-batch-size", "auto"])
    assert args.batch_size == 256 and args.feature_batch_size == "auto"


def test_tree_chunks_and_bertscore_batches_from_a_memory_budget(monkeypatch) -> None:
    from perbench.metrics import text
    from perbench.models import memory
    from perbench.models.encoder import encoder_path
    from perbench.models.memory import tree_chunk_tokens

    assert tree_chunk_tokens(80 * GB, LLAMA_8B, 1024, 2, 256, 10_240) == 10_240  # every candidate of a response
    small = tree_chunk_tokens(1 * GB, LLAMA_8B, 1024, 2, 256, 10_240)
    assert small == 5120  # halved from the cap until n × activations + n × (cache + n) × b fits 0.85 GiB

    def cost(n: int) -> int:
        return n * LLAMA_8B.activation_bytes_per_token(2) + n * (1024 + n) * 2

    assert cost(small) <= 0.85 * GB < cost(2 * small)
    assert tree_chunk_tokens(1 << 20, LLAMA_8B, 1024, 2, 256, 10_240) == 256  # never below the CPU's chunk

    path = encoder_path("minilm")
    assert text.bertscore_batch(path, "cpu") == text.CPU_BATCH
    monkeypatch.setattr(memory, "free_bytes", lambda device: 80 * GB)
    assert text.bertscore_batch(path, "cuda") == memory.MAX_ROWS
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1 << 20)
    assert text.bertscore_batch(path, "cuda") == text.CPU_BATCH  # never below bert-score's own default
