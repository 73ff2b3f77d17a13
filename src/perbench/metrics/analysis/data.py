"""The cells of a run, indexed for the analysis: rows per (group, method, metric), the bootstrap columns every
estimate is computed from, and the paired columns of every comparison (restricted to the cells both sides have).

User draws are stratified by user class where a benchmark splits its users into seen and unseen ones
(:func:`user_classes`, read off the cells, so older runs' cells get it too): each class is drawn among itself.

Rows of RL-trained policies carry their training seed (``rl_seed``: one row per (seed, user, prompt)): a column of
them is the mean over its seeds of each seed's mean, and its replicates resample the seeds on top of the users and
prompts (:func:`perbench.stats.seeded.seeded_means`, the RL table's bootstrap), one draw of a run's seeds shared by
every column with the same seeds, so differences stay paired by seed. Columns without seeds are as before. Rows of
a system that pools several fits of a stochastic method carry their fit seed (``fit_seed``) and are resampled the
same way: a fit seed is a training seed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import (
    FAIRNESS_METRICS,
    ZERO_SHOT,
    FloatArray,
    IntArray,
    as_row,
    is_descriptive,
    is_diagnostic,
    is_downstream,
    metric_sort_key,
    parse_group,
    stratum,
    training_seed,
)
from perbench.metrics.analysis.roles import RANDOM_PICK
from perbench.stats.bootstrap import Resampling, TwoWayBootstrap, factor_notes
from perbench.stats.seeded import seed_note, seeded_means, with_seeds

SEEN_METRIC, UNSEEN_METRIC = "rm_acc_seen", "rm_acc_unseen"  # whose users are the seen / unseen class
ACC = "\x00acc"  # pooled fairness accuracy (rm_acc_seen and rm_acc_unseen rows), an internal pseudo-metric


class Columns:
    """Row-index columns for the bootstrap, deduplicated by content."""

    def __init__(self) -> None:
        self.rows: list[IntArray] = []
        self._ids: dict[bytes, int] = {}

    def add(self, rows: IntArray) -> int:
        key = rows.tobytes()
        if key not in self._ids:
            self._ids[key] = len(self.rows)
            self.rows.append(rows)
        return self._ids[key]


class Data:
    """Rows, groups, methods and metrics of the cells, with every bootstrap column's point and replicates."""

    def __init__(
        self,
        cells: Iterable[Any],
        upstream: Sequence[str] | None,
        downstream: Sequence[str] | None,
        n_boot: int,
        seed: int,
        level: float,
    ) -> None:
        self.level, self.n_boot, self.seed = level, n_boot, seed
        self.notes: list[str] = []
        if n_boot < 2:
            self.notes.append(f"n_boot={n_boot}: no confidence intervals, so no method is called best")
        tagged = [(as_row(c), training_seed(c)) for c in cells]
        bad = sum(1 for r, _ in tagged if not math.isfinite(r[5]))
        if bad:
            self.notes.append(f"{bad} row(s) with a non-finite value were dropped (a missing value has no row)")
            tagged = [(r, s) for r, s in tagged if math.isfinite(r[5])]
        raw = [r for r, _ in tagged]
        # a row's training seed, labelled by its group: each run's trained policies are its own
        self.seed_label = [None if s is None else f"{r[0]}\x00{s}" for r, s in tagged]
        self.groups = list(dict.fromkeys(r[0] for r in raw))
        methods = list(dict.fromkeys(r[1] for r in raw))
        present = list(dict.fromkeys(r[2] for r in raw))
        self.present = set(present)
        reported = [m for m in present if not is_diagnostic(m) and not is_descriptive(m)]
        asked = next((m for m in [*(upstream or ()), *(downstream or ())] if is_descriptive(m)), None)
        if asked is not None:
            raise ValueError(
                f"upstream/downstream: {asked} describes the text (its length), it is no quality to rank; it enters "
                "only the verdict's trade-offs"
            )
        #: descriptive metrics present (:func:`is_descriptive`): paired against the random pick and zero-shot only
        self.descriptive = sorted((m for m in present if is_descriptive(m)), key=metric_sort_key)
        self.upstream = (
            list(upstream)
            if upstream is not None
            else sorted((m for m in reported if not is_downstream(m)), key=metric_sort_key)
        )
        self.downstream = (
            list(downstream)
            if downstream is not None
            else sorted((m for m in reported if is_downstream(m)), key=metric_sort_key)
        )
        for m in self.upstream + self.downstream:
            if m not in self.present:
                self.notes.append(f"metric {m} was requested but has no rows")
        own: dict[str, set[str]] = {}
        for r in raw:
            own.setdefault(r[1], set()).add(r[2])
        pure = {m for m in methods if all(k.startswith(f"{m}:") for k in own[m])}
        self.methods = [m for m in methods if m not in pure] + [m for m in methods if m in pure]
        self.pure_decoders = pure

        gi = {g: i for i, g in enumerate(self.groups)}
        self.keys = [parse_group(g) for g in self.groups]
        self.g = np.array([gi[r[0]] for r in raw], dtype=np.intp)
        self.method_of = np.array([r[1] for r in raw], dtype=object)
        self.metric_of = np.array([r[2] for r in raw], dtype=object)
        self.user_of = [r[3] for r in raw]
        self.prompt_of = [r[4] for r in raw]
        self.values = np.array([r[5] for r in raw], dtype=np.float64)
        benches = [k.benchmark for k in self.keys]
        self.multi_bench = len(set(benches)) > 1
        self.user_label = np.array(
            [
                f"{benches[g]}/{u}" if self.multi_bench else u
                for g, u in zip(self.g.tolist(), self.user_of, strict=True)
            ],
            dtype=object,
        )

        # row indices per (group, method, metric), plus the pooled fairness accuracy
        buckets: dict[tuple[int, str, str], list[int]] = {}
        for i, (g, m, k) in enumerate(zip(self.g.tolist(), self.method_of, self.metric_of, strict=True)):
            buckets.setdefault((g, m, k), []).append(i)
            if k in FAIRNESS_METRICS:
                buckets.setdefault((g, m, ACC), []).append(i)
        self.rows = {key: np.asarray(v, dtype=np.intp) for key, v in buckets.items()}
        self._check_seeds()

        strata = [stratum(benches[g], k) for g, k in zip(self.g.tolist(), self.metric_of.tolist(), strict=True)]
        classes = user_classes(strata, self.metric_of.tolist(), self.user_of)
        self.boot = TwoWayBootstrap(
            self.user_of, self.prompt_of, strata, n_boot=n_boot, seed=seed, user_classes=classes
        )
        self.cells = self.boot.cell_of_row
        self.cell_sets = {key: np.unique(self.cells[r]) for key, r in self.rows.items()}
        self.cols = Columns()
        self.full: dict[tuple[int, str, str], int] = {key: self.cols.add(r) for key, r in self.rows.items()}
        self.pairs: dict[tuple[int, str, str, str, str], tuple[int, int, int, bool] | None] = {}
        self._register_pairs()
        if any(s is not None for s in self.seed_label):
            self.point, self.reps, self.n_seeds = seeded_means(
                self.boot, self.values, self.cols.rows, self.seed_label, seed=seed
            )
        else:  # no trained policy's rows: exactly the two-way bootstrap
            self.point, self.reps = self.boot.means(self.values, self.cols.rows)
            self.n_seeds = [0] * len(self.cols.rows)
        self.plans: list[Resampling] = [
            with_seeds(self.boot.resampling(r), s) if s else self.boot.resampling(r)
            for r, s in zip(self.cols.rows, self.n_seeds, strict=True)
        ]
        self.n_cells = [int(np.unique(self.cells[r]).size) for r in self.cols.rows]
        self._group_notes()

    def _check_seeds(self) -> None:
        """Every (group, method, metric) has a training seed on all its rows or on none; notes for few seeds, and
        for rl rows without one (cells written before rows carried their seed: one mean over seeds per cell)."""
        tagged = self._tagged = np.array([s is not None for s in self.seed_label], dtype=bool)
        seeds: dict[int, set[str]] = {}
        blind: set[int] = set()
        for (g, m, k), rows in self.rows.items():
            on = tagged[rows]
            if on.any() and not on.all():
                raise ValueError(
                    f"cells of group {self.groups[g]}, method {m}, metric {k}: {int((~on).sum())} of {rows.size} "
                    "rows carry no rl_seed / fit_seed while the others do (a trained policy's or a pooled fit's rows "
                    "need one each)"
                )
            if on.any():
                seeds.setdefault(g, set()).update(str(self.seed_label[i]) for i in rows.tolist())
            elif k.partition(":")[0] in ("rl", "rl_sampled"):
                blind.add(g)
        for g, labels in seeds.items():
            note = seed_note(len(labels))
            if note:
                self.notes.append(f"{self.groups[g]} (training seeds): {note}")
        for g in sorted(blind):
            self.notes.append(
                f"{self.groups[g]}: its rl cells carry no rl_seed (one mean over training seeds per cell, as older "
                "versions wrote them), so their CIs leave out the variance between training runs"
            )

    def n_rows(self, rows: IntArray) -> int:
        """Rows of a column, a trained policy's counted once per (user, prompt) observation (not once per seed)."""
        if not self._tagged[rows].any():
            return int(rows.size)
        labels = [self.seed_label[i] for i in rows.tolist()]
        per: dict[tuple[int, Any], int] = {}
        for g, s in zip(self.g[rows].tolist(), labels, strict=True):
            per[(g, s)] = per.get((g, s), 0) + 1
        most: dict[int, int] = {}
        for (g, _), n in per.items():
            most[g] = max(most.get(g, 0), n)
        return sum(most.values())

    def means_of(self, columns: Sequence[IntArray]) -> tuple[FloatArray, FloatArray]:
        """Point means and replicates of further row columns, drawn with the run's own bootstrap (and seed) draws,
        so they pair with every registered column (a column's replicates do not depend on the other columns)."""
        if any(s is not None for s in self.seed_label):
            point, reps, _ = seeded_means(self.boot, self.values, columns, self.seed_label, seed=self.seed)
            return point, reps
        return self.boot.means(self.values, columns)

    def methods_with(self, metric: str) -> list[str]:
        return [m for m in self.methods if any((g, m, metric) in self.rows for g in range(len(self.groups)))]

    def _pair(self, g: int, a: str, ka: str, b: str, kb: str) -> None:
        """Columns of a − b in group g on the cells both have: (column a, column b, shared cells, partial)."""
        key = (g, a, ka, b, kb)
        if key in self.pairs or (g, a, ka) not in self.rows or (g, b, kb) not in self.rows:
            return
        sa, sb = self.cell_sets[(g, a, ka)], self.cell_sets[(g, b, kb)]
        if np.array_equal(sa, sb):
            self.pairs[key] = (self.full[(g, a, ka)], self.full[(g, b, kb)], int(sa.size), False)
            return
        common = np.intersect1d(sa, sb, assume_unique=True)
        if not common.size:
            self.pairs[key] = None
            return
        ra, rb = self.rows[(g, a, ka)], self.rows[(g, b, kb)]
        ra = ra[np.isin(self.cells[ra], common)]
        rb = rb[np.isin(self.cells[rb], common)]
        self.pairs[key] = (self.cols.add(ra), self.cols.add(rb), int(common.size), True)

    def _register_pairs(self) -> None:
        metrics = [*self.upstream, *self.downstream, ACC]
        for k in metrics:
            ms = self.methods_with(k)
            for i, a in enumerate(ms):
                for b in ms[i + 1 :]:
                    for g in range(len(self.groups)):
                        self._pair(g, a, k, b, k)
        for k in [*self.downstream, *self.descriptive]:
            zs = self.zero_shot_metric(k)
            if zs is None:
                continue
            for a in self.methods_with(k):
                if a != ZERO_SHOT:
                    for g in range(len(self.groups)):
                        self._pair(g, a, k, ZERO_SHOT, zs)
        for k in self.descriptive:  # a trade-off's re-ranking part: each system against the random pick
            for a in self.methods_with(k):
                if a not in (ZERO_SHOT, RANDOM_PICK):
                    for g in range(len(self.groups)):
                        self._pair(g, a, k, RANDOM_PICK, k)

    def pair_cols(self, g: int, a: str, ka: str, b: str, kb: str) -> tuple[int, int, int, bool] | None:
        """The registered columns of a − b in group g (either direction), or None."""
        got = self.pairs.get((g, a, ka, b, kb))
        if got is not None:
            return got
        rev = self.pairs.get((g, b, kb, a, ka))
        return None if rev is None else (rev[1], rev[0], rev[2], rev[3])

    def zero_shot_metric(self, metric: str) -> str | None:
        if not is_downstream(metric):
            return None
        zs = f"{ZERO_SHOT}:{metric.partition(':')[2]}"
        return zs if any((g, ZERO_SHOT, zs) in self.rows for g in range(len(self.groups))) else None

    def _group_notes(self) -> None:
        names = sorted(set(self.metric_of.tolist()))
        kind_of = {k: None if is_diagnostic(k) else is_downstream(k) for k in names}
        down = np.array([kind_of[k] for k in self.metric_of.tolist()], dtype=object)
        for kind, flag in (("upstream", False), ("downstream", True)):
            idx = np.flatnonzero(down == flag)
            if not idx.size:
                continue
            # one representative row per (group, cell): notes count distinct users and prompts per group
            _, first = np.unique(self.cells[idx] * len(self.groups) + self.g[idx], return_index=True)
            rows = idx[first].tolist()
            self.notes += factor_notes(
                [f"{self.groups[self.g[i]]} ({kind})" for i in rows],
                [self.user_of[i] for i in rows],
                [self.prompt_of[i] for i in rows],
            )

    def cell_means(self, method: str, metric: str) -> tuple[IntArray, FloatArray]:
        """(cells, means): a method's mean per (user, prompt) cell it has, averaged over the groups that have
        the cell; cells are sorted ids (see :meth:`cell_labels`)."""
        parts = [rows for g in range(len(self.groups)) if (rows := self.rows.get((g, method, metric))) is not None]
        if not parts:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        cells, means = [], []
        for rows in parts:  # per group: the mean of each cell's rows
            c, inv = np.unique(self.cells[rows], return_inverse=True)
            cells.append(c)
            means.append(np.bincount(inv.ravel(), weights=self.values[rows]) / np.bincount(inv.ravel()))
        uniq, inv = np.unique(np.concatenate(cells), return_inverse=True)
        flat = np.concatenate(means)
        avg: FloatArray = np.bincount(inv.ravel(), weights=flat) / np.bincount(inv.ravel())
        return np.asarray(uniq, dtype=np.intp), avg

    def cell_labels(self, cells: IntArray) -> tuple[list[str], list[str]]:
        """The user and prompt labels of cell ids (users and prompts of different benchmarks never coincide)."""
        if not hasattr(self, "_row_of_cell"):
            ids, first = np.unique(self.cells, return_index=True)
            self._row_of_cell = np.zeros(int(ids.max()) + 1 if ids.size else 0, dtype=np.intp)
            self._row_of_cell[ids] = first
        rows = self._row_of_cell[cells].tolist()
        prompts = [f"{self.keys[self.g[i]].benchmark}/{self.prompt_of[i]}" for i in rows]
        return [str(self.user_label[i]) for i in rows], prompts

    def identical(self, a: str, b: str, metric: str) -> bool:
        """Whether two methods have the same cells with the same values in every group (mpu and mpu_avg on seen
        users): their difference is exactly 0, a fact rather than an estimate."""
        for g in range(len(self.groups)):
            ra, rb = self.rows.get((g, a, metric)), self.rows.get((g, b, metric))
            if ra is None and rb is None:
                continue
            if ra is None or rb is None or ra.size != rb.size:
                return False
            if not np.array_equal(self.cell_sets[(g, a, metric)], self.cell_sets[(g, b, metric)]):
                return False
            va = _sorted_by_cell(self.cells[ra], self.values[ra])
            vb = _sorted_by_cell(self.cells[rb], self.values[rb])
            if not np.allclose(va, vb, rtol=0.0, atol=1e-12):
                return False
        return True

    def is_proportion(self, metric: str) -> bool:
        if is_descriptive(metric):  # a count of words, even where every answer has 0 or 1 of them
            return False
        v = self.values[self.metric_of == metric]
        return bool(v.size) and bool(np.all((v >= 0) & (v <= 1)))


def user_classes(strata: Sequence[str], metrics: Sequence[str], users: Sequence[str]) -> list[str] | None:
    """Each row's user class for stratified user draws, read off the cells: in a stratum with both seen-user
    (``rm_acc_seen``) and unseen-user (``rm_acc_unseen``) rows, a user with unseen rows is ``unseen``, one with
    seen rows ``seen``, any other ``""``; in a stratum without that split every user is ``""``. None when no
    stratum has the split (the draws are the unstratified ones)."""
    seen: dict[str, set[str]] = {}
    unseen: dict[str, set[str]] = {}
    for s, k, u in zip(strata, metrics, users, strict=True):
        if k == SEEN_METRIC:
            seen.setdefault(s, set()).add(u)
        elif k == UNSEEN_METRIC:
            unseen.setdefault(s, set()).add(u)
    split = set(seen) & set(unseen)
    if not split:
        return None
    return [
        ("unseen" if u in unseen[s] else "seen" if u in seen[s] else "") if s in split else ""
        for s, u in zip(strata, users, strict=True)
    ]


def _sorted_by_cell(cells: IntArray, values: FloatArray) -> FloatArray:
    order = np.lexsort((values, cells))
    out: FloatArray = values[order]
    return out


def reasons_for(reasons: Mapping[str, Mapping[str, str]] | None) -> dict[str, dict[str, str]]:
    return {str(m): {str(k): str(v) for k, v in r.items()} for m, r in (reasons or {}).items()}
