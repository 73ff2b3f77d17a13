"""Training noise in the intervals: a stochastic method's system pools its fits (``systems: {fit_seeds: N}``), its
cells carry their fit seed under the system's one label, and the analysis resamples the fits on top of users and
prompts; a system of one fit of a stochastic method is marked wherever it is ranked."""

from __future__ import annotations

from typing import Any

import numpy as np

from perbench.config import Component, Where
from perbench.metrics.analysis import analyze
from perbench.runner.cells import Cells
from perbench.systems import SystemsSpec, expand, fit_seed_of, is_stochastic, pooled_fits
from tests.test_analysis_rl_seeds import P, U, _cell_effects, coverage
from tests.test_analysis_rl_seeds import _rows as rl_rows

G = "b|p|seed0"
BON = "best_of_n:rubric_satisfaction"


def _rows(method: str, m: np.ndarray, seeds: tuple[int, ...] | None) -> list[dict[str, Any]]:
    """The RL test's rows of an (S, U·P) matrix, on a Best-of-N metric and tagged with fit seeds instead."""
    out = rl_rows(method, BON, m, seeds)
    for r in out:
        if "rl_seed" in r:
            r["fit_seed"] = r.pop("rl_seed")
    return out


def test_which_methods_are_stochastic_fits() -> None:
    assert [m for m in ("global_bt", "mpu", "lore", "pal_b", "vpl", "pref") if is_stochastic(m)] == [
        "lore", "pal_b", "vpl",
    ]  # fmt: skip
    assert is_stochastic("pal_a") and is_stochastic("genarm") and not is_stochastic("length")


def test_fit_seeds_expand_a_stochastic_system_into_fits_pooled_under_one_label() -> None:
    spec = SystemsSpec.from_dict({"train_fraction": [0.5, 1.0], "fit_seeds": 3}, Where("cfg.yaml"))
    systems = expand([Component("mpu"), Component("pal_b")], ["length"], spec, seed=0, shots=10)
    labels = [s.label for s in systems]
    assert labels == [
        "mpu(train_fraction=0.5)", "mpu",
        "pal_b(train_fraction=0.5)", "pal_b(train_fraction=0.5,fit_seed=1)", "pal_b(train_fraction=0.5,fit_seed=2)",
        "pal_b", "pal_b(fit_seed=1)", "pal_b(fit_seed=2)", "length",
    ]  # fmt: skip
    fits = pooled_fits(systems)
    assert fits["pal_b(fit_seed=2)"] == ("pal_b", fit_seed_of(0, 2)) and fits["pal_b"] == ("pal_b", 0)
    assert "mpu" not in fits  # a deterministic fit is fit once
    pal = next(s for s in systems if s.label == "pal_b(train_fraction=0.5,fit_seed=1)")
    assert (
        pal.seed == 0 and pal.fit_seed == fit_seed_of(0, 1) and pal.record()["pooled_as"] == "pal_b(train_fraction=0.5)"
    )
    assert pal.record()["fit_seeds"] == [0, fit_seed_of(0, 1), fit_seed_of(0, 2)] and pal.record()["stochastic_fit"]
    cells = Cells(G, fits)
    cells.add("pal_b(fit_seed=1)", BON, "u0", "p0", 0.5)
    cells.add("mpu", BON, "u0", "p0", 0.5)
    assert cells.rows[0]["method"] == "pal_b" and cells.rows[0]["fit_seed"] == fit_seed_of(0, 1)
    assert "fit_seed" not in cells.rows[1]
    assert SystemsSpec.from_dict({"fit_seeds": 3}, Where("x")).to_dict() == {"fit_seeds": 3}


def test_the_analysis_ci_covers_the_population_mean_with_three_fit_seeds() -> None:
    """As for RL seeds: fits whose spread is of the order of the cells' standard error; with the 3 fits resampled
    the CI covers the population mean (0) in ≥ 90 % of 200 runs, the fits averaged first (one system, no fit
    factor) cover less."""
    runs = 200
    hit, blind = coverage(lambda m, seeds: _rows("pal_b", m, seeds), "pal_b", BON, runs)
    assert hit / runs >= 0.9, hit / runs
    assert blind < hit - 0.05 * runs, (hit, blind)


def test_a_system_of_one_stochastic_fit_is_marked_wherever_it_is_ranked() -> None:
    from perbench.report.leaderboard import leaderboard_table

    rng = np.random.default_rng(3)
    cell = _cell_effects(rng)
    rows = [*_rows("pal_b", 0.3 + cell[None, :] + rng.normal(0, 0.05, (3, U * P)), (0, 11, 12))]
    rows += _rows("vpl", 0.9 + cell, None) + _rows("mpu", 0.1 + cell, None)
    members = {
        "pal_b": {"stochastic_fit": True, "fit_seeds": [0, 11, 12]},
        "vpl": {"stochastic_fit": True, "fit_seeds": [0]},
        "mpu": {"stochastic_fit": False, "fit_seeds": [0]},
    }
    a = analyze(rows, verdict_metric=BON, n_boot=200, systems=members)
    assert a["methods"][:3] == ["pal_b", "vpl", "mpu"]  # one system per method, not one per fit
    assert a["fit_seeds"]["fits"] == {"pal_b": 3, "vpl": 1} and a["fit_seeds"]["single_seed"] == ["vpl"]
    assert "3 training seeds" in (a["table"]["pal_b"][BON]["ci_note"] or "")
    v = a["verdict"]
    assert v["deploy"] == "vpl" or (v["headroom"] or {}).get("leader") == "vpl" or "vpl" in v["text"]
    note = next(p["text"] for p in v["parts"] if p["kind"] == "fit_seeds")
    assert note.startswith("vpl is one fit of a stochastic method")
    assert any("vpl (1 fit of a stochastic method)" in line for line in leaderboard_table(a))
