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

A prompt that only one user ever sees (a user's own prompts, as in most upstream pair sets) is nested in
that user: resampling the user already carries its variance, so its count stays 1 (resampling it again would
count that variance twice and widen the CI about √2-fold). Shared prompts, the crossed factor, are resampled
among themselves. With a single user in a stratum every prompt is resampled.

The two-way bootstrap is slightly conservative for a crossed design (it counts the residual variance about
twice), never anti-conservative like the one-way one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

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
                notes.append(
                    f"{g}: only {len(levels)} {name} (< {min_levels}); the CI is unreliable for the {name[:-1]} factor"
                )
    return notes


class TwoWayBootstrap:
    """Replicate weights for rows (stratum, user, prompt), drawn once and applied to any number of columns.

    ``resample_users`` / ``resample_prompts`` switch a factor off (its counts stay 1), which gives the
    one-way bootstraps for comparison.
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
    ) -> None:
        n = len(users)
        if len(prompts) != n or (strata is not None and len(strata) != n):
            raise ValueError("users, prompts and strata must have one entry per row")
        self.n_rows = n
        self.n_boot = max(0, int(n_boot))
        self.seed = seed
        self._resample = (resample_users, resample_prompts)
        st = np.zeros(n, dtype=np.intp) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
        self._n_strata = int(st.max()) + 1 if n else 0
        # global user / prompt levels: (stratum, id) pairs, numbered stratum by stratum
        self._user_of_row, self._user_stratum = self._levels(st, users)
        self._prompt_of_row, self._prompt_stratum = self._levels(st, prompts)
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

    def _counts(
        self, rng: np.random.Generator, level_stratum: IntArray, nb: int, on: bool, active: npt.NDArray[np.bool_]
    ) -> FloatArray:
        """(nb, levels) counts: per stratum, its active levels drawn with replacement; the others stay 1."""
        out = np.ones((nb, len(level_stratum)))
        if not on:
            return out
        for s in range(self._n_strata):
            lv = np.flatnonzero((level_stratum == s) & active)
            k = lv.size
            if k == 0:
                continue
            draw = rng.integers(0, k, size=(nb, k)) + (np.arange(nb) * k)[:, None]
            out[:, lv] = np.bincount(draw.ravel(), minlength=nb * k).reshape(nb, k)
        return out

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
        rng = np.random.default_rng(self.seed)
        width = max(n_cells, len(self._user_stratum) + len(self._prompt_stratum))
        step = max(1, _CHUNK_ELEMENTS // width)
        for b0 in range(0, self.n_boot, step):
            nb = min(step, self.n_boot - b0)
            cu = self._counts(rng, self._user_stratum, nb, self._resample[0], self._all_users)
            cp = self._counts(rng, self._prompt_stratum, nb, self._resample[1], self._prompt_crossed)
            w = cu[:, self._cell_user] * cp[:, self._cell_prompt]  # (nb, n_cells)
            prod = np.asarray(mat @ w.T)  # (2 n_cols, nb)
            with np.errstate(invalid="ignore", divide="ignore"):
                reps[b0 : b0 + nb] = (prod[:n_cols] / prod[n_cols:]).T
        return point, reps


def two_way_ci(
    values: Sequence[float] | FloatArray,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Two-way bootstrap percentile CI of the mean of ``values`` (one row per (user, prompt) observation).

    None when there is nothing to resample: no rows, ``n_boot`` < 2, or a single user and a single prompt.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or n_boot < 2 or (len(set(users)) < 2 and len(set(prompts)) < 2):
        return None
    boot = TwoWayBootstrap(users, prompts, n_boot=n_boot, seed=seed)
    _, reps = boot.means(v, [np.arange(v.size)])
    return percentile_ci(reps[:, 0], level)
