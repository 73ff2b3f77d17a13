"""Adaptive rounds for the decoders that generate per (user, prompt) cell (ARGS, GenARM, ICL): spend a budget
where it decides something.

The eligible cells (``Downstream.eval_targets``) are put in one seeded order (:func:`cell_order`: users and
prompts shuffled, then walked diagonal by diagonal, so any prefix spreads over as many users and prompts as it
can). Round r covers the first r × ``round`` cells of that order: every system still in contention gets the
cells of that prefix it does not have yet (a system that was dropped and is a contender again catches up). After
each round the decoder's cells so far go through the selection analysis (``perbench.metrics.analysis.analyze``)
on the round's metric; the systems in contention for the next round are the leader and the analysis'
``contenders`` (the methods whose difference from the leader is not yet resolved). The rounds stop when the
leader is separable from every other system, when equivalence is established, or when the budget is spent:

- ``budget: N`` counts generation units requested (one per (system, cell); a user-agnostic RM's generation is
  one per prompt, shared by its users), whether or not an earlier run left them in the cache, so a run makes the
  same rounds from an empty cache and from a full one. A round that would pass the budget is cut at the last
  cell that fits.
- ``budget: "4min"`` counts the wall time of the rounds' generation. It cannot be exact from scratch: a faster
  or busier machine stops at another round. Each finished round is stored (content-keyed, with its elapsed
  time), so a rerun or a resumed run reuses the stored rounds and makes exactly the same ones; results.json says
  so (``adaptive[...].reproducible``).

Every round is a content-keyed unit (the decoder, the policy, the systems' fit keys, the order, the round size,
the budget, the metric, the bootstrap settings and the round's index), and each of its generations is the same
unit the non-adaptive path would compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perbench.specs.adaptive import AdaptiveSpec as AdaptiveSpec

if TYPE_CHECKING:
    from perbench.config import RunConfig


def check_adaptive(cfg: RunConfig) -> None:
    """The preflight's rule for ``adaptive.metric``: one of the qualities the scoring measures."""
    from perbench.runner.scoring import QUALITY_METRICS

    metric = (cfg.adaptive or {}).get("metric")
    if metric is not None and metric not in QUALITY_METRICS:
        raise cfg.locate("adaptive", "metric").error(f"expected one of {', '.join(QUALITY_METRICS)}, got {metric!r}")


def cell_order(cells: Sequence[tuple[str, str]], seed: int) -> list[tuple[str, str]]:
    """A fixed order of (prompt id, user) cells: users and prompts shuffled by ``seed``, then diagonal by
    diagonal (the cell of user i and prompt j is on diagonal (j − i) mod P), so that a prefix of the order
    covers as many distinct users and prompts as it can (a full grid: each block of U cells holds every user)."""
    import numpy as np

    users = sorted({u for _, u in cells})
    prompts = sorted({p for p, _ in cells})
    rng = np.random.default_rng([seed, 17])
    u_rank = {u: i for i, u in enumerate(rng.permutation(users).tolist())}
    p_rank = {p: j for j, p in enumerate(rng.permutation(prompts).tolist())}
    P = max(1, len(prompts))
    return sorted(cells, key=lambda c: ((p_rank[c[0]] - u_rank[c[1]]) % P, u_rank[c[1]]))


def round_metric(cfg: Any, bench: Any, spec: AdaptiveSpec) -> str:
    """The quality the rounds rank by: ``adaptive.metric``, else the verdict metric's, else the first the
    benchmark has ground truth for (rubric satisfaction, ROUGE-L, the judge's score)."""
    if spec.metric is not None:
        return spec.metric
    if cfg.verdict_metric:
        return str(cfg.verdict_metric).split(":", 1)[1]
    if any(u.rubric for u in bench.users.values()):
        return "rubric_satisfaction"
    if bench.meta.get("ground_truth"):
        return "personal_reward"
    return "rougeL" if bench.references else "judge_score"


class Rounds:
    """The adaptive rounds of one per-cell decoder over its systems (see the module docstring)."""

    def __init__(self, down: Any, spec: Any, systems: list[Any]) -> None:
        from perbench.data.records import prompt_key
        from perbench.runner.units import unit_key

        self.down, self.s = down, down.s
        self.decoder_spec = spec
        self.systems = {sys.label: sys for sys in systems}
        self.spec = AdaptiveSpec.from_dict(self.s.cfg.adaptive, _where())
        cfg = self.s.cfg
        self.quality = round_metric(cfg, self.s.bench, self.spec)
        self.family = systems[0].family if systems else spec.name
        self.metric = f"{self.family}:{self.quality}"
        targets = {(prompt_key(p), u): (p, u) for p, u in down.eval_targets()}
        self.order = [targets[c] for c in cell_order(list(targets), cfg.seed)]
        self.na = {
            label: (self.s.not_applicable(sys.method) if sys.method is not None else set())
            for label, sys in self.systems.items()
        }
        self.base = unit_key(
            "adaptive",
            spec.to_dict(),
            self.s.policy.fingerprint,
            [[label, sys.method.key(sys.method.shots) if sys.method else None] for label, sys in self.systems.items()],
            [(prompt_key(p), u) for p, u in self.order],
            self.spec.round,
            self.spec.budget_text,
            self.metric,
            cfg.bootstrap,
            cfg.seed,
            cfg.reference_method,
            cfg.max_new_tokens,
            self.s.bench_fingerprint(),
        )
        self.have: dict[str, set[int]] = {label: set() for label in self.systems}
        self.records: list[dict[str, Any]] = []
        self._quality: dict[str, dict[int, float]] = {label: {} for label in self.systems}
        self._decoders = {label: down._decoder(sys.spec) for label, sys in self.systems.items()}

    # ------------------------------------------------------------------ the rounds
    def run(self) -> Rounds:
        from perbench.runner.units import unit_key

        requested: set[str] = set()
        spent, elapsed = 0, 0.0
        active = list(self.systems)
        r = 0
        while True:
            r += 1
            key = unit_key(self.base, r)
            rec = self.s.units.store.get_json(key)
            if rec is not None:
                self.s.units.reused["adaptive"] += 1
                for label, cells in rec["added_cells"].items():
                    self._add(label, list(cells), requested)
            else:
                rec = self._round(r, active, requested, spent, elapsed)
                self.s.units.put_json("adaptive", key, rec)
            self.records.append(rec)
            spent, elapsed, active = int(rec["spent"]), float(rec["elapsed_s"]), list(rec["next"])
            if rec["stopped"] is not None:
                return self

    def _units(self, label: str, cells: list[int]) -> list[str]:
        """The generation unit of each cell for system ``label`` (a user-agnostic RM shares one per prompt)."""
        from perbench.data.records import prompt_key

        targets = [self.order[c] for c in cells]
        _, slot = self.down.unit_keys(self._decoders[label], self.systems[label].method, targets)
        return [slot[(prompt_key(p), u)] for p, u in targets]

    def _add(self, label: str, cells: list[int], requested: set[str]) -> None:
        self.have[label].update(cells)
        requested.update(self._units(label, cells))

    def _complete(self, label: str) -> bool:
        return len(self.have[label]) == sum(u not in self.na[label] for _, u in self.order)

    def _round(self, r: int, active: list[str], requested: set[str], spent: int, elapsed: float) -> dict[str, Any]:
        import time

        prefix = min(len(self.order), r * self.spec.round)
        added: dict[str, list[int]] = {label: [] for label in active}
        cut = False
        new_units: set[str] = set()
        for c in range(prefix):
            want = [lab for lab in active if c not in self.have[lab] and self.order[c][1] not in self.na[lab]]
            if not want:
                continue
            keys = {k for lab in want for k in self._units(lab, [c])} - requested - new_units
            if self.spec.generations is not None and spent + len(new_units) + len(keys) > self.spec.generations:
                cut = True
                break
            new_units |= keys
            for lab in want:
                added[lab].append(c)
        t0 = time.perf_counter()
        for label, cells in added.items():
            if cells:
                self.down.generate(self.systems[label], [self.order[c] for c in cells])
        elapsed += time.perf_counter() - t0
        for label, cells in added.items():
            self._add(label, cells, requested)
        spent += len(new_units)
        leader, contenders, decision = self._contention()
        stopped, why = None, ""
        nxt = [lab for lab in [leader, *contenders] if lab in self.systems] if leader else list(self.systems)
        nxt = nxt or list(self.systems)
        if decision in ("separable", "equivalent"):
            stopped, why = decision, f"the analysis of {self.metric} after round {r} found the top {decision}"
        elif (
            cut
            or (self.spec.generations is not None and spent >= self.spec.generations)
            or (self.spec.minutes is not None and elapsed >= 60 * self.spec.minutes)
        ):
            stopped, why = "budget", f"the budget of {self.spec.budget_text} is spent"
        elif prefix >= len(self.order) and all(self._complete(lab) for lab in nxt):
            stopped, why = "budget", f"every eligible cell ({len(self.order)}) is evaluated"
        return {
            "round": r,
            "cells": prefix,
            "added": {lab: len(c) for lab, c in added.items()},
            "added_cells": added,
            "generations": len(new_units),
            "spent": spent,
            "elapsed_s": round(elapsed, 3),
            "leader": leader,
            "contenders": contenders,
            "decision": decision,
            "next": nxt,
            "stopped": stopped,
            "why": why,
        }

    def _contention(self) -> tuple[str | None, list[str], str]:
        """(leader, contenders, decision) from the selection analysis of the decoder's cells so far."""
        import numpy as np

        from perbench.data.records import prompt_key
        from perbench.metrics.analysis import Cell, analyze

        cfg = self.s.cfg
        method_of = {label: sys.method.label if sys.method else self.family for label, sys in self.systems.items()}
        rows = []
        for label, cells in self.have.items():
            todo = sorted(c for c in cells if c not in self._quality[label])
            if todo:  # quality of the round's metric only, each generation once
                targets = [self.order[c] for c in todo]
                texts = self.down.generate(self.systems[label], targets)
                gen = [texts[(prompt_key(p), u)] for p, u in targets]
                q = self.down.scoring.quality(gen, targets, metrics={self.quality})
                for c, row in zip(todo, q, strict=True):
                    self._quality[label][c] = row.get(self.quality, float("nan"))
            for c in sorted(cells):
                v = self._quality[label][c]
                if not np.isnan(v):
                    p, u = self.order[c]
                    rows.append(Cell("rounds", method_of[label], self.metric, u, prompt_key(p), v))
        if len({r.method for r in rows}) < 2:  # nothing to compare: spend the budget
            return None, [], "undecided"
        res = analyze(
            rows,
            upstream=[],
            downstream=[self.metric],
            verdict_metric=self.metric,
            reference_method=cfg.reference_method,
            n_boot=cfg.bootstrap,
            seed=cfg.seed,
            equivalence_margin=cfg.equivalence_margin,
            roles={b.label(): "baseline" for b in cfg.baselines},
        )
        rk = res["ranking"][self.metric]
        decision = rk.get("decision") or ("separable" if rk.get("best") else "undecided")
        by_method = {m: label for label, m in method_of.items()}
        contenders = [by_method[m] for m in rk.get("contenders", rk["tied"][1:]) if m in by_method]
        leader = by_method.get(rk["order"][0]) if rk["order"] else None
        return leader, contenders, str(decision)

    # ------------------------------------------------------------------ what the run reads
    def cells_of(self, label: str) -> list[tuple[Any, str]]:
        return [self.order[c] for c in sorted(self.have.get(label, ()))]

    def summary(self) -> dict[str, Any]:
        """What the selection analysis is told about the rounds (``analyze(adaptive=...)``)."""
        last = self.records[-1]
        reached = len({c for cells in self.have.values() for c in cells})
        return {
            "rounds": len(self.records),
            "stopped": last["stopped"],
            "cells": reached,
            "budget": self.spec.budget_text,
        }

    def record(self) -> dict[str, Any]:
        """The rounds as results.json records them (``adaptive[DECODER]``)."""
        last = self.records[-1]
        return {
            "metric": self.metric,
            "budget": self.spec.budget_text,
            "round_cells": self.spec.round,
            "eligible_cells": len(self.order),
            "rounds": [{k: v for k, v in rec.items() if k != "added_cells"} for rec in self.records],
            "stopped": last["stopped"],
            "why": last["why"],
            "cells": {label: len(cells) for label, cells in self.have.items()},
            "generations": int(last["spent"]),
            "summary": self.summary(),
            "reproducible": (
                "exact: the rounds depend only on the data, the config and the seed"
                if self.spec.generations is not None
                else "a minutes budget depends on the machine's speed: this run's rounds are stored and a rerun "
                "or resume reuses them, but a run from an empty cache may stop at another round"
            ),
        }


def _where() -> Any:
    from perbench.config import Where

    return Where("adaptive")
