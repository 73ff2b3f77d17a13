"""An independent re-run of the verdict's rule on bootstrap replicates of a run's cells, to check the stability
perbench reports (``results.json`` → ``analysis.verdict.stability``).

Independent of perbench's analysis code: it reads ``cells.jsonl`` as plain JSON, averages each system's rows per
(user, prompt) cell of the verdict metric, draws its own two-way bootstrap (users and prompts with replacement, its
own seed), estimates the variance components of each pairwise difference by the balanced two-way ANOVA (mean
squares, not perbench's U-statistics) and applies the rule written out again: the set for the best (for each
system i, d_i = the 95 % quantile of max_j (Δ̂_ij − Δ*_ij)/s*_ij; i is out when Δ̂_ij + d_i·s*_ij < 0 for some j),
the gate against the random pick (one-sided over the deployable systems, standard errors scaled by the pooled
ANOVA/bootstrap variance ratio), then: no_better_than_random, baseline, separable, equivalent, undecided. The
roles and the margin are read from results.json (configuration, not results). Needs a fully crossed verdict
metric (every system on every cell).

    python bench/verdict_stability.py RUN_DIR [--replicates 1000] [--seed 123] [--timing]

``--timing`` also times perbench's own pieces on the run's cells (CPU seconds): the pairwise comparisons of the
verdict metric, the set's critical values, the stability over the replicates, and the rankings of every metric.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def load(run: Path) -> tuple[str, list[str], dict[str, str], float, np.ndarray, dict[str, object]]:
    res = json.loads((run / "results.json").read_text())
    a = res["analysis"]
    metric = a["verdict"]["metric"]
    roles = a["roles"]
    margin = float(a["margins"][metric]["value"])
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    with (run / "cells.jsonl").open() as f:
        for line in f:
            c = json.loads(line)
            if c["metric"] == metric:
                sums[(c["method"], c["user"], c["prompt"])].append(float(c["value"]))
    systems = sorted({m for m, _, _ in sums if roles.get(m) in ("deployable", "baseline")})
    users = sorted({u for _, u, _ in sums})
    prompts = sorted({p for _, _, p in sums})
    y = np.full((len(systems), len(users), len(prompts)), np.nan)
    si = {m: i for i, m in enumerate(systems)}
    ui = {u: i for i, u in enumerate(users)}
    pi = {p: i for i, p in enumerate(prompts)}
    for (m, u, p), v in sums.items():
        if m in si:
            y[si[m], ui[u], pi[p]] = float(np.mean(v))
    assert np.isfinite(y).all(), "the verdict metric is not fully crossed"
    return metric, systems, roles, margin, y, a["verdict"].get("stability") or {}


def anova_ratio(y: np.ndarray) -> float:
    """Pooled over pairs: the ANOVA variance of a mean difference over the two-way bootstrap's expected one."""
    n, u, p = y.shape
    tot_true = tot_boot = 0.0
    ku, kp = (u - 1) / u, (p - 1) / p
    ke = ku + kp + ku * kp
    for i in range(n):
        for j in range(i + 1, n):
            d = y[i] - y[j]
            rm, cm, gm = d.mean(axis=1), d.mean(axis=0), d.mean()
            msr = p * np.sum((rm - gm) ** 2) / (u - 1)
            msc = u * np.sum((cm - gm) ** 2) / (p - 1)
            mse = np.sum((d - rm[:, None] - cm[None, :] + gm) ** 2) / ((u - 1) * (p - 1))
            su, sp, se = max(0.0, (msr - mse) / p), max(0.0, (msc - mse) / u), mse
            tot_true += su / u + sp / p + se / (u * p)
            tot_boot += ku * su / u + kp * sp / p + ke * se / (u * p)
    return tot_true / tot_boot if tot_boot > 0 else 1.0


def rule(
    delta: np.ndarray, se: np.ndarray, d: np.ndarray, gate_c: float, gate_se: np.ndarray, dep: np.ndarray,
    null: int, margin: float, tost: np.ndarray,
) -> list[str]:  # fmt: skip
    """The decision on each version (R × n × n) of the differences."""
    out = []
    n = dep.size
    for dd in delta:
        members = [i for i in range(n) if not any(dd[i, j] + d[i] * se[i, j] < 0 for j in range(n) if j != i)]
        beats = [i for i in range(n) if dep[i] and dd[i, null] - gate_c * gate_se[i] > 0]
        dm = [i for i in members if dep[i]]
        if not beats:
            out.append("no_better_than_random")
        elif any(not dep[i] for i in members):
            out.append("baseline")
        elif (
            len(dm) == 1
            and dm[0] in beats
            and all(dd[dm[0], r] - d[dm[0]] * se[dm[0], r] > 0 for r in range(n) if not dep[r] and r != null)
        ):
            out.append("separable:" + str(dm[0]))
        elif len(dm) >= 2 and all(
            margin > 0 and dd[i, j] + tost[i, j, 0] > -margin and dd[i, j] + tost[i, j, 1] < margin
            for i in dm for j in dm if i != j
        ):  # fmt: skip
            out.append("equivalent")
        else:
            out.append("undecided")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--timing", action="store_true")
    args = ap.parse_args()
    if args.timing:
        timing(Path(args.run_dir))
    metric, systems, roles, margin, y, reported = load(Path(args.run_dir))
    n, u, p = y.shape
    rng = np.random.default_rng(args.seed)
    b = args.replicates
    cu = rng.multinomial(u, np.full(u, 1 / u), size=b).astype(float)
    cp = rng.multinomial(p, np.full(p, 1 / p), size=b).astype(float)
    point = y.mean(axis=(1, 2))
    reps = np.einsum("bu,sup,bp->bs", cu, y, cp) / (u * p)
    delta = point[:, None] - point[None, :]
    rd = reps[:, :, None] - reps[:, None, :]
    se = rd.std(axis=0, ddof=1)
    dep = np.array([roles[m] == "deployable" for m in systems])
    null = systems.index("random_pick")
    off = ~np.eye(n, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(off[None], (delta[None] - rd) / np.where(off, se, 1)[None], -np.inf)
    d = np.quantile(z.max(axis=2), 0.95, axis=0)
    k = np.flatnonzero(dep)
    gz = (rd[:, k, null] - delta[k, null]) / se[k, null]
    gate_c = float(np.quantile(gz.max(axis=1), 0.95))
    gate_se = se[:, null] * np.sqrt(anova_ratio(y))
    lo, hi = np.quantile(rd, [0.05, 0.95], axis=0)
    tost = np.stack([lo - delta, hi - delta], axis=-1)
    now = rule(delta[None], se, d, gate_c, gate_se, dep, null, margin, tost)[0]
    got = rule(rd, se, d, gate_c, gate_se, dep, null, margin, tost)
    freq: dict[str, float] = {}
    for g in got:
        key = g if not g.startswith("separable:") else "separable"
        freq[key] = freq.get(key, 0.0) + 1 / b
    picks: dict[str, float] = {}
    for g in got:
        if g.startswith("separable:"):
            m = systems[int(g.split(":")[1])]
            picks[m] = picks.get(m, 0.0) + 1 / b
    print(f"{metric}: {n} systems ({int(dep.sum())} deployable), {u} users × {p} prompts, margin {margin:.4f}")
    print(f"decision on the point estimates: {now if not now.startswith('separable:') else systems[int(now[10:])]}")
    print("independent:", {k: round(v, 3) for k, v in sorted(freq.items(), key=lambda kv: -kv[1])})
    print("  picks:", {k: round(v, 3) for k, v in sorted(picks.items(), key=lambda kv: -kv[1])})
    print("perbench:   ", reported.get("outcomes"), "\n  picks:", reported.get("picks"))


def timing(run: Path) -> None:
    import time

    from perbench.metrics.analysis.best_set import compare, critical_values, gate_critical_value, stability
    from perbench.metrics.analysis.estimates import Estimates
    from perbench.metrics.analysis.ranking import ranking, system_names, tost_level
    from perbench.runner.rundir import load_run

    r = load_run(run, need_cells=True)
    a = r.results["analysis"]
    metric, roles = a["verdict"]["metric"], a["roles"]
    est = Estimates(r.cells or [], None, None, "global_bt", 1000, 0, 0.95, None)
    vals = {m: v for m in est.methods_with(metric) if (v := est.point_of(m, metric)) is not None}
    names = system_names(roles, vals)
    t = [time.process_time()]
    c = compare(est, metric, names, [roles.get(m) == "deployable" for m in names], "random_pick", tost_level(0.95))
    t.append(time.process_time())
    d, g = critical_values(c, 0.95), gate_critical_value(c, 0.95)
    t.append(time.process_time())
    stability(c, d, g, 0.03, [i for i, m in enumerate(names) if roles.get(m) == "deployable"])
    t.append(time.process_time())
    every = [*est.upstream, *est.downstream]
    for k in every:
        ranking(est, k, roles, 0.05)
    t.append(time.process_time())
    print(
        f"perbench, {len(names)} systems × {c.reps.shape[0]} replicates: comparisons {t[1] - t[0]:.2f} s, critical "
        f"values {t[2] - t[1]:.3f} s, stability {t[3] - t[2]:.3f} s; rankings of all {len(every)} metrics "
        f"{t[4] - t[3]:.2f} s (CPU)"
    )


if __name__ == "__main__":
    main()
