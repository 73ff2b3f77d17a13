"""Greedy generation at the library's speed: transformers' own ``generate`` over one left-padded batch, with its
dynamic KV cache by default, or a static one whose decode step transformers compiles (``PERBENCH_LIBRARY_GENERATE=
static``; see :func:`static_cache` for why that is not the default). The plain greedy path
(:func:`perbench.models.generate.generate_plain`) takes it on CUDA for models transformers can compile whole, and
falls back to perbench's own token loop elsewhere (a CPU; a model or device it fails on, said once).

Greedy picks are the same argmax either way (``tests/test_generation_paths.py`` checks token for token on a CPU).
Sampled generation keeps perbench's loop: each request draws from its own seeded generator (``docs/architecture.md``,
Decoder), which transformers' sampler does not do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from perbench.models.loader import LoadedLM

#: a batch's prompt length is rounded up to a multiple of this (left padding), its rows to a multiple of
#: :data:`ROW_STEP`: the shapes the compiled decode step sees repeat across calls
LENGTH_STEP = 64
ROW_STEP = 8
#: models (by fingerprint) the library path failed on in this process: they stay on the token loop
_FAILED: set[str] = set()


def supported(lm: LoadedLM) -> bool:
    """Whether greedy generation of ``lm`` takes the library path: on CUDA, for a model transformers compiles whole
    (``_can_compile_fullgraph``), unless ``PERBENCH_LIBRARY_GENERATE=0`` or it failed before."""
    if os.environ.get("PERBENCH_LIBRARY_GENERATE", "1").strip() == "0":
        return False
    if not str(lm.policy.device).startswith("cuda"):
        return False
    return bool(getattr(lm.model, "_can_compile_fullgraph", False)) and lm.fingerprint not in _FAILED


def static_cache() -> bool:
    """Whether the library path uses a static KV cache with its compiled decode step (``PERBENCH_LIBRARY_GENERATE=
    static``). Off by default: on an H200 (bf16, torch 2.11, transformers 5.25) compiling it held the default run's
    first zero-shot batch for over 150 s, where the dynamic cache's ``generate`` runs at the anchors' speed."""
    return os.environ.get("PERBENCH_LIBRARY_GENERATE", "1").strip() == "static"


def greedy_ids(
    lm: LoadedLM, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int, *, static: bool | None = None
) -> list[list[int]]:
    """Each prompt's greedy continuation (token ids; after a row's first stop token, transformers' padding: cut it
    with :func:`~perbench.models.generate.until_stop`), one left-padded batch through ``model.generate``;
    ``static``: a static KV cache (compiled decode on a GPU; default :func:`static_cache`)."""
    import torch
    from transformers import GenerationConfig

    static = static_cache() if static is None else static
    pad = int(lm.tokenizer.pad_token_id)
    n = len(prompt_ids)
    # under a static cache, shapes rounded up (prompt length to LENGTH_STEP, rows to ROW_STEP, the extra rows copies
    # of the last) so that successive calls reuse the compiled decode step instead of compiling one per shape
    B = -(-n // ROW_STEP) * ROW_STEP if static else n
    L = max(len(p) for p in prompt_ids)
    L = -(-L // LENGTH_STEP) * LENGTH_STEP if static else L
    prompt_ids = list(prompt_ids) + [prompt_ids[-1]] * (B - n)
    ids = torch.full((B, L), pad, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        ids[i, L - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, L - len(p) :] = 1
    eos = lm.eos_ids
    config = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        eos_token_id=eos,
        pad_token_id=pad,
        cache_implementation="static" if static else None,
    )
    dev = lm.policy.device
    with torch.inference_mode():
        out = lm.model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=config)
    return [[int(t) for t in row] for row in out[:n, L:].tolist()]


def try_greedy(lm: LoadedLM, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]] | None:
    """:func:`greedy_ids` where :func:`supported`, else None; a failure other than out-of-memory (which the caller's
    batcher halves on) is said once and sends the model back to the token loop (None)."""
    if not supported(lm):
        return None
    from perbench.models.batching import is_oom

    try:
        return greedy_ids(lm, prompt_ids, max_new_tokens)
    except Exception as e:  # any failure of the library path but out-of-memory falls back, once per model
        if isinstance(e, RuntimeError | MemoryError) and is_oom(e):
            raise
        _FAILED.add(lm.fingerprint)
        from perbench.io import warn

        warn(
            f"{lm.name}: transformers' generate failed ({_one_line(e)}); greedy decoding uses the "
            "token loop for this model"
        )
        return None


def _one_line(e: Any) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
