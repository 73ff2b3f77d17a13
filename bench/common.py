"""Shared pieces of the performance suite: side-by-side timing, goals, machine facts, small data helpers.

Every ratio in the suite comes from :func:`interleaved`: the variants being compared run in turn, round
after round, and each one's median is reported, so load on a shared machine hits them all alike.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Goal:
    """One line of the goals table: ``met`` is None when the figure could not be measured."""

    goal: str
    target: str
    measured: str
    met: bool | None
    note: str = ""


@dataclass
class Section:
    """What one benchmark piece reports: markdown body, goals, its process's peak memory and wall time."""

    key: str
    title: str
    body: list[str] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    wall_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Section:
        goals = [Goal(**g) for g in d.pop("goals", [])]
        return cls(goals=goals, **d)


@dataclass
class Settings:
    """What every piece is told: the device, dtype and size of the run."""

    device: str = "cpu"
    dtype: str | None = None
    quick: bool = False
    rounds: int = 3

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def interleaved(
    variants: dict[str, Callable[[], Any]],
    rounds: int,
    device: str = "cpu",
    warmup: bool = True,
    cpu: dict[str, float] | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Run every variant once per round, in turn; -> (median seconds per variant, last output per variant).
    A first untimed pass warms caches and lazy initialisation when ``warmup``. ``cpu``, when given, receives
    each variant's median CPU seconds of this process (``time.process_time``): with one torch thread on a
    shared machine it leaves out the time spent waiting for a core, which wall time counts."""
    outs: dict[str, Any] = {}
    if warmup:
        for name, fn in variants.items():
            outs[name] = fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu_times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            sync(device)
            t, c = time.perf_counter(), time.process_time()
            outs[name] = fn()
            sync(device)
            times[name].append(time.perf_counter() - t)
            cpu_times[name].append(time.process_time() - c)
    if cpu is not None:
        cpu.update({name: statistics.median(ts) for name, ts in cpu_times.items()})
    return {name: statistics.median(ts) for name, ts in times.items()}, outs


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def fmt_s(seconds: float) -> str:
    if seconds >= 60:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"
    return f"{seconds:.1f} s"


def table(header: list[str], rows: list[list[Any]], align: str = "") -> list[str]:
    """A markdown table; ``align`` one letter per column (l / r), default left then right."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def git_hash() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" (uncommitted changes)" if dirty.stdout.strip() else "")


def machine_facts(settings: Settings) -> dict[str, str]:
    import torch
    import transformers

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ram = ram_gb()
    facts = {
        "CPU": f"{cpu_model()}, {cores} cores granted to the process",
        "RAM": f"{ram:.0f} GiB" if ram else "unknown",
        "accelerator": "none (CPU only)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "perbench": git_hash(),
        "torch threads": str(torch.get_num_threads()),
        "device / dtype": f"{settings.device} / {settings.dtype or 'default (fp32 on CPU, bf16 on CUDA)'}",
    }
    if torch.cuda.is_available():
        facts["accelerator"] = torch.cuda.get_device_name(0)
    try:
        load = os.getloadavg()
        facts["load average at start"] = f"{load[0]:.1f} (1 min), {load[1]:.1f} (5 min)"
    except OSError:
        pass
    return facts


def no_eos(lm: Any) -> Any:
    """The same model with EOS disabled, so every row decodes all of its new tokens."""
    from perbench.models.loader import LoadedLM

    class NoEOS(LoadedLM):
        @property
        def eos_ids(self) -> list[int]:
            return []

    return NoEOS(lm.model, lm.tokenizer, lm.fingerprint, lm.name, lm.policy)


def load_policy(settings: Settings, spec: str = "smollm2") -> Any:
    from perbench.device import set_threads
    from perbench.models.loader import load_lm

    set_threads()
    return load_lm(spec, device=settings.device, dtype=settings.dtype)


PROMPTS = [
    "How can I keep basil alive on a windowsill?",
    "What is a good way to start running as a beginner?",
    "How do I make my emails sound more professional?",
    "What should I pack for a weekend camping trip?",
    "How do I remove a coffee stain from a white shirt?",
    "Any tips for learning to touch type?",
    "How do I split a restaurant bill fairly with friends?",
    "What is the easiest way to back up my phone photos?",
    "How should I prepare for a job interview?",
    "What is a simple way to start a vegetable garden?",
    "How do I get better at public speaking?",
    "How can I sleep better when I travel?",
    "What is a good routine for learning the guitar?",
    "How do I make a monthly budget?",
    "How can I stop procrastinating on chores?",
    "What should I know before adopting a cat?",
]
