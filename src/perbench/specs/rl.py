"""What an RL run is: :class:`RLSpec` (the fine-tuning recipe, validated) and :class:`RLPhase` (the run
config's ``rl:`` mapping = an RLSpec plus which reward models to train with, the training seeds, the
reference arms (placebo, KL-matched random update) and how the trained policies are evaluated).

GRPO and RLOO are offered, both through TRL (``GRPOTrainer``, ``RLOOTrainer``; the hooks used are the reward
function's ``log_metric`` keyword and the trainers' ``_tokenize_prompts``, present in TRL 1.13 to 1.16). TRL
1.16 has no PPO trainer: ``PPOTrainer`` moved to ``trl.experimental.ppo`` in TRL 1.10 and was later removed,
and it never took an in-process reward callable (it wanted tokenized ``input_ids``, a sequence-classification
reward module and a value model). ``algorithm: ppo`` is therefore a :class:`~perbench.errors.ConfigError` that
says so.

Plain data at the base (it imports nothing of perbench but ``errors``): the config checks the ``rl:`` block with it,
and the training room reads it (``perbench.training`` imports both classes from here).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perbench.errors import ConfigError

ALGORITHMS = ("grpo", "rloo", "ppo")
#: the largest seed (torch and numpy take seeds in [0, 2³²))
SEED_MAX = 2**32 - 1
GROUPS = ("user", "all")
SCALE_REWARDS = ("group", "batch", "none")
PPO_UNAVAILABLE = (
    "'ppo' is not available: the installed TRL ({version}) ships no PPO trainer (PPOTrainer moved to "
    "trl.experimental.ppo in TRL 1.10 and was then removed), and TRL's PPO never accepted an in-process reward "
    "callable (it needs a sequence-classification reward model and a value model); use algorithm: grpo or rloo"
)


def _trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:  # pragma: no cover - trl is a dependency
        return "not installed"


@dataclass(frozen=True)
class RLSpec:
    """One policy fine-tuning recipe: GRPO or RLOO with LoRA on the policy, against one reward.

    Rewards are z-scored per user with a mean and sd measured once, before training, on the base policy's own
    samples (``norm_samples`` per training prompt). With ``scale_rewards: group`` (GRPO's default) GRPO's
    advantages are invariant to a per-user affine map, because every group shares one prompt and one user; the
    normalisation then puts the logged rewards of different users and RMs on one scale (reward gain in base-sd
    units). With ``batch`` or ``none`` (RLOO's default: its advantage is the reward minus the mean of the
    group's other completions, optionally standardised over the batch with ``batch``) it also sets how users
    are weighted against each other in a batch. RLOO applies ``beta`` as a KL penalty in the reward (TRL's
    RLOO), GRPO as a KL term in the loss.
    """

    algorithm: Literal["grpo", "rloo", "ppo"] = "grpo"
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
    #: advantage scaling; None: the algorithm's default (GRPO ``group``, RLOO ``none``)
    scale_rewards: Literal["group", "batch", "none"] | None = None
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
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            raise bad("seed", f"must be an integer in [0, {SEED_MAX}], got {self.seed!r}")
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
        if self.scale_rewards is not None and self.scale_rewards not in SCALE_REWARDS:
            raise bad("scale_rewards", f"must be one of {', '.join(SCALE_REWARDS)}, got {self.scale_rewards!r}")
        if self.algorithm == "rloo" and self.scale_rewards == "group":
            raise bad(
                "scale_rewards",
                "RLOO's advantage is the reward minus the mean of the group's other completions; TRL standardises "
                "it over the batch only: use none or batch (or leave it out)",
            )
        if self.group not in GROUPS:
            raise bad("group", f"must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.group == "all" and self.max_users is not None:
            raise bad("max_users", "only applies to group: user (group: all trains one policy for every user)")
        mods = self.lora_target_modules
        if isinstance(mods, str) or not mods or not all(isinstance(m, str) and m for m in mods):
            raise bad("lora_target_modules", f"must be a non-empty list of module names, got {mods!r}")
        if not isinstance(self.gradient_checkpointing, bool):
            raise bad("gradient_checkpointing", f"must be true or false, got {self.gradient_checkpointing!r}")

    @property
    def advantage_scaling(self) -> str:
        """``scale_rewards`` with the algorithm's default filled in."""
        if self.scale_rewards is not None:
            return self.scale_rewards
        return "none" if self.algorithm == "rloo" else "group"

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


#: the placebo arm: GRPO/RLOO against a reward that carries no information about the user
PLACEBOS = ("random", "shuffled", "none")


@dataclass(frozen=True)
class RLPhase:
    """The run config's ``rl:`` key: the recipe plus the configured reward models to train with (None: all) and
    the design around them.

    ``seeds``: every (reward, user group) is trained once per seed, each a separate policy (None: the recipe's
    ``seed`` alone); the CIs resample the seeds. ``placebo``: one more arm trained exactly like the RMs'
    against ``random`` (a fixed random function of (user, prompt, completion), a different one per seed: after
    the per-user z-scoring it has the RMs' scale and no information) or ``shuffled`` (each RM with its users
    permuted: user u is rewarded by another user's RM; one arm per RM), or ``none``. ``kl_matched``: per
    trained RM run, a random LoRA update of the same shape, rescaled to the run's KL from the base policy on the
    evaluated prompts. ``eval_samples``: sampled completions per (prompt, user) and seed, next to the greedy
    one (0: greedy only). ``kl_samples``: completions per (prompt, user) of a KL measurement.
    ``context_items``: each user's first k profile items and first k train pairs (an unseen user's among the
    shots the RMs adapt from; never the answer key) are shown in every prompt of training and evaluation, so one
    shared policy (``group: all``) can personalise; prompts of the shown pairs are not trained on.
    """

    spec: RLSpec = field(default_factory=RLSpec)
    methods: tuple[str, ...] | None = None
    seeds: tuple[int, ...] | None = None
    placebo: Literal["random", "shuffled", "none"] = "random"
    kl_matched: bool = True
    eval_samples: int = 1
    kl_samples: int = 1
    context_items: int = 0

    @property
    def training_seeds(self) -> tuple[int, ...]:
        return self.seeds if self.seeds is not None else (self.spec.seed,)

    @property
    def plan_seed(self) -> int:
        """The seed of the choice of users and training prompts: one choice for every training seed."""
        return self.training_seeds[0]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "rl") -> RLPhase:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping of RL settings, got {type(data).__name__}")
        known = set(_PHASE_KEYS) | {f.name for f in dataclasses.fields(RLSpec)}
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=2)
                hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ConfigError(f"{where}: unknown key {key!r}.{hint}")
        rest = {k: v for k, v in data.items() if k not in _PHASE_KEYS}
        kw: dict[str, Any] = {}
        methods = data.get("methods")
        if methods is not None:
            if isinstance(methods, str) or not isinstance(methods, Sequence) or not methods:
                raise ConfigError(f"{where}.methods: must be a non-empty list of method labels, got {methods!r}")
            if not all(isinstance(m, str) and m for m in methods):
                raise ConfigError(f"{where}.methods: every entry must be a method label, got {methods!r}")
            kw["methods"] = tuple(methods)
        seeds = data.get("seeds")
        if seeds is not None:
            ok = isinstance(seeds, Sequence) and not isinstance(seeds, str) and len(seeds) > 0
            if not ok or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
                raise ConfigError(f"{where}.seeds: must be a non-empty list of integers, got {seeds!r}")
            out = [x for x in seeds if not 0 <= x <= SEED_MAX]
            if out:
                raise ConfigError(f"{where}.seeds: every seed must be an integer in [0, {SEED_MAX}], got {out[0]!r}")
            if len(set(seeds)) < len(seeds):
                raise ConfigError(
                    f"{where}.seeds: every seed must differ (a repeated seed repeats a run), got {seeds!r}"
                )
            if "seed" in data:
                raise ConfigError(f"{where}.seeds: give seed (one run) or seeds (one run per seed), not both")
            kw["seeds"] = tuple(seeds)
        if "placebo" in data:
            placebo = "none" if data["placebo"] is None else data["placebo"]
            if placebo not in PLACEBOS:
                raise ConfigError(f"{where}.placebo: must be one of {', '.join(PLACEBOS)}, got {placebo!r}")
            kw["placebo"] = placebo
        if "kl_matched" in data:
            if not isinstance(data["kl_matched"], bool):
                raise ConfigError(f"{where}.kl_matched: must be true or false, got {data['kl_matched']!r}")
            kw["kl_matched"] = data["kl_matched"]
        for key, low in (("eval_samples", 0), ("kl_samples", 1), ("context_items", 0)):
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < low:
                    raise ConfigError(f"{where}.{key}: must be an integer ≥ {low}, got {value!r}")
                kw[key] = value
        return cls(RLSpec.from_dict(rest, where), **kw)

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
        if self.seeds is not None:
            del out["seed"]
            out["seeds"] = list(self.seeds)
        if self.methods is not None:
            out["methods"] = list(self.methods)
        out |= {
            "placebo": self.placebo,
            "kl_matched": self.kl_matched,
            "eval_samples": self.eval_samples,
            "kl_samples": self.kl_samples,
            "context_items": self.context_items,
        }
        return out


_PHASE_KEYS = ("methods", "seeds", "placebo", "kl_matched", "eval_samples", "kl_samples", "context_items")
