"""Where one process keeps a run's units, and how a unit's results travel from the process that computed them.

The driver's stores are the run's unit store over the shared unit cache, the feature cache and the sample-pool
cache (:meth:`Stores.of_run`); it is the only process that writes them. A Ray worker computes into stores in its
own memory that read through to its dependencies' results (:meth:`Stores.over` a :class:`Handed`): a key the unit
reads is looked up in the results Ray handed over, without copying them into a store, and a dependency none of
whose keys the unit reads is never fetched to the worker. The worker returns what it added as a
:class:`UnitResult`, which the driver stores (:meth:`Stores.absorb`). A finished unit leaves a marker listing
the entries it touched, so a later run finds it done and can hand those entries to a unit that depends on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.cache import MEMORY, Store, encode_json
from perbench.runner.units import Units

if TYPE_CHECKING:
    from perbench.runner.plan import Unit

#: the stores a unit's results go to: units (run store + shared unit cache), features (φ and token features),
#: samples (Best-of-N sample pools)
STORE_NAMES = ("units", "features", "samples")


@dataclass
class UnitResult:
    """One unit's results as they travel through Ray's object store: the store entries it added, by store, and
    its work counters (per phase: computed, reused, recovered; the feature extractor's computed / reused)."""

    key: str
    entries: dict[str, dict[str, bytes]]
    computed: dict[str, int] = field(default_factory=dict)
    reused: dict[str, int] = field(default_factory=dict)
    recovered: dict[str, int] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    #: model forwards and metric evaluations the unit's worker made (``perbench.calls``), by name
    calls: dict[str, int] = field(default_factory=dict)
    node: str = ""  # the node that computed it ("" when read back from the driver's stores)
    seconds: float = 0.0  # how long the worker took, its setup (models, dependencies) included
    #: Ray's attempt number of the task that computed it (0: the first; n: n earlier attempts died with their
    #: worker or node, or its first result was lost with a node and rebuilt for a unit that read it)
    attempt: int = 0
    #: the dependencies whose results the unit read, by key, with the attempt that computed the copy it read
    read: dict[str, int] = field(default_factory=dict)
    read_bytes: int = 0  # the bytes of those results (what the worker fetched from the object store)


class Handed:
    """The results of a unit's dependencies as Ray handed them to its worker: which dependency holds each key (by
    store, from the driver's finished markers), and each dependency's :class:`UnitResult`, fetched (``fetch``) the
    first time one of its keys is read and then read in place (never copied into a store)."""

    def __init__(self, index: dict[str, dict[str, list[str]]], fetch: Callable[[str], UnitResult]) -> None:
        """``index``: dependency key → store name → the keys its result holds, in plan order (a key several
        dependencies list, one's own and the others' reads of it, is looked up in the first one first)."""
        self.owners: dict[str, dict[str, list[str]]] = {name: {} for name in STORE_NAMES}
        for dep, by_store in index.items():
            for name, keys in by_store.items():
                if name in self.owners:
                    for k in keys:
                        self.owners[name].setdefault(k, []).append(dep)
        self.fetch = fetch
        self.results: dict[str, UnitResult] = {}

    @classmethod
    def nothing(cls) -> Handed:
        return cls({}, lambda key: UnitResult(key, {}))

    def has(self, name: str, key: str) -> bool:
        return key in self.owners[name]

    def keys(self, name: str) -> list[str]:
        return list(self.owners[name])

    def get(self, name: str, keys: Iterable[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for k in keys:
            for dep in self.owners[name].get(k, ()):
                if dep not in self.results:
                    self.results[dep] = self.fetch(dep)
                value = self.results[dep].entries.get(name, {}).get(k)
                if value is not None:
                    out[k] = value
                    break
        return out

    def read(self) -> dict[str, int]:
        """The dependencies fetched so far, with the attempt that computed each."""
        return {k: r.attempt for k, r in self.results.items()}

    def read_bytes(self) -> int:
        return sum(len(v) for r in self.results.values() for entries in r.entries.values() for v in entries.values())


class ReadThrough(Store):
    """A store in memory over the dependencies' results handed to a worker (store ``name`` of each): what the unit
    writes goes to memory; a key it does not hold is read from :class:`Handed`, in place."""

    def __init__(self, name: str, below: Handed) -> None:
        super().__init__(MEMORY)
        self.name, self.below = name, below
        self.hidden: set[str] = set()  # handed keys deleted here (a value that could not be decoded)

    def get_many_bytes(self, keys: list[str]) -> dict[str, bytes]:
        found = super().get_many_bytes(keys)
        rest = [k for k in keys if k not in found and k not in self.hidden]
        if rest:
            more = self.below.get(self.name, rest)
            self._note(more)
            found.update(more)
        return found

    def present(self, keys: Iterable[str]) -> set[str]:
        wanted = list(keys)
        below = {k for k in wanted if k not in self.hidden and self.below.has(self.name, k)}
        return super().present(wanted) | below

    def keys(self) -> list[str]:
        own = super().keys()
        mine = set(own) | self.hidden
        return own + [k for k in self.below.keys(self.name) if k not in mine]

    def delete(self, key: str) -> None:
        super().delete(key)
        if self.below.has(self.name, key):
            self.hidden.add(key)

    def __contains__(self, key: str) -> bool:
        return bool(self.present([key]))

    def __len__(self) -> int:
        return len(self.keys())


@dataclass
class Stores:
    units: Units
    features: Store
    samples: Store

    @classmethod
    def of_run(cls, run_dir: Path) -> Stores:
        """The driver's: the run's unit store over ``$PERBENCH_CACHE/units.sqlite``, and the shared caches."""
        from perbench.io import cache_dir

        cache = cache_dir()
        units = Units(run_dir / "units.sqlite", shared=Store(cache / "units.sqlite"))
        return cls(units, Store(cache / "features.sqlite"), Store(cache / "samples.sqlite"))

    @classmethod
    def in_memory(cls) -> Stores:
        """Nothing on disk, nothing shared."""
        return cls(Units(MEMORY), Store(MEMORY), Store(MEMORY))

    @classmethod
    def over(cls, handed: Handed) -> Stores:
        """A worker's: in memory, reading through to the dependencies' results ``handed`` to it."""
        units = Units(MEMORY, store=ReadThrough("units", handed))
        return cls(units, ReadThrough("features", handed), ReadThrough("samples", handed))

    def close(self) -> None:
        """Close every store's SQLite connection (the run's, the shared unit cache's, the feature and sample
        caches'): SQLite folds its write-ahead log back into the file and removes it."""
        for store in (*self.by_name().values(), self.units.shared):
            if store is not None:
                store.close()

    def __enter__(self) -> Stores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def work(self) -> Counter[str]:
        """What this process has computed so far: units per phase (``Units.computed``), and the values written to
        the feature and sample stores (φ, token features, log-probs, pool samples), by store."""
        out = Counter(self.units.computed)
        out.update({name: self.by_name()[name].written for name in ("features", "samples")})
        return out

    def by_name(self) -> dict[str, Store]:
        return {"units": self.units.store, "features": self.features, "samples": self.samples}

    @contextmanager
    def journal(self) -> Iterator[dict[str, set[str]]]:
        """Collect the keys every store reads (found) or writes inside the block, by store."""
        touched: dict[str, set[str]] = {name: set() for name in STORE_NAMES}
        stores = self.by_name()
        for name, store in stores.items():
            store.journal = touched[name]
        try:
            yield touched
        finally:
            for store in stores.values():
                store.journal = None

    # ------------------------------------------------------------------ a worker's side
    def read(self, keys: dict[str, set[str]]) -> dict[str, dict[str, bytes]]:
        """The stored values of ``keys`` (by store)."""
        stores = self.by_name()
        return {name: stores[name].get_many_bytes(sorted(ks)) for name, ks in keys.items() if ks}

    # ------------------------------------------------------------------ the driver's side
    def finished(self, unit: Unit) -> dict[str, Any] | None:
        """The marker of ``unit`` when it is done and every entry it lists is still stored (a unit done by another
        run is found in the shared cache; its unit entries are copied into this run's store), else None."""
        marker = self.units.get_json(unit.done_key())
        if not isinstance(marker, dict) or not isinstance(marker.get("entries"), dict):
            return None
        entries: dict[str, list[str]] = marker["entries"]
        if self.units.missing(list(entries.get("units", [])), phase="plan"):
            return None
        for name in ("features", "samples"):
            keys = entries.get(name, [])
            if keys and len(self.by_name()[name].present(keys)) < len(set(keys)):
                return None
        return marker

    def mark_done(self, unit: Unit, touched: dict[str, set[str]]) -> None:
        """Record ``unit`` as finished, listing the entries it read or wrote."""
        marker = {"unit": unit.label, "entries": {name: sorted(keys) for name, keys in touched.items() if keys}}
        self.units.put_many({unit.done_key(): encode_json(marker)})

    def result_of(self, unit: Unit, marker: dict[str, Any]) -> UnitResult:
        """A finished unit's results read back from these stores (to hand to the units that depend on it)."""
        keys = {name: set(ks) for name, ks in marker["entries"].items() if name in STORE_NAMES}
        return UnitResult(unit.key, self.read(keys))

    def absorb(self, unit: Unit, result: UnitResult) -> None:
        """Store a unit computed elsewhere: its feature and sample entries, then its unit entries, its marker and
        its computed counts in one transaction of the run's store (a crash never counts a unit twice)."""
        for name in ("features", "samples"):
            if result.entries.get(name):
                self.by_name()[name].put_many_bytes(result.entries[name])
        marker = {"unit": unit.label, "entries": {name: sorted(v) for name, v in result.entries.items() if v}}
        items = {**result.entries.get("units", {}), unit.done_key(): encode_json(marker)}
        self.units.put_many(items, counts=result.computed)
