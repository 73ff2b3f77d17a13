"""What a run will cost, from its plan's sizes and measured per-unit costs, before any model loads.

:func:`plan_sizes` counts what the config asks of the loaded benchmark: the distinct texts φ is extracted for, the
fits (frozen-feature heads and LoRA steps), the scored test items, the Best-of-N pool's samples and cells, the
per-(user, prompt) generations of guided decoders and the cells the analysis reads. :func:`estimate_seconds`
multiplies them by per-unit costs:

- :data:`CPU_COSTS`: measured on 2 CPU cores in fp32 with the bundled SmolLM2-135M (the default run's phases from an
  empty cache divided by their unit counts; LoRA steps, ARGS and per-cell Best-of-N from ``perbench run
  all_methods`` / ``decoders``; docs/benchmarks.md, "What a run costs before it runs"). Model-bound costs scale with
  the models' parameter count (read from their configs without weights: ``tiny-random`` costs almost nothing).
- :data:`GPU_COSTS`: one H200 in bf16, an estimate, not a measurement: the plain-library anchors measured there
  (``transformers`` ``generate`` ≈ 19k tok/s at batch 1,024, a bf16 forward ≈ 689k tok/s at batch 256, docs/
  benchmarks-gpu.md) at the batch sizes perbench targets on a GPU (generation ≥ 10k tok/s, scoring ≥ 300k tok/s);
  the analysis and the report run on the host's CPU at the CPU's cost.

On a CPU, a run whose estimate is over :data:`CPU_LIMIT_S` is refused before any work (``check_cpu_time``), with its
estimate, unless ``allow_slow: true``: a GPU-sized config (``perbench run scale``) says what it would cost instead of
running silently for a day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perbench.errors import ConfigError

if TYPE_CHECKING:
    from perbench.config import RunConfig
    from perbench.data.records import Benchmark

#: a CPU run estimated over this many seconds is refused unless ``allow_slow`` (an hour)
CPU_LIMIT_S = 3600.0
#: parameters of the model the per-unit costs were measured with (SmolLM2-135M: 30 layers, hidden 576, vocab 49,152)
REFERENCE_PARAMS = 30 * 12 * 576**2 + 49152 * 576
#: tokens of a scored text (chat-templated prompt and response), for the GPU's tokens-per-second costs
TEXT_TOKENS = 120

#: seconds per unit, 2 CPU cores, fp32, SmolLM2-135M (module docstring)
CPU_COSTS: dict[str, float] = {
    "feature_text": 0.198,  # φ, token features and log π of a benchmark text: 112.2 s / 566 texts
    "pool_token": 0.00258,  # a sampled pool token: 73.9 s / (512 samples × 56 tokens)
    "pool_feature_text": 0.095,  # φ of a pool sample: 48.5 s / 512
    "pool_quality": 0.00103,  # quality of one (cell, sample): 16.8 s / (512 cells × 32 samples)
    "frozen_fit_pair": 0.00085,  # a frozen-feature head's fit, per train pair: 17.4 s / 20 fits / 1,021 pairs
    "frozen_score_item": 0.00055,  # a frozen-feature system's upstream scoring, per scored pair: 15.5 s / 20 / 1,411
    "zero_shot_prompt": 1.49,  # a greedy zero-shot answer with its quality: 23.8 s / 16 prompts
    "lora_step": 15.0,  # one LoRA training step (all_methods: 13-26 s)
    "lm_score_text": 0.095,  # an LM-run RM's forward over one (user,) text
    "guided_token": 0.0112,  # an ARGS token of one guided system (decoders: 46 s / (64 cells × 64 tokens))
    "analysis_cell": 0.000041,  # the analysis, per cell: 7.9 s / 194,355 cells
}
#: seconds per unit on one H200 in bf16: an estimate (module docstring), never a measurement
GPU_COSTS: dict[str, float] = {
    "feature_text": TEXT_TOKENS / 300_000,
    "pool_token": 1 / 10_000,
    "pool_feature_text": TEXT_TOKENS / 300_000,
    "pool_quality": CPU_COSTS["pool_quality"] / 2,  # checkers, ROUGE on the host; BERTScore on the GPU
    "frozen_fit_pair": CPU_COSTS["frozen_fit_pair"] / 4,
    "frozen_score_item": CPU_COSTS["frozen_score_item"] / 4,
    "zero_shot_prompt": 56 / 10_000 + 0.05,
    "lora_step": 0.15,
    "lm_score_text": TEXT_TOKENS / 300_000,
    "guided_token": 1.2 / 2_000,  # ARGS ≈ 1.2 × greedy; a few hundred rows at once decode ≈ 2k tok/s
    "analysis_cell": CPU_COSTS["analysis_cell"],
}
#: what scales with the model's size (the rest is the host's work)
MODEL_BOUND = (
    "feature_text",
    "pool_token",
    "pool_feature_text",
    "zero_shot_prompt",
    "lora_step",
    "lm_score_text",
    "guided_token",
)


@dataclass(frozen=True)
class PlanSizes:
    """How much of each kind of work a run asks for (see the module docstring); ``sizes`` names them by cost."""

    sizes: dict[str, float]
    systems: int

    def line(self) -> str:
        s = self.sizes
        return (
            f"{self.systems} systems, {int(s['feature_text'])} texts, {int(s['lora_step'])} LoRA steps, "
            f"{int(s['pool_quality'] / max(s.get('pool_size', 1), 1))} Best-of-N cells, "
            f"{int(s['guided_token'])} guided tokens, {int(s['analysis_cell'])} cells"
        )


def plan_sizes(cfg: RunConfig, bench: Benchmark) -> PlanSizes:
    """The run's sizes by cost kind (see :data:`CPU_COSTS`), from the config and the loaded benchmark."""
    from perbench import registry
    from perbench.config import Where
    from perbench.rewards.base import FeatureRM
    from perbench.systems import SystemsSpec, expand

    spec = None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, Where("systems"))
    every = expand(cfg.methods, cfg.baselines, spec, seed=cfg.seed, shots=cfg.shots)
    systems = [sd for sd in every if not sd.baseline]
    n_sys = len(every)
    test = [p for p in bench.pairs if p.split == "test"] + [p for ps in bench.pair_sets.values() for p in ps]
    train = [p for p in bench.pairs if p.split == "train"]
    texts = {(str(p.prompt), t) for p in bench.pairs for t in (p.chosen, p.rejected)}
    texts |= {(str(p.prompt), t) for ps in bench.pair_sets.values() for p in ps for t in (p.chosen, p.rejected)}
    test_texts = {(str(p.prompt), t) for p in test for t in (p.chosen, p.rejected)}
    frozen = lora_steps = 0.0
    lm_items = 0.0
    lm_personal = lm_agnostic = 0
    for sd in systems:
        cls = registry.reward_models.get(sd.method.name)
        if issubclass(cls, FeatureRM):
            frozen += 1
            continue
        steps = sd.method.params.get("steps", _default(cls, "steps"))
        lora_steps += float(steps or 0)
        # an LM-run RM scores each distinct (user,) text once (``score_distinct``)
        if cls.user_agnostic:
            lm_agnostic += 1
            lm_items += len(test_texts)
        else:
            lm_personal += 1
            lm_items += 2 * len(test)
    by_prompt: dict[str, set[str]] = {}
    for p in bench.pairs:
        if p.split == "test":
            by_prompt.setdefault(str(p.prompt), set()).add(p.user_id)
    pool_prompts = list(by_prompt)[: cfg.max_pool_prompts] if cfg.max_pool_prompts else list(by_prompt)
    pool_cells = sum(len(by_prompt[k]) for k in pool_prompts)
    pool_samples = pool_size = 0.0
    guided_cells = 0.0
    zero_prompts = 0.0
    gen_prompts = min(len(by_prompt), cfg.max_test_prompts or len(by_prompt))
    gen_users = min(len(bench.users), cfg.max_gen_users or len(bench.users))
    for d in cfg.decoders:
        if d.name == "best_of_n":
            size = int(d.params.get("pool") or d.params.get("n") or 16)
            pool_size = max(pool_size, size)
            pool_samples += len(pool_prompts) * size
            if not d.params.get("pool"):  # per-cell sampling: every cell draws its own n samples
                pool_samples += (gen_prompts * gen_users - len(pool_prompts)) * size
        elif d.name == "zero_shot":
            zero_prompts += len(pool_prompts) or gen_prompts
        else:
            eligible = [sd for sd in systems if _guides(d.name, sd.method.name)]
            guides = len(cfg.guide_with) if cfg.guide_with is not None else len(eligible)
            guided_cells += gen_prompts * gen_users * guides
    lm_items += lm_personal * pool_cells * pool_size + lm_agnostic * len(pool_prompts) * pool_size
    cells = n_sys * (4 * len(test) + 10 * pool_cells) + guided_cells * 8
    sizes = {
        "feature_text": float(len(texts)),
        "pool_token": pool_samples * cfg.max_new_tokens,
        "pool_feature_text": pool_samples,
        "pool_quality": pool_cells * pool_size,
        "pool_size": pool_size,
        "frozen_fit_pair": frozen * len(train),
        "frozen_score_item": (frozen + len(cfg.baselines)) * len(test),
        "zero_shot_prompt": zero_prompts,
        "lora_step": lora_steps,
        "lm_score_text": lm_items,
        "guided_token": guided_cells * cfg.max_new_tokens,
        "analysis_cell": float(cells),
    }
    return PlanSizes(sizes, n_sys)


def _default(cls: type, name: str) -> Any:
    import inspect

    p = inspect.signature(cls).parameters.get(name)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def _guides(decoder: str, method: str) -> bool:
    from perbench import registry

    problem = getattr(registry.decoders.get(decoder), "rm_problem", None)
    return problem is None or problem(registry.reward_models.get(method)) is None


def model_scale(spec: str) -> float:
    """The model's parameter count over the reference model's (1.0 when its config cannot be read); the count is
    memoized by the model's identity (a rerun reads no config)."""
    from perbench.memo import memo_json
    from perbench.models.identity import ModelSpec, model_identity

    if ModelSpec.parse(spec).name == "tiny-random":
        return 1e-3
    ident = model_identity(spec)
    try:
        params = _params(spec) if ident is None else memo_json("model_params", [ident], lambda: _params(spec))
    except (ConfigError, OSError, ValueError, AttributeError, TypeError):
        return 1.0
    return float(params) / REFERENCE_PARAMS


def _params(spec: str) -> int:
    """The parameter count of ``spec``'s decoder stack and embeddings, from its config alone."""
    from perbench.models.loader import text_config

    c = text_config(spec)
    hidden, layers, vocab = int(c.hidden_size), int(c.num_hidden_layers), int(c.vocab_size)
    inter = int(getattr(c, "intermediate_size", 4 * hidden) or 4 * hidden)
    return layers * (4 * hidden**2 + 3 * hidden * inter) + vocab * hidden


def estimate_seconds(sizes: PlanSizes, costs: dict[str, float], scale: float = 1.0) -> dict[str, float]:
    """Seconds per cost kind (model-bound kinds times ``scale``), and their ``total``."""
    out = {k: sizes.sizes[k] * c * (scale if k in MODEL_BOUND else 1.0) for k, c in costs.items() if k in sizes.sizes}
    out["total"] = sum(out.values())
    return out


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_cpu_time(cfg: RunConfig, bench: Benchmark) -> None:
    """Refuse a run on a CPU whose estimated time is over :data:`CPU_LIMIT_S`, unless ``allow_slow`` (one line, before
    any model loads)."""
    if cfg.allow_slow or _runs_elsewhere(cfg):
        return
    from perbench.device import resolve_device

    if resolve_device(cfg.device, cfg.dtype).device != "cpu":
        return
    sizes = plan_sizes(cfg, bench)
    # a policy served by an inference endpoint costs this CPU no decoding (its scale: the RM backbone's)
    scale = max(
        model_scale(cfg.rm_backbone), model_scale(cfg.policy if isinstance(cfg.policy, str) else cfg.rm_backbone)
    )
    cpu = estimate_seconds(sizes, CPU_COSTS, scale)["total"]
    if cpu <= CPU_LIMIT_S:
        return
    gpu = estimate_seconds(sizes, GPU_COSTS, scale)["total"]
    raise ConfigError(
        f"this run would take about {duration(cpu)} on this CPU (estimated from its plan: "
        f"{sizes.line()}; about {duration(gpu)} on one H200); it is sized for a GPU: run it with --device cuda, or "
        "pass --set allow_slow=true to run it here anyway"
    )


def _runs_elsewhere(cfg: RunConfig) -> bool:
    """Units computed on other machines (Ray workers) or on a named other device cost this CPU nothing."""
    from perbench import registry

    if getattr(registry.executors.get(cfg.executor), "remote", False) and cfg.unit_device not in (None, "cpu"):
        return True
    return cfg.unit_device not in (None, "auto", "cpu")
