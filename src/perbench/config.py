"""One run config, three front doors: YAML (``perbench run cfg.yaml``), CLI flags, Python (``RunConfig(...)``).

Every front door is checked before anything loads, and every problem is a :class:`~perbench.errors.ConfigError`
naming the file, line (for YAML) and key, what is allowed, and a "Did you mean" where a name is misspelt:

- unknown keys; each field's type and range, read from its annotation (``bool``/``int``/``float``/``str``,
  ``Optional``, ``list``, ``Literal``, with :class:`Bound` and :class:`Rule` metadata): integers are never taken
  from strings, non-finite numbers are refused;
- component parameters (benchmark, methods, decoders) against the registered class's or loader's signature
  (names, required ones, value types), decoders' parameter ranges, and each method's and decoder's own
  constructor checks (a parameter a constructor refuses, e.g. ``trust_remote_code`` without the explicit
  permission ``--trust-remote-code``, is located at that parameter: :class:`~perbench.errors.ParamError`);
- ``device``, ``dtype``, ``run_name`` (one plain path component), ``verdict_metric``'s form, the ``systems:``,
  ``adaptive:``, ``rl:`` and ``resources:`` blocks (their specs are plain data at the base, ``perbench.specs``);
- YAML: syntax errors with their line, duplicate keys, a directory, a missing or non-regular file as config, an
  alias expansion too large to be a config. An empty file means the embedded default run. Numbers follow YAML 1.2
  (``0100`` is 100, ``0o17`` octal, ``1:30`` text, ``1e-3`` a number); PyYAML's YAML 1.1 rules would read
  ``0100`` as 64 and ``1:30`` as 90.

The config is a leaf: it imports nothing of perbench but ``errors``, ``io``, ``registry`` and ``specs``. What needs a
room's knowledge -- which names are models, the systems the config expands to (and so ``guide_with``,
``reference_method``, ``rl.methods``), which qualities the adaptive rounds can rank by -- is checked in the preflight
that ``run`` and ``validate`` share (``perbench.runner.preflight.check_config``), located by :meth:`RunConfig.locate`.

Every value that shapes a result goes into the config hash that names the run directory, so the same config
resumes the same run.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import math
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from perbench.errors import ConfigError, ParamError
from perbench.specs.adaptive import AdaptiveSpec

# the located YAML and the value checks the config is built from, defined at the base (``perbench.specs``) and
# importable from here as before
from perbench.specs.located import MAX_NODES as MAX_NODES
from perbench.specs.located import ConfigLoader as ConfigLoader
from perbench.specs.located import LinedDict as LinedDict
from perbench.specs.located import LinedList as LinedList
from perbench.specs.located import MissingConfigError as MissingConfigError
from perbench.specs.located import Where as Where
from perbench.specs.located import load_yaml as load_yaml
from perbench.specs.located import read_yaml as read_yaml
from perbench.specs.resources import RESOURCE_FIELDS as RESOURCE_FIELDS
from perbench.specs.resources import RESOURCE_KINDS as RESOURCE_KINDS
from perbench.specs.resources import parse_resources
from perbench.specs.rl import RLPhase
from perbench.specs.systems import SystemsSpec
from perbench.specs.values import Bound as Bound
from perbench.specs.values import Rule as Rule
from perbench.specs.values import check_value as check_value
from perbench.specs.values import describe as describe
from perbench.specs.values import show as _show

# -------------------------------------------------------------------------------------------- field rules
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")
DEVICES = "auto, cpu, cuda, cuda:N, mps"
DTYPES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = ("fp32", "bf16", "fp16")


def _device_problem(v: str) -> str | None:
    return None if _DEVICE.fullmatch(v) else f"{v!r} is not a device; allowed: {DEVICES}"


def _dtype_problem(v: str) -> str | None:
    ok = v in DTYPES or v in _DTYPE_ALIASES
    return None if ok else f"{v!r} is not a dtype; allowed: {', '.join(DTYPES)}"


def _model_problem(v: str) -> str | None:
    """Which strings name a model is the models room's rule (``perbench.models.loader.model_name_problem``), run in
    the preflight (``perbench.runner.preflight.check_config``); here a model is any string."""
    return None


#: the longest file name most file systems allow, in bytes
NAME_MAX = 255


def _run_name_problem(v: str) -> str | None:
    plain = v not in ("", ".", "..") and "/" not in v and "\\" not in v and "\0" not in v and ":" not in v[:2]
    size = len(v.encode("utf-8", "surrogatepass"))
    if plain and size > NAME_MAX:
        return f"a folder name of {size} bytes; file systems allow at most {NAME_MAX}: choose a shorter run_name"
    if plain:
        return None
    return (
        f"{v!r} is not one plain folder name: run_name names a folder inside out_dir, so it cannot be empty, "
        "'.' or '..', absolute, or contain / or \\ (set out_dir to write elsewhere)"
    )


def _nonempty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


POSITIVE = Bound(1)
NON_NEGATIVE = Bound(0)
SEED = Bound(0, 2**32 - 1)
#: the most bootstrap replicates a CI draws: the replicate matrix is allocated at once (replicates × columns)
MAX_BOOTSTRAP = 100_000
BOOTSTRAP = Bound(0, MAX_BOOTSTRAP)


def margin_problem(v: float) -> str | None:
    """An equivalence margin is in the metric's own units (0.05 = 5 points of a proportion), in [0, 1): every
    quality perbench ranks on lies in [0, 1], so a margin of 1 or more would call any two methods equivalent."""
    if math.isfinite(v) and 0 <= v < 1:
        return None
    hint = f" (did you mean {v / 100:g}, i.e. {v:g} points?)" if math.isfinite(v) and 1 <= v < 100 else ""
    return f"expected a margin in the metric's own units in [0, 1) (0.05 = 5 points of a proportion), got {v!r}{hint}"


MARGIN = Rule(margin_problem, "a margin in the metric's own units, in [0, 1) (0.05 = 5 points)")
MODEL = Rule(_model_problem, "a model: a bundled alias, tiny-random[:SEED], a local folder or .gguf file, or org/name")
DEVICE = Rule(_device_problem, f"a device ({DEVICES})")
DTYPE = Rule(_dtype_problem, f"a dtype ({', '.join(DTYPES)})")
RUN_NAME = Rule(_run_name_problem, "one plain folder name")
NON_EMPTY = Rule(_nonempty, "a non-empty string")

#: ranges of decoder parameters (by parameter name; ``_DECODER_OVERRIDES`` for decoders that differ)
_DECODER_BOUNDS: dict[str, Bound] = {
    "k": Bound(1),
    "n": Bound(1),
    "alpha": Bound(0),
    "temperature": Bound(0, lo_open=True),
    "top_p": Bound(0, 1, lo_open=True),
    "sample_batch": Bound(1),
    "pool": Bound(1),
    "max_item_chars": Bound(1),
}
_DECODER_OVERRIDES: dict[str, dict[str, Bound]] = {"icl": {"k": Bound(0)}, "icl_rag": {"k": Bound(0)}}


def _method_bound(name: str) -> Bound | None:
    """The range of a method parameter by its name: a penalty weight (``l2``, ``adapt_l2``, ``anchor_ridge``, …)
    is ≥ 0 (a negative one rewards large weights, and the fit diverges or returns nonsense)."""
    return NON_NEGATIVE if name.endswith(("l2", "ridge")) else None


# ------------------------------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Component:
    """A registry name plus keyword parameters, e.g. ``args`` with ``{"k": 10, "w": 1.0}``."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any, where: str | Where) -> Component:
        """A name, ``{name: NAME, <params>}`` or ``{NAME: {<params>}}`` (no registry check)."""
        return _parse_component(value, where if isinstance(where, Where) else Where(where))[0]

    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    def to_dict(self) -> dict[str, Any]:
        """``{name: NAME, <params>}``, or ``{NAME: {<params>}}`` when a parameter is itself called ``name`` (the
        ``file`` loader's): both parse back to the same component."""
        if "name" in self.params:
            return {self.name: dict(self.params)}
        return {"name": self.name, **self.params}


def _plain(value: Any) -> Any:
    """``value`` as plain YAML/JSON data: components as mappings, and the located mappings and sequences that a
    config file was parsed into as plain dicts and lists."""
    if isinstance(value, Component):
        return _plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parse_component(value: Any, where: Where) -> tuple[Component, Any, Where]:
    """-> (component, the mapping its parameters came from, the location of those parameters)."""
    form = "expected a name or {name: NAME, <params>}"
    if isinstance(value, Component):
        name, params, container, at = value.name, value.params, value.params, where
    elif isinstance(value, str):
        name, params, container, at = value, {}, None, where
    elif isinstance(value, dict) and "name" in value:
        name = value["name"]
        params = {k: v for k, v in value.items() if k != "name"}
        container, at = value, where
    elif isinstance(value, dict) and len(value) == 1:
        ((name, params),) = value.items()
        at = where.at(str(name), value)
        params = {} if params is None else params
        container = params
        if not isinstance(params, dict):
            raise at.error(f"the parameters of {name!r} must be a mapping, got {_show(params)}")
    else:
        raise where.error(f"{form}, got {_show(value)}")
    if not isinstance(name, str) or not name.strip():
        raise where.error(f"{form}; the name must be a non-empty string, got {_show(name)}")
    bad = [k for k in params if not isinstance(k, str)]
    if bad:
        raise at.error(f"parameter names are strings, got {_show(bad[0])}")
    return Component(name, dict(params)), container, at


def check_component(value: Any, where: Where, kind: str) -> Component:
    """Parse and check one component of ``kind`` (benchmark, method, decoder) against its registry entry: its
    parameters against the registered class's or loader's signature, decoders' ranges, and (not for a benchmark,
    whose loader would load the data) the constructor's own checks."""
    from perbench import registry

    reg = {"benchmark": registry.benchmarks, "method": registry.reward_models, "decoder": registry.decoders}[kind]
    comp, container, at = _parse_component(value, where)
    try:
        reg.entry(comp.name)
        target = reg.get(comp.name)
        accepted = registry.accepted_params(target)
    except registry.UnknownNameError as e:
        raise where.error(str(e)) from None
    except ImportError as e:
        raise where.error(
            f"{kind} {comp.name!r} cannot be imported ({e}); is its optional dependency installed?"
        ) from e
    if accepted is not None:
        _check_params(comp, accepted, at, container, kind)
    if kind in ("decoder", "method"):
        bounds = {**_DECODER_BOUNDS, **_DECODER_OVERRIDES.get(comp.name, {})} if kind == "decoder" else {}
        for k, v in comp.params.items():
            b = bounds.get(k) if kind == "decoder" else _method_bound(k)
            if b is not None and isinstance(v, int | float) and not isinstance(v, bool) and not b.holds(v):
                kind_text = "an integer" if isinstance(v, int) else "a number"
                raise at.at(k, container).error(f"expected {kind_text} {b.text()}, got {v!r}")
    if kind != "benchmark":  # the constructor's own checks; a benchmark loader would load the data
        try:
            target(**comp.params)
        except ParamError as e:  # a parameter the component refuses (remote code without the permission, ...)
            raise at.at(e.param, container).error(e.problem) from None
        except ConfigError as e:
            raise at.error(str(e)) from None
        except (ValueError, TypeError) as e:
            text = str(e)
            raise at.error(text if text.startswith(comp.name) else f"{comp.name}: {text}") from None
    return comp


def _check_params(comp: Component, accepted: Mapping[str, Any], at: Where, container: Any, kind: str) -> None:
    names = list(accepted)
    listed = ", ".join(names) or "none"
    for k in comp.params:
        if k not in accepted:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise at.at(k, container).error(f"{kind} {comp.name!r}: unknown parameter {k!r}.{hint} Accepted: {listed}")
    missing = [p.name for p in accepted.values() if p.required and p.name not in comp.params]
    if missing:
        first = missing[0]
        spec = f"{{name: {comp.name}, {first}: ...}}"
        key, example = {"benchmark": ("benchmark", spec), "method": ("methods", f"[{spec}]")}.get(
            kind, ("decoders", f"[{spec}]")
        )
        raise at.error(
            f"{kind} {comp.name!r} needs {', '.join(missing)}: give it in the config ({key}: {example}) or with "
            f"--set '{key}={example}'. Accepted: {listed}"
        )
    for k, v in comp.params.items():
        check_value(v, accepted[k].annotation, at.at(k, container))


# --------------------------------------------------------------------------------------------------- the config
@dataclass
class RunConfig:
    benchmark: Component = field(default_factory=lambda: Component("rubrics"))
    policy: Annotated[str, MODEL] = "smollm2"
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
    #: generation batch size, or "auto" (a device default: 8 on CPU, 32 on CUDA); either halves on out-of-memory
    batch_size: Annotated[int, POSITIVE] | Literal["auto"] = 8
    feature_batch_size: Annotated[int, POSITIVE] = 16
    max_length: Annotated[int, POSITIVE] = 1024
    #: judge LM for rubric aspects that no checker covers (``User.answer_key``); None: no judge
    judge: Annotated[str, MODEL] | None = None
    #: policies to decode with (decoders × reward models × policies); None: just ``policy``. Upstream policy
    #: accuracy always uses ``policy``.
    policies: list[Annotated[str, MODEL]] | None = None
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
    #: kinds and fields keep their defaults (1 CPU, 2 GB, 4 GB for rl, and 1 GPU when the device is CUDA)
    resources: dict[str, dict[str, float]] | None = None
    #: auto | cpu | cuda | cuda:N | mps
    device: Annotated[str, DEVICE] = "auto"
    #: auto | float32 | bfloat16 | float16
    dtype: Annotated[str, DTYPE] = "auto"
    out_dir: Annotated[str, NON_EMPTY] = "runs"
    #: the run's folder inside ``out_dir`` (one plain name; default: ``BENCHMARK-CONFIGHASH``)
    run_name: Annotated[str, RUN_NAME] | None = None

    def __post_init__(self) -> None:
        """The Python front door is checked like the others (``RunConfig(max_new_tokens=-1)`` is refused)."""
        values = _validate({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, Where("RunConfig"))
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
        cfg = cls(**_validate(data, src))
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
            out[f.name] = _plain(v)
        # a baseline without parameters is written as its name, as configs always wrote it (and as hashes read it)
        out["baselines"] = [b.name if not b.params else _plain(b) for b in self.baselines]
        return out

    def result_hash(self) -> str:
        """Hash of everything that shapes results (not where they are written)."""
        d = self.to_dict()
        for k in ("out_dir", "run_name", "batch_size", "feature_batch_size", "executor", "resources"):
            d.pop(k, None)
        for k in (
            "judge",
            "pa_rgd_k",
            "policies",
            "seeds",
            "verdict_metric",
            "equivalence_margin",
            "equivalence_fraction",
            "verdict_predictor",
            "rl",
            "upstream_benchmarks",
            "systems",
            "adaptive",
            "max_pool_prompts",
        ):  # optional extras: absent = the hash configs had before they existed
            if d.get(k) is None:
                d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def run_dir(self) -> Path:
        """``out_dir`` / the run's folder; ``~`` in ``out_dir`` is the home folder, as a shell reads it."""
        return Path(self.out_dir).expanduser() / (self.run_name or f"{self.benchmark.name}-{self.result_hash()}")


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(RunConfig, include_extras=True)


def _defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(RunConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _validate(data: Mapping[Any, Any], src: Where) -> dict[str, Any]:
    """Check ``data`` (some or all of RunConfig's keys) -> every field's value, components parsed."""
    hints = _hints()
    names = list(hints)
    for key in data:
        if not isinstance(key, str):
            raise src.error(f"config keys are names, got {_show(key)}")
        if key not in hints:
            close = difflib.get_close_matches(key, sorted(names), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise src.at(key, data).error(f"unknown key.{hint}")
    values = {**_defaults(), **data}
    try:
        for key in data:
            where, value = src.at(key, data), data[key]
            if key == "benchmark":
                values[key] = check_component(value, where, "benchmark")
            elif key == "resources":
                values[key] = parse_resources(value, where)
            elif key in ("methods", "decoders", "baselines", "upstream_benchmarks"):
                if value is None and key == "upstream_benchmarks":
                    continue
                if not isinstance(value, list | tuple):
                    raise where.error(f"expected a list of {key}, got {_show(value)}")
                kind = {"decoders": "decoder", "upstream_benchmarks": "benchmark"}.get(key, "method")
                values[key] = [check_component(v, where.at(i, value), kind) for i, v in enumerate(value)]
            else:
                check_value(value, hints[key], where)
                values[key] = list(value) if isinstance(value, tuple) else value
    except RecursionError:
        raise src.error("nested too deeply to be a run config") from None
    _cross_checks(values, data, src)
    return values


def _cross_checks(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> None:
    """Checks that involve several fields or a registry. What needs a room's knowledge (which names are models,
    the systems a config expands to, which qualities exist) is the preflight's (``runner/preflight.py``)."""
    from perbench import registry

    def at(key: str) -> Where:
        return src.at(key, data)

    try:
        registry.executors.entry(v["executor"])
    except registry.UnknownNameError as e:
        raise at("executor").error(str(e)) from None
    labels = [m.label() for m in v["methods"] + v["baselines"]]
    seen: set[str] = set()
    for i, label in enumerate(labels):
        if label in seen:
            where = at("methods") if i < len(v["methods"]) else at("baselines")
            raise where.error(f"{label!r} is listed twice (as a method or baseline); list each once")
        seen.add(label)
    if v["systems"] is not None:
        _check_systems_block(v, data, src)
    if v["rl"] is not None:
        RLPhase.from_dict(v["rl"], where=str(at("rl")))
    if v["adaptive"] is not None:
        AdaptiveSpec.from_dict(v["adaptive"], at("adaptive"))
    metric = v["verdict_metric"]
    if metric is not None:
        decoder, sep, quality = metric.partition(":")
        if not sep or not decoder or not quality:
            raise at("verdict_metric").error(
                f"expected DECODER:QUALITY (e.g. args:rubric_satisfaction), got {metric!r}"
            )
    seeds = v["seeds"]
    if seeds is not None:
        if not seeds:
            raise at("seeds").error("expected at least one seed (or null for just `seed`)")
        dup = sorted({s for s in seeds if seeds.count(s) > 1})
        if dup:
            raise at("seeds").error(f"seed {dup[0]} is listed twice")
        name = v["run_name"]
        longest = None if name is None else f"{name}-seed{max(seeds)}"
        if longest is not None and len(longest.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise at("run_name").error(
                f"with seeds each seed's run folder is RUN_NAME-seedN: {len(longest.encode('utf-8', 'surrogatepass'))} "
                f"bytes for seed {max(seeds)}; file systems allow at most {NAME_MAX}: choose a shorter run_name"
            )


def _check_systems_block(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> None:
    """The ``systems:`` block parses, and the methods it names are this config's (what it expands to is checked
    in the preflight: ``perbench.systems.check_systems``)."""
    raw = v["systems"]
    where = src.at("systems", data)
    spec = SystemsSpec.from_dict(raw, where)
    names = {m.name for m in v["methods"]} | {m.label() for m in v["methods"]}
    named: list[tuple[str, int | str, str, str]] = [("methods", i, m, "") for i, m in enumerate(spec.methods or ())] + [
        ("params", m, m, ", so its grid would expand nothing") for m in spec.params
    ]
    for key, at, m, why in named:
        if m not in names:
            close = difflib.get_close_matches(m, sorted(names), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            problem = f"{m!r} is not one of this config's methods{why}.{hint}"
            raise where.at(key, raw).at(at, raw.get(key)).error(problem)


def parse_set(values: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are parsed as YAML (numbers, lists, mappings)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = load_yaml(raw, f"--set {key.strip()}")
    return out
