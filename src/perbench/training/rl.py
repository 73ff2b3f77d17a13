"""Training-time downstream: fine-tune the policy against one personalized RM with TRL's GRPO or RLOO (LoRA on
the policy) and record what happened, so the trained policy can be evaluated like any decoder.

One run = one (reward, user group, seed): :func:`plan_groups` splits the training (prompt, user) pairs by the
recipe's ``group``; :func:`train_policy` trains one group and returns an :class:`RLRun` (LoRA weights,
per-user reward normalisation, per-step history, content fingerprint). Prompts reach TRL as chat messages,
which it renders with the policy's chat template exactly as :func:`perbench.models.chat.encode_prompt` does
(an optional view puts the user's context into the policy's prompt; the reward always scores the original
prompt); the user reaches the reward function through the dataset's ``user_id`` column.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from perbench.data.records import Prompt, prompt_key, prompt_messages
from perbench.errors import PerbenchError
from perbench.models.chat import encode_prompt
from perbench.models.loader import LoadedLM, model_copy
from perbench.progress import progress
from perbench.training.policy import completion_logprobs, lora_config
from perbench.training.records import RLRun
from perbench.training.reward import BaseSample, PromptView, RewardFn, UserNorm, base_samples, user_norms
from perbench.training.spec import RLSpec

#: the per-step record: TRL's log key -> ours
HISTORY_KEYS = {
    "reward_raw": "reward_raw",
    "reward": "reward_norm",
    "reward_std": "reward_norm_sd",
    "kl": "kl",
    "loss": "loss",
    "entropy": "entropy",
    "completions/mean_length": "completion_tokens",
    "grad_norm": "grad_norm",
    "step_time": "seconds",
}
#: RLOO logs its KL penalty's first-order estimate (log π − log π_ref per token, may be < 0) as ``kl``; the
#: history's ``kl`` is then the probe's exp(q) − q − 1 (GRPO's estimator), so both algorithms log one quantity
RLOO_KEYS = {**HISTORY_KEYS, "kl": "kl_penalty", "kl_k3": "kl"}


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("trl", "peft", "transformers", "torch")}


def canonical_prompts(prompts: Sequence[tuple[Prompt, str]]) -> list[tuple[Prompt, str]]:
    """Unique (prompt, user) pairs in a fixed order, so a run depends on the set, not on the caller's order."""
    seen: dict[tuple[str, str], tuple[Prompt, str]] = {}
    for p, u in prompts:
        seen.setdefault((prompt_key(p), u), (p, u))
    return [seen[k] for k in sorted(seen)]


def run_fingerprint(
    policy: LoadedLM,
    reward_identity: str,
    prompts: Sequence[tuple[Prompt, str]],
    spec: RLSpec,
    view: PromptView | None = None,
) -> str:
    """Content key of a run (known before training, so a finished run can be looked up instead of re-run)."""
    rows = canonical_prompts(prompts)
    body = [
        spec.to_dict(),
        reward_identity,
        policy.fingerprint,
        policy.chat_template_hash,
        [[prompt_key(p), u] for p, u in rows],
        _versions(),
    ]
    if view is not None:  # what the policy saw, when it is not the prompt itself
        body.append([prompt_key(view(p, u)) for p, u in rows])
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _stable_int(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:4], "little")


def plan_groups(
    spec: RLSpec, prompts: Sequence[tuple[Prompt, str]], users: Sequence[str] | None = None
) -> dict[str, list[tuple[Prompt, str]]]:
    """Training (prompt, user) pairs -> one entry per run: ``{user: pairs}`` for ``group: user`` (at most
    ``max_users`` users, a seeded choice), ``{"all": pairs}`` for ``group: all``. ``users`` restricts the
    candidates (e.g. to the users evaluated downstream); ``max_train_prompts`` caps each user's prompts."""
    by_user: dict[str, list[tuple[Prompt, str]]] = {}
    for p, u in canonical_prompts(prompts):
        if users is None or u in users:
            by_user.setdefault(u, []).append((p, u))
    for u, rows in by_user.items():
        if spec.max_train_prompts is not None and len(rows) > spec.max_train_prompts:
            rng = np.random.default_rng(_stable_int(spec.seed, u))
            keep = sorted(rng.choice(len(rows), spec.max_train_prompts, replace=False).tolist())
            by_user[u] = [rows[i] for i in keep]
    chosen = sorted(by_user)
    if spec.group == "all":
        return {"all": [row for u in chosen for row in by_user[u]]} if chosen else {}
    if spec.max_users is not None and len(chosen) > spec.max_users:
        rng = np.random.default_rng(spec.seed)
        chosen = sorted(rng.choice(chosen, spec.max_users, replace=False).tolist())
    return {u: by_user[u] for u in chosen}


@contextmanager
def _isolated_rng(seed: int) -> Iterator[None]:
    """Seed python, numpy and torch for a run and restore the caller's generators afterwards."""
    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def train_policy(
    policy: LoadedLM,
    reward: RewardFn,
    prompts: Sequence[tuple[Prompt, str]],
    spec: RLSpec,
    work_dir: Path,
    *,
    reward_identity: str | None = None,
    samples: Sequence[BaseSample] | None = None,
    view: PromptView | None = None,
) -> RLRun:
    """GRPO or RLOO + LoRA on a copy of ``policy`` (never modified) against ``reward`` for the (prompt, user)
    pairs.

    ``reward_identity`` defaults to ``reward.identity`` (set by :func:`~perbench.training.reward.rm_reward`);
    ``samples`` are the base-policy samples of the normalisation (drawn here when None; pass the same ones to
    every RM trained on the same prompts to draw them once, drawn with the same ``view``). ``view`` maps a
    (prompt, user) to the prompt the policy sees (e.g. with the user's context); the reward scores the
    completion against the original prompt. Same inputs and seed -> same weights (on CPU)."""
    identity = reward_identity or getattr(reward, "identity", None)
    if not isinstance(identity, str) or not identity:
        raise ValueError(
            "train_policy needs the reward's identity for the run fingerprint: use rm_reward() or pass reward_identity="
        )
    rows = canonical_prompts(prompts)
    users = sorted({u for _, u in rows})
    if spec.group == "user" and len(users) > 1:
        raise ValueError(
            f"group: user trains one policy per user, got prompts of {len(users)} users (split them with plan_groups)"
        )
    shown = view or (lambda p, u: p)
    kept = [(p, u) for p, u in rows if len(encode_prompt(policy.tokenizer, shown(p, u))) <= spec.max_prompt_tokens]
    if not kept:
        raise PerbenchError(
            f"rl: none of the {len(rows)} training prompts fits rl.max_prompt_tokens ({spec.max_prompt_tokens} tokens)"
        )
    notes = []
    if len(kept) < len(rows):
        notes.append(f"{len(rows) - len(kept)} training prompts longer than max_prompt_tokens skipped")
    if samples is None:
        samples = base_samples(policy, kept, spec, view)
    missing = sorted(set(users) - {s.user_id for s in samples})
    if missing:
        raise ValueError(f"no base samples for users {missing[:5]}: the normalisation needs every user's")
    norms, _ = user_norms(reward, samples)
    notes += [f"user {u}: {n.note}" for u, n in norms.items() if n.note]
    t0 = time.perf_counter()
    with _isolated_rng(spec.seed):
        history, lora_state = _run_trl(policy, reward, kept, [shown(p, u) for p, u in kept], norms, spec, work_dir)
    return RLRun(
        spec=spec,
        fingerprint=run_fingerprint(policy, identity, kept, spec, view),
        base_fingerprint=policy.fingerprint,
        reward_identity=identity,
        users=users,
        n_prompts=len(kept),
        skipped_prompts=len(rows) - len(kept),
        normalisation={u: norms[u] for u in users},
        history=history,
        lora_state=lora_state,
        runtime_s=time.perf_counter() - t0,
        versions=_versions(),
        notes=notes,
    )


def _run_trl(
    policy: LoadedLM,
    reward: RewardFn,
    rows: list[tuple[Prompt, str]],
    shown: list[Prompt],
    norms: dict[str, UserNorm],
    spec: RLSpec,
    work_dir: Path,
) -> tuple[list[dict[str, float | None]], dict[str, np.ndarray]]:
    """One TRL run over ``rows`` (prompt, user); ``shown[i]`` is the prompt the policy sees for row i."""
    from datasets import Dataset
    from peft import get_peft_model_state_dict
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    holder: dict[str, Any] = {}
    rloo = spec.algorithm == "rloo"
    keys = RLOO_KEYS if rloo else HISTORY_KEYS

    def perbench_rm(
        prompts: list[Any], completions: list[Any], user_id: list[str], row: list[int], **kw: Any
    ) -> list[float | None]:
        texts = [(c[-1]["content"] if isinstance(c, list) else str(c)).strip() for c in completions]
        raw = np.asarray(reward(user_id, [rows[i][0] for i in row], texts), np.float64)
        z = np.array([norms[u].apply(float(r)) for u, r in zip(user_id, raw, strict=True)])
        log_metric = kw.get("log_metric")
        if log_metric is not None:
            log_metric("reward_raw", float(raw.mean()))
            if spec.beta == 0 or rloo:
                kl = _kl_probe(
                    holder["trainer"], policy, [shown[i] for i in row], kw["completion_ids"], spec.temperature
                )
                log_metric("kl_k3" if rloo else "kl", kl)
        return [float(v) for v in z]

    class History(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.rows: list[dict[str, float | None]] = []
            self.bar = progress(total=spec.steps, desc=f"rl {spec.algorithm} ({len(rows)} prompts)", unit="step")

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if not logs or "train_runtime" in logs:
                return
            rec: dict[str, float | None] = {"step": float(state.global_step)}
            for theirs, ours in keys.items():
                v = logs.get(theirs)
                rec[ours] = None if v is None else float(v)
            self.rows.append(rec)
            self.bar.update(1)

    dataset = Dataset.from_list(
        [{"prompt": prompt_messages(shown[i]), "user_id": u, "row": i} for i, (_, u) in enumerate(rows)]
    )
    dtype = policy.policy.torch_dtype()
    if rloo:
        from trl.trainer.rloo_config import RLOOConfig as Config
        from trl.trainer.rloo_trainer import RLOOTrainer as Trainer

        specific: dict[str, Any] = {"normalize_advantages": spec.advantage_scaling == "batch"}
    else:
        from trl.trainer.grpo_config import GRPOConfig as Config  # type: ignore[assignment]
        from trl.trainer.grpo_trainer import GRPOTrainer as Trainer  # type: ignore[assignment]

        specific = {"scale_rewards": spec.advantage_scaling, "loss_type": "dapo"}
    args = Config(
        output_dir=str(work_dir / "trl"),
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        max_steps=spec.steps,
        per_device_train_batch_size=spec.batch_size,
        gradient_accumulation_steps=1,
        num_generations=spec.num_generations,
        max_completion_length=spec.max_new_tokens,
        temperature=spec.temperature,
        top_p=1.0,
        top_k=0,
        beta=spec.beta,
        learning_rate=spec.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        seed=spec.seed,
        data_seed=spec.seed,
        use_cpu=policy.policy.device == "cpu",
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        activation_checkpointing=spec.gradient_checkpointing,  # transformers 5 name of gradient_checkpointing
        generation_kwargs={"eos_token_id": policy.eos_ids},
        dataloader_num_workers=0,
        **specific,
    )
    history = History()
    trainer = Trainer(
        model=model_copy(policy),  # no hub kernels: TRL's train() would fetch them
        reward_funcs=perbench_rm,
        args=args,
        train_dataset=dataset,
        processing_class=policy.tokenizer,
        peft_config=lora_config(spec),
        callbacks=[history],
    )
    trainer.remove_callback(PrinterCallback)  # the history callback records the logs; no dicts on stdout
    _check_prompt_rendering(trainer, policy, shown[0])
    holder["trainer"] = trainer
    trainer.train()
    history.bar.close()
    state = get_peft_model_state_dict(trainer.model)
    lora = {k: v.detach().float().cpu().numpy() for k, v in state.items()}
    return history.rows, lora


def _check_prompt_rendering(trainer: Any, policy: LoadedLM, prompt: Prompt) -> None:
    """TRL must feed the policy the very ids :func:`encode_prompt` gives (what the zero-shot decoder and the
    evaluation of the trained policy use); checked on one prompt through TRL's own tokenizing step."""
    tokenize = getattr(trainer, "_tokenize_prompts", None)
    if tokenize is None:  # a TRL without this step: nothing to compare against
        return
    ids = [int(i) for i in tokenize([prompt_messages(prompt)])[0][0]]
    if ids != encode_prompt(policy.tokenizer, prompt):
        raise PerbenchError(
            f"rl: TRL renders prompts differently from perbench's chat template for {policy.name}; trained and "
            "zero-shot generations would not be comparable"
        )


def _kl_probe(
    trainer: Any, policy: LoadedLM, prompts: list[Prompt], completion_ids: list[list[int]], temperature: float
) -> float:
    """TRL's per-token KL estimate for a step's rollouts when it computes none itself (beta = 0): the trained
    model with and without its adapter, in eval mode, on the rollouts TRL just sampled."""
    model = trainer.model
    was_training = model.training
    model.eval()
    try:
        lm = LoadedLM(model, policy.tokenizer, policy.fingerprint, policy.name, policy.policy)
        pids = [encode_prompt(policy.tokenizer, p) for p in prompts]
        lp = completion_logprobs(lm, pids, completion_ids, temperature)
        with model.disable_adapter():
            ref = completion_logprobs(lm, pids, completion_ids, temperature)
    finally:
        model.train(was_training)
    q = torch.cat([r - a for r, a in zip(ref, lp, strict=True)])
    return float((torch.exp(q) - q - 1).mean()) if len(q) else 0.0
