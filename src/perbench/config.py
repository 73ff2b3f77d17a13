"""One run config, three front doors: YAML (``perbench run cfg.yaml``), CLI flags, Python (``RunConfig(...)``).

Unknown keys are errors with a "Did you mean" hint; every value that shapes a result goes into the
config hash that names the run directory, so the same config resumes the same run.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class Component:
    """A registry name plus keyword parameters, e.g. ``args`` with ``{"k": 10, "w": 1.0}``."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any, where: str) -> Component:
        if isinstance(value, Component):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict):
            if "name" in value:
                return cls(str(value["name"]), {k: v for k, v in value.items() if k != "name"})
            if len(value) == 1:
                ((name, params),) = value.items()
                return cls(str(name), dict(params or {}))
        raise ValueError(f"{where}: expected a name or {{name: ..., <params>}}, got {value!r}")

    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.params}


@dataclass
class RunConfig:
    benchmark: Component = field(default_factory=lambda: Component("rubrics"))
    policy: str = "smollm2"
    rm_backbone: str = "smollm2"
    methods: list[Component] = field(default_factory=lambda: [Component("global_bt")])
    baselines: list[str] = field(default_factory=lambda: ["length", "random"])
    decoders: list[Component] = field(
        default_factory=lambda: [Component("zero_shot"), Component("args", {"k": 10, "w": 1.0})]
    )
    #: which methods steer reward-guided decoders (default: every method the decoder can use)
    guide_with: list[str] | None = None
    #: few-shot adaptation of unseen users: main number of shots and the curve
    shots: int = 10
    shot_curve: list[int] = field(default_factory=lambda: [1, 2, 5, 10, 20])
    #: weight of the reward in policy accuracy's teacher-forced RGD score
    pa_weight: float = 1.0
    #: policy accuracy also under the RGD-induced policy (top-k softmax of log π + w·r, the deployed ARGS's k);
    #: costs one tree forward of k candidates per response token and method
    pa_rgd: bool = False
    #: k of that top-k when no ``args`` decoder is configured (w is then ``pa_weight``)
    pa_rgd_k: int | None = None
    tie_policy: Literal["strict", "half"] = "strict"
    bootstrap: int = 1000
    max_new_tokens: int = 96
    max_test_prompts: int | None = 16
    #: for user-conditioned decoding: how many users per prompt get their own generation (None: all)
    max_gen_users: int | None = 8
    batch_size: int = 8
    feature_batch_size: int = 16
    max_length: int = 1024
    #: judge LM for rubric aspects that no checker covers (``User.answer_key``); None: no judge
    judge: str | None = None
    #: policies to decode with (decoders × reward models × policies); None: just ``policy``. Upstream policy
    #: accuracy always uses ``policy``.
    policies: list[str] | None = None
    seed: int = 0
    #: run the whole config once per seed and report mean ± sd across seeds (None: just ``seed``)
    seeds: list[int] | None = None
    #: the downstream metric the verdict ranks methods by (``DECODER:QUALITY``); None: the first present of
    #: args/best_of_n rubric satisfaction, judge score, ROUGE-L
    verdict_metric: str | None = None
    #: the user-agnostic RM that per-user gains and "minority users" are measured against
    reference_method: str = "global_bt"
    #: BERTScore-F1 of generations against the user's reference (bundled all-MiniLM-L6-v2)
    bertscore: bool = True
    #: how independent units of a phase run (``perbench list executors``)
    executor: str = "local"
    device: str = "auto"
    dtype: str = "auto"
    out_dir: str = "runs"
    run_name: str | None = None

    # ------------------------------------------------------------------ front doors
    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> RunConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names:
                close = difflib.get_close_matches(key, sorted(names), n=2)
                hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ValueError(f"{where}: unknown key {key!r}.{hint}")
            kwargs[key] = value
        cfg = cls(**kwargs)
        cfg._normalise(where)
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        import yaml

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a run config is a mapping, got {type(data).__name__}")
        return cls.from_dict(data, where=str(path))

    @classmethod
    def default(cls) -> RunConfig:
        """The embedded default run (``perbench run`` with no arguments)."""
        return cls.from_yaml(str(resources.files("perbench") / "configs" / "default.yaml"))

    def override(self, **changes: Any) -> RunConfig:
        data = self.to_dict()
        data.update({k: v for k, v in changes.items() if v is not None})
        return RunConfig.from_dict(data, where="overrides")

    def _normalise(self, where: str) -> None:
        self.benchmark = Component.parse(self.benchmark, f"{where}: benchmark")
        self.methods = [Component.parse(m, f"{where}: methods[{i}]") for i, m in enumerate(self.methods)]
        self.decoders = [Component.parse(d, f"{where}: decoders[{i}]") for i, d in enumerate(self.decoders)]
        self.baselines = list(self.baselines)
        if self.tie_policy not in ("strict", "half"):
            raise ValueError(f"{where}: tie_policy must be 'strict' or 'half', got {self.tie_policy!r}")
        if self.pa_rgd_k is not None and self.pa_rgd_k < 1:
            raise ValueError(f"{where}: pa_rgd_k must be ≥ 1 (or null), got {self.pa_rgd_k}")
        if self.shots < 0 or any(n <= 0 for n in self.shot_curve):
            raise ValueError(f"{where}: shots must be ≥ 0 and shot_curve entries > 0")
        from perbench import registry

        for c in self.methods:
            registry.reward_models.entry(c.name)
        for b in self.baselines:
            registry.reward_models.entry(b)
        for c in self.decoders:
            registry.decoders.entry(c.name)
        registry.benchmarks.entry(self.benchmark.name)
        registry.executors.entry(self.executor)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Component):
                v = v.to_dict()
            elif isinstance(v, list):
                v = [x.to_dict() if isinstance(x, Component) else x for x in v]
            out[f.name] = v
        return out

    def result_hash(self) -> str:
        """Hash of everything that shapes results (not where they are written)."""
        d = self.to_dict()
        for k in ("out_dir", "run_name", "batch_size", "feature_batch_size", "executor"):
            d.pop(k, None)
        for k in (
            "judge",
            "pa_rgd_k",
            "policies",
            "seeds",
            "verdict_metric",
        ):  # optional extras: absent = the hash configs had before they existed
            if d.get(k) is None:
                d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def run_dir(self) -> Path:
        return Path(self.out_dir) / (self.run_name or f"{self.benchmark.name}-{self.result_hash()}")


def parse_set(values: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are parsed as YAML (numbers, lists, mappings)."""
    import yaml

    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(raw)
    return out
