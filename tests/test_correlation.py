import math

import numpy as np
import pytest
from scipy import stats

from perbench.metrics.correlation import BATCHED, CORRELATIONS, kendall_tau_b, ndcg, rbo, snap_ties


def _scipy(name: str, x: np.ndarray, y: np.ndarray) -> float:
    if name == "kendall_tau_b":
        return float(stats.kendalltau(x, y, variant="b").statistic)
    if name == "weighted_tau":
        return float(stats.weightedtau(x, y).statistic)
    if name == "spearman":
        return float(stats.spearmanr(x, y).statistic)
    return float(stats.pearsonr(x, y).statistic)


@pytest.mark.parametrize("name", ["kendall_tau_b", "weighted_tau", "spearman", "pearson"])
def test_equals_scipy_on_random_inputs_with_ties(name: str) -> None:
    rng = np.random.default_rng(7)
    xs, ys, want = [], [], []
    for t in range(120):
        n = 8
        if t % 2:  # heavy ties: few distinct values
            x = rng.integers(0, 3, n).astype(float)
            y = rng.integers(0, 3, n).astype(float)
        else:
            x = rng.normal(size=n)
            y = 0.5 * x + rng.normal(size=n)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        got = CORRELATIONS[name](x, y)
        ref = _scipy(name, x, y)
        assert got is not None and got == pytest.approx(ref, abs=1e-12)
        xs.append(x)
        ys.append(y)
        want.append(ref)
    batched = BATCHED[name](np.stack(xs), np.stack(ys))
    np.testing.assert_allclose(batched, want, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CORRELATIONS))
def test_undefined_is_none_not_nan(name: str) -> None:
    fn = CORRELATIONS[name]
    assert fn([1.0, 2.0], [2.0, 1.0]) is None  # fewer than 3 systems
    assert fn([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]) is None  # constant upstream
    assert fn([1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]) is None  # constant downstream
    b = BATCHED[name](np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]), np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))
    assert math.isnan(b[0]) and b[1] == pytest.approx(1.0)


def test_ndcg_hand_computed() -> None:
    # upstream ranks A, B, C; downstream scores 2, 3, 1 → gains (min-max) 0.5, 1, 0
    # DCG  = 0.5/log2(2) + 1/log2(3) + 0/log2(4) = 0.5 + 0.6309298 = 1.1309298
    # IDCG = 1/log2(2) + 0.5/log2(3) + 0         = 1 + 0.3154649 = 1.3154649
    assert ndcg([3.0, 2.0, 1.0], [2.0, 3.0, 1.0]) == pytest.approx(1.1309298 / 1.3154649, abs=1e-7)
    # perfectly agreeing order → 1; reversed order of 4 systems, gains 1, 2/3, 1/3, 0 in reverse:
    # DCG  = 0 + (1/3)/log2(3) + (2/3)/log2(4) + 1/log2(5) = 0.2103099 + 0.3333333 + 0.4306766 = 0.9743198
    # IDCG = 1 + (2/3)/log2(3) + (1/3)/log2(4) + 0 = 1 + 0.4206199 + 0.1666667 = 1.5872866
    assert ndcg([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert ndcg([4.0, 3.0, 2.0, 1.0], [0.0, 1.0, 2.0, 3.0]) == pytest.approx(0.9743198 / 1.5872866, abs=1e-7)


def test_ndcg_averages_over_the_orders_of_tied_systems() -> None:
    # upstream ties B and C (both 1.0): they share positions 2 and 3, so each gets the mean discount
    # (1/log2(3) + 1/log2(4)) / 2 = 0.5654649; gains 1, 0, 0.5 → DCG = 1 + 0.5 · 0.5654649 = 1.2827325;
    # IDCG = 1 + 0.5/log2(3) = 1.3154649 (the old rule, B first by system order, gave 1.25 / 1.3154649)
    assert ndcg([2.0, 1.0, 1.0], [3.0, 1.0, 2.0]) == pytest.approx(1.2827325 / 1.3154649, abs=1e-7)
    assert ndcg([1.0, 1.0, 2.0], [2.0, 1.0, 3.0]) == pytest.approx(1.2827325 / 1.3154649, abs=1e-7)


def test_values_equal_up_to_rounding_are_ties() -> None:
    x = [(0.1 + 0.2) + 0.3, (0.3 + 0.2) + 0.1, 0.2, 0.1]  # the first two differ in the last bit only
    assert x[0] != x[1]
    assert snap_ties(np.array([x]))[0].tolist()[:2] == [0.6, 0.6]
    y = [1.0, 2.0, 3.0, 4.0]
    assert kendall_tau_b(x, y) == pytest.approx(kendall_tau_b([0.6, 0.6, 0.2, 0.1], y))
    assert BATCHED["ndcg"](np.array([x]), np.array([y]))[0] == pytest.approx(ndcg([0.6, 0.6, 0.2, 0.1], y))


def test_rbo_hand_computed() -> None:
    # rankings A,B,C vs B,A,C, p = 0.9: overlaps X1=0, X2=2, X3=3
    # RBO_ext = (3/3)·0.9³ + (0.1/0.9)·(0·0.9 + (2/2)·0.81 + (3/3)·0.729) = 0.729 + 0.171 = 0.9
    assert rbo([3.0, 2.0, 1.0], [2.0, 3.0, 1.0]) == pytest.approx(0.9)
    # identical rankings → 1
    assert rbo([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    # A,B,C,D vs D,C,B,A: X1=0, X2=0, X3=2, X4=4
    # = 0.9⁴ + (0.1/0.9)·((2/3)·0.729 + 1·0.6561) = 0.6561 + (0.486 + 0.6561)/9 = 0.6561 + 0.1269
    assert rbo([4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(0.783, abs=1e-9)
    # a different persistence changes the value: p = 0.5 on the first case
    # = 0.125 + 1·(0.25 + 0.125) = 0.5
    assert rbo([3.0, 2.0, 1.0], [2.0, 3.0, 1.0], p=0.5) == pytest.approx(0.5)
