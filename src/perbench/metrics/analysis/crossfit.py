"""System values and rank coefficients over systems, in-sample and cross-fitted over prompt folds.

:class:`Systems` gives each system's value of a metric and the coefficients (τ-b, ρ, NDCG) of two metrics' rankings
of the systems, on the point values and on every bootstrap replicate (:mod:`.validity` compares predictors with it).

:class:`HeldOut` gives the same coefficients **cross-fitted**: a predictor measured on one half of the prompts
against the downstream outcome measured on the other half, averaged over the two ways round. An on-policy
predictor (``onpolicy_acc``, ``onpolicy_bok_acc@K``) is read off the very pool samples and exact labels the
Best-of-N outcome is computed from: in-sample, the sampling noise they share counts as agreement, and its τ-b
with the outcome is biased upward. On disjoint prompts that noise is independent. The folds split the outcome's
prompts (per benchmark) in two halves in an order fixed by a hash of each prompt; a predictor with no cells on the
outcome's prompts (another benchmark's pairs) is read whole, already held out. Every predictor goes through the
same folds, so their held-out coefficients compare like with like; the fold values are resampled with the
run's own bootstrap draws (users × prompts, and seeds), so differences between predictors stay paired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from perbench.metrics.analysis.base import Est, FloatArray, IntArray
from perbench.metrics.analysis.estimates import Estimates
from perbench.metrics.correlation import BATCHED, CORRELATIONS

#: the coefficients compared between predictors (τ-b decides the verdict)
COEFFICIENTS = ("kendall_tau_b", "spearman", "ndcg")
#: prompt folds of the cross-fit
FOLDS = 2


class Systems:
    """System values and coefficients on a set of systems, cached (a system is a (setting, method) of
    ``methods``)."""

    def __init__(self, est: Estimates, methods: Sequence[str]) -> None:
        self.est = est
        self.methods = sorted(methods)
        self.settings = sorted({k.setting for k in est.keys})
        self._v: dict[tuple[str, str, str], Est | None] = {}
        self._c: dict[tuple[str, str, tuple[tuple[str, str], ...]], dict[str, tuple[float | None, FloatArray]]] = {}

    def value(self, s: str, m: str, k: str) -> Est | None:
        if (s, m, k) not in self._v:
            self._v[(s, m, k)] = self.est.value(m, k, s)
        return self._v[(s, m, k)]

    def having(self, metrics: Sequence[str]) -> list[tuple[str, str]]:
        return [
            (s, m) for s in self.settings for m in self.methods if all(self.value(s, m, k) is not None for k in metrics)
        ]

    def resampled(self, systems: Sequence[tuple[str, str]], metrics: Sequence[str]) -> bool:
        """Every system's value of every metric has a bootstrap (at least 2 (user, prompt) pairs)."""
        ests = [self.value(s, m, k) for s, m in systems for k in metrics]
        return self.est.n_boot >= 2 and all(e is not None and all(self.est.plans[c].unit for c in e.cols) for e in ests)

    def coefs(self, x: str, y: str, systems: Sequence[tuple[str, str]]) -> dict[str, tuple[float | None, FloatArray]]:
        """Each coefficient of x's ranking with y's over ``systems``: (point or None, replicates with NaN)."""
        key = (x, y, tuple(systems))
        if key not in self._c:
            xs = [self.value(s, m, x) for s, m in systems]
            ys = [self.value(s, m, y) for s, m in systems]
            px = np.array([e.point for e in xs if e is not None])
            py = np.array([e.point for e in ys if e is not None])
            n = self.est.n_boot
            rx = np.stack([e.reps for e in xs if e is not None], axis=1) if systems else np.zeros((n, 0))
            ry = np.stack([e.reps for e in ys if e is not None], axis=1) if systems else np.zeros((n, 0))
            self._c[key] = {
                name: (CORRELATIONS[name](px, py), BATCHED[name](rx, ry) if n else np.zeros(0)) for name in COEFFICIENTS
            }
        return self._c[key]


def _fold_of(labels: Sequence[str]) -> dict[str, int]:
    """Each prompt label's fold: the labels in the order of their sha256, dealt out in turn."""
    ranked = sorted(set(labels), key=lambda x: hashlib.sha256(x.encode("utf-8")).hexdigest())
    return {x: i % FOLDS for i, x in enumerate(ranked)}


class HeldOut(Systems):
    """:class:`Systems` whose coefficients with a downstream metric are cross-fitted over prompt folds (see the
    module docstring); values and coefficients between two upstream metrics are the in-sample ones."""

    def __init__(self, est: Estimates, methods: Sequence[str], metrics: Sequence[str] = ()) -> None:
        super().__init__(est, methods)
        labels = np.array([f"{est.keys[g].benchmark}/{p}" for g, p in zip(est.g.tolist(), est.prompt_of, strict=True)])
        self._labels, code = np.unique(labels, return_inverse=True)
        self._label_code: IntArray = np.asarray(code, dtype=np.intp).ravel()
        #: the upstream metrics whose fold values are computed together (one bootstrap pass per downstream metric)
        self.metrics = list(metrics)
        self._folds: dict[str, dict[str, int]] = {}
        self._fv: dict[tuple[str, str, str, str, int], Est | None] = {}
        self._ready: set[str] = set()

    def folds(self, d: str) -> dict[str, int]:
        """The fold of each of the downstream metric ``d``'s prompts."""
        if d not in self._folds:
            rows = np.concatenate([r for (_, _, k), r in self.est.rows.items() if k == d] or [np.zeros(0, np.intp)])
            self._folds[d] = _fold_of(self._labels[np.unique(self._label_code[rows])].tolist())
        return self._folds[d]

    def usable(self, d: str) -> bool:
        """Whether ``d`` has at least two prompts in every fold."""
        counts = np.bincount(list(self.folds(d).values()), minlength=FOLDS)
        return bool(len(counts) == FOLDS and counts.min() >= 2)

    def _parts(self, where: IntArray, s: str, m: str, k: str, f: int) -> list[IntArray]:
        """The rows of system (s, m)'s metric k in fold f (``where``: each row's fold, −1 off d's prompts), per group;
        all of a group's rows when none is on d's prompts (a predictor on other prompts: already held out)."""
        est = self.est
        parts = []
        for g in range(len(est.groups)):
            rows = est.rows.get((g, m, k))
            if rows is None or est.keys[g].setting != s:
                continue
            w = where[rows]
            if not (w >= 0).any():
                parts.append(rows)
            elif (w == f).any():
                parts.append(rows[w == f])
        return parts

    def _prepare(self, d: str, metrics: Sequence[str]) -> None:
        """Every system's fold values of ``metrics`` on d's folds, in one pass of the run's bootstrap."""
        fold = self.folds(d)
        per_code = np.array([fold.get(x, -1) for x in self._labels.tolist()], dtype=np.intp)
        where = per_code[self._label_code]
        keys: list[tuple[tuple[str, str, str, str, int], int, int]] = []
        columns: list[IntArray] = []
        for s in self.settings:
            for m in self.methods:
                for k in dict.fromkeys(metrics):
                    for f in range(FOLDS):
                        parts = self._parts(where, s, m, k, f)
                        if not parts:
                            self._fv[(s, m, k, d, f)] = None
                            continue
                        keys.append(((s, m, k, d, f), len(parts), sum(int(r.size) for r in parts)))
                        columns += parts
        if not columns:
            return
        point, reps = self.est.means_of(columns)
        at = 0
        for key, n, cells in keys:
            self._fv[key] = Est(float(np.mean(point[at : at + n])), np.mean(reps[:, at : at + n], axis=1), cells=cells)
            at += n

    def fold_value(self, s: str, m: str, k: str, d: str, f: int) -> Est | None:
        """System (s, m)'s value of metric k on the rows whose prompt is in fold f of d's prompts (all of k's rows
        when none of them is on d's prompts; the mean over a setting's groups); None when it has no row there."""
        if d not in self._ready:
            self._ready.add(d)
            self._prepare(d, [*self.metrics, d])
        if (s, m, k, d, f) not in self._fv:
            self._prepare(d, [k])
        return self._fv[(s, m, k, d, f)]

    def having(self, metrics: Sequence[str]) -> list[tuple[str, str]]:
        d = next((k for k in metrics if ":" in k), None)
        base = super().having(metrics)
        if d is None:
            return base
        return [
            (s, m) for s, m in base
            if all(self.fold_value(s, m, k, d, f) is not None for k in metrics for f in range(FOLDS))
        ]  # fmt: skip

    def resampled(self, systems: Sequence[tuple[str, str]], metrics: Sequence[str]) -> bool:
        return super().resampled(systems, [k for k in metrics if ":" not in k] or metrics)

    def coefs(self, x: str, y: str, systems: Sequence[tuple[str, str]]) -> dict[str, tuple[float | None, FloatArray]]:
        """Cross-fitted when y is downstream: the mean over folds f of coef(x on fold f, y on the other fold)."""
        if ":" not in y or ":" in x:
            return super().coefs(x, y, systems)
        key = (x, y, tuple(systems))
        if key in self._c:
            return self._c[key]
        n = self.est.n_boot
        per: dict[str, list[tuple[float | None, FloatArray]]] = {name: [] for name in COEFFICIENTS}
        for f in range(FOLDS):
            xs = [self.fold_value(s, m, x, y, f) for s, m in systems]
            ys = [self.fold_value(s, m, y, y, (f + 1) % FOLDS) for s, m in systems]
            px = np.array([e.point for e in xs if e is not None])
            py = np.array([e.point for e in ys if e is not None])
            rx = np.stack([e.reps for e in xs if e is not None], axis=1) if systems else np.zeros((n, 0))
            ry = np.stack([e.reps for e in ys if e is not None], axis=1) if systems else np.zeros((n, 0))
            for name in COEFFICIENTS:
                per[name].append((CORRELATIONS[name](px, py), BATCHED[name](rx, ry) if n else np.zeros(0)))
        out: dict[str, tuple[float | None, FloatArray]] = {}
        for name, got in per.items():
            points = [p for p, _ in got]
            value = (
                None if any(p is None for p in points) else float(np.mean([float(p) for p in points if p is not None]))
            )
            out[name] = (value, np.mean(np.stack([r for _, r in got]), axis=0) if n else np.zeros(0))
        self._c[key] = out
        return out
