"""The records and small rules every part of the analysis shares: a cell, a group name, the metric order, what
counts as a tie, and the JSON-safe output."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# never in the method table, a ranking, a correlation, the verdict metric's choice or a diagnosis; read only by the
# verdict's trade-offs against zero-shot decoding (split into sampling and re-ranking like any other quality)
from perbench.specs.metrics import DESCRIPTIVE_QUALITIES

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

ZERO_SHOT = "zero_shot"
DEFAULT_VERDICT_METRIC = "args:rubric_satisfaction"
#: practical-equivalence margin in the metric's units when none is given (5 points of a proportion)
DEFAULT_MARGIN = 0.05
FAIRNESS_METRICS = ("rm_acc_seen", "rm_acc_unseen")
#: the reference method's accuracy on each user's train pairs (seen users) or few-shot pairs (unseen users): the
#: pairs that select minority users, never the test pairs they are evaluated on
TRAIN_ACC = "rm_acc_train"
#: diagnostic metrics: read by one part of the analysis, never in the method table, the rankings or the selection
DIAGNOSTIC_METRICS = frozenset({TRAIN_ACC})
#: two values closer than this (relative to their size, at least 1) are an exact tie: no float rounding ranks them
TIE_TOL = 1e-12

#: the prefix of an upstream metric on another benchmark's test pairs (``rm_acc_on_NAME``): its users and prompts are
#: another population, drawn in a bootstrap stratum of their own (:func:`stratum`); ``rm_acc_on_NAME@bok``, ``@ties``
#: and ``@consistency`` are the listwise metrics on the same pairs (:mod:`perbench.runner.listwise`)
EXTERNAL = "rm_acc_on_"

_UPSTREAM_ORDER = (
    "rm_acc_seen",
    "rm_acc_unseen",
    "rm_acc_all",
    "rm_acc_pers_only",
    "rm_acc_consensus",
    "fewshot_acc",
    "fewshot_active_acc",
)
_UPSTREAM_LATE = ("pa", "pa_rgd", "pa_prefix_mean", "pa_prefix_sum")
_DECODER_ORDER = ("args", "best_of_n", "genarm", "zero_shot", "icl_rag")
_QUALITY_ORDER = ("rubric_satisfaction", "personal_reward", "rouge1", "rougeL", "bertscore_f1", "rm_win", "bon_gain")


@dataclass(frozen=True)
class Cell:
    group: str
    method: str
    metric: str
    user: str
    prompt: str
    value: float
    rl_seed: int | None = None  # the training seed of an RL-trained policy's row (None: not a trained policy's)
    fit_seed: int | None = None  # the fit seed of a pooled stochastic system's row (None: a system of one fit)


@dataclass(frozen=True)
class GroupKey:
    """``benchmark|policy|seed3`` → setting ``benchmark|policy``, seed 3, benchmark ``benchmark``."""

    setting: str
    seed: int | None
    benchmark: str


_SEED = re.compile(r"^(.*)\|seed(\d+)$")


def parse_group(group: str) -> GroupKey:
    """Split a group name into its setting (the name without a trailing ``|seedN``), seed and benchmark."""
    m = _SEED.match(group)
    setting, seed = (m.group(1), int(m.group(2))) if m else (group, None)
    return GroupKey(setting=setting, seed=seed, benchmark=setting.split("|", 1)[0])


def stratum(benchmark: str, metric: str) -> str:
    """The bootstrap stratum of a row: its benchmark, or for ``rm_acc_on_NAME`` that other benchmark (inside this
    run's), whose users and prompts are resampled among themselves."""
    if not metric.startswith(EXTERNAL):
        return benchmark
    return f"{benchmark}>{metric[len(EXTERNAL) :].partition('@')[0]}"  # NAME@bok, @ties, @consistency: NAME's


def is_downstream(metric: str) -> bool:
    return ":" in metric


def is_diagnostic(metric: str) -> bool:
    return metric in DIAGNOSTIC_METRICS


def is_descriptive(metric: str) -> bool:
    """A downstream metric that describes the text (its length), not its quality: :data:`DESCRIPTIVE_QUALITIES`."""
    return is_downstream(metric) and metric.partition(":")[2] in DESCRIPTIVE_QUALITIES


def metric_sort_key(metric: str) -> tuple[int, int, int, str]:
    """Canonical metric order: upstream (accuracy, few-shot by N, policy accuracy), then decoder × quality."""
    if is_downstream(metric):
        dec, _, q = metric.partition(":")
        d = _DECODER_ORDER.index(dec) if dec in _DECODER_ORDER else len(_DECODER_ORDER)
        qi = _QUALITY_ORDER.index(q) if q in _QUALITY_ORDER else len(_QUALITY_ORDER)
        return (2, d, qi, metric)
    base, _, n = metric.partition("@")
    if base in _UPSTREAM_ORDER:
        return (0, _UPSTREAM_ORDER.index(base), int(n) if n.isdigit() else 0, metric)
    if base in _UPSTREAM_LATE:
        return (1, _UPSTREAM_LATE.index(base), 0, metric)
    return (1, len(_UPSTREAM_LATE), 0, metric)


def same_value(a: float, b: float) -> bool:
    """An exact tie up to float rounding (``TIE_TOL`` relative, absolute below 1)."""
    return abs(a - b) <= TIE_TOL * max(1.0, abs(a), abs(b))


def order_by_value(values: Mapping[str, float]) -> list[str]:
    """Names by decreasing value; names whose values tie (:func:`same_value`) are ordered by name, so neither
    float rounding nor the order methods were configured in decides a rank."""
    ranked = sorted(values, key=lambda m: (-values[m], m))
    out: list[str] = []
    group: list[str] = []
    for m in ranked:
        if group and not same_value(values[group[-1]], values[m]):
            out += sorted(group)
            group = []
        group.append(m)
    return out + sorted(group)


def f_(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def ci_(x: Sequence[float] | None) -> list[float] | None:
    return None if x is None else [float(x[0]), float(x[1])]


def json_safe(obj: Any) -> Any:
    """Defensive pass: numpy scalars to Python, any non-finite float to None."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return f_(float(obj))
    return obj


@dataclass
class Est:
    """A point estimate with its bootstrap replicates (a value, or a paired difference)."""

    point: float
    reps: FloatArray
    sd_seeds: float | None = None
    cols: tuple[int, ...] = ()  # the bootstrap columns it is computed from
    cells: int = 0  # distinct (user, prompt) cells it averages (summed over groups)
    partial: bool = False  # a difference: some cells of either side are not covered by the other


def as_row(c: Any) -> tuple[str, str, str, str, str, float]:
    if isinstance(c, Cell):
        return c.group, c.method, c.metric, c.user, c.prompt, float(c.value)
    return str(c["group"]), str(c["method"]), str(c["metric"]), str(c["user"]), str(c["prompt"]), float(c["value"])


def training_seed(c: Any) -> str | None:
    """A cell's training seeds as one label (``<s>``: the seed of an RL-trained policy, one row per seed; ``fit<s>``:
    the fit seed of a system that pools several fits of a stochastic method), or None."""
    if isinstance(c, Cell):
        rl, fit = c.rl_seed, c.fit_seed
    else:
        rl, fit = c.get("rl_seed"), c.get("fit_seed")
    parts = ([] if fit is None else [f"fit{int(fit)}"]) + ([] if rl is None else [str(int(rl))])
    return "|".join(parts) or None
