"""Training-time downstream: fine-tune the policy against a personalized reward model (GRPO + LoRA via TRL)
and evaluate the trained policy like a decoder. Uses models/ and rewards/ only."""

from perbench.training.policy import generate_with, lora_config, measure_kl, trained_lm
from perbench.training.records import RLRun
from perbench.training.reward import BaseSample, RewardFn, RMReward, UserNorm, base_samples, rm_identity, rm_reward
from perbench.training.rl import canonical_prompts, plan_groups, run_fingerprint, train_policy
from perbench.training.spec import RLPhase, RLSpec

__all__ = [
    "BaseSample",
    "RLPhase",
    "RLRun",
    "RLSpec",
    "RMReward",
    "RewardFn",
    "UserNorm",
    "base_samples",
    "canonical_prompts",
    "generate_with",
    "lora_config",
    "measure_kl",
    "plan_groups",
    "rm_identity",
    "rm_reward",
    "run_fingerprint",
    "train_policy",
    "trained_lm",
]
