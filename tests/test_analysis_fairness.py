"""Fairness (perbench.metrics.analysis.fairness): minority users are selected on train pairs, never on the test
pairs they are evaluated on."""

from typing import Any

import numpy as np

from perbench.metrics.analysis import analyze

G = "rubrics|smollm2|seed0"


def _pairs(method: str, metric: str, acc: dict[str, float], per_user: int, rng: np.random.Generator) -> list[Any]:
    out = []
    for u, p in acc.items():
        wins = rng.random(per_user) < p
        out += [
            {
                "group": G,
                "method": method,
                "metric": metric,
                "user": u,
                "prompt": f"{metric}-{u}-{i}",
                "value": float(w),
            }
            for i, w in enumerate(wins)
        ]
    return out


def test_minority_users_are_selected_on_train_pairs_and_evaluated_on_test_pairs() -> None:
    """Every user has the same true accuracy (0.5) under the reference RM. Selecting users whose *test* accuracy
    is below 0.5 would pick the unlucky ones and report a minority accuracy far below 0.5 for the reference RM
    itself; selecting on train pairs (independent draws) leaves their test accuracy near 0.5."""
    rng = np.random.default_rng(0)
    users = {f"u{i}": 0.5 for i in range(60)}
    cells = _pairs("global_bt", "rm_acc_seen", users, 6, rng) + _pairs("global_bt", "rm_acc_train", users, 6, rng)
    cells += _pairs("mpu", "rm_acc_seen", users, 6, rng)
    res = analyze(cells, n_boot=20)
    minority = res["minority"]
    assert minority["na"] is None and minority["selected_from"] == 60 and 10 < len(minority["users"]) < 50
    acc = res["fairness"]["global_bt"]["minority_acc"]
    assert 0.4 < acc < 0.6  # selection on the test pairs themselves gives about 0.3 here
    test_acc = res["fairness"]["global_bt"]["per_user"]
    on_test = [u for u, a in test_acc.items() if a < 0.5]
    assert np.mean([test_acc[u] for u in on_test]) < 0.35  # what selecting on test pairs would have reported
    # the diagnostic metric is no method metric: not in the table, rankings or selection
    assert "rm_acc_train" not in res["metrics"]["upstream"] and "rm_acc_train" not in res["ranking"]
    assert all("rm_acc_train" not in row for row in res["table"].values())


def test_without_train_pair_cells_no_user_is_called_a_minority() -> None:
    rng = np.random.default_rng(1)
    users = {f"u{i}": 0.3 for i in range(10)}
    res = analyze(_pairs("global_bt", "rm_acc_seen", users, 5, rng), n_boot=20)
    assert res["minority"]["users"] == [] and "no rm_acc_train rows" in res["minority"]["na"]
    f = res["fairness"]["global_bt"]
    assert f["minority_users"] == 0 and f["minority_acc"] is None and "not selected" in f["minority_na"]
