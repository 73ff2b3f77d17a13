"""One generic registry per extensible concept (benchmarks, reward models, decoders, metrics, executors).

Entries may be lazy ``"module:attr"`` strings so that importing :mod:`perbench` never imports torch.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """An unknown registry name; the message suggests the closest known names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text.
        return str(self.args[0])


@dataclass
class Entry(Generic[T]):
    name: str
    target: T | str
    help: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Maps names to objects or lazy ``"module:attr"`` targets."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, target: T | str, *, help: str = "", defaults: dict[str, Any] | None = None
    ) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = Entry(name, target, help, dict(defaults or {}))

    def decorator(self, name: str, *, help: str = "") -> Callable[[T], T]:
        def wrap(obj: T) -> T:
            self.register(name, obj, help=help)
            return obj

        return wrap

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            known = ", ".join(sorted(self._entries))
            raise UnknownNameError(f"unknown {self.kind} {name!r}.{hint} Known: {known}") from None

    def get(self, name: str) -> T:
        entry = self.entry(name)
        if isinstance(entry.target, str):
            module_name, _, attr = entry.target.partition(":")
            obj: T = getattr(importlib.import_module(module_name), attr)
            entry.target = obj
        return entry.target  # type: ignore[return-value]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())


# The registries. Targets are lazy strings: adding a method/benchmark/decoder = one file + one line here.
benchmarks: Registry[Any] = Registry("benchmark")
reward_models: Registry[Any] = Registry("reward model")
decoders: Registry[Any] = Registry("decoder")
metrics: Registry[Any] = Registry("metric")
executors: Registry[Any] = Registry("executor")

benchmarks.register(
    "rubrics",
    "perbench.data.rubrics.benchmark:load_rubrics",
    help="built-in benchmark with checkable per-user rubrics (exact downstream ground truth)",
    defaults={"rm_backbone": "smollm2", "policy": "smollm2", "k": 10, "w": 1.0},
)
benchmarks.register(
    "file",
    "perbench.data.loaders:load_benchmark_file",
    help="any JSON/JSONL/CSV/Parquet file or HF dataset with a field mapping",
)

reward_models.register("global_bt", "perbench.rewards.global_bt:GlobalBT", help="Bradley-Terry linear head on frozen features")
reward_models.register("length", "perbench.rewards.baselines:LengthRM", help="baseline: longer is better")
reward_models.register("random", "perbench.rewards.baselines:RandomRM", help="baseline: seeded random scores")

decoders.register("zero_shot", "perbench.decoding.greedy:ZeroShot", help="the policy alone (greedy or sampled)")
decoders.register("args", "perbench.decoding.args:ARGS", help="ARGS reward-guided decoding (top-k, weight w)")

metrics.register("rm_accuracy", "perbench.metrics.rm_accuracy:rm_accuracy", help="pairwise RM accuracy with tie policy")
metrics.register("policy_accuracy", "perbench.metrics.policy_accuracy:policy_accuracy", help="teacher-forced RGD score accuracy")
metrics.register("rubric", "perbench.metrics.rubric:rubric_satisfaction", help="exact rubric satisfaction via checkers")
metrics.register("rouge", "perbench.metrics.text:rouge", help="ROUGE-1/ROUGE-L F1 vs the user's reference")

executors.register("local", "perbench.runner.executors:LocalExecutor", help="in-process, sequential")
