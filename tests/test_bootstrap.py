import numpy as np
import pytest

from perbench.stats import bootstrap as bs
from perbench.stats.bootstrap import (
    PAIRS,
    TWO_WAY,
    TwoWayBootstrap,
    bootstrap_ci,
    factor_notes,
    percentile_ci,
    two_way_ci,
)
from perbench.stats.intervals import bootstrap_by_group, pair_weighted

N_USERS, N_PROMPTS, TRUE_MEAN = 40, 16, 0.3


def _crossed(rng: np.random.Generator) -> np.ndarray:
    """y_up = μ + a_u + b_p + e_up: user sd 0.5, prompt sd 1, residual sd 1 (prompts are few and vary most)."""
    a = rng.normal(0, 0.5, N_USERS)
    b = rng.normal(0, 1.0, N_PROMPTS)
    e = rng.normal(0, 1.0, (N_USERS, N_PROMPTS))
    return (TRUE_MEAN + a[:, None] + b[None, :] + e).ravel()


USERS = [f"u{i}" for i in range(N_USERS) for _ in range(N_PROMPTS)]
PROMPTS = [f"p{j}" for _ in range(N_USERS) for j in range(N_PROMPTS)]


def test_two_way_covers_a_crossed_effect_and_users_only_does_not() -> None:
    rng = np.random.default_rng(2024)
    two_way = users_only = old = 0
    n_sim = 200
    for s in range(n_sim):
        y = _crossed(rng)
        ci = two_way_ci(y, USERS, PROMPTS, n_boot=200, seed=s)
        assert ci is not None
        two_way += ci[0] <= TRUE_MEAN <= ci[1]
        _, reps = TwoWayBootstrap(USERS, PROMPTS, n_boot=200, seed=s, resample_prompts=False).means(
            y, [np.arange(y.size)]
        )
        one = percentile_ci(reps[:, 0])
        assert one is not None
        users_only += one[0] <= TRUE_MEAN <= one[1]
        if s < 60:  # the project's previous per-user bootstrap, on part of the simulations (it is slow)
            lo, hi = bootstrap_by_group(y, USERS, pair_weighted, n_boot=200, seed=s)
            old += lo <= TRUE_MEAN <= hi
    # measured: two-way 0.94 (0.932 over 1000 simulations), users-only 0.48, previous bootstrap 0.50
    assert two_way / n_sim >= 0.90
    assert users_only / n_sim <= 0.70
    assert old / 60 <= 0.75


def test_row_weight_is_user_count_times_prompt_count() -> None:
    # value 1 on user u0's rows only, complete crossed design: Σ_p c_u0·c_p / Σ_u,p c_u·c_p = c_u0 / Σ_u c_u,
    # a multiple of 1/N_USERS in every replicate; independent per-row weights would not give that
    y = np.array([1.0 if u == "u0" else 0.0 for u in USERS])
    _, reps = TwoWayBootstrap(USERS, PROMPTS, n_boot=300, seed=1).means(y, [np.arange(y.size)])
    k = reps[:, 0] * N_USERS
    np.testing.assert_allclose(k, np.round(k), atol=1e-9)
    assert len(np.unique(np.round(k))) > 2  # and it does vary


def test_same_draws_for_every_column_and_deterministic() -> None:
    rng = np.random.default_rng(0)
    y = _crossed(rng)
    idx = np.arange(y.size)
    boot = TwoWayBootstrap(USERS, PROMPTS, n_boot=100, seed=5)
    point, reps = boot.means(y, [idx, idx.copy(), idx[: y.size // 2]])
    assert point[0] == pytest.approx(y.mean())
    np.testing.assert_array_equal(reps[:, 0], reps[:, 1])  # a paired difference of equal columns is exactly 0
    assert not np.allclose(reps[:, 0], reps[:, 2])
    _, again = TwoWayBootstrap(USERS, PROMPTS, n_boot=100, seed=5).means(y, [idx])
    np.testing.assert_array_equal(again[:, 0], reps[:, 0])
    _, other = TwoWayBootstrap(USERS, PROMPTS, n_boot=100, seed=6).means(y, [idx])
    assert not np.array_equal(other[:, 0], reps[:, 0])


def test_prompts_nested_in_users_are_not_resampled_twice() -> None:
    # upstream pairs: every prompt belongs to one user; the CI should match the per-user bootstrap, not be √2 wider
    rng = np.random.default_rng(3)
    users = [f"u{i}" for i in range(30) for _ in range(20)]
    prompts = [f"q{i}_{j}" for i in range(30) for j in range(20)]
    y = (rng.random(600) < 0.6).astype(float)
    two = two_way_ci(y, users, prompts, n_boot=2000, seed=0)
    lo, hi = bootstrap_by_group(y, users, pair_weighted, n_boot=2000, seed=0)
    assert two is not None
    assert (two[1] - two[0]) == pytest.approx(hi - lo, rel=0.15)


def test_strata_draw_separately() -> None:
    # two benchmarks: a column on stratum A alone is unaffected by how many users stratum B has
    # (stratum A has 5 users, so its column is resampled two-way rather than by the few-users fallback)
    users = ["a1", "a2", "a3", "a4", "a5", "b1"] * 2
    prompts = ["p1"] * 6 + ["p2"] * 6
    strata = ["A"] * 5 + ["B"] + ["A"] * 5 + ["B"]
    y = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 5.0] * 2)
    col = np.array([0, 1, 2, 3, 4, 6, 7, 8, 9, 10])
    boot = TwoWayBootstrap(users, prompts, strata, n_boot=200, seed=0)
    assert boot.resampling(col).unit == TWO_WAY
    _, reps = boot.means(y, [col])
    assert set(np.round(reps[:, 0] * 5, 9)) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}


def test_two_way_ci_edge_cases_and_notes() -> None:
    assert two_way_ci([], [], [], n_boot=100) is None
    assert two_way_ci([1.0, 0.0], ["u", "u"], ["p", "p"], n_boot=100) is None
    ci = two_way_ci([1.0, 0.0, 1.0, 1.0], ["u1", "u2", "u1", "u2"], ["p1", "p1", "p2", "p2"], n_boot=200)
    assert ci is not None and 0.0 <= ci[0] <= 0.75 <= ci[1] <= 1.0
    notes = factor_notes(["g"] * 4, ["u1", "u2", "u1", "u2"], ["p1", "p1", "p2", "p2"])
    assert len(notes) == 2 and "2 users" in notes[0] and "2 prompts" in notes[1]
    assert factor_notes(["g"] * len(USERS), USERS, PROMPTS) == []


def _two_users(per_user: int = 50) -> tuple[np.ndarray, list[str], list[str]]:
    """Upstream-like pairs of a random RM: 2 users, each with their own prompts, accuracies 0.40 and 0.46."""
    y = np.zeros(2 * per_user)
    y[:20] = 1.0  # u0: 20 / 50
    y[per_user : per_user + 23] = 1.0  # u1: 23 / 50
    users = ["u0"] * per_user + ["u1"] * per_user
    prompts = [f"q{i}" for i in range(2 * per_user)]
    return y, users, prompts


def test_two_users_resample_prompts_and_say_so() -> None:
    # the case: resampling 2 users gives [0.40, 0.46] for a random RM, seeming to exclude 0.5
    y, users, prompts = _two_users()
    forced = TwoWayBootstrap(users, prompts, n_boot=500, seed=0, min_levels=0)
    assert forced.resampling(np.arange(y.size)).unit == TWO_WAY
    old = percentile_ci(forced.means(y, [np.arange(y.size)])[1][:, 0])
    assert old is not None and old[1] < 0.5  # what the users-only bootstrap claimed
    got = bootstrap_ci(y, users, prompts, n_boot=500, seed=0)
    assert got.resampling.unit == bs.PROMPTS and got.ci is not None
    assert got.ci[0] < 0.43 < 0.5 < got.ci[1]
    assert got.note is not None and "only 2 users (< 5)" in got.note and "100 prompts only" in got.note


def test_few_users_and_prompts_resample_pairs() -> None:
    users = ["u1", "u2", "u1", "u2", "u1", "u2"]
    prompts = ["p1", "p1", "p2", "p2", "p3", "p3"]
    y = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    got = bootstrap_ci(y, users, prompts, n_boot=300, seed=0)
    assert got.resampling.unit == PAIRS and got.resampling.pairs == 6
    assert (
        got.note is not None
        and "2 users" in got.note
        and "3 prompts" in got.note
        and "6 (user, prompt) pairs" in got.note
    )
    assert got.ci is not None and got.ci[0] < got.ci[1]
    # every replicate is a mean of redrawn cells: a multiple of 1/6 of the 6 drawn values
    _, reps = TwoWayBootstrap(users, prompts, n_boot=300, seed=0).means(y, [np.arange(6)])
    np.testing.assert_allclose(reps[:, 0] * 6, np.round(reps[:, 0] * 6), atol=1e-9)


@pytest.mark.parametrize(
    ("users", "prompts"),
    [(["u"], ["p"]), (["u", "u", "u"], ["p", "p", "p"])],  # one (user, prompt) pair, once or repeated
)
def test_a_single_pair_has_no_ci_and_says_why(users: list[str], prompts: list[str]) -> None:
    got = bootstrap_ci([0.3] * len(users), users, prompts, n_boot=200, seed=0)
    assert got.ci is None and got.resampling.unit is None
    assert got.note is not None and "no CI" in got.note
    assert two_way_ci([0.3] * len(users), users, prompts, n_boot=200) is None
    _, reps = TwoWayBootstrap(users, prompts, n_boot=50).means([0.3] * len(users), [np.arange(len(users))])
    assert np.isnan(reps).all()  # never a [x, x] interval


def test_fallback_columns_leave_two_way_columns_alone() -> None:
    # a two-way column gets the same replicates whether or not a few-users column is evaluated with it
    rng = np.random.default_rng(9)
    y = _crossed(rng)
    everyone = np.arange(y.size)
    two = np.flatnonzero(np.isin(USERS, ["u0", "u1"]))
    boot = TwoWayBootstrap(USERS, PROMPTS, n_boot=150, seed=3)
    assert boot.resampling(two).unit == bs.PROMPTS and boot.resampling(everyone).unit == TWO_WAY
    _, alone = boot.means(y, [everyone])
    _, mixed = boot.means(y, [everyone, two])
    np.testing.assert_array_equal(alone[:, 0], mixed[:, 0])
    assert np.isfinite(mixed[:, 1]).all() and mixed[:, 1].std() > 0


def _split_cells(anchor: bool = True) -> list[dict[str, object]]:
    """20 seen users with rm_acc_seen pairs, 8 unseen users with rm_acc_unseen pairs (each user's own pairs), and
    metric ``probe``: value 0 for each unseen user and 1 for one ``anchor`` user who is neither seen nor unseen, so
    a replicate's mean of probe is 1 / (the unseen users it drew + 1)."""
    rng = np.random.default_rng(0)
    g = "bench|policy|seed0"
    cells: list[dict[str, object]] = []
    for metric, who, n in (("rm_acc_seen", "s", 20), ("rm_acc_unseen", "n", 8)):
        for i in range(n):
            for j in range(4):
                v = float(rng.random() < 0.6)
                cells.append(_cell(g, metric, f"{who}{i}", f"{who}{i}/{j}", v))
    probe = [(f"n{i}", 0.0) for i in range(8)] + ([("anchor", 1.0)] if anchor else [])
    cells += [_cell(g, "probe", u, f"{u}/probe", v) for u, v in probe]
    return cells


def _cell(group: str, metric: str, user: str, prompt: str, value: float) -> dict[str, object]:
    return {"group": group, "method": "m", "metric": metric, "user": user, "prompt": prompt, "value": value}


def test_unseen_users_are_drawn_among_themselves() -> None:
    """Users are drawn per class (seen / unseen, read off the cells): every replicate of a column over unseen users
    has exactly the 8 unseen users (drawn over all 29 users together it had 0 to 20 of them)."""
    from perbench.metrics.analysis.data import user_classes
    from perbench.metrics.analysis.estimates import Estimates

    cells = _split_cells()
    est = Estimates(cells, None, None, "m", 400, 0, 0.95, None)
    probe = est.value("m", "probe")
    assert probe is not None and np.allclose(probe.reps, 1 / 9)
    # the same rows without the classes: the number of unseen users in a replicate varies
    rows = [(str(c["user"]), str(c["prompt"])) for c in cells]
    flat = TwoWayBootstrap([u for u, _ in rows], [p for _, p in rows], n_boot=400, seed=0)
    idx = np.flatnonzero([c["metric"] == "probe" for c in cells])
    _, reps = flat.means(np.array([float(c["value"]) for c in cells]), [idx])  # type: ignore[arg-type]
    with np.errstate(divide="ignore"):  # a replicate that did not draw the anchor has mean 0
        drawn = 1 / reps[:, 0] - 1
    assert drawn.min() < 6 and drawn.max() > 10
    classes = user_classes(["b"] * 3, ["rm_acc_seen", "rm_acc_unseen", "args:x"], ["s", "n", "z"])
    assert classes == ["seen", "unseen", ""]
    # a benchmark without the split (no unseen rows): no classes, the unstratified draws
    assert user_classes(["b"] * 2, ["rm_acc_seen", "args:x"], ["s", "z"]) is None


def test_stratified_draws_leave_a_seen_only_column_alike_in_distribution() -> None:
    from perbench.metrics.analysis.estimates import Estimates

    cells = _split_cells(anchor=False)
    est = Estimates(cells, None, None, "m", 2000, 1, 0.95, None)
    seen = est.value("m", "rm_acc_seen")
    assert seen is not None
    idx = np.flatnonzero([c["metric"] == "rm_acc_seen" for c in cells])
    users = [str(c["user"]) for c in cells]
    prompts = [str(c["prompt"]) for c in cells]
    flat = TwoWayBootstrap(users, prompts, n_boot=2000, seed=2)
    _, reps = flat.means(np.array([float(c["value"]) for c in cells]), [idx])  # type: ignore[arg-type]
    assert np.std(seen.reps) == pytest.approx(np.std(reps[:, 0]), rel=0.08)
    # the CI: its ends and middle agree to within 1/8 of its width (the stratified replicates are means over
    # exactly 80 cells, the flat ones over a varying number: their lattices differ, their spread does not)
    q = [0.025, 0.5, 0.975]
    width = float(np.subtract(*np.quantile(reps[:, 0], [0.975, 0.025])))
    np.testing.assert_allclose(np.quantile(seen.reps, q), np.quantile(reps[:, 0], q), atol=width / 8)
