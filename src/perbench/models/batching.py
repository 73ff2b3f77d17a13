"""Batches that adapt to memory: start from a configured size (or ``auto``: a device-dependent default),
halve on out-of-memory and retry the same items, and remember the size that worked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: the starting size of ``auto``, by device kind
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
    size and retries those items (a batch of one that does not fit re-raises). ``size`` is the size in use."""

    def __init__(self, size: int | str, device: str) -> None:
        self.size = start_size(size, device)
        self.requested = size
        self.halvings = 0

    def run(self, items: Sequence[T], fn: Callable[[Sequence[T]], list[R]]) -> list[R]:
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
                self.halvings += 1
                continue
            out.extend(got)
            i += len(batch)
        return out

    def record(self) -> dict[str, int | str]:
        return {"requested": self.requested, "used": self.size, "halvings": self.halvings}

    @staticmethod
    def _free() -> None:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
