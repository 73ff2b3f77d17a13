"""What a model is made of, from its config alone: the names of its modules, built on the meta device (no
weights are read or allocated). A LoRA recipe's ``lora_target_modules`` is checked against them before any work.
"""

from __future__ import annotations

from typing import Any

from perbench.models.identity import TINY_RANDOM
from perbench.models.loader import TINY_CONTEXT, ModelSpec, _load_or_explain, resolve_spec


def model_config(spec: str | ModelSpec) -> Any:
    """The transformers config of ``spec`` (read from its folder or the hub cache; tiny-random's own)."""
    mspec = ModelSpec.parse(spec)
    if mspec.name.startswith(TINY_RANDOM):
        from transformers import LlamaConfig

        # the shape of :func:`perbench.models.loader.tiny_random_lm` (its module names do not depend on the vocab)
        return LlamaConfig(
            vocab_size=8,
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=TINY_CONTEXT,
            tie_word_embeddings=True,
        )
    target, _, kw = resolve_spec(mspec)
    from transformers import AutoConfig

    return _load_or_explain(mspec.name, AutoConfig.from_pretrained, target, trust_remote_code=False, **kw)


def module_names(spec: str | ModelSpec) -> list[str]:
    """The dotted names of every module of the causal LM ``spec`` (``model.layers.0.self_attn.q_proj``, …)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model_config(spec)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    return [name for name, _ in model.named_modules() if name]


def missing_targets(targets: tuple[str, ...] | list[str], names: list[str]) -> list[str]:
    """The LoRA targets that match no module: PEFT matches a target by the whole name or its last parts."""
    return [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]


def leaf_kinds(names: list[str]) -> list[str]:
    """The distinct last parts of module names that hold no numbers (``q_proj``, ``up_proj``, …), for a hint."""
    return sorted({n.rsplit(".", 1)[-1] for n in names if not n.rsplit(".", 1)[-1].isdigit()})
