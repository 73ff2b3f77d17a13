"""Where one process keeps a run's units, and how a unit's results travel from the process that computed them.

The driver's stores are the run's unit store over the shared unit cache, the feature cache and the sample-pool
cache (:meth:`Stores.of_run`); it is the only process that writes them. A Ray worker computes into stores in its
own memory (:meth:`Stores.in_memory`) filled with its dependencies' results, and returns what it added as a
:class:`UnitResult`, which the driver stores (:meth:`Stores.absorb`). A finished unit leaves a marker listing
the entries it touched, so a later run finds it done and can hand those entries to a unit that depends on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
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
        """A worker's: nothing on disk, nothing shared."""
        return cls(Units(MEMORY), Store(MEMORY), Store(MEMORY))

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
    def load(self, result: UnitResult) -> None:
        """Fill these (in-memory) stores with a dependency's results."""
        for name, store in self.by_name().items():
            if result.entries.get(name):
                store.put_many_bytes(result.entries[name])

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
