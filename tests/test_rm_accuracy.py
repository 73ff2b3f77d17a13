from __future__ import annotations

import numpy as np
import pytest

from perbench.metrics.rm_accuracy import pair_outcomes, preference_accuracy, rm_accuracy
from perbench.stats.intervals import bootstrap_by_group, macro, pair_weighted


def test_strict_ties_count_as_wrong_and_are_counted() -> None:
    res = rm_accuracy(np.array([2.0, 1.0, 1.0, 0.0]), np.array([1.0, 1.0, 2.0, 0.0]), ["a", "a", "b", "b"], n_boot=0)
    assert res["accuracy"] == 0.25
    assert res["ties"] == 2
    assert res["tie_policy"] == "strict"


def test_half_ties() -> None:
    res = rm_accuracy(
        np.array([2.0, 1.0, 1.0, 0.0]),
        np.array([1.0, 1.0, 2.0, 0.0]),
        ["a", "a", "b", "b"],
        tie="half",
        n_boot=0,
    )
    assert res["accuracy"] == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)


def test_nan_scores_are_wrong_and_reported_invalid() -> None:
    out = pair_outcomes(np.array([np.nan, 1.0]), np.array([0.0, np.nan]), tie="half")
    assert out.tolist() == [0.0, 0.0]
    res = rm_accuracy(np.array([np.nan, 3.0]), np.array([0.0, 1.0]), ["a", "b"], n_boot=0)
    assert res["invalid"] == 1 and res["accuracy"] == 0.5


def test_unknown_tie_policy_rejected() -> None:
    with pytest.raises(ValueError, match="tie policy"):
        pair_outcomes(np.zeros(1), np.zeros(1), tie="coin")  # type: ignore[arg-type]


def test_macro_vs_pair_weighted_and_per_user() -> None:
    # user a: 3/3 right, user b: 0/1 right
    res = rm_accuracy(np.array([1.0, 1.0, 1.0, 0.0]), np.zeros(4), ["a", "a", "a", "b"], n_boot=0)
    assert res["per_user"]["a"] == {"accuracy": 1.0, "n": 3}
    assert res["per_user"]["b"] == {"accuracy": 0.0, "n": 1}
    assert res["accuracy"] == 0.75 and res["macro"] == 0.5
    assert res["n_users"] == 2 and res["n_pairs"] == 4


def test_judge_preferences_count_parse_failures() -> None:
    res = preference_accuracy(np.array([1.0, 0.0, 0.5, np.nan]), ["a", "b", "c", "d"], n_boot=0)
    assert res["accuracy"] == 0.25 and res["invalid"] == 1 and res["ties"] == 1


def test_bootstrap_resamples_users_not_pairs() -> None:
    # Two users with identical per-user accuracy: every resample gives the same value -> zero-width CI.
    vals = np.array([1, 0, 1, 0], dtype=float)
    lo, hi = bootstrap_by_group(vals, ["a", "a", "b", "b"], pair_weighted, n_boot=200)
    assert lo == hi == 0.5
    lo, hi = bootstrap_by_group(np.array([1.0, 1.0, 0.0]), ["a", "a", "b"], macro, n_boot=500)
    assert lo == 0.0 and hi == 1.0
    assert np.isnan(bootstrap_by_group(vals, ["a"] * 4, pair_weighted)[0])


def test_results_files_are_strict_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A one-user group has no bootstrap CI: results.json says null, never a bare NaN that JSON.parse rejects."""
    import json

    from perbench.io import atomic_write_json, atomic_write_jsonl

    acc = rm_accuracy(np.array([1.0, 0.0]), np.array([0.0, 1.0]), ["only", "only"], n_boot=50)
    obj = {"acc": acc, "inf": float("inf"), "arr": np.array([np.nan, 1.0]), "np": np.float32("nan")}
    atomic_write_json(tmp_path / "r.json", obj)
    atomic_write_jsonl(tmp_path / "r.jsonl", [obj])

    def refuse(c: str) -> None:
        raise ValueError(f"non-standard JSON constant {c}")

    for name in ("r.json", "r.jsonl"):
        back = json.loads((tmp_path / name).read_text(), parse_constant=refuse)
        assert back["acc"]["ci"] == [None, None] and back["inf"] is None and back["arr"] == [None, 1.0]
        assert back["np"] is None and back["acc"]["accuracy"] == 0.5
