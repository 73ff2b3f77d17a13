"""The pool diagnosis against a scorer with no information: "hacked" prompts and users without signal are tested
against the permutation null with Holm's adjustment, so a random scorer is rarely flagged, while a reward that
really prefers the worse samples on a prompt is."""

from __future__ import annotations

import numpy as np

from perbench.metrics.pool_diagnosis import diagnose, holm

Pool = tuple[np.ndarray, list[str], list[str]]


def _pool(rng: np.random.Generator, users: int = 32, prompts: int = 16, N: int = 16) -> Pool:
    """Truth of each (user, prompt) cell's N samples: a prompt effect shared by every user (what makes the cells of
    one prompt correlated), a user × sample taste and noise."""
    base = rng.normal(0, 0.15, (prompts, N))
    taste = rng.normal(0, 1, (users, 3))
    feats = rng.normal(0, 1, (prompts, N, 3))
    T = np.array([base[p] + 0.05 * feats[p] @ taste[u] + rng.normal(0, 0.03, N)
                  for u in range(users) for p in range(prompts)])  # fmt: skip
    us = [f"u{u}" for u in range(users) for _ in range(prompts)]
    ps = [f"p{p}" for _ in range(users) for p in range(prompts)]
    return T, us, ps


def _agnostic(rng: np.random.Generator, users: int, prompts: int, N: int) -> np.ndarray:
    """A user-agnostic random scorer: one random score per sample, the same for every user."""
    s = rng.normal(size=(prompts, N))
    return np.array([s[p] for _ in range(users) for p in range(prompts)])


def test_holm_adjusts_step_down() -> None:
    assert holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]
    assert holm([]) == []


def test_a_random_scorer_is_flagged_as_hacking_in_at_most_5_percent_of_pools() -> None:
    rng = np.random.default_rng(0)
    pools, flagged, silent, reversed_ = 60, 0, 0, 0
    for _ in range(pools):
        T, us, ps = _pool(rng)
        d = diagnose(_agnostic(rng, 32, 16, 16), T, {}, us, ps)
        flagged += bool(d["hacked_prompts"])
        silent += len(d["users_without_signal"])
        reversed_ += sum(u["reason"] == "reversed" for u in d["collapsed_users"])
    assert flagged <= 0.05 * pools, flagged
    assert reversed_ <= 0.05 * pools, reversed_
    assert silent >= 0.9 * 32 * pools  # its users are "no evidence of signal", not collapsed


def test_a_reward_that_prefers_the_worse_samples_on_some_prompts_is_found() -> None:
    rng = np.random.default_rng(1)
    T, us, ps = _pool(rng)
    bad = {"p0", "p1"}
    sign = np.array([-1.0 if p in bad else 1.0 for p in ps])[:, None]
    S = sign * T + rng.normal(0, 0.05, T.shape)
    d = diagnose(S, T, {}, us, ps)
    assert {h["prompt"] for h in d["hacked_prompts"]} == bad
    assert all(h["p_adjusted"] <= 0.05 for h in d["hacked_prompts"])
    assert d["users_without_signal"] == [] and d["users_tested"] == 32


def test_the_report_counts_users_with_no_evidence_of_signal() -> None:
    from perbench.report.signal import collapse_rows

    rng = np.random.default_rng(2)
    T, us, ps = _pool(rng, users=8, prompts=6)
    d = diagnose(_agnostic(rng, 8, 6, 16), T, {}, us, ps)
    head, rows = collapse_rows({"downstream": {"best_of_n[rand]": {"guide": "rand", "diagnosis": d}}})
    col = head.index("users with no evidence of signal")
    assert rows[0][col] == f"{len(d['users_without_signal'])} of 8" and "null" in d["rules"]
