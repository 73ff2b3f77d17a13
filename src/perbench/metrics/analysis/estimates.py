"""Estimates and their CIs: a method's value on a metric, a paired difference, the method table and the paired
differences against the reference RM and zero-shot decoding.

A value is the mean of its rows per group, then the mean over seeds within a setting, then over settings; a
difference a − b is paired: per group both sides are restricted to the cells they share. A CI is the percentile
interval of the two-way bootstrap replicates, with two exceptions stated in ``ci_note``: a proportion at 0 or 1
whose replicates never vary gets the exact binomial (Clopper–Pearson) interval of its cells instead of a
zero-width one, and any other zero-width interval is said to have no variation in the resamples. A point
estimate outside its own percentile interval is noted as well.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from perbench.metrics.analysis.base import TIE_TOL, ZERO_SHOT, Est, FloatArray, ci_, f_, is_descriptive
from perbench.metrics.analysis.data import Data
from perbench.stats.bootstrap import percentile_ci


class Estimates(Data):
    def __init__(
        self,
        cells: Iterable[Any],
        upstream: Sequence[str] | None,
        downstream: Sequence[str] | None,
        reference: str,
        n_boot: int,
        seed: int,
        level: float,
        reasons: Mapping[str, Mapping[str, str]] | None,
    ) -> None:
        super().__init__(cells, upstream, downstream, n_boot, seed, level)
        self.reference = reference
        self.reasons = reasons or {}

    def _combine(self, per_group: Mapping[int, tuple[float, FloatArray, tuple[int, ...], int]]) -> Est:
        by_setting: dict[str, list[tuple[float, FloatArray]]] = {}
        for g, (p, r, _, _) in per_group.items():
            by_setting.setdefault(self.keys[g].setting, []).append((p, r))
        points = [float(np.mean([p for p, _ in vs])) for vs in by_setting.values()]
        reps = [np.mean(np.stack([r for _, r in vs]), axis=0) for vs in by_setting.values()]
        variances = [float(np.var([p for p, _ in vs], ddof=1)) for vs in by_setting.values() if len(vs) > 1]
        sd = math.sqrt(float(np.mean(variances))) if variances else None
        cols = tuple(dict.fromkeys(c for _, _, cs, _ in per_group.values() for c in cs))
        cells = sum(n for _, _, _, n in per_group.values())
        return Est(float(np.mean(points)), np.mean(np.stack(reps), axis=0), sd, cols, cells)

    def value(self, method: str, metric: str, setting: str | None = None) -> Est | None:
        """A method's value (over every setting, or one ``setting``: its seeds' mean)."""
        per = {
            g: (float(self.point[c]), self.reps[:, c], (c,), self.n_cells[c])
            for g in range(len(self.groups))
            if (c := self.full.get((g, method, metric))) is not None
            and (setting is None or self.keys[g].setting == setting)
        }
        return self._combine(per) if per else None

    def delta(self, a: str, ka: str, b: str, kb: str) -> Est | None:
        """Paired a − b on the cells both have, combined over groups like a value; ``partial`` when either side
        has cells the other lacks (its statements then speak of the shared cells only)."""
        per: dict[int, tuple[float, FloatArray, tuple[int, ...], int]] = {}
        partial = False
        for g in range(len(self.groups)):
            cols = self.pair_cols(g, a, ka, b, kb)
            if cols is None:
                partial = partial or (g, a, ka) in self.rows or (g, b, kb) in self.rows
                continue
            ca, cb, n, part = cols
            partial = partial or part
            per[g] = (float(self.point[ca] - self.point[cb]), self.reps[:, ca] - self.reps[:, cb], (ca, cb), n)
        if not per:
            return None
        est = self._combine(per)
        est.partial = partial
        if abs(est.point) <= TIE_TOL:  # an exact tie computed in two row orders: 0, not ±1e-17
            est.point = 0.0
        return est

    def ci(self, est: Est | None, level: float | None = None) -> tuple[float, float] | None:
        """The percentile CI; None without replicates or when a column has fewer than 2 (user, prompt) pairs."""
        if est is None or self.n_boot < 2 or any(self.plans[c].unit is None for c in est.cols):
            return None
        return percentile_ci(est.reps, self.level if level is None else level)

    def resampled(self, cols: Sequence[int]) -> dict[str, Any]:
        """``resampled`` (the unit, or units joined by ``+``) and ``ci_note`` (why it is not two-way, or why
        there is no CI) for an estimate over the bootstrap columns ``cols``."""
        if not cols:
            return {"resampled": None, "ci_note": None}
        if self.n_boot < 2:
            return {"resampled": None, "ci_note": f"n_boot={self.n_boot}: no CI"}
        plans = [self.plans[c] for c in cols]
        units = list(dict.fromkeys(p.unit for p in plans))
        unit = None if None in units else "+".join(str(u) for u in units)
        notes = list(dict.fromkeys(p.note for p in plans if p.note))
        return {"resampled": unit, "ci_note": "; ".join(notes) or None}

    def ci_entry(self, est: Est | None, metric: str | None = None) -> dict[str, Any]:
        """``ci``, ``resampled`` and ``ci_note`` of an estimate: the keys every CI of the output carries. With
        ``metric`` (a value, not a difference) a proportion at 0 or 1 gets its exact binomial interval."""
        how = self.resampled(() if est is None else est.cols)
        ci = self.ci(est)
        notes = [how["ci_note"]] if how["ci_note"] else []
        if est is not None and ci is not None:
            if ci[1] - ci[0] <= 1e-12 * max(1.0, abs(ci[0]), abs(ci[1])):
                ends = est.point in (0.0, 1.0) and metric is not None and self.is_proportion(metric)
                if ends and est.cells >= 1:
                    ci = binomial_bound(est.point, est.cells, self.level)
                    notes.append(
                        f"all {est.cells} cells are {est.point:g}, so the resamples never vary: the CI is the exact "
                        f"binomial (Clopper–Pearson) interval for {est.cells} cells, treated as independent"
                    )
                else:
                    notes.append("no variation in the resamples (every resample gives the same value)")
            elif not ci[0] - 1e-12 <= est.point <= ci[1] + 1e-12:
                notes.append("the point estimate lies outside its percentile CI (a skewed bootstrap distribution)")
        return {"ci": ci_(ci), "resampled": how["resampled"], "ci_note": "; ".join(notes) or None}

    def na_reason(self, method: str, metric: str) -> str:
        given = self.reasons.get(method, {}).get(metric)
        if given:
            return given
        if metric not in self.present:
            return f"no {metric} rows in this run"
        if method in self.pure_decoders and not metric.startswith(f"{method}:"):
            return f"{method} is a decoder without a reward model: it has only its own {method}:* metrics"
        return f"no {metric} rows for {method} (not applicable to its users, or not run)"

    def table(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for m in self.methods:
            out[m] = {}
            for k in [*self.upstream, *self.downstream]:
                est = self.value(m, k)
                if est is None:
                    out[m][k] = {
                        "value": None, "ci": None, "sd_seeds": None, "n": 0, "users": 0, "prompts": 0,
                        "na": self.na_reason(m, k), "resampled": None, "ci_note": None,
                    }  # fmt: skip
                    continue
                rows = np.concatenate([r for (g, mm, kk), r in self.rows.items() if mm == m and kk == k])
                out[m][k] = {
                    "value": f_(est.point),
                    "sd_seeds": f_(est.sd_seeds),
                    "n": self.n_rows(rows),
                    "users": len({(self.keys[self.g[i]].benchmark, self.user_of[i]) for i in rows.tolist()}),
                    "prompts": len({(self.keys[self.g[i]].benchmark, self.prompt_of[i]) for i in rows.tolist()}),
                    "na": None,
                    **self.ci_entry(est, k),
                }
        return out

    def paired_entry(self, a: str, ka: str, b: str, kb: str) -> dict[str, Any] | None:
        d = self.delta(a, ka, b, kb)
        if d is None:
            return None
        entry = self.ci_entry(d)
        ci = entry["ci"]
        return {
            "a": a,
            "b": b,
            "b_metric": kb,
            "delta": f_(d.point),
            "excludes_zero": bool(ci is not None and (ci[0] > 0 or ci[1] < 0)),
            "cells": d.cells,
            "partial": d.partial,
            **entry,
        }

    def paired(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for k in [*self.upstream, *self.downstream]:
            entries = []
            ms = self.methods_with(k)
            if self.reference in ms:
                for a in ms:
                    if a != self.reference and (e := self.paired_entry(a, k, self.reference, k)):
                        entries.append(e)
            zs = self.zero_shot_metric(k)
            if zs is not None:
                for a in ms:
                    if a != ZERO_SHOT and (e := self.paired_entry(a, k, ZERO_SHOT, zs)):
                        entries.append(e)
            out[k] = entries
        return out

    def per_user(self, method: str, metric: str) -> dict[str, float]:
        idx = [i for (g, m, k), r in self.rows.items() if m == method and k == metric for i in r.tolist()]
        if not idx:
            return {}
        labels = self.user_label[idx]
        uniq, inv = np.unique(labels, return_inverse=True)
        sums = np.bincount(inv.ravel(), weights=self.values[idx])
        counts = np.bincount(inv.ravel())
        return {str(u): float(s / c) for u, s, c in zip(uniq, sums, counts, strict=True)}

    def point_of(self, method: str, metric: str) -> float | None:
        e = self.value(method, metric)
        return None if e is None else e.point

    def fmt(self, metric: str, x: float, delta: bool = False) -> str:
        if self.is_proportion(metric):
            return f"{100 * x:+.1f} pts" if delta else f"{100 * x:.1f}%"
        if is_descriptive(metric):
            return f"{x:+.1f} words" if delta else f"{x:.1f} words"
        return f"{x:+.3f}" if delta else f"{x:.3f}"

    def fmt_ci(self, metric: str, ci: Sequence[float] | None, label: str | None = None) -> str:
        if ci is None:
            return "no CI"
        pct = label or f"{100 * self.level:g}% CI"
        if self.is_proportion(metric):
            return f"{pct} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        if is_descriptive(metric):
            return f"{pct} [{ci[0]:.1f}, {ci[1]:.1f}]"
        return f"{pct} [{ci[0]:.3f}, {ci[1]:.3f}]"


def binomial_bound(point: float, n: int, level: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval for 0 of n (point 0) or n of n (point 1) successes."""
    edge = (1 - level) / 2
    b = 1.0 - edge ** (1.0 / n)
    return (0.0, b) if point == 0.0 else (1.0 - b, 1.0)
