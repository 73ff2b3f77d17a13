"""Units of work keyed by content, so a rerun of the same config recomputes nothing.

A unit whose stored value cannot be decoded is a missing unit: it is deleted (the store warns, naming the file
and the key), recomputed, and counted as ``recovered``. Every computation is also added to a tally kept in the
run's store file, so the run's totals survive a crash and a resume (``computed_total`` in :meth:`Units.summary`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from perbench.cache import CorruptValueError, Store, decode_json, pack_arrays, unpack_arrays
from perbench.errors import StoreError

if TYPE_CHECKING:
    from perbench.models.generate import Generation

T = TypeVar("T")

#: a pack_arrays bundle is a zip file (an empty one, e.g. a stateless method's fit, is only its end record); a JSON
#: value never starts like either
_NPZ = (b"PK\x03\x04", b"PK\x05\x06")


def unit_key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Tally(Counter[str]):
    """This process's computations per phase; each increment (``tally[phase] += n``) is also added to the
    store's persistent tally. :meth:`note` counts here only (for a count already stored with its value)."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def __setitem__(self, phase: str, n: int) -> None:
        delta = n - self[phase]
        if delta:
            self.store.add_counts({phase: delta})
        super().__setitem__(phase, n)

    def note(self, phase: str, n: int = 1) -> None:
        super().__setitem__(phase, self[phase] + n)


def _decode_unit(raw: bytes) -> Any:
    return unpack_arrays(raw) if raw.startswith(_NPZ) else decode_json(raw)


class Units:
    """A content-keyed store plus counters of what was computed, reused and recovered, per phase."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.computed = Tally(self.store)
        self.reused: Counter[str] = Counter()
        self.recovered: Counter[str] = Counter()

    def _load(self, phase: str, key: str, decode: Callable[[bytes], T]) -> T | None:
        raw = self.store.get_bytes(key)
        if raw is None:
            return None
        try:
            return decode(raw)
        except CorruptValueError as e:
            self._recover(phase, key, e)
            return None

    def _recover(self, phase: str, key: str, e: CorruptValueError) -> None:
        self.store.discard(key, str(e))
        self.recovered[phase] += 1

    def json(self, phase: str, key: str, compute: Callable[[], Any]) -> Any:
        got = self._load(phase, key, decode_json)
        if got is not None:
            self.reused[phase] += 1
            return got
        value = compute()
        self.put_json(phase, key, value)
        return value

    def arrays(self, phase: str, key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        got = self._load(phase, key, unpack_arrays)
        if got is not None:
            self.reused[phase] += 1
            return got
        value = compute()
        self.put_arrays(phase, key, value)
        return value

    def put_json(self, phase: str, key: str, value: Any) -> None:
        """Store a computed unit and count it, in one transaction (a crash never counts a unit twice)."""
        self.store.put_json(key, value, counts={phase: 1})
        self.computed.note(phase)

    def put_arrays(self, phase: str, key: str, value: dict[str, np.ndarray]) -> None:
        self.store.put_bytes(key, pack_arrays(**value), counts={phase: 1})
        self.computed.note(phase)

    def put_generation(self, phase: str, key: str, gen: Generation) -> None:
        """Store one generated text (with its token count and whether it ended on its own) as a unit."""
        self.put_json(phase, key, {"text": gen.text, "n_tokens": len(gen.token_ids), "finished": gen.finished})

    def texts(self, keys: Iterable[str]) -> dict[str, str]:
        """The stored texts of generation units that were just found or computed."""
        out: dict[str, str] = {}
        for k in keys:
            unit = self.store.get_json(k)
            if unit is None:
                raise StoreError(f"{self.store.path}: the generation unit {k} vanished from the store")
            out[k] = str(unit["text"])
        return out

    def missing(self, keys: list[str], *, phase: str = "unlabelled") -> list[str]:
        """The keys with no stored value, or one that cannot be decoded (deleted, counted as ``recovered``)."""
        found = self.store.get_many_bytes(keys)
        out = []
        for k in keys:
            raw = found.get(k)
            if raw is not None:
                try:
                    _decode_unit(raw)
                    continue
                except CorruptValueError as e:
                    self._recover(phase, k, e)
                    del found[k]
            out.append(k)
        return out

    def summary(self) -> dict[str, dict[str, int]]:
        """This process's ``computed`` / ``reused`` / ``recovered`` units per phase, and ``computed_total``: the
        units computed by every process that worked on this run (a crashed one and its resume, Ray workers)."""
        return {
            "computed": dict(self.computed),
            "reused": dict(self.reused),
            "recovered": dict(self.recovered),
            "computed_total": self.store.counts(),
        }
