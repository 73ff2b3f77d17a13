"""Selection analysis: which personalized RM to deploy, and does the upstream ranking predict the downstream one.

Input: cells, the long-format rows ``{group, method, metric, user, prompt, value}`` a run writes (see
``perbench.runner.cells``). Output: ``analyze(...)``, the JSON-safe ``results["analysis"]`` dict (method table
with two-way CIs, rankings, paired differences, upstream → downstream correlations, per-user fairness and the
verdict).

Readings, stated once:

- **Groups.** ``group`` is ``benchmark|policy|seedN`` (any ``|``-separated string works): ``parse_group``
  strips a trailing ``|seedN`` to get the *setting*; groups that differ only in the seed are seeds of one
  setting. The *benchmark* (first field) is the resampling stratum: groups of one benchmark share its users and
  prompts, so they share the bootstrap draws (a user drawn twice counts twice in every seed and policy).
- **Statistics.** A (method, metric) value in one group is the mean of its rows. The table value is the mean
  over seeds within a setting, then the mean over settings; ``sd_seeds`` is the sd across seeds (the root of
  the mean per-setting variance, ddof 1) and is null with a single seed.
- **Resampling.** Two-way bootstrap (users × prompts, ``perbench.metrics.bootstrap``); all numbers of one
  replicate come from the same draws, and CIs are percentile intervals. A difference a − b is paired: per
  group, both sides are restricted to the (user, prompt) cells they share, then combined like a value.
  A number whose rows have fewer than 5 users resamples its prompts only (or, with fewer than 5 prompts too,
  its (user, prompt) pairs); with fewer than 2 pairs it has no CI. Next to each CI, ``resampled`` names the
  unit (``users×prompts``, ``prompts``, ``pairs``; null: nothing to resample) and ``ci_note`` says why it is not
  the two-way bootstrap (null when it is).
- **Direction.** Higher is better for every metric (``rm_win`` is ranked the same way; read it as how strongly
  an RM prefers its own guided output, a reward-hacking signal rather than quality).
- **Ranking.** Methods in decreasing point value. The leader is ``best`` only when the CI of (leader − m)
  lies above 0 for every other method m (so in particular against the runner-up); otherwise ``best`` is null and
  ``tied`` lists the leader and every method whose difference from it has a CI reaching 0.
- **Selection.** A system is a (group, method) with both metrics; systems are pooled across groups as the papers
  pool across model scales. Each replicate recomputes every system's values, then the correlation
  (``perbench.metrics.correlation``); replicates where it is undefined are dropped.
- **Fairness.** Per-user accuracy pools a method's ``rm_acc_seen`` and ``rm_acc_unseen`` rows. Worst decile =
  mean of the lowest 10 % of users' accuracies (at least one user). *Minority users* are the users on whom the
  reference (global, user-agnostic) RM scores below 0.5: their preferences oppose what the majority taught it.
- **Verdict.** Among RMs (a pure decoder such as ``zero_shot``, whose metrics are all its own ``zero_shot:*``,
  is a baseline, not a candidate), deploy the ``best`` one on the verdict metric; when none is separable, the
  verdict names the tied methods instead. ``value``/``ci`` are the leader's either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perbench.metrics.bootstrap import MIN_LEVELS, Resampling, TwoWayBootstrap, factor_notes, percentile_ci
from perbench.metrics.correlation import BATCHED, CORRELATIONS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

ZERO_SHOT = "zero_shot"
DEFAULT_VERDICT_METRIC = "args:rubric_satisfaction"
FAIRNESS_METRICS = ("rm_acc_seen", "rm_acc_unseen")
_ACC = "\x00acc"  # pooled fairness accuracy, an internal pseudo-metric
_UPSTREAM_ORDER = ("rm_acc_seen", "rm_acc_unseen", "rm_acc_pers_only", "fewshot_acc", "fewshot_active_acc")
_UPSTREAM_LATE = ("pa", "pa_rgd", "pa_prefix_mean", "pa_prefix_sum")
_DECODER_ORDER = ("args", "best_of_n", "genarm", "zero_shot", "icl_rag")
_QUALITY_ORDER = ("rubric_satisfaction", "rouge1", "rougeL", "bertscore_f1", "rm_win", "bon_gain")


@dataclass(frozen=True)
class Cell:
    group: str
    method: str
    metric: str
    user: str
    prompt: str
    value: float


@dataclass(frozen=True)
class GroupKey:
    """``benchmark|policy|seed3`` → setting ``benchmark|policy``, seed 3, benchmark ``benchmark``."""

    setting: str
    seed: int | None
    benchmark: str


_SEED = re.compile(r"^(.*)\|seed(\d+)$")


def parse_group(group: str) -> GroupKey:
    """Split a group name into its setting (the name without a trailing ``|seedN``), seed and benchmark."""
    m = _SEED.match(group)
    setting, seed = (m.group(1), int(m.group(2))) if m else (group, None)
    return GroupKey(setting=setting, seed=seed, benchmark=setting.split("|", 1)[0])


def is_downstream(metric: str) -> bool:
    return ":" in metric


def metric_sort_key(metric: str) -> tuple[int, int, int, str]:
    """Canonical metric order: upstream (accuracy, few-shot by N, policy accuracy), then decoder × quality."""
    if is_downstream(metric):
        dec, _, q = metric.partition(":")
        d = _DECODER_ORDER.index(dec) if dec in _DECODER_ORDER else len(_DECODER_ORDER)
        qi = _QUALITY_ORDER.index(q) if q in _QUALITY_ORDER else len(_QUALITY_ORDER)
        return (2, d, qi, metric)
    base, _, n = metric.partition("@")
    if base in _UPSTREAM_ORDER:
        return (0, _UPSTREAM_ORDER.index(base), int(n) if n.isdigit() else 0, metric)
    if base in _UPSTREAM_LATE:
        return (1, _UPSTREAM_LATE.index(base), 0, metric)
    return (1, len(_UPSTREAM_LATE), 0, metric)


# ---------------------------------------------------------------- small helpers


def _f(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _ci(x: tuple[float, float] | None) -> list[float] | None:
    return None if x is None else [float(x[0]), float(x[1])]


def _json_safe(obj: Any) -> Any:
    """Defensive pass: numpy scalars to Python, any non-finite float to None."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _f(float(obj))
    return obj


@dataclass
class _Est:
    point: float
    reps: FloatArray
    sd_seeds: float | None = None
    cols: tuple[int, ...] = ()  # the bootstrap columns it is computed from


class _Columns:
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


def _as_row(c: Any) -> tuple[str, str, str, str, str, float]:
    if isinstance(c, Cell):
        return c.group, c.method, c.metric, c.user, c.prompt, float(c.value)
    return str(c["group"]), str(c["method"]), str(c["metric"]), str(c["user"]), str(c["prompt"]), float(c["value"])


# ---------------------------------------------------------------- the analysis


class _Analysis:
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
        self.level, self.n_boot, self.seed, self.reference = level, n_boot, seed, reference
        self.reasons = reasons or {}
        self.notes: list[str] = []
        if n_boot < 2:
            self.notes.append(f"n_boot={n_boot}: no confidence intervals, so no method is called best")
        raw = [_as_row(c) for c in cells]
        bad = sum(1 for r in raw if not math.isfinite(r[5]))
        if bad:
            self.notes.append(f"{bad} row(s) with a non-finite value were dropped (a missing value has no row)")
            raw = [r for r in raw if math.isfinite(r[5])]
        self.groups = list(dict.fromkeys(r[0] for r in raw))
        self.methods = list(dict.fromkeys(r[1] for r in raw))
        present = list(dict.fromkeys(r[2] for r in raw))
        self.present = set(present)
        self.upstream = (
            list(upstream)
            if upstream is not None
            else sorted((m for m in present if not is_downstream(m)), key=metric_sort_key)
        )
        self.downstream = (
            list(downstream)
            if downstream is not None
            else sorted((m for m in present if is_downstream(m)), key=metric_sort_key)
        )
        for m in self.upstream + self.downstream:
            if m not in self.present:
                self.notes.append(f"metric {m} was requested but has no rows")
        pure = {m for m in self.methods if all(k.startswith(f"{m}:") for k in present_for(raw, m))}
        self.methods = [m for m in self.methods if m not in pure] + [m for m in self.methods if m in pure]
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
                buckets.setdefault((g, m, _ACC), []).append(i)
        self.rows = {key: np.asarray(v, dtype=np.intp) for key, v in buckets.items()}

        self.boot = TwoWayBootstrap(
            self.user_of, self.prompt_of, [benches[g] for g in self.g.tolist()], n_boot=n_boot, seed=seed
        )
        self.cells = self.boot.cell_of_row
        self._cell_sets = {key: np.unique(self.cells[r]) for key, r in self.rows.items()}
        self.cols = _Columns()
        self.full: dict[tuple[int, str, str], int] = {key: self.cols.add(r) for key, r in self.rows.items()}
        self.pairs: dict[tuple[int, str, str, str, str], tuple[int, int] | None] = {}
        self._register_pairs()
        self.point, self.reps = self.boot.means(self.values, self.cols.rows)
        self.plans: list[Resampling] = [self.boot.resampling(r) for r in self.cols.rows]
        self._group_notes()

    # ------------------------------------------------------------ planning

    def methods_with(self, metric: str) -> list[str]:
        return [m for m in self.methods if any((g, m, metric) in self.rows for g in range(len(self.groups)))]

    def _pair(self, g: int, a: str, ka: str, b: str, kb: str) -> None:
        key = (g, a, ka, b, kb)
        if key in self.pairs or (g, a, ka) not in self.rows or (g, b, kb) not in self.rows:
            return
        sa, sb = self._cell_sets[(g, a, ka)], self._cell_sets[(g, b, kb)]
        if np.array_equal(sa, sb):
            self.pairs[key] = (self.full[(g, a, ka)], self.full[(g, b, kb)])
            return
        common = np.intersect1d(sa, sb, assume_unique=True)
        if not common.size:
            self.pairs[key] = None
            return
        ra, rb = self.rows[(g, a, ka)], self.rows[(g, b, kb)]
        ra = ra[np.isin(self.cells[ra], common)]
        rb = rb[np.isin(self.cells[rb], common)]
        self.pairs[key] = (self.cols.add(ra), self.cols.add(rb))

    def _register_pairs(self) -> None:
        metrics = [*self.upstream, *self.downstream, _ACC]
        for k in metrics:
            ms = self.methods_with(k)
            for i, a in enumerate(ms):
                for b in ms[i + 1 :]:
                    for g in range(len(self.groups)):
                        self._pair(g, a, k, b, k)
        for k in self.downstream:
            zs = self._zero_shot_metric(k)
            if zs is None:
                continue
            for a in self.methods_with(k):
                if a != ZERO_SHOT:
                    for g in range(len(self.groups)):
                        self._pair(g, a, k, ZERO_SHOT, zs)

    def _zero_shot_metric(self, metric: str) -> str | None:
        if not is_downstream(metric):
            return None
        zs = f"{ZERO_SHOT}:{metric.partition(':')[2]}"
        return zs if any((g, ZERO_SHOT, zs) in self.rows for g in range(len(self.groups))) else None

    def _group_notes(self) -> None:
        for kind, down in (("upstream", False), ("downstream", True)):
            idx = [i for i, k in enumerate(self.metric_of) if is_downstream(k) == down]
            if idx:
                self.notes += factor_notes(
                    [f"{self.groups[self.g[i]]} ({kind})" for i in idx],
                    [self.user_of[i] for i in idx],
                    [self.prompt_of[i] for i in idx],
                )

    # ------------------------------------------------------------ estimates

    def _combine(self, per_group: Mapping[int, tuple[float, FloatArray, tuple[int, ...]]]) -> _Est:
        by_setting: dict[str, list[tuple[float, FloatArray, tuple[int, ...]]]] = {}
        for g, v in per_group.items():
            by_setting.setdefault(self.keys[g].setting, []).append(v)
        points = [float(np.mean([p for p, _, _ in vs])) for vs in by_setting.values()]
        reps = [np.mean(np.stack([r for _, r, _ in vs]), axis=0) for vs in by_setting.values()]
        variances = [float(np.var([p for p, _, _ in vs], ddof=1)) for vs in by_setting.values() if len(vs) > 1]
        sd = math.sqrt(float(np.mean(variances))) if variances else None
        cols = tuple(dict.fromkeys(c for _, _, cs in per_group.values() for c in cs))
        return _Est(float(np.mean(points)), np.mean(np.stack(reps), axis=0), sd, cols)

    def value(self, method: str, metric: str) -> _Est | None:
        per = {
            g: (float(self.point[c]), self.reps[:, c], (c,))
            for g in range(len(self.groups))
            if (c := self.full.get((g, method, metric))) is not None
        }
        return self._combine(per) if per else None

    def delta(self, a: str, ka: str, b: str, kb: str) -> _Est | None:
        """Paired a − b on the cells both have, combined over groups like a value."""
        per: dict[int, tuple[float, FloatArray, tuple[int, ...]]] = {}
        for g in range(len(self.groups)):
            cols = self.pairs.get((g, a, ka, b, kb))
            if cols is None and (g, b, kb, a, ka) in self.pairs:
                cols = self.pairs[(g, b, kb, a, ka)]
                cols = None if cols is None else (cols[1], cols[0])
            if cols is None:
                continue
            ca, cb = cols
            per[g] = (float(self.point[ca] - self.point[cb]), self.reps[:, ca] - self.reps[:, cb], (ca, cb))
        return self._combine(per) if per else None

    def ci(self, est: _Est | None) -> tuple[float, float] | None:
        """The percentile CI; None without replicates or when a column has fewer than 2 (user, prompt) pairs."""
        if est is None or self.n_boot < 2 or any(self.plans[c].unit is None for c in est.cols):
            return None
        return percentile_ci(est.reps, self.level)

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

    def ci_entry(self, est: _Est | None) -> dict[str, Any]:
        """``ci``, ``resampled`` and ``ci_note`` of an estimate: the keys every CI of the output carries."""
        return {"ci": _ci(self.ci(est)), **self.resampled(() if est is None else est.cols)}

    # ------------------------------------------------------------ sections

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
                    "value": _f(est.point),
                    "ci": _ci(self.ci(est)),
                    "sd_seeds": _f(est.sd_seeds),
                    "n": int(rows.size),
                    "users": len({(self.keys[self.g[i]].benchmark, self.user_of[i]) for i in rows.tolist()}),
                    "prompts": len({(self.keys[self.g[i]].benchmark, self.prompt_of[i]) for i in rows.tolist()}),
                    "na": None,
                    **self.resampled(est.cols),
                }
        return out

    def ranking(self, metric: str, among: Sequence[str] | None = None) -> dict[str, Any]:
        vals = {m: e.point for m in (among if among is not None else self.methods) if (e := self.value(m, metric))}
        order = sorted(vals, key=lambda m: -vals[m])  # stable: ties keep method order
        res: dict[str, Any] = {"order": order, "best": None, "tied": order[:1], "vs_runner_up": None}
        if len(order) < 2:
            res["best"] = order[0] if order else None
            return res
        lead = order[0]
        tied = [lead]
        for m in order[1:]:
            ci = self.ci(self.delta(lead, metric, m, metric))
            if ci is None or ci[0] <= 0:
                tied.append(m)
        d = self.delta(lead, metric, order[1], metric)
        res["tied"] = tied
        res["best"] = lead if len(tied) == 1 else None
        if d is not None:
            res["vs_runner_up"] = {"a": lead, "b": order[1], "delta": _f(d.point), **self.ci_entry(d)}
        return res

    def _paired_entry(self, a: str, ka: str, b: str, kb: str) -> dict[str, Any] | None:
        d = self.delta(a, ka, b, kb)
        if d is None:
            return None
        ci = self.ci(d)
        return {
            "a": a,
            "b": b,
            "b_metric": kb,
            "delta": _f(d.point),
            "ci": _ci(ci),
            "excludes_zero": bool(ci is not None and (ci[0] > 0 or ci[1] < 0)),
            **self.resampled(d.cols),
        }

    def paired(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for k in [*self.upstream, *self.downstream]:
            entries = []
            ms = self.methods_with(k)
            if self.reference in ms:
                for a in ms:
                    if a != self.reference and (e := self._paired_entry(a, k, self.reference, k)):
                        entries.append(e)
            zs = self._zero_shot_metric(k)
            if zs is not None:
                for a in ms:
                    if a != ZERO_SHOT and (e := self._paired_entry(a, k, ZERO_SHOT, zs)):
                        entries.append(e)
            out[k] = entries
        return out

    def selection(self) -> tuple[dict[str, Any], dict[str, FloatArray]]:
        pairs = []
        tau_reps: dict[str, FloatArray] = {}
        for u in self.upstream:
            for d in self.downstream:
                systems = [
                    (g, m)
                    for g in range(len(self.groups))
                    for m in self.methods
                    if (g, m, u) in self.full and (g, m, d) in self.full
                ]
                cu = [self.full[(g, m, u)] for g, m in systems]
                cd = [self.full[(g, m, d)] for g, m in systems]
                x, y = self.point[cu], self.point[cd]
                xr, yr = self.reps[:, cu], self.reps[:, cd]
                entry: dict[str, Any] = {"upstream": u, "downstream": d, "n_systems": len(systems)}
                how = self.resampled(cu + cd)
                unresampled = any(self.plans[c].unit is None for c in cu + cd)
                for name, fn in CORRELATIONS.items():
                    val = fn(x, y) if len(systems) else None
                    ci = None
                    reps = BATCHED[name](xr, yr) if len(systems) and self.n_boot else np.zeros(0)
                    if name == "kendall_tau_b":
                        tau_reps[f"{u}\x00{d}"] = reps if val is not None else np.full(self.n_boot, np.nan)
                    enough = self.n_boot >= 2 and not unresampled
                    if val is not None and enough and np.isfinite(reps).sum() * 2 >= self.n_boot:
                        ci = percentile_ci(reps, self.level)
                    na = None
                    if val is None:
                        na = (
                            f"{len(systems)} system(s) with both metrics (need 3)"
                            if len(systems) < 3
                            else "a constant input: the coefficient is undefined"
                        )
                    elif unresampled and self.n_boot >= 2:
                        na = "a system's value has fewer than 2 (user, prompt) pairs: no CI"
                    elif ci is None and self.n_boot >= 2:
                        na = "undefined in more than half of the bootstrap replicates: no CI"
                    entry[name] = {"value": _f(val), "ci": _ci(ci), "na": na, **how}
                single = len(self.groups) == 1
                entry["points"] = [
                    [m if single else f"{m} [{self.groups[g]}]", _f(float(xv)), _f(float(yv))]
                    for (g, m), xv, yv in zip(systems, x, y, strict=True)
                ]
                pairs.append(entry)
        best: dict[str, Any] = {}
        for d in self.downstream:
            cands = [(e["upstream"], e["kendall_tau_b"]) for e in pairs if e["downstream"] == d]
            scored = [(u, t) for u, t in cands if t["value"] is not None]
            if not scored:
                best[d] = {
                    "upstream": None, "kendall_tau_b": None, "ci": None, "p_best": None,
                    "text": f"No upstream metric has a defined Kendall tau-b with {d} (too few systems or constant).",
                }  # fmt: skip
                continue
            u_best, t_best = max(scored, key=lambda ut: ut[1]["value"])
            mat = np.stack([tau_reps[f"{u}\x00{d}"] for u, _ in scored], axis=1) if self.n_boot else None
            p_best = None
            if mat is not None and mat.size:
                finite = np.isfinite(mat).any(axis=1)
                if finite.any():
                    top = np.argmax(np.where(np.isfinite(mat[finite]), mat[finite], -np.inf), axis=1)
                    p_best = float(np.mean(top == [u for u, _ in scored].index(u_best)))
            best[d] = {
                "upstream": u_best,
                "kendall_tau_b": t_best["value"],
                "ci": t_best["ci"],
                "p_best": p_best,
                "text": self._predictor_text(u_best, d, t_best["value"], t_best["ci"], p_best),
            }
        return {"pairs": pairs, "best_predictor": best}, tau_reps

    def _predictor_text(self, u: str, d: str, tau: float, ci: list[float] | None, p_best: float | None) -> str:
        pct = f"{100 * self.level:g}%"
        head = f"{u} best predicts {d} (tau-b {tau:.2f}"
        head += f", {pct} CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ", no CI"
        head += f"; the top predictor in {100 * p_best:.0f}% of resamples)" if p_best is not None else ")"
        if ci is None:
            return head + "; without a CI its reliability is unknown."
        if ci[0] > 0:
            return head + "; the CI excludes 0, so its ranking reliably predicts the downstream one."
        if ci[1] < 0:
            return head + "; even it ranks methods against the downstream order (the CI is below 0)."
        return head + "; the CI includes 0, so no upstream metric reliably predicts it."

    def fairness(self, verdict_metric: str | None) -> dict[str, Any]:
        ref_acc = self._per_user(self.reference, _ACC)
        minority = {u for u, a in ref_acc.items() if a < 0.5}
        out: dict[str, Any] = {}
        for m in self.methods:
            acc = self._per_user(m, _ACC)
            entry: dict[str, Any] = {
                "worst_decile_acc": _worst_decile(acc),
                "minority_users": len(minority) if ref_acc else 0,
                "minority_acc": None,
                "gain_over_reference": None,
                "per_user": acc,
                "per_user_gain": {u: acc[u] - ref_acc[u] for u in acc if u in ref_acc} if m != self.reference else {},
                "downstream": None,
                "na": None,
            }
            reasons = []
            if not acc:
                reasons.append(f"{m} has no rm_acc_seen/rm_acc_unseen rows")
            if not ref_acc:
                reasons.append(f"reference {self.reference} has no rm_acc_seen/rm_acc_unseen rows: no minority users")
            if acc and minority:
                idx = [i for (g, mm, k), r in self.rows.items() if mm == m and k == _ACC for i in r.tolist()]
                on = [self.values[i] for i in idx if self.user_label[i] in minority]
                entry["minority_acc"] = float(np.mean(on)) if on else None
            if m != self.reference:
                entry["gain_over_reference"] = self._gain(m, _ACC, self.reference, _ACC)
            if verdict_metric is not None and (down := self._per_user(m, verdict_metric)):
                ref_down = self._per_user(self.reference, verdict_metric)
                entry["downstream"] = {
                    "metric": verdict_metric,
                    "worst_decile": _worst_decile(down),
                    "per_user": down,
                    "per_user_gain": {u: down[u] - ref_down[u] for u in down if u in ref_down}
                    if m != self.reference
                    else {},
                    "gain_over_reference": None
                    if m == self.reference
                    else self._gain(m, verdict_metric, self.reference, verdict_metric),
                }
            entry["na"] = "; ".join(reasons) or None
            out[m] = entry
        return out

    def _gain(self, a: str, ka: str, b: str, kb: str) -> dict[str, Any] | None:
        d = self.delta(a, ka, b, kb)
        return None if d is None else {"value": _f(d.point), **self.ci_entry(d)}

    def _per_user(self, method: str, metric: str) -> dict[str, float]:
        idx = [i for (g, m, k), r in self.rows.items() if m == method and k == metric for i in r.tolist()]
        if not idx:
            return {}
        labels = self.user_label[idx]
        uniq, inv = np.unique(labels, return_inverse=True)
        sums = np.bincount(inv.ravel(), weights=self.values[idx])
        counts = np.bincount(inv.ravel())
        return {str(u): float(s / c) for u, s, c in zip(uniq, sums, counts, strict=True)}

    # ------------------------------------------------------------ verdict

    def is_proportion(self, metric: str) -> bool:
        v = self.values[self.metric_of == metric]
        return bool(v.size) and bool(np.all((v >= 0) & (v <= 1)))

    def fmt(self, metric: str, x: float, delta: bool = False) -> str:
        if self.is_proportion(metric):
            return f"{100 * x:+.1f} pts" if delta else f"{100 * x:.1f}%"
        return f"{x:+.3f}" if delta else f"{x:.3f}"

    def fmt_ci(self, metric: str, ci: Sequence[float] | None) -> str:
        if ci is None:
            return "no CI"
        pct = f"{100 * self.level:g}% CI"
        if self.is_proportion(metric):
            return f"{pct} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        return f"{pct} [{ci[0]:.3f}, {ci[1]:.3f}]"

    def verdict(self, requested: str | None, selection: dict[str, Any]) -> dict[str, Any]:
        notes: list[str] = []
        present_down = [k for k in self.downstream if k in self.present]
        metric = requested
        if metric is None:
            metric = DEFAULT_VERDICT_METRIC if DEFAULT_VERDICT_METRIC in present_down else None
        if metric is None or metric not in self.present:
            fallback = present_down[0] if present_down else next((k for k in self.upstream if k in self.present), None)
            if requested is not None or metric is not None:
                notes.append(f"{metric or requested} has no rows; the verdict uses {fallback} instead.")
            elif fallback is not None:
                notes.append(f"No verdict metric was set; the verdict uses {fallback}.")
            metric = fallback
        empty: dict[str, Any] = {
            "metric": metric, "deploy": None, "runner_up": None, "tied": [], "value": None, "ci": None,
            "resampled": None, "ci_note": None,
            "upstream_metric": None, "upstream_tau": None, "upstream_tau_ci": None, "agrees": None,
        }  # fmt: skip
        if metric is None:
            return {**empty, "text": "No metric has any rows: nothing to decide."}
        cands = [m for m in self.methods_with(metric) if m not in self.pure_decoders]
        if not cands:
            return {**empty, "text": " ".join([*notes, f"No reward model has {metric} rows: nothing to decide."])}
        rank = self.ranking(metric, cands)
        lead = rank["order"][0]
        est = self.value(lead, metric)
        assert est is not None
        ci = self.ci(est)
        runner = rank["order"][1] if len(rank["order"]) > 1 else None
        res = {
            **empty,
            "deploy": rank["best"],
            "runner_up": runner,
            "tied": rank["tied"],
            "value": _f(est.point),
            **self.ci_entry(est),
        }
        parts = list(notes)
        val = f"{metric} {self.fmt(metric, est.point)}, {self.fmt_ci(metric, ci)}"
        if rank["best"] is not None and runner is None:
            parts.append(f"Deploy {lead} ({val}); it is the only reward model with {metric}.")
        elif rank["best"] is not None and runner is not None:
            d = self.delta(runner, metric, lead, metric)
            rd = "" if d is None else f" ({self.fmt(metric, d.point, True)}, {self.fmt_ci(metric, self.ci(d))})"
            parts.append(f"Deploy {lead} ({val}); runner-up {runner}{rd}.")
        else:
            d = self.delta(lead, metric, runner, metric) if runner else None
            gap = "" if d is None else f"; {lead} - {runner} = {self.fmt(metric, d.point, True)}, "
            dci = None if d is None else self.ci(d)
            gap += (
                ""
                if d is None
                else f"{self.fmt_ci(metric, dci)}" + (", which includes 0" if dci and dci[0] <= 0 else "")
            )
            parts.append(
                f"The data cannot separate the top methods on {metric}: {', '.join(rank['tied'])} "
                f"(leader {lead}: {val}{gap}). Any of them is a defensible choice; more users or prompts "
                "would be needed to tell them apart."
            )
        zs = self._zero_shot_metric(metric)
        if zs is not None:
            d = self.delta(lead, metric, ZERO_SHOT, zs)
            if d is not None:
                dci = self.ci(d)
                how = (
                    "beats"
                    if dci is not None and dci[0] > 0
                    else "is worse than"
                    if dci is not None and dci[1] < 0
                    else "does not reliably beat"
                )
                parts.append(
                    f"{lead} {how} zero-shot decoding ({zs}: {self.fmt(metric, d.point, True)}, "
                    f"{self.fmt_ci(metric, dci)})."
                )
        bp = selection["best_predictor"].get(metric) if is_downstream(metric) else None
        if bp is not None and bp["upstream"] is not None:
            u = bp["upstream"]
            res.update(upstream_metric=u, upstream_tau=bp["kendall_tau_b"], upstream_tau_ci=bp["ci"])
            both = [m for m in cands if self.value(m, u) is not None]
            top_up = max(both, key=lambda m: self._point(m, u)) if both else None
            top_down = max(both, key=lambda m: self._point(m, metric)) if both else None
            agrees = None if top_up is None else top_up == top_down
            res["agrees"] = agrees
            tci = bp["ci"]
            tau = f"tau-b {bp['kendall_tau_b']:.2f}" + (f", CI [{tci[0]:.2f}, {tci[1]:.2f}]" if tci else "")
            if agrees:
                parts.append(f"The upstream ranking by {u} agrees: it also puts {top_up} first ({tau}).")
            elif agrees is False:
                parts.append(f"The upstream ranking by {u} disagrees: it puts {top_up} first ({tau}).")
            if tci is not None and tci[0] <= 0:
                parts.append(f"Even {u}, the best upstream predictor, does not reliably predict {metric}.")
        elif is_downstream(metric):
            parts.append(f"No upstream metric has a defined rank correlation with {metric}.")
        if res["ci_note"]:
            parts.append(f"About {lead}'s CI: {res['ci_note']}.")
        res["text"] = " ".join(parts)
        return res

    def _point(self, method: str, metric: str) -> float:
        e = self.value(method, metric)
        return -math.inf if e is None else e.point


def present_for(raw: Sequence[tuple[str, str, str, str, str, float]], method: str) -> set[str]:
    return {r[2] for r in raw if r[1] == method}


def _worst_decile(per_user: Mapping[str, float]) -> float | None:
    if not per_user:
        return None
    acc = np.sort(np.fromiter(per_user.values(), dtype=np.float64))
    return float(np.mean(acc[: max(1, math.ceil(0.1 * acc.size))]))


def analyze(
    cells: Iterable[Mapping[str, Any] | Cell],
    *,
    upstream: list[str] | None = None,
    downstream: list[str] | None = None,
    verdict_metric: str | None = None,
    reference_method: str = "global_bt",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    na_reasons: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The selection analysis of a run's cells: ``results["analysis"]`` (JSON-safe, deterministic given seed).

    ``upstream`` / ``downstream`` default to the metrics present (names without / with ``:``).
    ``verdict_metric`` defaults to ``args:rubric_satisfaction`` when present, else the first downstream
    metric. ``na_reasons[method][metric]`` gives the runner's reason for a method that has no rows.
    """
    a = _Analysis(cells, upstream, downstream, reference_method, n_boot, seed, level, na_reasons)
    selection, _ = a.selection()
    verdict = a.verdict(verdict_metric, selection)
    out = {
        "resampling": (
            f"two-way: users × prompts (pigeonhole bootstrap), n_boot={n_boot}, seed={seed}; with fewer than "
            f"{MIN_LEVELS} users, prompts only (with fewer prompts too, (user, prompt) pairs; see each ci_note)"
        ),
        "n_boot": n_boot,
        "notes": a.notes,
        "methods": a.methods,
        "metrics": {"upstream": a.upstream, "downstream": a.downstream},
        "table": a.table(),
        "ranking": {k: a.ranking(k) for k in [*a.upstream, *a.downstream]},
        "paired": a.paired(),
        "selection": selection,
        "fairness": a.fairness(verdict["metric"] if verdict["metric"] and is_downstream(verdict["metric"]) else None),
        "verdict": verdict,
    }
    return dict(_json_safe(out))
