"""Adaptive batch sizes: halve on out-of-memory, retry the same items, keep every result in order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from perbench.models.batching import AdaptiveBatcher, start_size


def test_halves_on_out_of_memory_and_keeps_every_item_in_order() -> None:
    seen: list[int] = []

    def fn(batch: Sequence[int]) -> list[int]:
        seen.append(len(batch))
        if len(batch) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [2 * x for x in batch]

    b = AdaptiveBatcher("auto", "cuda:0")
    assert b.size == 32
    assert b.run(list(range(20)), fn) == [2 * x for x in range(20)]
    assert b.record() == {"requested": "auto", "used": 2, "halvings": 4}  # 32 → 16 → 8 → 4 → 2
    assert seen[:5] == [20, 16, 8, 4, 2]


def test_cpu_allocator_failure_counts_as_out_of_memory_but_other_errors_do_not() -> None:
    calls = {"n": 0}

    def fn(batch: Sequence[int]) -> list[int]:
        calls["n"] += 1
        if len(batch) > 1:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: can't allocate memory")
        return list(batch)

    b = AdaptiveBatcher(4, "cpu")
    assert b.run([1, 2, 3], fn) == [1, 2, 3] and b.size == 1

    def broken(batch: Sequence[int]) -> list[int]:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        AdaptiveBatcher(4, "cpu").run([1, 2], broken)


def test_a_batch_of_one_that_does_not_fit_reraises() -> None:
    def fn(batch: Sequence[int]) -> list[int]:
        raise torch.OutOfMemoryError("out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        AdaptiveBatcher(2, "cpu").run([1], fn)
    assert start_size("auto", "cpu") == 8 and start_size(5, "cuda") == 5
