"""The numbers a verdict stands on, recomputed by hand on a small run and a small pool: the pooled Best-of-n value at
the decoder's own n, the random pick (the pool mean), the oracle pick (the expected best of an n-subset by the exact
metric, spec §7), the simultaneous critical value of "beats the random pick", and each guided row's policy accuracy
at its own decoder's weight. Each test fails under a named wrong variant of the code (docs/reliability.md)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

N_POOL, N_PICK = 6, 3
BON = f"best_of_n(n={N_PICK},pool={N_POOL})"
METRIC = "best_of_n:rubric_satisfaction"
WEIGHTS = (0.05, 20.0)


def expected_pick(scores: np.ndarray, quality: np.ndarray, n: int) -> float:
    """E[quality of the score-argmax of a uniformly random n-subset], by enumerating every subset (ties at the top
    split evenly): written apart from perbench's closed form."""
    total = 0.0
    subsets = list(itertools.combinations(range(len(scores)), n))
    for sub in subsets:
        top = max(scores[i] for i in sub)
        winners = [i for i in sub if scores[i] == top]
        total += sum(quality[i] for i in winners) / len(winners)
    return total / len(subsets)


def hashed_verdicts(text: str) -> dict[str, str | None]:
    """A stand-in for the rubric checkers: each aspect's pole drawn from a hash of the text. A tiny random policy's
    samples all land in the checkers' dead zones, so every pool would be flat (random pick = oracle); with these
    verdicts pools vary, and the numbers below can tell n from n/2 and an n-subset's best from the pool's."""
    import hashlib

    from perbench.data.rubrics.aspects import ASPECTS

    out: dict[str, str | None] = {}
    for name, aspect in ASPECTS.items():
        h = hashlib.sha256(f"{name}\x00{text}".encode()).digest()[0]
        out[name] = aspect.poles[h % len(aspect.poles)]
    return out


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from perbench.api import run
    from perbench.config import RunConfig

    out = tmp_path_factory.mktemp("pins")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERBENCH_CACHE", str(out / "cache"))  # quality units under the stand-in checkers stay here
        mp.setattr("perbench.data.rubrics.aspects.annotate", hashed_verdicts)
        yield _small_run(out, run, RunConfig)


def _small_run(out: Path, run: Any, RunConfig: Any) -> Path:
    spec = {
        "benchmark": {"name": "rubrics", "max_train_prompts": 2, "max_test_prompts": 2, "consensus_per_prompt": 0},
        "policy": "tiny-random", "rm_backbone": "tiny-random", "baselines": [],
        "methods": ["mpu", {"name": "length", "unit": "chars"}],
        "decoders": ["zero_shot", {"name": "best_of_n", "n": N_PICK, "pool": N_POOL},
                     *({"name": "args", "k": 3, "w": w} for w in WEIGHTS)],
        "guide_with": ["mpu"], "verdict_metric": METRIC, "max_new_tokens": 12, "max_gen_users": 2,
        "max_pool_prompts": 2, "bootstrap": 20, "shot_curve": [1], "bertscore": False, "out_dir": str(out),
        "device": "cpu",
    }  # fmt: skip
    return run(RunConfig.from_dict(spec)).run_dir


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_pooled_best_of_n_its_random_pick_and_its_oracle_are_the_exact_expectations_at_the_decoders_n(
    small_run: Path,
) -> None:
    from perbench.data.rubrics.benchmark import load_rubrics
    from perbench.metrics.rubric import rubric_satisfaction
    from perbench.rewards.baselines import LengthRM

    results = json.loads((small_run / "results.json").read_text(encoding="utf-8"))
    source = results["benchmark"]["meta"]["source_user_ids"]  # recorded id -> the source's
    users = load_rubrics(max_train_prompts=2, max_test_prompts=2, consensus_per_prompt=0).users
    samples = _lines(small_run / "samples.jsonl")
    texts: dict[str, list[str]] = {}
    for r in samples:
        if r.get("kind") == "bon_sample" and r["decoder"] == BON:
            texts.setdefault(r["prompt_id"], []).append(r["text"])
    assert texts and all(len(t) == N_POOL for t in texts.values())
    cells = {(c["method"], c["user"], c["prompt"]): c["value"] for c in _lines(small_run / "cells.jsonl")
             if c["metric"] == METRIC}  # fmt: skip
    length = LengthRM(unit="chars")
    checked = distinct = 0
    for (method, user, prompt), value in cells.items():
        if method not in ("random_pick", "oracle_pick", "length(unit=chars)"):
            continue
        pool = texts[prompt]
        q = np.array([rubric_satisfaction(t, users[source[user]])["satisfaction"] for t in pool])
        want = {
            "random_pick": float(q.mean()),
            "oracle_pick": expected_pick(q, q, N_PICK),
            "length(unit=chars)": expected_pick(np.array([float(len(t)) for t in pool]), q, N_PICK),
        }[method]
        assert value == pytest.approx(want, abs=1e-9), (method, user, prompt)
        checked += 1
        if method == "length(unit=chars)":
            s = np.array([length.length(t) for t in pool], float)
            # the wrong variants would differ here: n/2 (or 1) instead of n, the pool's max instead of an n-subset's
            half = expected_pick(s, q, N_PICK // 2 or 1)
            distinct += int(abs(want - half) > 1e-9 and abs(expected_pick(q, q, N_PICK) - q.max()) > 1e-9)
    assert checked >= 3 * 2 * 2 and distinct > 0, (checked, distinct)


def test_the_guided_rows_policy_accuracy_is_taken_at_each_decoders_own_weight(small_run: Path) -> None:
    results = json.loads((small_run / "results.json").read_text(encoding="utf-8"))
    up = results["upstream"]["mpu"]["policy_accuracy"]
    seen = []
    for w in WEIGHTS:
        row = results["downstream"][f"args(k=3,w={w})[mpu]"]["policy_accuracy"]
        assert row["w"] == w
        for g in ("seen", "unseen"):
            if g not in row:
                continue
            points = {float(p["w"]): p for p in up[g]["curve"]["points"]}
            assert row[g]["tilt"]["accuracy"] == pytest.approx(points[w]["accuracy"], abs=1e-12), (w, g)
            seen.append((w, g, row[g]["tilt"]["accuracy"]))
    by_w = {w: [a for ww, _, a in seen if ww == w] for w in WEIGHTS}
    assert by_w[WEIGHTS[0]] != by_w[WEIGHTS[1]], by_w  # the two weights give the two rows different numbers


@pytest.mark.parametrize("k", [1, 3, 8])
def test_the_one_sided_simultaneous_critical_value_is_the_max_statistics_quantile(k: int) -> None:
    """k independent equal-variance differences: P(max_j Z_j ≤ c) = Φ(c)^k = 0.95 gives c = Φ⁻¹(0.95^{1/k})."""
    from perbench.metrics.analysis.ranking import simultaneous, simultaneous_lower

    rng = np.random.default_rng(k)
    reps = rng.normal(0.0, 1.0, (40_000, k))
    crit, lows = simultaneous_lower([0.0] * k, list(reps.T), 0.95)
    assert crit == pytest.approx(norm.ppf(0.95 ** (1 / k)), abs=0.04)
    assert lows == pytest.approx([-crit * reps[:, j].std(ddof=1) for j in range(k)])
    two, _ = simultaneous([0.0] * k, list(reps.T), 0.95)  # two-sided: P(max |Z_j| ≤ c) = (2Φ(c) − 1)^k
    assert two == pytest.approx(norm.ppf((1 + 0.95 ** (1 / k)) / 2), abs=0.04)


def test_beats_the_random_pick_uses_the_simultaneous_critical_value_over_the_deployable_systems() -> None:
    from perbench.metrics.analysis.estimates import Estimates
    from perbench.metrics.analysis.headroom import headroom
    from perbench.metrics.analysis.roles import method_roles

    rng = np.random.default_rng(0)
    k, users, prompts = 6, 30, 20
    cells = []
    for u, p in itertools.product(range(users), range(prompts)):
        base = 0.5 + rng.normal(0, 0.05)
        cells.append(("random_pick", u, p, base))
        cells.append(("oracle_pick", u, p, base + 0.3))
        cells += [(f"sys{j}", u, p, base + 0.002 + rng.normal(0, 0.1)) for j in range(k)]
    rows = [{"group": "g|pol|seed0", "method": m, "metric": METRIC, "user": f"u{u}", "prompt": f"p{p}", "value": v}
            for m, u, p, v in cells]  # fmt: skip
    est = Estimates(rows, None, None, "sys0", 2000, 0, 0.95, None)
    entry = headroom(est, method_roles(est.methods, est.pure_decoders))[METRIC]
    crit = entry["critical_value"]
    # independent systems: near the value for k independent differences, far from the marginal 1.645
    assert crit == pytest.approx(norm.ppf(0.95 ** (1 / k)), abs=0.2) and crit > 2.1


def test_the_length_cells_are_each_picks_expected_words_the_pools_mean_and_the_greedy_outputs(
    small_run: Path,
) -> None:
    """``words`` cells (the length a trade-off's split reads): a Best-of-n pick's is the exact expectation of its
    pick's length, the random pick's the pool's mean length, zero-shot's the length of its own output; none of them
    is ranked."""
    samples = _lines(small_run / "samples.jsonl")
    pools: dict[str, list[str]] = {}
    for r in samples:
        if r.get("kind") == "bon_sample" and r["decoder"] == BON:
            pools.setdefault(r["prompt_id"], []).append(r["text"])
    greedy = {(r["user_id"], r["prompt_id"]): r["text"] for r in samples
              if r.get("kind") == "generation" and r["decoder"].startswith("zero_shot")}  # fmt: skip
    words = [c for c in _lines(small_run / "cells.jsonl") if c["metric"].endswith(":words")]
    seen: dict[str, int] = {}
    distinct = 0  # a length pick whose length differs from the pool's mean: the two are told apart
    for c in words:
        key = (c["method"], c["metric"])
        if key == ("random_pick", "best_of_n:words"):
            want = float(np.mean([len(t.split()) for t in pools[c["prompt"]]]))
        elif key == ("length(unit=chars)", "best_of_n:words"):
            pool = pools[c["prompt"]]
            n_words = np.array([len(t.split()) for t in pool], float)
            want = expected_pick(np.array([float(len(t)) for t in pool]), n_words, N_PICK)
            distinct += int(abs(want - n_words.mean()) > 1e-9)
        elif key == ("zero_shot", "zero_shot:words"):
            want = float(len(greedy[(c["user"], c["prompt"])].split()))
        else:
            continue
        assert c["value"] == pytest.approx(want, abs=1e-9), c
        seen[c["method"]] = seen.get(c["method"], 0) + 1
    assert set(seen) == {"random_pick", "length(unit=chars)", "zero_shot"} and min(seen.values()) >= 2 * 2, seen
    assert distinct > 0
    assert {c["method"] for c in words if c["metric"] == "best_of_n:words"} >= {"mpu", "random_pick"}
    assert "oracle_pick" not in {c["method"] for c in words}  # length is no quality: it has no ceiling
    analysis = json.loads((small_run / "results.json").read_text(encoding="utf-8"))["analysis"]
    assert "best_of_n:words" in analysis["metrics"]["descriptive"]
    assert not any(k.endswith(":words") for k in [*analysis["metrics"]["downstream"], *analysis["ranking"]])


def test_the_length_split_of_a_run_is_the_paired_means_of_its_words_cells(small_run: Path) -> None:
    """On the run's own cells, the trade-off row for length of a pick (here the chars-length baseline, whose pick is
    the longest of each n-subset): sampling is the mean over cells of the pool's mean length − the greedy output's,
    re-ranking the pick's expected length − the pool's mean, in words."""
    from perbench.metrics.analysis.estimates import Estimates
    from perbench.metrics.analysis.roles import method_roles
    from perbench.metrics.analysis.verdict import Verdict

    cells = _lines(small_run / "cells.jsonl")
    est = Estimates(cells, None, None, "mpu", 20, 0, 0.95, None)
    v = Verdict(est, method_roles(est.methods, est.pure_decoders), {"value": 0.05, "source": "test"}, None, None)
    rows, text = v.trade_offs(METRIC, "length(unit=chars)")
    row = {r["metric"]: r for r in rows}["best_of_n:words"]
    by = {(c["method"], c["user"], c["prompt"]): c["value"] for c in cells if c["metric"].endswith(":words")}
    keys = [(u, p) for m, u, p in by if m == "random_pick"]
    zero = [by[("zero_shot", u, p)] - by[("random_pick", u, p)] for u, p in keys]
    pick = [by[("length(unit=chars)", u, p)] - by[("random_pick", u, p)] for u, p in keys]
    assert row["sampling"]["value"] == pytest.approx(-np.mean(zero), abs=1e-9)
    assert row["reranking"]["value"] == pytest.approx(np.mean(pick), abs=1e-9) and row["reranking"]["value"] > 0
    assert row["delta"] == pytest.approx(row["sampling"]["value"] + row["reranking"]["value"], abs=1e-9)
    assert "Length: re-ranking by length(unit=chars) " in text and "words" in text
