"""Training seeds in the selection analysis (perbench.metrics.analysis.data, perbench.stats.seeded): rl cells carry
their training seed, and the analysis resamples the seeds as the RL table does, so the verdict's CI of an rl system
is the RL table's seed-covering CI; columns without seeds keep their numbers."""

from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from perbench.metrics.analysis.estimates import Estimates
from perbench.training.evaluation import ArmValues, compare, summarise

G = "b|p|seed0"
RL, ZS = "rl:rubric_satisfaction", "zero_shot:rubric_satisfaction"
U, P, SEEDS = 12, 8, (0, 1, 2)
CELLS = tuple((f"u{u}", f"p{p}") for u in range(U) for p in range(P))


def _cell_effects(rng: np.random.Generator) -> np.ndarray:
    """(U·P,) user, prompt and cell effects of a crossed design, population mean 0."""
    return (rng.normal(0, 0.2, U)[:, None] + rng.normal(0, 0.2, P)[None, :]).ravel() + rng.normal(0, 0.2, U * P)


def _rows(method: str, metric: str, m: np.ndarray, seeds: tuple[int, ...] | None) -> list[dict[str, Any]]:
    """Cells of an (S, U·P) matrix: one row per (seed, cell), tagged ``rl_seed`` unless ``seeds`` is None."""
    out = []
    for i, row in enumerate(np.atleast_2d(m)):
        for (u, p), v in zip(CELLS, row, strict=True):
            r = {"group": G, "method": method, "metric": metric, "user": u, "prompt": p, "value": float(v)}
            if seeds is not None:
                r["rl_seed"] = seeds[i]
            out.append(r)
    return out


def _width(ci: Any) -> float:
    return float(ci[1] - ci[0])


def _close(got: Any, want: Any, tol: float = 0.12) -> None:
    """Two CIs of one quantity drawn apart: each end within ``tol`` of the RL table's width."""
    w = _width(want)
    assert abs(got[0] - want[0]) <= tol * w and abs(got[1] - want[1]) <= tol * w, (got, want)


def test_the_verdicts_ci_of_an_rl_system_is_the_rl_tables_seed_covering_ci() -> None:
    """Seeds that disagree widen the verdict's CI as they widen the RL table's (the same interval up to the draws);
    two rewards trained with the same seeds are compared seed by seed (the shared offsets cancel), as the RL table
    compares a run with its placebo; zero-shot's own CI does not move when rl rows join it."""
    rng = np.random.default_rng(7)
    cell = _cell_effects(rng)
    offsets = np.array([0.4, -0.4, 0.1])[:, None]  # one per training seed, shared by both rewards' runs
    mpu = 0.5 + cell + offsets + rng.normal(0, 0.02, (3, U * P))
    lore = 0.3 + cell + offsets + rng.normal(0, 0.02, (3, U * P))
    zs = 0.2 + cell + rng.normal(0, 0.02, U * P)
    rows = [*_rows("mpu", RL, mpu, SEEDS), *_rows("lore(rank=4)", RL, lore, SEEDS), *_rows("zero_shot", ZS, zs, None)]
    n_boot = 2000
    res = analyze(rows, verdict_metric=RL, reference_method="lore(rank=4)", n_boot=n_boot, seed=0)

    arm = ArmValues("rl[mpu]", SEEDS, CELLS, {"q": mpu})
    table = summarise(arm, {}, n_boot=n_boot, seed=0)["q"]
    got = res["table"]["mpu"][RL]
    assert got["value"] == pytest.approx(table["mean"]) and got["n"] == U * P == table["n"]
    _close(got["ci"], table["ci"])
    assert "only 3 training seeds" in got["ci_note"] and got["resampled"] == "users×prompts"
    verdict = res["verdict"]
    assert verdict["metric"] == RL and verdict["deploy"] == "mpu" and verdict["ci"] == got["ci"]
    # what the analysis gave before seeds were resampled: one mean over seeds per cell
    blind = analyze(_rows("mpu", RL, mpu.mean(0), None), n_boot=n_boot, seed=0)["table"]["mpu"][RL]["ci"]
    assert _width(got["ci"]) > 3 * _width(blind)

    # against zero-shot (untrained: no seeds): the downstream rl row's paired CI
    ref = ArmValues("zero_shot", (0,), CELLS, {"q": zs[None, :]})
    vs_zs = compare(arm, ref, n_boot=n_boot, seed=0)["q"]
    [paired] = [e for e in res["paired"][RL] if e["a"] == "mpu" and e["b"] == "zero_shot"]
    assert paired["delta"] == pytest.approx(vs_zs["delta"])
    _close(paired["ci"], vs_zs["ci"])
    # two rewards trained with the same seeds: paired by seed, as the RL table pairs a run with its placebo
    pair = compare(arm, ArmValues("rl[lore]", SEEDS, CELLS, {"q": lore}), n_boot=n_boot, seed=0)["q"]
    [vs_lore] = [e for e in res["paired"][RL] if e["a"] == "mpu" and e["b"] == "lore(rank=4)"]
    assert vs_lore["delta"] == pytest.approx(pair["delta"]) == pytest.approx(0.2, abs=0.01)
    assert _width(vs_lore["ci"]) < 0.2 * _width(got["ci"]) and vs_lore["excludes_zero"]
    _close(vs_lore["ci"], pair["ci"], tol=0.25)

    # zero-shot's CI is the one it has without the rl rows
    alone = analyze(_rows("zero_shot", ZS, zs, None), n_boot=n_boot, seed=0)["table"]["zero_shot"][ZS]
    assert res["table"]["zero_shot"][ZS]["ci"] == alone["ci"] and alone["ci_note"] is None


def test_one_training_seed_is_said_like_too_few_users() -> None:
    """One seed: nothing to resample, so the CI is the cells' and says it leaves the runs' variance out; rl cells
    without seeds (older runs) are said to; a column mixing tagged and untagged rows is refused."""
    cell = _cell_effects(np.random.default_rng(3))
    one = analyze(_rows("mpu", RL, cell[None, :], (5,)), n_boot=200, seed=0)
    untagged = analyze(_rows("mpu", RL, cell, None), n_boot=200, seed=0)
    e = one["table"]["mpu"][RL]
    assert e["ci"] == untagged["table"]["mpu"][RL]["ci"] and "one training seed" in e["ci_note"]
    assert any("(training seeds): one training seed" in n for n in one["notes"])
    assert any("carry no rl_seed" in n for n in untagged["notes"])
    mixed = _rows("mpu", RL, np.stack([cell, cell]), (0, 1))
    del mixed[0]["rl_seed"]
    with pytest.raises(ValueError, match="carry no rl_seed"):
        analyze(mixed, n_boot=50)


def test_the_analysis_ci_covers_the_population_mean_with_three_seeds() -> None:
    """A seeded simulation through the analysis's bootstrap: with 3 training seeds whose spread is of the order of
    the cells' standard error, the rl value's CI covers the population mean (0) in ≥ 90 % of 200 runs; the same
    cells averaged over seeds first (the analysis before seeds were a factor) cover less."""
    runs = 200
    hit, blind = coverage(lambda m, seeds: _rows("mpu", RL, m, seeds), "mpu", RL, runs)
    assert hit / runs >= 0.9, hit / runs
    assert blind < hit - 0.05 * runs, (hit, blind)


def coverage(rows: Any, method: str, metric: str, runs: int) -> tuple[int, int]:
    """Runs whose CI of ``method`` covers the population mean 0, with 3 seeds (spread 0.15, of the order of the
    cells' standard error) tagged and resampled, and with the seeds averaged first: (tagged, averaged).
    ``rows(matrix, seeds)`` writes the (S, U·P) matrix as cells, tagged with ``seeds`` unless None."""
    hit = blind = 0
    for r in range(runs):
        rng = np.random.default_rng(r)
        m = _cell_effects(rng)[None, :] + rng.normal(0, 0.15, 3)[:, None] + rng.normal(0, 0.05, (3, U * P))
        for tagged in (True, False):
            est = Estimates(rows(m, SEEDS) if tagged else rows(m.mean(0), None), None, None, "", 300, r, 0.95, None)
            lo, hi = est.ci(est.value(method, metric)) or (np.nan, np.nan)
            covered = lo <= 0.0 <= hi
            hit, blind = (hit + covered, blind) if tagged else (hit, blind + covered)
    return hit, blind
