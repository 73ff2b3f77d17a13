"""Counters of the expensive calls a process makes: model forward passes and metric evaluations.

Every model perbench loads counts its forward passes (a forward pre-hook on its decoder, or on the encoder
itself: a call through the whole model or through its decoder counts once); every metric counts the texts it
evaluates (BERTScore, ROUGE, the rubric checkers, the LM judge). A run reports what its units and its assembly
pass did with them (``work`` in results.json), so work left to the assembly, or repeated, shows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: this process's counts since it started, by name (``forwards``, ``bertscore``, ``rouge``, ``rubric``, ``judge``)
CALLS: Counter[str] = Counter()


def note(name: str, n: int = 1) -> None:
    if n:
        CALLS[name] += n


def snapshot() -> Counter[str]:
    return Counter(CALLS)


def since(before: Counter[str]) -> dict[str, int]:
    """What was counted since ``before`` (a :func:`snapshot`), without zeros."""
    now = Counter(CALLS)
    now.subtract(before)
    return {k: v for k, v in sorted(now.items()) if v}


def _count_forward(module: Any, args: Any) -> None:
    CALLS["forwards"] += 1


def count_forwards(model: Any) -> Any:
    """Count every forward pass of ``model`` (its decoder's, when it has one); returns ``model``."""
    get = getattr(model, "get_decoder", None)
    target = get() if callable(get) else model
    if not getattr(target, "_perbench_counted", False):
        target.register_forward_pre_hook(_count_forward)
        target._perbench_counted = True
    return model
