"""The RL recipe against the policy it trains, checked before any work (from the policy's config alone, no
weights): the rollout length fits the policy's context, and every LoRA target names modules the policy has.
(The recipe's own ranges, seeds included, are checked where the config is read: :mod:`perbench.training.spec`.)
"""

from __future__ import annotations

from perbench.config import RunConfig
from perbench.errors import ConfigError


def check_rl(cfg: RunConfig) -> None:
    """A located :class:`ConfigError` for an ``rl:`` recipe the policy cannot run."""
    if cfg.rl is None or not isinstance(cfg.policy, str):  # a served policy with rl: refused by check_served
        return
    from perbench.models.anatomy import leaf_kinds, missing_targets, module_names
    from perbench.models.loader import model_context
    from perbench.training.spec import RLPhase

    where = cfg.where("rl")
    spec = RLPhase.from_dict(cfg.rl, where=where).spec
    try:
        context = model_context(cfg.policy)
    except ConfigError as e:
        raise ConfigError(f"{cfg.where('policy')}: {e}") from None
    if context is not None and spec.max_prompt_tokens + spec.max_new_tokens > context:
        raise ConfigError(
            f"{where}.max_new_tokens: {spec.max_new_tokens} new tokens after prompts of up to "
            f"{spec.max_prompt_tokens} (rl.max_prompt_tokens) cannot fit the context of {cfg.policy} ({context} "
            f"positions); keep max_prompt_tokens + max_new_tokens ≤ {context}"
        )
    names = module_names(cfg.policy)
    missing = missing_targets(spec.lora_target_modules, names)
    if missing:
        raise ConfigError(
            f"{where}.lora_target_modules: {', '.join(map(repr, missing))} name(s) no module of {cfg.policy}, so "
            f"LoRA would have nothing to adapt there; its modules: {', '.join(leaf_kinds(names))}"
        )
