"""The rules of single keys: the ranges (:class:`Bound`) and checks (:class:`Rule`) that ``RunConfig``'s annotations
carry, e.g. ``device``, ``dtype``, ``run_name`` (one plain folder name) and the verdict's equivalence margin."""

from __future__ import annotations

import math
import re

from perbench.specs.values import Bound, Rule

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
