"""``RunConfig``, the run's typed config, and its front doors: YAML (``from_yaml``, the embedded ``default``), a
mapping (``from_dict``), keyword overrides (``override``), ``--set key=value`` pairs (:func:`parse_set`) and Python
(``RunConfig(...)``, checked in ``__post_init__``). Each front door checks through the key table
(:mod:`perbench.config.keys`) and remembers where each key was given, so a check made later names its file and line."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from perbench.config import hashing
from perbench.config.components import Component, plain
from perbench.config.keys import validate
from perbench.config.rules import (
    BOOTSTRAP,
    DEVICE,
    DTYPE,
    MARGIN,
    MODEL,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    RUN_NAME,
    SEED,
)
from perbench.errors import ConfigError
from perbench.specs.endpoint import SERVED, Endpoint
from perbench.specs.located import Where, load_yaml, read_yaml
from perbench.specs.values import Bound
from perbench.specs.values import show as _show


@dataclass
class RunConfig:
    benchmark: Component = field(default_factory=lambda: Component("rubrics"))
    #: the policy that decodes: a model spec, or a model an OpenAI-compatible server serves (``{endpoint: URL, model:
    #: NAME}``, :class:`~perbench.specs.endpoint.Endpoint`): it generates the pool, zero-shot and ICL outputs; the
    #: decoders and metrics that read the policy's logits need a policy in process
    policy: Annotated[str, MODEL] | Annotated[Endpoint, SERVED] = "smollm2"
    rm_backbone: Annotated[str, MODEL] = "smollm2"
    methods: list[Component] = field(default_factory=lambda: [Component("global_bt")])
    #: reference lines scored like methods, never recommended: names, or ``{name: length, unit: chars}``
    baselines: list[Component] = field(default_factory=lambda: [Component("length"), Component("random")])
    decoders: list[Component] = field(
        default_factory=lambda: [Component("zero_shot"), Component("args", {"k": 10, "w": 1.0})]
    )
    #: which systems steer the decoders that generate per (user, prompt), e.g. ARGS and GenARM (default: every
    #: system the decoder can use); each entry is a system's label (``name``, ``name(param=value,…)``) or a
    #: baseline. Best-of-N re-ranks its shared pool with every system whatever this says (scoring is cheap).
    guide_with: list[str] | None = None
    #: few-shot adaptation of unseen users: main number of shots and the curve
    shots: Annotated[int, NON_NEGATIVE] = 10
    shot_curve: list[Annotated[int, POSITIVE]] = field(default_factory=lambda: [1, 2, 5, 10, 20])
    #: the weight w on the reward in policy accuracy's headline (log π(y|x) + w·r(x, y)) for a method that no weighted
    #: decoder guides (None: its headline is not applicable; the curve over w is reported either way); a method
    #: that steers ARGS or GenARM is measured at that decoder's weight
    pa_weight: float | None = None
    #: policy accuracy also under the top-k RGD-induced policy (top-k softmax of log π + w·r, the deployed ARGS's
    #: k), a labelled variant; costs one tree forward of k candidates per response token and method
    pa_rgd: bool = False
    #: k of that top-k for methods that do not guide an ``args`` decoder (default: the first ARGS's k, else 10)
    pa_rgd_k: Annotated[int, POSITIVE] | None = None
    tie_policy: Literal["strict", "half"] = "strict"
    #: bootstrap resamples of every CI (0: no CIs)
    bootstrap: Annotated[int, BOOTSTRAP] = 1000
    max_new_tokens: Annotated[int, POSITIVE] = 96
    max_test_prompts: Annotated[int, POSITIVE] | None = 16
    #: for user-conditioned decoding: how many users per prompt get their own generation (None: all)
    max_gen_users: Annotated[int, POSITIVE] | None = 8
    #: generation batch size, or "auto": 8 on a CPU (the measured fastest), on CUDA the rows the free memory holds
    #: (models/memory.py's estimate from the model's shape and the longest request); either halves on out-of-memory
    batch_size: Annotated[int, POSITIVE] | Literal["auto"] = "auto"
    #: texts per scoring forward (features, pair scores), or "auto": 16 on a CPU, on CUDA what the free memory holds
    feature_batch_size: Annotated[int, POSITIVE] | Literal["auto"] = "auto"
    max_length: Annotated[int, POSITIVE] = 1024
    #: judge LM for rubric aspects that no checker covers (``User.answer_key``), a model spec or an endpoint like
    #: ``policy``'s; None: no judge
    judge: Annotated[str, MODEL] | Annotated[Endpoint, SERVED] | None = None
    #: policies to decode with (decoders × reward models × policies); None: just ``policy``. Each entry is a model
    #: spec or an endpoint like ``policy``'s (a served one runs only the decoders that need no logits, and has no
    #: policy accuracy). Upstream policy accuracy is also computed under each in-process policy.
    policies: list[Annotated[str, MODEL] | Annotated[Endpoint, SERVED]] | None = None
    seed: Annotated[int, SEED] = 0
    #: run the whole config once per seed and report mean ± sd across seeds (None: just ``seed``)
    seeds: list[Annotated[int, SEED]] | None = None
    #: the downstream metric the verdict ranks methods by (``DECODER:QUALITY``); None: the first present of
    #: args/best_of_n rubric satisfaction, judge score, ROUGE-L
    verdict_metric: str | None = None
    #: the user-agnostic RM that per-user gains and "minority users" are measured against (a method or baseline
    #: label of this config; the default may be absent, then the report says there is no reference)
    reference_method: str = "global_bt"
    #: more upstream benchmarks whose test pairs every system is also scored on, as predictors of the downstream
    #: ranking (cells ``rm_acc_on_NAME``, NAME = the loaded benchmark's name): each entry is a benchmark like
    #: ``benchmark`` (e.g. ``{name: file, source: general.jsonl, default_user: anyone}`` for a non-personalized
    #: file). Their users are scored as users no method has seen (each method's unknown-user fallback)
    upstream_benchmarks: list[Component] | None = None
    #: practical-equivalence margin ε of the verdict, in the metric's units (0.05 = 5 points of a proportion):
    #: methods whose 90% CI of the difference to the leader lies inside ±ε are "practically equivalent"; None:
    #: ``equivalence_fraction`` of the metric's headroom where it has one, else 0.05; 0: never claim equivalence
    equivalence_margin: Annotated[float, MARGIN] | None = None
    #: on a metric with a null and a ceiling (a pooled decoder's random pick and oracle), the equivalence margin as a
    #: fraction of that headroom (oracle − random pick) when ``equivalence_margin`` is unset; None: the default 0.1
    equivalence_fraction: Annotated[float, Bound(0, 1, lo_open=True)] | None = None
    #: the upstream metric the verdict's upstream sentence reads, fixed before the run (None: ``rm_acc_all``, RM
    #: accuracy on every test pair); the best of all predictors is reported beside it as a maximum, adjusted
    verdict_predictor: str | None = None
    #: BERTScore-F1 of generations against the user's reference (bundled all-MiniLM-L6-v2)
    bertscore: bool = True
    #: the training-time downstream phase: GRPO (+ LoRA) of the policy against each RM, evaluated like a decoder
    #: (``perbench.training.RLSpec`` fields plus ``methods: [...]``, default every method); None: off
    rl: dict[str, Any] | None = None
    #: reward-model populations: each method crossed with train fractions, fit seeds, shots and its own
    #: parameter grids (``perbench.systems``); None: one system per method
    systems: dict[str, Any] | None = None
    #: adaptive rounds for the decoders that generate per (user, prompt) (ARGS, GenARM, ICL): ``budget``
    #: (generations per decoder, or minutes as "4min"), ``round`` (cells per round), ``metric`` (a quality;
    #: default the verdict metric's); None: every eligible cell at once
    adaptive: dict[str, Any] | None = None
    #: test prompts that get a shared Best-of-N pool (and zero-shot output) for every user with ground truth
    #: on them (None: every test prompt); ``max_test_prompts`` / ``max_gen_users`` limit per-user decoders only
    max_pool_prompts: Annotated[int, POSITIVE] | None = None
    #: how the run's units are computed (``perbench list executors``)
    executor: str = "local"
    #: what one unit of each kind asks of a machine (Ray schedules by it; ``local`` ignores it):
    #: ``{KIND: {num_cpus: N, num_gpus: N, memory_gb: N}}`` for KIND in features, fit, score, decode, rl; unset
    #: kinds and fields keep their defaults (1 CPU, 2 GB, 4 GB for rl, and 1 GPU when the units' device is CUDA)
    resources: dict[str, dict[str, float]] | None = None
    #: auto | cpu | cuda | cuda:N | mps
    device: Annotated[str, DEVICE] = "auto"
    #: auto | float32 | bfloat16 | float16
    dtype: Annotated[str, DTYPE] = "auto"
    #: where the run's units compute, when not ``device`` / ``dtype``: Ray workers on other machines (a CPU driver,
    #: GPU workers: ``unit_device: cuda``); the plan's fingerprints use this dtype (auto: bf16 on CUDA, else fp32),
    #: and the driver loads no model for units it does not compute. The local executor computes units in the driver,
    #: under these. None: ``device`` / ``dtype``
    unit_device: Annotated[str, DEVICE] | None = None
    unit_dtype: Annotated[str, DTYPE] | None = None
    #: let transformers swap model layers for kernels it fetches from the Hugging Face hub and runs (the ``kernels``
    #: package; on load and on ``model.train()``). Off: every model runs its own torch code, offline
    hub_kernels: bool = False
    #: run on a CPU even when the run's estimated CPU time is over an hour (``perbench.runner.estimate``: such a run is
    #: refused with its estimate unless this is true)
    allow_slow: bool = False
    out_dir: Annotated[str, NON_EMPTY] = "runs"
    #: the run's folder inside ``out_dir`` (one plain name; default: ``BENCHMARK-CONFIGHASH``)
    run_name: Annotated[str, RUN_NAME] | None = None

    def __post_init__(self) -> None:
        """The Python front door is checked like the others (``RunConfig(max_new_tokens=-1)`` is refused)."""
        values = validate(
            RunConfig, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, Where("RunConfig")
        )
        for k, v in values.items():
            setattr(self, k, v)
        #: where each key was given (``run.yaml:3: device``, ``command line: seed``), for checks made at run time
        self._origins: dict[str, str] = {}
        #: each key's source and the mapping it was given in (with its lines, from YAML), for :meth:`locate`
        self._given: dict[str, tuple[Where, Any]] = {}

    def where(self, key: str) -> str:
        """Where ``key`` was given, as errors name it: ``FILE:LINE: key``, ``command line: key`` or ``key``."""
        return self._origins.get(key, key)

    def locate(self, key: str, *path: str | int) -> Where:
        """Where ``key`` (and the item ``path`` below it, e.g. ``("policies", 1)``) was given: file, line and key
        path, for the checks the preflight makes (``RunConfig`` for a value given in Python)."""
        src, data = self._given.get(key, (Where("RunConfig"), None))
        where = src.at(key, data)
        value = data.get(key) if isinstance(data, Mapping) else None
        for step in path:
            where = where.at(step, value)
            if isinstance(value, Mapping):
                value = value.get(step)
            elif isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
                value = value[step]
            else:
                value = None
        return where

    # ------------------------------------------------------------------ front doors
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str | Where = "config") -> RunConfig:
        """A config from a mapping of keys (``where`` names its source in error messages)."""
        src = where if isinstance(where, Where) else Where(where)
        if not isinstance(data, Mapping):
            raise src.error(f"a run config is a mapping of keys (benchmark:, methods:, …), got {_show(data)}")
        cfg = cls(**validate(RunConfig, data, src))
        cfg._origins = {k: str(src.at(k, data)) for k in data if isinstance(k, str)}
        cfg._given = {k: (src, data) for k in data if isinstance(k, str)}
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """A config from a YAML file; an empty file means the embedded default (:meth:`default`)."""
        data = read_yaml(path)
        if data is None or data == {}:
            return cls.default()
        src = Where(str(path))
        if not isinstance(data, dict):
            raise Where(str(path), 1).error(
                f"a run config is a mapping of keys (benchmark:, methods:, …), got {_show(data)}"
            )
        return cls.from_dict(data, src)

    @classmethod
    def default(cls) -> RunConfig:
        """The embedded default run (``perbench run`` with no arguments)."""
        return cls.from_yaml(str(resources.files("perbench") / "configs" / "default.yaml"))

    def override(self, where: str = "overrides", /, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (a None value sets the key to null, e.g. ``seeds=None``; a key that
        cannot be null is refused); ``where`` (positional) names them in error messages."""
        data = self.to_dict()
        given = dict(changes)
        data.update(given)
        cfg = RunConfig.from_dict(data, where=where)
        cfg._origins = {**self._origins, **{k: str(Where(where).at(k)) for k in given}}
        cfg._given = {**self._given, **{k: (Where(where), given) for k in given}}
        return cfg

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = plain(v)
        # a baseline without parameters is written as its name, as configs always wrote it (and as hashes read it)
        out["baselines"] = [b.name if not b.params else plain(b) for b in self.baselines]
        return out

    def result_hash(self) -> str:
        """Hash of everything that shapes results (not where they are written)."""
        return hashing.result_hash(self.to_dict())

    def run_dir(self) -> Path:
        """``out_dir`` / the run's folder; ``~`` in ``out_dir`` is the home folder, as a shell reads it."""
        return Path(self.out_dir).expanduser() / (self.run_name or f"{self.benchmark.name}-{self.result_hash()}")


def parse_set(values: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are parsed as YAML (numbers, lists, mappings)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = load_yaml(raw, f"--set {key.strip()}")
    return out
