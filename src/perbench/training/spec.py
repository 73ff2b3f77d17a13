"""What an RL run is: :class:`RLSpec` (the fine-tuning recipe, validated) and :class:`RLPhase` (the run
config's ``rl:`` mapping = an RLSpec plus which reward models to train with).

Only GRPO is offered. TRL 1.13 has no PPO trainer: ``PPOTrainer`` moved to ``trl.experimental.ppo`` in
TRL 1.10 and was later removed, and it never took an in-process reward callable (it wanted tokenized
``input_ids``, a sequence-classification reward module and a value model). ``algorithm: ppo`` is therefore
a :class:`~perbench.errors.ConfigError` that says so.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perbench.errors import ConfigError

ALGORITHMS = ("grpo", "ppo")
GROUPS = ("user", "all")
SCALE_REWARDS = ("group", "batch", "none")
PPO_UNAVAILABLE = (
    "'ppo' is not available: the installed TRL ({version}) ships no PPO trainer (PPOTrainer moved to "
    "trl.experimental.ppo in TRL 1.10 and was then removed), and TRL's PPO never accepted an in-process reward "
    "callable (it needs a sequence-classification reward model and a value model); use algorithm: grpo"
)


def _trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:  # pragma: no cover - trl is a dependency
        return "not installed"


@dataclass(frozen=True)
class RLSpec:
    """One policy fine-tuning recipe: GRPO with LoRA on the policy, against one personalized RM.

    Rewards are z-scored per user with a mean and sd measured once, before training, on the base policy's own
    samples (``norm_samples`` per training prompt). With ``scale_rewards: group`` (TRL's default) GRPO's
    advantages are invariant to a per-user affine map, because every group shares one prompt and one user; the
    normalisation then puts the logged rewards of different users and RMs on one scale (reward gain in base-sd
    units). With ``batch`` or ``none`` it also sets how users are weighted against each other in a batch.
    """

    algorithm: Literal["grpo", "ppo"] = "grpo"
    steps: int = 20
    learning_rate: float = 1e-4
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    #: completions sampled per prompt (GRPO's group size G)
    num_generations: int = 4
    #: completions per optimizer step (a multiple of ``num_generations``: batch_size / G prompts per step)
    batch_size: int = 8
    #: training prompts longer than this (chat-templated) are skipped and counted, never truncated
    max_prompt_tokens: int = 512
    max_new_tokens: int = 56
    #: sampling temperature of the rollouts (and of the normalisation samples and of the KL measurement)
    temperature: float = 1.0
    #: KL coefficient toward the reference (base) policy; the KL is recorded per step whatever its value
    beta: float = 0.04
    scale_rewards: Literal["group", "batch", "none"] = "group"
    #: one run per (RM, user) ("user") or per (RM, all users pooled) ("all")
    group: Literal["user", "all"] = "user"
    #: with group "user": train for at most this many users (a seeded choice; None: all)
    max_users: int | None = None
    #: training prompts per user (a seeded choice; None: all the user's prompts)
    max_train_prompts: int | None = None
    #: base-policy samples per training prompt for the per-user reward normalisation
    norm_samples: int = 4
    gradient_checkpointing: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self, where: str = "rl") -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"{where}.{key}: {why}")

        if self.algorithm not in ALGORITHMS:
            raise bad("algorithm", f"must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.algorithm == "ppo":
            raise bad("algorithm", PPO_UNAVAILABLE.format(version=_trl_version()))
        for key in ("steps", "lora_r", "num_generations", "batch_size", "max_prompt_tokens", "max_new_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(key, f"must be an integer ≥ 1, got {value!r}")
        for key in ("max_users", "max_train_prompts"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise bad(key, f"must be an integer ≥ 1 or null, got {value!r}")
        if isinstance(self.norm_samples, bool) or not isinstance(self.norm_samples, int) or self.norm_samples < 2:
            raise bad("norm_samples", f"must be an integer ≥ 2 (an sd needs two samples), got {self.norm_samples!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise bad("seed", f"must be an integer, got {self.seed!r}")
        if self.num_generations < 2:
            raise bad("num_generations", f"GRPO needs ≥ 2 completions per prompt, got {self.num_generations}")
        if self.batch_size % self.num_generations:
            raise bad(
                "batch_size",
                f"must be a multiple of num_generations ({self.num_generations}), got {self.batch_size}",
            )
        if not _is_number(self.learning_rate) or not self.learning_rate > 0:
            raise bad("learning_rate", f"must be a number > 0, got {self.learning_rate!r}")
        if not _is_number(self.lora_alpha) or not self.lora_alpha > 0:
            raise bad("lora_alpha", f"must be a number > 0, got {self.lora_alpha!r}")
        if not _is_number(self.lora_dropout) or not 0 <= self.lora_dropout < 1:
            raise bad("lora_dropout", f"must be in [0, 1), got {self.lora_dropout!r}")
        if not _is_number(self.temperature) or not self.temperature > 0:
            raise bad("temperature", f"must be a number > 0, got {self.temperature!r}")
        if not _is_number(self.beta) or not self.beta >= 0:
            raise bad("beta", f"must be a number ≥ 0, got {self.beta!r}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise bad("scale_rewards", f"must be one of {', '.join(SCALE_REWARDS)}, got {self.scale_rewards!r}")
        if self.group not in GROUPS:
            raise bad("group", f"must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.group == "all" and self.max_users is not None:
            raise bad("max_users", "only applies to group: user (group: all trains one policy for every user)")
        mods = self.lora_target_modules
        if isinstance(mods, str) or not mods or not all(isinstance(m, str) and m for m in mods):
            raise bad("lora_target_modules", f"must be a non-empty list of module names, got {mods!r}")
        if not isinstance(self.gradient_checkpointing, bool):
            raise bad("gradient_checkpointing", f"must be true or false, got {self.gradient_checkpointing!r}")

    # ------------------------------------------------------------------ front doors
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "rl") -> RLSpec:
        """From a YAML/CLI mapping: unknown keys get a "Did you mean" hint; YAML's string spellings of floats
        (``1e-4`` is a string to YAML 1.1) are accepted for float fields."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping of RL settings, got {type(data).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names:
                close = difflib.get_close_matches(str(key), sorted(names), n=2)
                hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ConfigError(f"{where}: unknown key {key!r}.{hint}")
            if key in _FLOAT_FIELDS and isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise ConfigError(f"{where}.{key}: must be a number, got {value!r}") from None
            if key == "lora_target_modules" and isinstance(value, list):
                value = tuple(value)
            kwargs[key] = value
        spec = cls.__new__(cls)
        defaults = {f.name: _default_of(f) for f in dataclasses.fields(cls)}
        for key, value in {**defaults, **kwargs}.items():
            object.__setattr__(spec, key, value)
        spec.validate(where)
        return spec

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["lora_target_modules"] = list(self.lora_target_modules)
        return out


_FLOAT_FIELDS = frozenset({"learning_rate", "lora_alpha", "lora_dropout", "temperature", "beta"})


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING
    return f.default_factory()


@dataclass(frozen=True)
class RLPhase:
    """The run config's ``rl:`` key: the recipe plus the configured reward models to train with (None: all)."""

    spec: RLSpec = field(default_factory=RLSpec)
    methods: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "rl") -> RLPhase:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping of RL settings, got {type(data).__name__}")
        rest = {k: v for k, v in data.items() if k != "methods"}
        methods = data.get("methods")
        if methods is not None:
            if isinstance(methods, str) or not isinstance(methods, Sequence) or not methods:
                raise ConfigError(f"{where}.methods: must be a non-empty list of method labels, got {methods!r}")
            if not all(isinstance(m, str) and m for m in methods):
                raise ConfigError(f"{where}.methods: every entry must be a method label, got {methods!r}")
            methods = tuple(methods)
        return cls(RLSpec.from_dict(rest, where), methods)

    def check_methods(self, configured: Sequence[str], where: str = "rl") -> list[str]:
        """The labels to train with, checked against the run's configured reward models."""
        if self.methods is None:
            return list(configured)
        unknown = [m for m in self.methods if m not in configured]
        if unknown:
            raise ConfigError(
                f"{where}.methods: {', '.join(map(repr, unknown))} not among the configured methods "
                f"({', '.join(configured) or 'none'})"
            )
        return list(self.methods)

    def to_dict(self) -> dict[str, Any]:
        out = self.spec.to_dict()
        if self.methods is not None:
            out["methods"] = list(self.methods)
        return out
