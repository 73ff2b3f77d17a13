"""The verdict's trade-offs charged to their cause: every difference to zero-shot decoding on another quality of the
pick's decoder split into sampling (random pick − zero-shot) and re-ranking (pick − random pick); the sentence names
the reward model's part only, and the report shows both."""

from __future__ import annotations

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from tests.test_null_ceiling import METRIC, pool_cells

ROUGE = "best_of_n:rougeL"


def _cells(rerank_cost: float) -> list[dict[str, object]]:
    """pref and a weaker global_bt on a pool whose samples all lose ROUGE-L to greedy decoding (0.30 → 0.20):
    sampling costs 10 points whichever RM re-ranks; pref's pick costs ``rerank_cost`` more on top."""
    rng = np.random.default_rng(11)
    rouge = {"pref": 0.20 - rerank_cost, "global_bt": 0.20, "random_pick": 0.20, "zero_shot": 0.30}
    cells = pool_cells(
        {"pref": 3.0, "global_bt": 0.5}, rng, users=16, prompts=12,
        extra={"zero_shot:rubric_satisfaction": {"zero_shot": 0.30}, ROUGE: rouge},
    )  # fmt: skip
    for c in cells:
        if c["method"] == "zero_shot":
            c["metric"] = "zero_shot:rubric_satisfaction" if "rubric" in str(c["metric"]) else "zero_shot:rougeL"
    return cells


def test_a_cost_that_sampling_causes_is_not_charged_to_the_reward_model() -> None:
    v = analyze(_cells(0.0), verdict_metric=METRIC, n_boot=200)["verdict"]
    assert v["pick"] == "pref", v["text"]
    row = {t["metric"]: t for t in v["trade_offs"]}[ROUGE]
    assert row["ci"][1] < 0  # pref's pick is below zero-shot on ROUGE-L ...
    assert row["sampling"]["ci"][1] < 0  # ... because the pool is
    assert row["reranking"]["ci"][0] < 0 < row["reranking"]["ci"][1]  # re-ranking costs nothing reliably
    assert row["delta"] == pytest.approx(row["sampling"]["value"] + row["reranking"]["value"])
    text = next(p["text"] for p in v["parts"] if p["kind"] == "trade_offs")
    assert text.startswith("Re-ranking by pref (its pick − a random pick from the same pool, marginal CIs)")
    assert "changes no other quality reliably: ROUGE-L" in text and "trades away" not in text
    assert "comes from sampling from the policy" in text


def test_a_cost_that_re_ranking_causes_is_charged_with_its_own_interval() -> None:
    v = analyze(_cells(0.08), verdict_metric=METRIC, n_boot=200)["verdict"]
    row = {t["metric"]: t for t in v["trade_offs"]}[ROUGE]
    assert row["reranking"]["value"] == pytest.approx(-0.08, abs=0.01) and row["reranking"]["ci"][1] < 0
    text = next(p["text"] for p in v["parts"] if p["kind"] == "trade_offs")
    r = row["reranking"]
    # (the noisy ROUGE-L rows of this fixture go below 0: not a proportion, so 3 decimals)
    assert f"trades away ROUGE-L {r['value']:+.3f} (95% CI [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}])" in text
    assert f"{row['delta']:+.3f}" not in text  # the total (−0.18) is not what the sentence charges


def test_the_report_shows_both_parts() -> None:
    from perbench.report.costs import trade_off_section

    a = analyze(_cells(0.0), verdict_metric=METRIC, n_boot=100)
    html = trade_off_section(a)
    assert "sampling (random pick − zero-shot)" in html and "re-ranking by pref (pick − random pick)" in html
    assert html.count("<tr>") >= 2
    assert trade_off_section({"verdict": {"trade_offs": []}}) == ""
