"""The run as a plan of independent units, each keyed by content and declaring its inputs and its needs.

A unit computes something expensive and leaves it in the stores (the run's ``units.sqlite`` over the shared unit
cache, the feature cache, the sample-pool cache): every forward pass, decode, fit, score, quality check and win
rate of the run is inside some unit, and the assembly pass that follows (upstream, downstream, analysis, report)
only reads (its work counters are zero). Executors (``perbench list executors``) map units: ``local`` runs them
here in order, ``ray`` as Ray tasks with the units' resource needs, after their dependencies, each task handed
references to its dependencies' results (fetching those it reads) and returning its own; ``footprint.py``
estimates from the plan how much of Ray's object store those results need. Because the assembly is the same code
whichever executor ran the units, a run's results do not depend on the executor.

A unit's key is a hash of what its own results depend on (models' fingerprints, the benchmark's content, the
method's and decoder's parameters, the evaluated targets, seeds, lengths) and of its dependencies' keys, never of
the run's config hash: a run with a changed decoder parameter finds every unit that does not depend on that
decoder done by the run before it.

Units, in dependency order:

* ``features:train``: φ of the train responses under the RM backbone (the seen users' train split and the
  unseen users' shots), what every frozen-feature method fits and adapts on;
* ``features:test``: per-token features of the test responses, and the policy's log-probs of them;
* ``fit:M``: method M trained on the seen users' train pairs (its state cached by content);
* ``upstream:M``: M's scores of the test pairs, its few-shot curve, its policy accuracy (``upstream:M@P``: its
  policy accuracy under another policy P of ``policies``);
* ``pool:D@P``: the Best-of-N sample pool of decoder D under policy P, one per test prompt (sampled once,
  shared by every system and user), φ of its texts and its quality per (cell, sample);
* ``generate:D[M]@P``: decoder D's generations for every evaluated (prompt, user), guided by M (if any), their
  quality and M's win rate over zero-shot; for a pooled Best-of-N, M's scores of the pool (and of zero-shot);
* ``adaptive:D@P``: the adaptive rounds of a per-cell decoder D over all of its systems (``adaptive:``), then
  each system's quality and win rate on the cells it reached;
* ``rl:LABEL:GROUP@P``: the policy fine-tuned against an RM for one group of users, and its generations;
* ``rl_eval:LABEL:GROUP@P``: one fine-tuned policy's evaluation (greedy and sampled generations, KL, and for
  an RM's run the KL-matched random update and its generations), one unit per run, in parallel;
* ``rl_eval:base@P``: the base policy's generations on the cells the runs train for;
* ``rl_eval:rl@P``: the quality and RM scores of every evaluated text (the RL summary the assembly reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perbench.runner.units import unit_key

#: the resource kind (``resources:`` in the config) of each kind of unit
RESOURCE_KIND = {
    "features": "features",
    "fit": "fit",
    "upstream": "score",
    "pool": "decode",
    "generate": "decode",
    "adaptive": "decode",
    "rl": "rl",
    "rl_eval": "score",
}


@dataclass(frozen=True)
class Needs:
    """What one unit needs of a machine: Ray schedules by these; ``local`` ignores them."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float = 2.0


def needs_of(kind: str, resources: Mapping[str, Mapping[str, float]] | None, cuda: bool) -> Needs:
    """The needs of a unit of resource ``kind``: the config's ``resources[kind]`` over the defaults, which fit one
    node with one GPU (a unit takes the GPU when the units' device is CUDA, so units on one GPU run in turn)."""
    given = (resources or {}).get(kind, {})
    return Needs(
        cpus=float(given.get("num_cpus", 1.0)),
        gpus=float(given.get("num_gpus", 1.0 if cuda else 0.0)),
        memory_gb=float(given.get("memory_gb", 4.0 if kind == "rl" else 2.0)),
    )


@dataclass(frozen=True)
class Unit:
    kind: str  # features | fit | upstream | pool | generate | adaptive | rl | rl_eval
    name: str  # the method / decoder label it concerns (train / test for features)
    key: str  # content key (see the module docstring)
    deps: tuple[str, ...] = ()
    needs: Needs = field(default_factory=Needs)
    policy: str | None = None  # generation units: the policy spec they decode with

    @property
    def label(self) -> str:
        label = f"{self.kind}:{self.name}" if self.name else self.kind
        return f"{label}@{self.policy}" if self.policy else label

    def done_key(self) -> str:
        """The store key marking the unit finished (a resumed run, or any run with the same inputs, skips it)."""
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

    def closure(self, unit: Unit) -> list[Unit]:
        """Every unit ``unit`` depends on, directly or through another, in plan order: what its worker is handed."""
        index = self.by_key()
        wanted: set[str] = set()
        todo = list(unit.deps)
        while todo:
            k = todo.pop()
            if k not in wanted:
                wanted.add(k)
                todo += index[k].deps
        return [u for u in self.units if u.key in wanted]


def make_unit(
    kind: str,
    name: str,
    content: Any,
    deps: list[Unit],
    resources: Mapping[str, Mapping[str, float]] | None,
    cuda: bool,
    policy: str | None = None,
) -> Unit:
    """A unit keyed by ``content`` (what its own results depend on) and by its dependencies' keys (so a change
    to any of its inputs is a new unit), needing what its kind needs."""
    key = unit_key("unit", kind, name, policy, content, [d.key for d in deps])
    return Unit(kind, name, key, tuple(d.key for d in deps), needs_of(RESOURCE_KIND[kind], resources, cuda), policy)
