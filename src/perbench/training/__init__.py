"""Training-time downstream: fine-tune the policy against a personalized reward model (GRPO or RLOO + LoRA via
TRL) and evaluate the trained policy like a decoder. Uses models/ and rewards/ only."""

from perbench.training.policy import generate_with, lora_config, measure_kl, policy_lm, trained_lm
from perbench.training.records import RLRun
from perbench.training.reference import KLMatch, kl_matched, random_update, update_norms
from perbench.training.reward import (
    BaseSample,
    PromptView,
    RandomReward,
    RewardFn,
    RMReward,
    ShuffledUsers,
    UserNorm,
    base_samples,
    derangement,
    rm_identity,
    rm_reward,
)
from perbench.training.rl import canonical_prompts, plan_groups, run_fingerprint, train_policy
from perbench.training.spec import RLPhase, RLSpec

__all__ = [
    "BaseSample",
    "KLMatch",
    "PromptView",
    "RLPhase",
    "RLRun",
    "RLSpec",
    "RMReward",
    "RandomReward",
    "RewardFn",
    "ShuffledUsers",
    "UserNorm",
    "base_samples",
    "canonical_prompts",
    "derangement",
    "generate_with",
    "kl_matched",
    "lora_config",
    "measure_kl",
    "plan_groups",
    "policy_lm",
    "random_update",
    "rm_identity",
    "rm_reward",
    "run_fingerprint",
    "train_policy",
    "trained_lm",
    "update_norms",
]
