"""Reward-model populations: the ``systems:`` block expands each method into many deployable reward models.

A *system* is one deployable RM: a method with its parameters, fitted on a fraction of the seen users' train
pairs with a seed, and adapting unseen users from a number of shots. Without a ``systems:`` block every method
is one system (all train pairs, the run's ``seed`` and ``shots``). With one, each method of ``methods`` (or of
``systems.methods``) is crossed with

- the run-level axes ``train_fraction`` (in (0, 1]), ``seed`` (the fit seed) and ``shots``;
- its own parameter grid under ``params`` (e.g. ``lore: {K: [1, 2, 5]}``), checked like any method parameter.

```yaml
systems:
  train_fraction: [0.25, 0.5, 1.0]
  seed: [0, 1]
  params:
    lore: {K: [2, 5]}
```

Labels. A system is named by its method's label (``lore(K=2)``) plus every run-level axis whose value differs
from the run's own (``train_fraction`` 1.0, ``seed`` = ``seed``, ``shots`` = ``shots``), inside the same
parentheses: ``lore(K=2,train_fraction=0.5)``. So the system that is the plain method keeps the plain label
(``reference_method``, ``guide_with`` and earlier runs name it as before). A label never holds ``@`` or ``|``
(they name a policy and a group elsewhere). The *family* of a system is its label up to the first ``(``: the
method, whose variants are not independent draws (results.json records each system's family and axes).

Fit seeds. A method whose fit is stochastic (``stochastic_fit``: a random initialisation, sampled contexts or
minibatches; docs/methods.md lists which) gives one draw per fit. ``fit_seeds: N`` fits each of its systems N times,
with the system's seed and N − 1 seeds derived from it (:func:`fit_seed_of`; systems with the same seed share them,
so their fits pair in the analysis as RL runs of one seed do), on the same train pairs; the fits are
*one* system: their cells carry ``fit_seed`` under the system's label, and the analysis takes the mean over fits and
resamples the fits on top of users and prompts (as it does for RL training seeds). The extra fits are run as systems
of their own (labels with ``fit_seed=i``, ``pooled`` naming the system they belong to). ``seed:`` is different: each
of its values is a separate system (a different train subset and fit, compared side by side).

A train fraction keeps, for each seen user, the first ⌈f·n⌉ of their n train pairs in an order fixed by the
system's seed (:func:`train_subset`): a 0.25 subset lies inside the 0.5 subset of the same seed.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perbench.specs.systems import AXES, SystemsSpec

if TYPE_CHECKING:
    from perbench.config import Component, RunConfig
    from perbench.data.records import PreferencePair

__all__ = [
    "AXES",
    "SystemDef",
    "SystemsSpec",
    "check_system_names",
    "check_systems",
    "expand",
    "family_of",
    "fit_label",
    "fit_seed_of",
    "is_stochastic",
    "pooled_fits",
    "system_label",
    "train_subset",
]


@dataclass(frozen=True)
class SystemDef:
    """One deployable reward model of a run."""

    label: str
    method: Component  # the method with its parameters (grid values merged in)
    train_fraction: float
    seed: int
    shots: int
    baseline: bool = False
    #: the seed this fit runs with (None: ``seed``); one of ``fit_seeds`` when the system pools several fits
    fit_seed: int | None = None
    #: the label of the system this fit is one draw of (None: the system is its own, one fit)
    pooled: str | None = None
    #: the method's fit is stochastic (``stochastic_fit``): one fit is one draw
    stochastic: bool = False
    #: the seeds of every fit pooled into this system (empty: one fit, ``seed``)
    fit_seeds: tuple[int, ...] = ()

    @property
    def family(self) -> str:
        return family_of(self.label)

    def axes(self) -> dict[str, Any]:
        return {"train_fraction": self.train_fraction, "seed": self.seed, "shots": self.shots}

    def record(self) -> dict[str, Any]:
        """What results.json says about the system (``systems.members[label]``)."""
        return {
            "family": self.family,
            "method": self.method.name,
            "params": dict(self.method.params),
            **self.axes(),
            "baseline": self.baseline,
            "stochastic_fit": self.stochastic,
            "fit_seeds": list(self.fit_seeds) or [self.seed if self.fit_seed is None else self.fit_seed],
            "pooled_as": self.pooled,
        }


def fit_seed_of(seed: int, i: int) -> int:
    """The seed of fit ``i`` of a system with seed ``seed``: the seed itself for fit 0, else one derived from both
    (not a small integer another ``seed:`` value would be)."""
    if i == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}|fit{i}".encode()).digest()[:4], "little") % 2**31


def is_stochastic(method: str) -> bool:
    """Whether the registered method's fit is stochastic (``stochastic_fit``; imports the method's module)."""
    from perbench import registry

    if method not in registry.reward_models:
        return False
    return bool(getattr(registry.reward_models.get(method), "stochastic_fit", False))


def _fits(sd: SystemDef, n: int, stochastic: bool) -> list[SystemDef]:
    """The system ``sd`` as its fits: ``n`` of them (labels ``fit_seed=i`` beyond the first) for a stochastic
    method, else ``sd`` alone."""
    import dataclasses

    if not stochastic or n <= 1:
        return [dataclasses.replace(sd, stochastic=stochastic)]
    seeds = tuple(fit_seed_of(sd.seed, i) for i in range(n))
    out = []
    for i, s in enumerate(seeds):
        label = fit_label(sd.label, i)
        out.append(dataclasses.replace(sd, label=label, fit_seed=s, pooled=sd.label, stochastic=True, fit_seeds=seeds))
    return out


def fit_label(label: str, i: int) -> str:
    """The label of fit ``i`` of the pooled system ``label`` (fit 0 is the system itself)."""
    return label if i == 0 else _with_axis(label, f"fit_seed={i}")


def _with_axis(label: str, extra: str) -> str:
    return label[:-1] + "," + extra + ")" if label.endswith(")") else f"{label}({extra})"


def pooled_fits(systems: Iterable[SystemDef]) -> dict[str, tuple[str, int]]:
    """Each fit that is one draw of a pooled system: its label -> (the system's label, its fit seed)."""
    return {sd.label: (sd.pooled, sd.fit_seed) for sd in systems if sd.pooled is not None and sd.fit_seed is not None}


def family_of(label: str) -> str:
    """A system's method family: its label up to the first ``(``."""
    return label.split("(", 1)[0]


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def system_label(method: Component, axes: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The method's label plus the run-level axes that differ from the run's own values."""
    extra = [f"{k}={_fmt(axes[k])}" for k in AXES if k in axes and axes[k] != defaults[k]]
    base = method.label()
    if not extra:
        return base
    if base.endswith(")"):
        return base[:-1] + "," + ",".join(extra) + ")"
    return f"{base}({','.join(extra)})"


def expand(
    methods: Sequence[Component],
    baselines: Iterable[Component | str],
    spec: SystemsSpec | None,
    *,
    seed: int,
    shots: int,
    stochastic_of: Callable[[str], bool] | None = None,
) -> list[SystemDef]:
    """Every system of a run, methods first (in config order, each method's grid in order), then baselines; a
    stochastic method's system with ``fit_seeds`` > 1 as its fits (see the module docstring). ``stochastic_of``:
    whether a method's fit is stochastic (None: its registered class says, :func:`is_stochastic`).
    Raises ValueError naming the first duplicate label or a label holding ``@`` or ``|``."""
    from perbench.config import Component

    defaults: dict[str, Any] = {"train_fraction": 1.0, "seed": seed, "shots": shots}
    out: list[SystemDef] = []
    for m in methods:
        expands = spec is not None and (spec.methods is None or m.name in spec.methods or m.label() in spec.methods)
        stochastic = is_stochastic(m.name) if stochastic_of is None else stochastic_of(m.name)
        if not expands:
            out += _fits(SystemDef(m.label(), m, 1.0, seed, shots), 1 if spec is None else spec.fit_seeds, stochastic)
            continue
        assert spec is not None
        grid = {**spec.params.get(m.name, {}), **spec.params.get(m.label(), {})}
        names = list(grid)
        for combo in itertools.product(*(grid[n] for n in names)):
            variant = Component(m.name, {**m.params, **dict(zip(names, combo, strict=True))})
            for f, s, k in itertools.product(
                spec.train_fraction or (1.0,), spec.seed or (seed,), spec.shots or (shots,)
            ):
                axes = {"train_fraction": float(f), "seed": s, "shots": k}
                sd = SystemDef(system_label(variant, axes, defaults), variant, float(f), s, k)
                out += _fits(sd, spec.fit_seeds, stochastic)
    for b in baselines:
        comp = b if isinstance(b, Component) else Component(b)
        out.append(SystemDef(comp.label(), comp, 1.0, seed, shots, baseline=True))
    seen: set[str] = set()
    for sd in out:
        if sd.label in seen:
            raise ValueError(f"two systems are both labelled {sd.label!r}; list each method and grid value once")
        if "@" in sd.label or "|" in sd.label:
            raise ValueError(f"system label {sd.label!r} holds '@' or '|', which name a policy and a group")
        seen.add(sd.label)
    return out


def train_subset(pairs: Sequence[PreferencePair], fraction: float, seed: int) -> list[PreferencePair]:
    """For each user, the first ⌈fraction·n⌉ of their n pairs in an order fixed by ``seed`` (pairs keep their
    original order in the result). Nested: for one seed, a smaller fraction's subset lies inside a larger one's."""
    if fraction >= 1.0:
        return list(pairs)
    by_user: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_user.setdefault(p.user_id, []).append(i)
    keep: set[int] = set()
    for idx in by_user.values():
        ranked = sorted(idx, key=lambda i: hashlib.sha256(f"{seed}|{pairs[i].content_key()}".encode()).hexdigest())
        keep.update(ranked[: math.ceil(fraction * len(idx))])
    return [p for i, p in enumerate(pairs) if i in keep]


# ------------------------------------------------------------------------------------------- preflight rules
def check_systems(cfg: RunConfig) -> list[str]:
    """The preflight's rule for the systems a config expands to: every label distinct and plain, each variant of a
    parameter grid checked like a method (``systems.params.METHOD.PARAM``) -> every system's label."""
    from perbench.config import check_component

    spec = None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, cfg.locate("systems"))
    try:
        systems = expand(cfg.methods, cfg.baselines, spec, seed=cfg.seed, shots=cfg.shots)
    except ValueError as e:
        raise cfg.locate("systems" if spec is not None else "methods").error(str(e)) from None
    if spec is not None and spec.params:
        checked: set[str] = set()
        for sd in systems:
            if sd.baseline or sd.method.label() in checked:
                continue
            checked.add(sd.method.label())
            check_component(sd.method, cfg.locate("systems", "params", sd.method.name), "method")
    return [sd.label for sd in systems]


def check_system_names(cfg: RunConfig, labels: Sequence[str]) -> None:
    """The keys that name systems (``guide_with``, ``reference_method``, ``rl.methods``) name systems of this
    config (``labels``: :func:`check_systems`)."""
    import dataclasses
    import difflib

    from perbench.specs.rl import RLPhase

    def hint(name: str) -> str:
        close = difflib.get_close_matches(name, list(labels), n=1)
        return f" Did you mean {close[0]!r}?" if close else ""

    allowed = ", ".join(labels) or "none"
    for i, g in enumerate(cfg.guide_with or []):
        if g not in labels:
            raise cfg.locate("guide_with", i).error(
                f"{g!r} is not one of this config's methods or baselines, so it would guide nothing.{hint(g)} "
                f"Allowed: {allowed}"
            )
    ref = cfg.reference_method
    default = {f.name: f.default for f in dataclasses.fields(cfg)}["reference_method"]
    if ref not in labels and ref != default:  # the default may be absent: then the report says there is none
        raise cfg.locate("reference_method").error(
            f"{ref!r} is not one of this config's methods or baselines, so per-user gains and minority users would "
            f"be measured against nothing.{hint(ref)} Allowed: {allowed}"
        )
    if cfg.rl is not None:
        where = str(cfg.locate("rl"))
        RLPhase.from_dict(cfg.rl, where=where).check_methods(list(labels), where=where)
