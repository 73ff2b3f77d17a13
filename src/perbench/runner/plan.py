"""The run as a plan of independent units, each keyed by content and declaring its inputs and its needs.

A unit computes something expensive and leaves it in the run's store (``units.sqlite``) or the shared
caches (features, sample pools); the assembly pass that follows (upstream, downstream, analysis, report)
then only reads. Executors (``perbench list executors``) map units: ``local`` runs them here in order,
``ray`` as Ray tasks with the units' resource needs, after their dependencies. Because the assembly is the
same code whichever executor ran the units, a run's results do not depend on the executor.

Units, in dependency order:

* ``features``: φ of every train and test response under the RM backbone, and the policy's log-probs of
  the test responses (shared by every frozen-feature method, computed once);
* ``fit:M``: method M trained on the seen users' train pairs (its state cached by content);
* ``upstream:M``: M's scores of the test pairs, its few-shot curve, its policy accuracy;
* ``pool:D@P``: the Best-of-N sample pool of decoder D under policy P, one per test prompt (sampled once,
  shared by every system and user), φ of its texts and its quality per (cell, sample);
* ``generate:D[M]@P``: decoder D's generations for every evaluated (prompt, user), guided by M (if any); for a
  pooled Best-of-N, M's scores of the pool;
* ``adaptive:D@P``: the adaptive rounds of a per-cell decoder D over all of its systems (``adaptive:``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perbench.runner.units import unit_key


@dataclass(frozen=True)
class Needs:
    """What one unit needs of a machine: Ray schedules by these; ``local`` ignores them."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float = 2.0


@dataclass(frozen=True)
class Unit:
    kind: str  # features | fit | upstream | pool | generate | adaptive | rl
    name: str  # the method / decoder label it concerns ("" for features)
    key: str  # content key: the config's result hash, the benchmark, the kind and the name
    deps: tuple[str, ...] = ()
    needs: Needs = field(default_factory=Needs)
    policy: str | None = None  # generation units: the policy spec they decode with

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind

    def done_key(self) -> str:
        """The store key marking the unit finished (a resumed run skips it)."""
        return unit_key("plan-unit-done", self.key)


@dataclass
class Plan:
    units: list[Unit]

    def by_key(self) -> dict[str, Unit]:
        return {u.key: u for u in self.units}

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for u in self.units:
            out[u.kind] = out.get(u.kind, 0) + 1
        return out


def make_unit(base: str, kind: str, name: str, deps: list[Unit], needs: Needs, policy: str | None = None) -> Unit:
    return Unit(kind, name, unit_key(base, kind, name, policy), tuple(d.key for d in deps), needs, policy)
