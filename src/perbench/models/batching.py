"""Batches that adapt to memory: start from a configured size (or ``auto``: on a CPU the measured fastest size,
on a GPU the rows its free memory holds by :mod:`perbench.models.memory`'s estimate), halve on out-of-memory and
retry the same items, and remember the size that worked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: the starting size of ``auto`` where no memory estimate is made (a CPU: the measured fastest), by device kind
AUTO_START = {"cpu": 8, "cuda": 32, "mps": 16}


def start_size(size: int | str, device: str) -> int:
    """The first batch size to try: ``size`` itself, or ``auto``'s default for the device."""
    if size == "auto":
        return AUTO_START.get(device.split(":")[0], 8)
    return int(size)


def is_oom(err: BaseException) -> bool:
    import torch

    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


class AdaptiveBatcher:
    """Runs ``fn`` over consecutive batches of ``items``; on out-of-memory it frees the cache, halves the batch
    size and retries those items (a batch of one that does not fit re-raises). ``size`` is the size in use.

    ``fit(seq_len)``: for ``auto``, the rows of that length the device holds (an object with ``rows`` and
    ``record()``, or None where the device has no memory query); each :meth:`run` given ``length`` sizes its
    batches by the longest item, never above a size that ran out of memory. Off a CPU, a run given ``length`` also
    takes its items longest first (little padding; the results come back in the items' order); on a CPU the order
    stays the callers', so its results do not move."""

    def __init__(
        self, size: int | str, device: str, fit: Callable[[int], Any] | None = None, start: int | None = None
    ) -> None:
        #: ``start``: ``auto``'s first size where no estimate is made, if not the device default
        self.size = start if size == "auto" and start is not None else start_size(size, device)
        self.requested = size
        self.halvings = 0
        self.device = device
        self.fit = fit if size == "auto" else None
        self.ceiling: int | None = None  # the largest size known not to run out of memory
        self.estimate: dict[str, Any] | None = None

    def run(
        self, items: Sequence[T], fn: Callable[[Sequence[T]], list[R]], length: Callable[[T], int] | None = None
    ) -> list[R]:
        if not items:
            return []
        order = list(range(len(items)))
        if length is not None:
            lengths = [length(x) for x in items]
            if self.fit is not None:
                est = self.fit(max(lengths))
                if est is not None:
                    self.estimate = est.record()
                    self.size = min(est.rows, self.ceiling or est.rows)
            if not self.device.startswith("cpu"):
                order.sort(key=lambda i: -lengths[i])
        todo = [items[i] for i in order]
        got = self._run(todo, fn)
        out: list[Any] = [None] * len(items)
        for i, r in zip(order, got, strict=True):
            out[i] = r
        return out

    def _run(self, items: Sequence[T], fn: Callable[[Sequence[T]], list[R]]) -> list[R]:
        out: list[R] = []
        i = 0
        while i < len(items):
            batch = items[i : i + self.size]
            try:
                got = fn(batch)
            except (RuntimeError, MemoryError) as e:
                if not is_oom(e) or self.size == 1:
                    raise
                self._free()
                self.size = max(1, self.size // 2)
                self.ceiling = self.size
                self.halvings += 1
                continue
            out.extend(got)
            i += len(batch)
        return out

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"requested": self.requested, "used": self.size, "halvings": self.halvings}
        if self.estimate is not None:
            rec["estimate"] = self.estimate
        return rec

    @staticmethod
    def _free() -> None:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
