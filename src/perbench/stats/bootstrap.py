"""Two-way (users × prompts) bootstrap: the "pigeonhole" bootstrap of a crossed design.

A downstream row is a (user, prompt) cell, and both users and prompts are samples: a CI that resamples users
only ignores the prompt-to-prompt variance and covers the truth far less often than it claims when prompts
are few. A replicate here draws users with replacement and, independently, prompts with replacement; a row
gets weight (count of its user) × (count of its prompt), and a statistic is the weighted mean of its rows.

Draws are made once per replicate and per *stratum* (e.g. a benchmark: the rows that share one population
of users and prompts); every column (method × metric × setting) is evaluated on the same draws, so
differences, rankings and correlations computed from the replicates carry the real joint uncertainty.
Replicate weights are applied as one sparse product per chunk of replicates, so ~50k rows × 1000 replicates
stay within a few tens of MB.

Users of different classes (seen and unseen users of a benchmark, ``user_classes``) are drawn per class, each
class's users among themselves: a replicate of a metric on unseen users only then always has the data's number
of unseen users (drawn over all users together, it would have a random number of them), and a metric over all
users keeps the data's mix of the classes.

A prompt that only one user ever sees (a user's own prompts, as in most upstream pair sets) is nested in
that user: resampling the user already carries its variance, so its count stays 1 (resampling it again would
count that variance twice and widen the CI about √2-fold). Shared prompts, the crossed factor, are resampled
among themselves. With a single user in a stratum every prompt is resampled.

The two-way bootstrap is slightly conservative for a crossed design (it counts the residual variance about
twice), never anti-conservative like the one-way one.

Few users. Resampling 2 users says almost nothing about the next user (with 2 users a random method scored
[0.41, 0.45], seeming to exclude 0.5), so each column chooses its resampling unit from its own rows
(:meth:`TwoWayBootstrap.resampling`): with at least ``min_levels`` (5) distinct users, users × prompts as above;
with fewer users, its prompts only (users fixed, nested prompts included); with fewer prompts as well, its
(user, prompt) pairs only; with fewer than 2 pairs, nothing (no CI, with the reason). The fallbacks carry a note
saying so. A fallback draws, per stratum, among the prompts (or pairs) of the columns that use it, so those
columns share their draws, as two-way columns share theirs; a paired difference compares columns restricted to
the same cells, so both of its sides always have the same unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perbench.config import MAX_BOOTSTRAP

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

MIN_LEVELS = 5  # fewer users (or prompts) than this: the CI says little about that factor
_CHUNK_ELEMENTS = 4_000_000


def percentile_ci(replicates: Any, level: float = 0.95, *, min_finite: int = 2) -> tuple[float, float] | None:
    """Percentile interval of the finite replicates; None when fewer than ``min_finite`` are finite."""
    r = np.asarray(replicates, dtype=np.float64).ravel()
    r = r[np.isfinite(r)]
    if r.size < min_finite:
        return None
    lo, hi = np.quantile(r, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def replicate_position(point: float, replicates: Any) -> float | None:
    """The share of the finite replicates below ``point`` (ties count half): 0.5 when the bootstrap distribution
    is centred on the estimate; near 0 or 1 when the replicates are pulled away from it (a biased statistic)."""
    r = np.asarray(replicates, dtype=np.float64).ravel()
    r = r[np.isfinite(r)]
    if not r.size or not math.isfinite(point):
        return None
    return float(np.mean(r < point) + 0.5 * np.mean(r == point))


def symmetric_ci(
    point: float,
    replicates: Any,
    level: float = 0.95,
    *,
    bounds: tuple[float, float] = (-math.inf, math.inf),
    min_finite: int = 2,
) -> tuple[float, float] | None:
    """The percentile interval made symmetric about the estimate: ``point ± h`` with h the larger of
    ``point − q_lo`` and ``q_hi − point`` (q: the percentile interval's ends), clipped to ``bounds``.

    It is the hull of the percentile and the basic interval (``2·point − q_hi``, ``2·point − q_lo``): where the
    replicates are pulled to one side of the estimate (a rank coefficient of noisy means, pulled toward 0), it
    reaches as far on the other side instead of following them, and it always contains the estimate. None when
    fewer than ``min_finite`` replicates are finite."""
    ci = percentile_ci(replicates, level, min_finite=min_finite)
    if ci is None or not math.isfinite(point):
        return None
    h = max(point - ci[0], ci[1] - point, 0.0)
    return max(bounds[0], point - h), min(bounds[1], point + h)


def factor_notes(
    groups: Sequence[str], users: Sequence[str], prompts: Sequence[str], *, min_levels: int = MIN_LEVELS
) -> list[str]:
    """One note per group with fewer than ``min_levels`` distinct users or prompts."""
    seen: dict[str, tuple[set[str], set[str]]] = {}
    for g, u, p in zip(groups, users, prompts, strict=True):
        us, ps = seen.setdefault(g, (set(), set()))
        us.add(u)
        ps.add(p)
    notes = []
    for g, (us, ps) in seen.items():
        for name, levels in (("users", us), ("prompts", ps)):
            if len(levels) < min_levels:
                note = (
                    f"{g}: only {len(levels)} {name} (< {min_levels}); the CI is unreliable for the {name[:-1]} factor"
                )
                if name == "users":
                    note += ", so its CIs resample prompts or (user, prompt) pairs instead (see each ci_note)"
                notes.append(note)
    return notes


#: resampling units, most to least informative
TWO_WAY, PROMPTS, PAIRS = "users×prompts", "prompts", "pairs"


@dataclass(frozen=True)
class Resampling:
    """What a column's bootstrap resamples, chosen from the column's distinct users, prompts and cells."""

    unit: str | None  # TWO_WAY, PROMPTS, PAIRS, or None: fewer than 2 (user, prompt) pairs, no CI
    users: int
    prompts: int
    pairs: int
    note: str | None  # why the unit is not the two-way one (None when it is), and when training seeds are few
    seeds: int = 0  # training seeds resampled on top (:mod:`.seeded`; 0: rows of no trained policy)

    @classmethod
    def choose(cls, users: int, prompts: int, pairs: int, min_levels: int = MIN_LEVELS) -> Resampling:
        if users >= min_levels:
            return cls(TWO_WAY, users, prompts, pairs, None)
        few = f"only {users} user{'s' * (users != 1)} (< {min_levels})"
        if prompts >= min_levels:
            note = f"{few}: the CI resamples the {prompts} prompts only, so it leaves out user-to-user variance"
            return cls(PROMPTS, users, prompts, pairs, note)
        if pairs >= 2:
            note = (
                f"{few} and {prompts} prompt{'s' * (prompts != 1)}: the CI resamples the {pairs} (user, prompt) "
                "pairs only, so it leaves out user-to-user and prompt-to-prompt variance"
            )
            return cls(PAIRS, users, prompts, pairs, note)
        return cls(None, users, prompts, pairs, f"{pairs} (user, prompt) pair{'s' * (pairs != 1)}: no CI (needs 2)")


class TwoWayBootstrap:
    """Replicate weights for rows (stratum, user, prompt), drawn once and applied to any number of columns.

    ``resample_users`` / ``resample_prompts`` switch a factor off (its counts stay 1), which gives the
    one-way bootstraps for comparison. ``user_classes`` (one per row, the same for every row of a user) stratifies
    the user draws: each class's users are drawn among themselves, so every replicate has as many users of each
    class as the data (seen and unseen users, say). A column with fewer than ``min_levels`` users falls back to
    resampling prompts or (user, prompt) pairs (:meth:`resampling`; ``min_levels=0`` keeps every column two-way).
    """

    def __init__(
        self,
        users: Sequence[str],
        prompts: Sequence[str],
        strata: Sequence[str] | None = None,
        *,
        n_boot: int = 1000,
        seed: int = 0,
        resample_users: bool = True,
        resample_prompts: bool = True,
        min_levels: int = MIN_LEVELS,
        user_classes: Sequence[str] | None = None,
    ) -> None:
        n = len(users)
        if len(prompts) != n or (strata is not None and len(strata) != n):
            raise ValueError("users, prompts and strata must have one entry per row")
        if user_classes is not None and len(user_classes) != n:
            raise ValueError("user_classes must have one entry per row")
        self.n_rows = n
        if int(n_boot) > MAX_BOOTSTRAP:  # the replicate matrices are allocated at once: refuse before, not after
            raise ValueError(f"n_boot={n_boot}: at most {MAX_BOOTSTRAP} bootstrap resamples")
        self.n_boot = max(0, int(n_boot))
        self.seed = seed
        self._resample = (resample_users, resample_prompts)
        self.min_levels = min_levels
        st = np.zeros(n, dtype=np.intp) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
        self._n_strata = int(st.max()) + 1 if n else 0
        # global user / prompt levels: (stratum, id) pairs, numbered stratum by stratum
        self._user_of_row, self._user_stratum = self._levels(st, users)
        self._prompt_of_row, self._prompt_stratum = self._levels(st, prompts)
        # the users drawn among themselves: a stratum's, or a (stratum, class)'s; numbered by stratum, then class,
        # so with one class per stratum the groups are the strata and the draws are those of the unstratified run
        self._user_group = self._user_stratum
        if user_classes is not None and len(self._user_stratum):
            cls = np.empty(len(self._user_stratum), dtype=object)
            cls[self._user_of_row] = np.asarray(list(user_classes), dtype=object)
            keys = np.array([f"{s:09d}\x00{c}" for s, c in zip(self._user_stratum.tolist(), cls, strict=True)])
            self._user_group = np.unique(keys, return_inverse=True)[1].ravel().astype(np.intp)
        # cells: distinct (user level, prompt level); rows of one cell always share a weight
        pair = self._user_of_row.astype(np.int64) * max(1, len(self._prompt_stratum)) + self._prompt_of_row
        cells, cell_of_row = np.unique(pair, return_inverse=True)
        self._cell_of_row: IntArray = np.asarray(cell_of_row, dtype=np.intp).ravel()
        self._cell_user = (cells // max(1, len(self._prompt_stratum))).astype(np.intp)
        self._cell_prompt = (cells % max(1, len(self._prompt_stratum))).astype(np.intp)
        self._all_users = np.ones(len(self._user_stratum), dtype=bool)
        # prompts seen by one user only are nested in that user: not resampled (see the module docstring)
        users_per_prompt = np.bincount(self._cell_prompt, minlength=len(self._prompt_stratum))
        users_per_stratum = np.bincount(self._user_stratum, minlength=self._n_strata)
        self._prompt_crossed = (users_per_prompt > 1) | (users_per_stratum[self._prompt_stratum] < 2)
        self._cell_stratum = self._user_stratum[self._cell_user]

    @staticmethod
    def _levels(stratum: IntArray, ids: Sequence[str]) -> tuple[IntArray, IntArray]:
        keys = np.array([f"{s}\x00{i}" for s, i in zip(stratum.tolist(), ids, strict=True)], dtype=object)
        if not len(keys):
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
        uniq, inv = np.unique(keys, return_inverse=True)
        inv = inv.ravel()
        first = np.zeros(len(uniq), dtype=np.intp)
        first[inv] = np.arange(len(inv))  # any row of the level: its stratum is part of the key
        level_stratum = stratum[first]
        # renumber so each stratum's levels are contiguous
        order = np.lexsort((np.arange(len(uniq)), level_stratum))
        renumber = np.empty(len(uniq), dtype=np.intp)
        renumber[order] = np.arange(len(uniq))
        return renumber[inv], level_stratum[order]

    @property
    def cell_of_row(self) -> IntArray:
        """The (stratum, user, prompt) cell of each row (an integer id)."""
        return self._cell_of_row

    def resampling(self, rows: Any) -> Resampling:
        """The resampling unit of a column (row indices), from its distinct users, prompts and cells."""
        r = np.asarray(rows, dtype=np.intp).ravel()
        cells = np.unique(self._cell_of_row[r])
        users = np.unique(self._cell_user[cells]).size
        prompts = np.unique(self._cell_prompt[cells]).size
        return Resampling.choose(users, prompts, int(cells.size), self.min_levels)

    def _counts(
        self, rng: np.random.Generator, level_stratum: IntArray, nb: int, on: bool, active: npt.NDArray[np.bool_]
    ) -> FloatArray:
        """(nb, levels) counts: per group (``level_stratum``: a stratum, or for users a (stratum, class)), its active
        levels drawn with replacement; the others stay 1."""
        out = np.ones((nb, len(level_stratum)))
        if not on:
            return out
        for s in range(int(level_stratum.max()) + 1 if level_stratum.size else 0):
            lv = np.flatnonzero((level_stratum == s) & active)
            k = lv.size
            if k == 0:
                continue
            draw = rng.integers(0, k, size=(nb, k)) + (np.arange(nb) * k)[:, None]
            out[:, lv] = np.bincount(draw.ravel(), minlength=nb * k).reshape(nb, k)
        return out

    def _local_counts(self, rng: np.random.Generator, ids: IntArray, level_stratum: IntArray, nb: int) -> FloatArray:
        """(nb, len(ids)) counts of the levels ``ids`` when only those levels are drawn, per stratum, with
        replacement (the fallback units: a few users' prompts or (user, prompt) pairs)."""
        uniq, inv = np.unique(ids, return_inverse=True)
        counts = self._counts(rng, level_stratum[uniq], nb, True, np.ones(len(uniq), dtype=bool))
        return counts[:, inv.ravel()]

    def means(self, values: Any, columns: Sequence[Any]) -> tuple[FloatArray, FloatArray]:
        """Point means (n_cols,) and replicate weighted means (n_boot, n_cols) of ``values`` over each column.

        A column is an array of row indices (a row may appear in several columns). Empty columns, and
        replicates in which a column's rows all drew weight 0, give NaN.
        """
        from scipy import sparse

        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size != self.n_rows:
            raise ValueError(f"{v.size} values for {self.n_rows} rows")
        n_cols = len(columns)
        n_cells = len(self._cell_user)
        idx = [np.asarray(c, dtype=np.intp).ravel() for c in columns]
        col_of = np.repeat(np.arange(n_cols), [len(c) for c in idx])
        rows = np.concatenate(idx) if idx else np.zeros(0, dtype=np.intp)
        cell = self._cell_of_row[rows]
        # [sums | counts] per (column, cell): one sparse matrix, one product per chunk
        mat = sparse.csr_matrix(
            (
                np.concatenate([v[rows], np.ones(len(rows))]),
                (np.concatenate([col_of, col_of + n_cols]), np.concatenate([cell, cell])),
            ),
            shape=(2 * n_cols, n_cells),
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            tot = np.asarray(mat.sum(axis=1)).ravel()
            point = tot[:n_cols] / tot[n_cols:]
        reps = np.full((self.n_boot, n_cols), np.nan)
        if self.n_boot == 0 or n_cols == 0 or n_cells == 0:
            return point, reps
        # columns by resampling unit; each unit has its own random stream, so a two-way column's replicates do
        # not depend on which other columns are present. A fallback unit draws among the levels its columns use
        # (few users' prompts or cells) and weighs those cells only.
        units = [self.resampling(c).unit for c in idx]
        by_unit = {u: np.flatnonzero([x == u for x in units]) for u in (TWO_WAY, PROMPTS, PAIRS) if u in units}
        plans: dict[str, tuple[Any, IntArray]] = {}
        for u, cols in by_unit.items():
            part = mat[np.concatenate([cols, cols + n_cols])]
            if u == TWO_WAY:
                plans[u] = (part, np.arange(n_cells))
            else:
                used = np.unique(np.concatenate([self._cell_of_row[idx[c]] for c in cols]))
                plans[u] = (part[:, used], used)
        stream = {TWO_WAY: 0, PROMPTS: 1, PAIRS: 2}
        rngs = {u: np.random.default_rng(self.seed if u == TWO_WAY else (self.seed, stream[u])) for u in plans}
        width = max(n_cells, len(self._user_stratum) + len(self._prompt_stratum))
        step = max(1, _CHUNK_ELEMENTS // width)
        for b0 in range(0, self.n_boot, step):
            nb = min(step, self.n_boot - b0)
            for u, (part, used) in plans.items():
                rng = rngs[u]
                if u == TWO_WAY:
                    cu = self._counts(rng, self._user_group, nb, self._resample[0], self._all_users)
                    cp = self._counts(rng, self._prompt_stratum, nb, self._resample[1], self._prompt_crossed)
                    w = cu[:, self._cell_user] * cp[:, self._cell_prompt]  # (nb, n_cells)
                elif u == PROMPTS:
                    w = self._local_counts(rng, self._cell_prompt[used], self._prompt_stratum, nb)
                else:
                    w = self._local_counts(rng, used, self._cell_stratum, nb)
                prod = np.asarray(part @ w.T)  # (2 k, nb)
                cols = by_unit[u]
                k = len(cols)
                with np.errstate(invalid="ignore", divide="ignore"):
                    reps[b0 : b0 + nb, cols] = (prod[:k] / prod[k:]).T
        return point, reps


@dataclass(frozen=True)
class BootstrapCI:
    """A percentile CI with what it resampled; ``ci`` is None when there is nothing to resample (see ``note``)."""

    ci: tuple[float, float] | None
    resampling: Resampling

    @property
    def note(self) -> str | None:
        return self.resampling.note


def bootstrap_ci(
    values: Sequence[float] | FloatArray,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    min_levels: int = MIN_LEVELS,
) -> BootstrapCI:
    """Bootstrap percentile CI of the mean of ``values`` (one row per (user, prompt) observation): two-way with
    at least ``min_levels`` users, else the fallback of :class:`Resampling` (prompts, or (user, prompt) pairs)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    boot = TwoWayBootstrap(users, prompts, n_boot=max(n_boot, 0), seed=seed, min_levels=min_levels)
    plan = boot.resampling(np.arange(v.size))
    if plan.unit is None or n_boot < 2:
        return BootstrapCI(None, plan)
    _, reps = boot.means(v, [np.arange(v.size)])
    return BootstrapCI(percentile_ci(reps[:, 0], level), plan)


def two_way_ci(
    values: Sequence[float] | FloatArray,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """The interval of :func:`bootstrap_ci` (two-way, or its fallback with fewer than 5 users).

    None when there is nothing to resample: no rows, ``n_boot`` < 2, or fewer than 2 (user, prompt) pairs.
    """
    return bootstrap_ci(values, users, prompts, n_boot=n_boot, seed=seed, level=level).ci
