"""A trained run as a policy: the base model with the run's LoRA, decoded by perbench's own loop.

:func:`generate_with` decodes exactly like the ``zero_shot`` decoder (:func:`perbench.models.generate.
generate_plain`, greedy), so the trained policy's rows differ from zero-shot's only by the weights.
:func:`measure_kl` estimates KL(π_trained ‖ π_base) per prompt from samples of the trained policy.
The base :class:`LoadedLM` is never modified: the LoRA goes into a deep copy of its model.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
)
from perbench.models.loader import LoadedLM
from perbench.models.stepper import CachedLM
from perbench.training.spec import RLSpec

if TYPE_CHECKING:
    from perbench.training.records import RLRun


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

    model = copy.deepcopy(base.model)
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


def generate_with(
    run: RLRun, base: LoadedLM, requests: Sequence[GenRequest], max_new_tokens: int, *, batch_size: int = 8
) -> list[Generation]:
    """Greedy generations of the trained policy, decoded as the ``zero_shot`` decoder decodes."""
    lm = trained_lm(run, base)
    out: list[Generation] = []
    for batch in batched(requests, batch_size):
        out += generate_plain(lm, batch, max_new_tokens)
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
    drawn = torch.stack(steps, 1).tolist()
    eos = set(lm.eos_ids)
    out = []
    for row in drawn:
        ids: list[int] = []
        for tok in row:
            ids.append(int(tok))
            if tok in eos:
                break
        out.append(ids)
    return out


def completion_logprobs(
    lm: LoadedLM, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], temperature: float
) -> list[torch.Tensor]:
    """Per-token log-probabilities of each completion under softmax(logits / temperature) — the distribution
    GRPO samples from and optimises — teacher-forced in one forward (prompts left-padded, completions
    right-padded)."""
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
        lp = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, ids[:, P:, None])[..., 0]
    return [lp[i, : len(c)].cpu() for i, c in enumerate(completion_ids)]


def measure_kl(
    run: RLRun, base: LoadedLM, requests: Sequence[GenRequest], max_new_tokens: int, *, batch_size: int = 8
) -> np.ndarray:
    """Per request: Σ_t log π(y_t | x, y_<t) − log π_base(y_t | x, y_<t) for one y ~ π (each request's own
    seed), π = the trained policy, both at the run's sampling temperature. Its mean over requests is an
    unbiased estimate of the sequence-level KL(π ‖ π_base) in nats."""
    lm = trained_lm(run, base)
    out: list[float] = []
    T = run.spec.temperature
    for batch in batched(requests, batch_size):
        comps = sample_ids(lm, batch, max_new_tokens, T)
        prompts = [encode_prompt(base.tokenizer, r.prompt) for r in batch]
        lp = completion_logprobs(lm, prompts, comps, T)
        lp_ref = completion_logprobs(base, prompts, comps, T)
        out += [float((a - b).sum()) for a, b in zip(lp, lp_ref, strict=True)]
    return np.array(out, np.float64)
