"""Units of work keyed by content, so a rerun of the same config recomputes nothing."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from perbench.cache import Store, pack_arrays, unpack_arrays

T = TypeVar("T")


def unit_key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Units:
    """A content-keyed store plus counters of what was computed vs reused, per phase."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.computed: Counter[str] = Counter()
        self.reused: Counter[str] = Counter()

    def json(self, phase: str, key: str, compute: Callable[[], Any]) -> Any:
        got = self.store.get_json(key)
        if got is not None:
            self.reused[phase] += 1
            return got
        value = compute()
        self.store.put_json(key, value)
        self.computed[phase] += 1
        return value

    def arrays(self, phase: str, key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        raw = self.store.get_bytes(key)
        if raw is not None:
            self.reused[phase] += 1
            return unpack_arrays(raw)
        value = compute()
        self.store.put_bytes(key, pack_arrays(**value))
        self.computed[phase] += 1
        return value

    def missing(self, keys: list[str]) -> list[str]:
        found = self.store.get_many_bytes(keys)
        return [k for k in keys if k not in found]

    def summary(self) -> dict[str, dict[str, int]]:
        return {"computed": dict(self.computed), "reused": dict(self.reused)}
