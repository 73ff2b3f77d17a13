"""A trained run as a policy: the base model with the run's LoRA, decoded by perbench's own loop.

:func:`generate_with` decodes exactly like the ``zero_shot`` decoder (:func:`perbench.models.generate.
generate_plain`: greedy, or sampled at a temperature), so the trained policy's rows differ from the base
policy's only by the weights. :func:`measure_kl` estimates KL(π_trained ‖ π_base) per prompt from samples of
the trained policy. The base :class:`LoadedLM` is never modified: the LoRA goes into a deep copy of its model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from perbench.models.chat import encode_prompt
from perbench.models.generate import (
    Generation,
    GenRequest,
    batched,
    decode_loop,
    generate_plain,
    row_generators,
    sample_top_p,
    until_stop,
)
from perbench.models.loader import LoadedLM, model_copy
from perbench.models.stepper import CachedLM
from perbench.training.records import RLRun
from perbench.training.spec import RLSpec


def lora_config(spec: RLSpec) -> Any:
    """The peft ``LoraConfig`` of a recipe (the same object for training and for reloading the weights)."""
    from peft import LoraConfig

    return LoraConfig(
        r=spec.lora_r,
        lora_alpha=spec.lora_alpha,
        lora_dropout=spec.lora_dropout,
        target_modules=list(spec.lora_target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def trained_lm(run: RLRun, base: LoadedLM) -> LoadedLM:
    """A new :class:`LoadedLM`: a copy of ``base``'s model with the run's LoRA weights. The LoRA is merged into
    the copy's weights, except when it adapts an output layer tied to the input embeddings (merging would change
    the embeddings too): the adapter layers then stay in place. Fingerprint: base + run."""
    from peft import get_peft_model, set_peft_model_state_dict
    from peft.tuners.tuners_utils import BaseTunerLayer

    model = model_copy(base)
    peft_model: Any = get_peft_model(model, lora_config(run.spec))
    device = base.policy.device
    state = {k: torch.from_numpy(np.asarray(v)).to(device) for k, v in run.lora_state.items()}
    result: Any = set_peft_model_state_dict(peft_model, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing or not state:
        raise ValueError(
            f"RL run {run.fingerprint}: LoRA weights do not fit {base.name} "
            f"(unexpected {list(result.unexpected_keys)[:3]}, missing {missing[:3]}, {len(state)} tensors)"
        )
    tied = bool(getattr(base.model.config, "tie_word_embeddings", False))
    if tied and isinstance(peft_model.get_output_embeddings(), BaseTunerLayer):
        merged = peft_model.base_model.model
    else:
        merged = peft_model.merge_and_unload()
    merged.eval()
    return LoadedLM(merged, base.tokenizer, f"{base.fingerprint}+rl:{run.fingerprint}", f"{base.name}+rl", base.policy)


def policy_lm(policy: RLRun | LoadedLM, base: LoadedLM) -> LoadedLM:
    """A run's trained policy (built from ``base``), or an already loaded policy as it is."""
    return policy if isinstance(policy, LoadedLM) else trained_lm(policy, base)


def generate_with(
    policy: RLRun | LoadedLM,
    base: LoadedLM,
    requests: Sequence[GenRequest],
    max_new_tokens: int,
    *,
    sample: bool = False,
    temperature: float = 1.0,
    batch_size: int = 8,
) -> list[Generation]:
    """Generations of the trained policy (or of a loaded one), decoded as the ``zero_shot`` decoder decodes:
    greedy, or ``sample``d at ``temperature`` with each request's own seed."""
    lm = policy_lm(policy, base)
    out: list[Generation] = []
    for batch in batched(requests, batch_size):
        out += generate_plain(lm, batch, max_new_tokens, sample=sample, temperature=temperature)
    return out


def sample_ids(
    lm: LoadedLM, requests: Sequence[GenRequest], max_new_tokens: int, temperature: float
) -> list[list[int]]:
    """Sampled completions as token ids, the stop token included (it carries probability mass too); drawn as
    :func:`generate_plain` draws (temperature, then the full nucleus), one generator per request."""
    gens = row_generators(requests, lm.policy.device)
    steps: list[torch.Tensor] = []

    def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, None]:
        lp = torch.log_softmax(state.logprobs(hidden) / temperature, dim=-1)
        tokens = sample_top_p(lp, 1.0, gens)
        steps.append(tokens.cpu())
        return tokens, None

    decode_loop(lm, requests, max_new_tokens, choose)
    return until_stop(torch.stack(steps, 1).tolist(), lm.eos_ids)


def _completion_logsoftmax(
    lm: LoadedLM, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log softmax(logits / temperature) at every completion position (B, C, V), the completion ids (B, C)),
    teacher-forced in one forward (prompts left-padded, completions right-padded)."""
    B = len(prompt_ids)
    P, C = max(len(p) for p in prompt_ids), max(len(c) for c in completion_ids)
    pad = int(lm.tokenizer.pad_token_id)
    ids = torch.full((B, P + C), pad, dtype=torch.long)
    mask = torch.zeros((B, P + C), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        ids[i, P - len(p) : P] = torch.tensor(list(p))
        ids[i, P : P + len(c)] = torch.tensor(list(c))
        mask[i, P - len(p) : P + len(c)] = 1
    ids, mask = ids.to(lm.policy.device), mask.to(lm.policy.device)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, P - 1 : P + C - 1]
        lsm = torch.log_softmax(logits.float() / temperature, dim=-1)
    return lsm, ids[:, P:]


def completion_logprobs(
    lm: LoadedLM, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], temperature: float
) -> list[torch.Tensor]:
    """Per-token log-probabilities of each completion under softmax(logits / temperature) — the distribution
    GRPO samples from and optimises — teacher-forced in one forward."""
    lsm, ids = _completion_logsoftmax(lm, prompt_ids, completion_ids, temperature)
    lp = lsm.gather(-1, ids[..., None])[..., 0]
    return [lp[i, : len(c)].cpu() for i, c in enumerate(completion_ids)]


def measure_kl(
    policy: RLRun | LoadedLM,
    base: LoadedLM,
    requests: Sequence[GenRequest],
    max_new_tokens: int,
    *,
    temperature: float | None = None,
    batch_size: int = 8,
) -> np.ndarray:
    """Per request: Σ_t KL(π(· | x, y_<t) ‖ π_base(· | x, y_<t)) along one y ~ π (each request's own seed),
    both at the sampling temperature (default: the run's). Summing the exact per-step KL over the vocabulary
    instead of log π(y_t) − log π_base(y_t) keeps the estimate unbiased for the sequence-level KL(π ‖ π_base)
    (in nats) and removes the variance of the token draw at each step; each value is ≥ 0."""
    lm = policy_lm(policy, base)
    T = temperature if temperature is not None else (policy.spec.temperature if isinstance(policy, RLRun) else 1.0)
    out: list[float] = []
    for batch in batched(requests, batch_size):
        comps = sample_ids(lm, batch, max_new_tokens, T)
        prompts = [encode_prompt(base.tokenizer, r.prompt) for r in batch]
        lp, _ = _completion_logsoftmax(lm, prompts, comps, T)
        lq, _ = _completion_logsoftmax(base, prompts, comps, T)
        step = (lp.exp() * (lp - lq)).sum(-1).clamp(min=0.0)  # (B, C): KL of each step's distribution
        out += [float(step[i, : len(c)].sum()) for i, c in enumerate(comps)]
    return np.array(out, np.float64)
