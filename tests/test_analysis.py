import json
import math
from typing import Any

import numpy as np
import pytest

from perbench.metrics.analysis import Cell, analyze, parse_group

N_USERS, N_PROMPTS = 12, 8
ARGS = "args:rubric_satisfaction"
ZS = "zero_shot:rubric_satisfaction"


def _rows(
    group: str, method: str, metric: str, mean: float, rng: np.random.Generator, noise: float = 0.1
) -> list[dict[str, Any]]:
    out = []
    for u in range(N_USERS):
        for p in range(N_PROMPTS):
            v = float(np.clip(mean + rng.normal(0, noise), 0, 1)) if noise else mean
            prompt = f"p{p}" if ":" in metric else f"q{u}_{p}"
            out.append(
                {"group": group, "method": method, "metric": metric, "user": f"u{u}", "prompt": prompt, "value": v}
            )
    return out


def _run(cells: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    res = analyze(cells, n_boot=200, seed=0, **kw)
    json.dumps(res, allow_nan=False)  # no NaN / inf anywhere
    return res


def test_parse_group() -> None:
    k = parse_group("rubrics|smollm2|seed12")
    assert (k.setting, k.seed, k.benchmark) == ("rubrics|smollm2", 12, "rubrics")
    k = parse_group("rubrics")
    assert (k.setting, k.seed, k.benchmark) == ("rubrics", None, "rubrics")


def test_clear_winner_is_deployed() -> None:
    rng = np.random.default_rng(0)
    g = "rubrics|smollm2|seed0"
    cells = (
        _rows(g, "global_bt", ARGS, 0.5, rng)
        + _rows(g, "mpu", ARGS, 0.8, rng)
        + _rows(g, "pal_b", ARGS, 0.45, rng)
        + _rows(g, "zero_shot", ZS, 0.4, rng)
    )
    res = _run(cells)
    r = res["ranking"][ARGS]
    assert r["order"] == ["mpu", "global_bt", "pal_b"]
    assert r["best"] == "mpu" and r["tied"] == ["mpu"]
    assert r["vs_runner_up"]["b"] == "global_bt" and r["vs_runner_up"]["ci"][0] > 0
    v = res["verdict"]
    assert v["metric"] == ARGS and v["deploy"] == "mpu" and v["runner_up"] == "global_bt"
    assert v["ci"][0] < v["value"] < v["ci"][1]
    assert v["text"].startswith("Deploy mpu") and "beats zero-shot decoding" in v["text"]
    # zero_shot is a baseline: listed last, never a verdict candidate, compared in `paired`
    assert res["methods"][-1] == "zero_shot"
    zs = [e for e in res["paired"][ARGS] if e["b"] == "zero_shot" and e["a"] == "mpu"]
    assert len(zs) == 1 and zs[0]["b_metric"] == ZS and zs[0]["excludes_zero"]
    assert zs[0]["delta"] == pytest.approx(res["table"]["mpu"][ARGS]["value"] - res["table"]["zero_shot"][ZS]["value"])
    ref = [e for e in res["paired"][ARGS] if e["b"] == "global_bt"]
    assert {e["a"] for e in ref} == {"mpu", "pal_b"}


def test_identical_methods_are_reported_as_identical_not_as_a_zero_width_ci() -> None:
    rng = np.random.default_rng(1)
    g = "rubrics|smollm2|seed0"
    twin = _rows(g, "mpu", ARGS, 0.7, rng)
    clone = [{**c, "method": "mpu_avg"} for c in twin]  # mpu and mpu_avg on seen users: the same scores
    cells = twin + clone + _rows(g, "global_bt", ARGS, 0.3, rng)
    res = _run(cells)
    r = res["ranking"][ARGS]
    assert r["order"][:2] == ["mpu", "mpu_avg"] and r["identical"] == ["mpu_avg"]
    twin_entry = next(c for c in r["comparisons"] if c["b"] == "mpu_avg")
    assert twin_entry["status"] == "identical" and twin_entry["delta"] == 0.0 and twin_entry["ci"] is None
    assert "identical scores on every cell" in twin_entry["ci_note"]
    # the informative comparison is with the first method that is not identical
    assert r["vs_runner_up"]["b"] == "global_bt" and r["vs_runner_up"]["ci"][0] > 0
    assert r["decision"] == "separable" and r["best"] == "mpu"
    v = res["verdict"]
    assert v["deploy"] == "mpu" and v["identical"] == ["mpu_avg"]
    assert "mpu_avg scores identically to mpu on every cell" in v["text"]
    assert "cannot" not in v["text"] and "[0.0, 0.0]" not in v["text"]
    # only the two twins: identical is an answer ("equivalent"), not "cannot separate"
    alone = _run(twin + clone)
    assert alone["ranking"][ARGS]["decision"] == "equivalent" and alone["verdict"]["deploy"] is None
    assert "mpu and mpu_avg are identical" in alone["verdict"]["text"] and "cannot" not in alone["verdict"]["text"]


def test_perfect_upstream_predictor() -> None:
    rng = np.random.default_rng(2)
    g = "rubrics|smollm2|seed0"
    cells: list[dict[str, Any]] = []
    # five deployable systems (the verdict's upstream sentence reads the deployable ones; a coefficient needs 5)
    # and two baselines
    systems = [("global_bt", 0.55), ("mpu", 0.75), ("pal_b", 0.65), ("vpl", 0.6), ("lore", 0.7)]
    for m, skill in [*systems, ("length", 0.5), ("random", 0.45)]:
        cells += _rows(g, m, "rm_acc_unseen", skill, rng, noise=0)  # orders methods exactly like downstream
        cells += _rows(g, m, "pa_sum", 1 - skill, rng, noise=0)  # the reverse order
        cells += _rows(g, m, ARGS, skill, rng, noise=0.02)
    res = _run(cells)
    pairs = {(p["upstream"], p["downstream"]): p for p in res["selection"]["pairs"]}
    good = pairs[("rm_acc_unseen", ARGS)]
    assert good["n_systems"] == 5  # the deployable ones: baselines are reference lines, never a system
    assert good["kendall_tau_b"]["value"] == pytest.approx(1.0)
    assert good["spearman"]["value"] == pytest.approx(1.0) and good["ndcg"]["value"] == pytest.approx(1.0)
    assert good["rbo"]["value"] == pytest.approx(1.0)
    assert good["kendall_tau_b"]["ci"][0] > 0
    assert pairs[("pa_sum", ARGS)]["kendall_tau_b"]["value"] == pytest.approx(-1.0)
    assert sorted(p[0] for p in good["points"]) == ["global_bt", "lore", "mpu", "pal_b", "vpl"]
    bp = res["selection"]["best_predictor"][ARGS]
    assert bp["upstream"] == "rm_acc_unseen" and bp["p_best"] == pytest.approx(1.0)
    assert "rm_acc_unseen best predicts" in bp["text"] and "excludes 0" in bp["text"]
    v = res["verdict"]
    assert v["upstream_metric"] == "rm_acc_unseen" and v["agrees"] is True
    assert v["upstream_tau"] == pytest.approx(1.0)
    assert res["metrics"] == {"upstream": ["rm_acc_unseen", "pa_sum"], "downstream": [ARGS], "descriptive": []}


def test_na_states_and_too_few_systems() -> None:
    rng = np.random.default_rng(3)
    g = "rubrics|smollm2|seed0"
    cells = _rows(g, "global_bt", "rm_acc_seen", 0.6, rng) + _rows(g, "global_bt", ARGS, 0.5, rng)
    cells += _rows(g, "mpu", "rm_acc_seen", 0.7, rng)  # no downstream rows for mpu
    res = _run(cells, na_reasons={"mpu": {ARGS: "no per-token reward"}})
    na = res["table"]["mpu"][ARGS]
    assert na["value"] is None and na["ci"] is None and na["n"] == 0 and na["na"] == "no per-token reward"
    assert res["table"]["global_bt"][ARGS]["na"] is None
    tau = res["selection"]["pairs"][0]["kendall_tau_b"]
    assert tau["value"] is None and tau["ci"] is None and "need 5" in tau["na"]
    assert res["selection"]["best_predictor"][ARGS]["upstream"] is None
    assert res["ranking"][ARGS]["order"] == ["global_bt"]
    assert not any("unreliable" in n for n in res["notes"])  # 12 users, 8 and 96 prompts: no notes


def test_seeds_give_mean_and_sd() -> None:
    rng = np.random.default_rng(4)
    cells = []
    for s, mean in [(0, 0.4), (1, 0.6), (2, 0.5)]:
        cells += _rows(f"rubrics|smollm2|seed{s}", "global_bt", ARGS, mean, rng, noise=0)
        cells += _rows(f"rubrics|smollm2|seed{s}", "mpu", ARGS, mean + 0.1, rng, noise=0)
    res = _run(cells)
    e = res["table"]["global_bt"][ARGS]
    assert e["value"] == pytest.approx(0.5) and e["sd_seeds"] == pytest.approx(0.1)  # sd(0.4, 0.6, 0.5), ddof 1
    assert e["n"] == 3 * N_USERS * N_PROMPTS and e["users"] == N_USERS and e["prompts"] == N_PROMPTS
    single = _run([c for c in cells if c["group"].endswith("seed0")])
    assert single["table"]["global_bt"][ARGS]["sd_seeds"] is None


def test_fairness_minority_users() -> None:
    rng = np.random.default_rng(5)
    g = "rubrics|smollm2|seed0"
    cells = []
    for c in _rows(g, "global_bt", "rm_acc_seen", 1.0, rng, noise=0):
        cells.append({**c, "value": 0.0 if c["user"] in ("u0", "u1") else 1.0})  # u0, u1 oppose the majority
    for c in _rows(g, "global_bt", "rm_acc_train", 1.0, rng, noise=0):  # ... on their train pairs as well
        cells.append({**c, "value": 0.0 if c["user"] in ("u0", "u1") else 1.0})
    cells += _rows(g, "mpu", "rm_acc_seen", 1.0, rng, noise=0)
    for c in _rows(g, "mpu", "rm_acc_unseen", 0.5, rng, noise=0):
        cells.append({**c, "user": "new_" + c["user"]})
    res = _run([Cell(**c) for c in cells])  # Cell records are accepted as well
    f = res["fairness"]
    assert f["global_bt"]["minority_users"] == 2 and f["global_bt"]["minority_acc"] == 0.0
    assert f["global_bt"]["worst_decile_acc"] == pytest.approx(0.0)  # 12 users → lowest 2 (ceil 1.2)
    assert f["mpu"]["minority_acc"] == 1.0
    assert f["mpu"]["per_user"]["u0"] == 1.0 and f["mpu"]["per_user"]["new_u3"] == 0.5
    assert f["mpu"]["worst_decile_acc"] == pytest.approx(0.5)
    assert f["mpu"]["per_user_gain"]["u0"] == 1.0 and f["mpu"]["per_user_gain"]["u5"] == 0.0
    gain = f["mpu"]["gain_over_reference"]  # paired on the cells both have (seen users)
    assert gain["value"] == pytest.approx(2 / 12) and gain["ci"][0] <= 2 / 12 <= gain["ci"][1]


def test_verdict_falls_back_and_is_deterministic() -> None:
    rng = np.random.default_rng(6)
    g = "rubrics|smollm2|seed0"
    cells = _rows(g, "global_bt", "best_of_n:rouge1", 0.3, rng) + _rows(g, "mpu", "best_of_n:rouge1", 0.35, rng)
    res = _run(cells, verdict_metric="genarm:rubric_satisfaction")
    v = res["verdict"]
    assert v["metric"] == "best_of_n:rouge1"
    assert "genarm:rubric_satisfaction has no rows" in v["text"]
    assert _run(cells, verdict_metric="genarm:rubric_satisfaction") == res
    assert analyze(cells, n_boot=200, seed=1)["table"] != res["table"]  # the seed drives the CIs


def test_few_users_are_noted() -> None:
    rng = np.random.default_rng(7)
    cells = [c for c in _rows("tiny", "global_bt", ARGS, 0.5, rng) if c["user"] in ("u0", "u1", "u2")]
    res = _run(cells)
    assert any("3 users" in n and "unreliable" in n for n in res["notes"])
    assert not any(math.isnan(x) for x in res["table"]["global_bt"][ARGS]["ci"])


def test_every_ci_says_what_it_resampled() -> None:
    rng = np.random.default_rng(8)
    g = "rubrics|smollm2|seed0"
    cells = _rows(g, "global_bt", ARGS, 0.5, rng) + _rows(g, "mpu", ARGS, 0.7, rng)
    cells += _rows(g, "global_bt", "rm_acc_seen", 0.6, rng) + _rows(g, "mpu", "rm_acc_seen", 0.7, rng)
    res = _run(cells)
    e = res["table"]["mpu"][ARGS]
    assert e["resampled"] == "users×prompts" and e["ci_note"] is None  # 12 users: the two-way bootstrap
    assert res["ranking"][ARGS]["vs_runner_up"]["resampled"] == "users×prompts"
    assert all(p["resampled"] == "users×prompts" for p in res["paired"][ARGS])
    assert res["verdict"]["resampled"] == "users×prompts" and res["verdict"]["ci_note"] is None
    assert res["selection"]["pairs"][0]["kendall_tau_b"]["resampled"] == "users×prompts"
    assert res["fairness"]["mpu"]["gain_over_reference"]["resampled"] == "users×prompts"
    assert not any("instead" in n for n in res["notes"])


def test_two_users_fall_back_to_prompts_with_a_note() -> None:
    # downstream rows of 2 users (max_gen_users=2) next to upstream rows of 12: only the former fall back
    rng = np.random.default_rng(9)
    g = "rubrics|smollm2|seed0"
    two = {"u0", "u1"}
    cells = [c for c in _rows(g, "global_bt", ARGS, 0.5, rng, noise=0.3) if c["user"] in two]
    cells += [c for c in _rows(g, "mpu", ARGS, 0.55, rng, noise=0.3) if c["user"] in two]
    cells += _rows(g, "global_bt", "rm_acc_seen", 0.6, rng) + _rows(g, "mpu", "rm_acc_seen", 0.7, rng)
    res = _run(cells)
    down = res["table"]["mpu"][ARGS]
    assert down["users"] == 2 and down["resampled"] == "prompts"
    assert "only 2 users (< 5)" in down["ci_note"] and "8 prompts only" in down["ci_note"]
    assert down["ci"][0] < down["value"] < down["ci"][1]
    up = res["table"]["mpu"]["rm_acc_seen"]
    assert up["resampled"] == "users×prompts" and up["ci_note"] is None
    gap = res["ranking"][ARGS]["vs_runner_up"]
    assert gap["resampled"] == "prompts" and "only 2 users" in gap["ci_note"]
    v = res["verdict"]
    assert v["metric"] == ARGS and v["resampled"] == "prompts" and "only 2 users" in v["ci_note"]
    assert "CI: only 2 users" in v["text"]
    assert any("only 2 users" in n and "resample prompts or (user, prompt) pairs instead" in n for n in res["notes"])


def test_two_users_two_prompts_resample_pairs_and_one_pair_has_no_ci() -> None:
    g = "rubrics|smollm2|seed0"
    cells = [
        {"group": g, "method": "mpu", "metric": ARGS, "user": u, "prompt": p, "value": v}
        for (u, p), v in zip(
            [("u0", "p0"), ("u0", "p1"), ("u1", "p0"), ("u1", "p1")], [0.2, 0.9, 0.4, 0.7], strict=True
        )
    ]
    cells.append({"group": g, "method": "pal_b", "metric": ARGS, "user": "u0", "prompt": "p0", "value": 0.3})
    res = _run(cells)
    pairs = res["table"]["mpu"][ARGS]
    assert pairs["resampled"] == "pairs" and "4 (user, prompt) pairs only" in pairs["ci_note"]
    assert pairs["ci"] is not None and pairs["ci"][0] < pairs["ci"][1]
    single = res["table"]["pal_b"][ARGS]
    assert single["value"] == pytest.approx(0.3)
    assert single["ci"] is None and single["resampled"] is None and "no CI" in single["ci_note"]
    # the paired difference shares one cell: no CI either, so the two cannot be separated
    gap = res["ranking"][ARGS]["vs_runner_up"]
    assert gap["ci"] is None and "no CI" in gap["ci_note"]
    assert res["ranking"][ARGS]["best"] is None
