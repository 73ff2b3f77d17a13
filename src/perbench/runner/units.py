"""Units of work keyed by content, so a rerun of the same config recomputes nothing.

A run's units live in its own store (``RUN/units.sqlite``) over the unit cache that every run under the same
``PERBENCH_CACHE`` shares (``$PERBENCH_CACHE/units.sqlite``): a unit computed by any run with the same inputs is
copied into this run's store (so the run folder stays a complete record of what it read) and counted as reused;
a unit computed here goes to both.

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

from perbench.cache import CorruptValueError, Store, decode_json, encode_json, pack_arrays, unpack_arrays
from perbench.errors import StoreError

if TYPE_CHECKING:
    from perbench.models.generation import Generation

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
    """A content-keyed store (over the shared unit cache ``shared``, when given) plus counters of what was
    computed, reused and recovered, per phase."""

    def __init__(self, path: str | Path, *, shared: Store | None = None, store: Store | None = None) -> None:
        """``store``: the run's store itself, instead of a store at ``path`` (a Ray worker's read-through view)."""
        self.store = store if store is not None else Store(path)
        self.shared = shared
        self.computed = Tally(self.store)
        self.reused: Counter[str] = Counter()
        self.recovered: Counter[str] = Counter()

    def _raw(self, key: str) -> bytes | None:
        """The stored value of ``key``: the run's, else the shared cache's (copied into the run's store)."""
        raw = self.store.get_bytes(key)
        if raw is not None or self.shared is None:
            return raw
        raw = self.shared.get_bytes(key)
        if raw is None:
            return None
        try:
            _decode_unit(raw)
        except CorruptValueError as e:
            self.shared.discard(key, str(e))
            return None
        self.store.put_bytes(key, raw)
        return raw

    def _load(self, phase: str, key: str, decode: Callable[[bytes], T]) -> T | None:
        raw = self._raw(key)
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

    def get_json(self, key: str) -> Any | None:
        """A stored JSON value (the run's or the shared cache's), None when absent or undecodable."""
        raw = self._raw(key)
        return None if raw is None else self.store.decoded(key, raw, decode_json)

    def put_many(self, items: dict[str, bytes], *, counts: dict[str, int] | None = None) -> None:
        """Store encoded units computed elsewhere (a Ray worker) with their counts, in one transaction."""
        self.store.put_many_bytes(items, counts=counts)
        if self.shared is not None and items:
            self.shared.put_many_bytes(items)

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
        self._put(phase, key, encode_json(value))

    def put_arrays(self, phase: str, key: str, value: dict[str, np.ndarray]) -> None:
        self._put(phase, key, pack_arrays(**value))

    def _put(self, phase: str, key: str, raw: bytes) -> None:
        self.store.put_bytes(key, raw, counts={phase: 1})
        self.computed.note(phase)
        if self.shared is not None:
            self.shared.put_bytes(key, raw)

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
        """The keys with no stored value, or one that cannot be decoded (deleted, counted as ``recovered``). Keys
        found in the shared cache only are copied into the run's store first."""
        out = self._missing_in(self.store, keys, phase)
        if out and self.shared is not None:
            found = self.shared.get_many_bytes(out)
            good = {}
            for k, raw in found.items():
                try:
                    _decode_unit(raw)
                    good[k] = raw
                except CorruptValueError as e:
                    self.shared.discard(k, str(e))
            if good:
                self.store.put_many_bytes(good)
            out = [k for k in out if k not in good]
        return out

    def _missing_in(self, store: Store, keys: list[str], phase: str) -> list[str]:
        found = store.get_many_bytes(keys)
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
