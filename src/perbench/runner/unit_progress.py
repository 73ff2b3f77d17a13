"""A progress bar over a run's units while an executor waits for them: done / running / pending, by kind.

"Running" counts units whose dependencies have all finished (running, or queued for a free slot of the
cluster); "pending" counts units still waiting for a dependency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from perbench.progress import progress

if TYPE_CHECKING:
    from perbench.runner.plan import Unit


def _by_kind(counts: Counter[str]) -> str:
    return " ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "0"


class UnitProgress:
    def __init__(self, units: list[Unit]) -> None:
        self.total = len(units)
        self.done: Counter[str] = Counter()
        self.keys = {u.key for u in units}
        self.finished_keys: set[str] = set()
        self.bar: Any = progress(total=self.total, desc="units", unit="unit")

    def state(self, pending: Iterable[Unit]) -> tuple[Counter[str], Counter[str]]:
        """(running or queued, waiting for a dependency) among ``pending``, by kind."""
        running: Counter[str] = Counter()
        waiting: Counter[str] = Counter()
        for u in pending:
            blocked = any(d in self.keys and d not in self.finished_keys for d in u.deps)
            (waiting if blocked else running)[u.kind] += 1
        return running, waiting

    def text(self, pending: Iterable[Unit]) -> str:
        running, waiting = self.state(pending)
        return f"done {_by_kind(self.done)} | running {_by_kind(running)} | pending {_by_kind(waiting)}"

    def show(self, pending: Iterable[Unit]) -> None:
        self.bar.set_postfix_str(self.text(pending), refresh=True)

    def finished(self, unit: Unit, pending: Iterable[Unit]) -> None:
        self.done[unit.kind] += 1
        self.finished_keys.add(unit.key)
        self.bar.update(1)
        self.show(pending)

    def close(self) -> None:
        self.bar.close()
