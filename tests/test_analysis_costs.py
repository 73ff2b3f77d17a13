"""The verdict's trade-offs charged to their cause: every difference to zero-shot decoding on another quality of the
pick's decoder split into sampling (random pick − zero-shot) and re-ranking (pick − random pick); the sentence names
the reward model's part only, and the report shows both."""

from __future__ import annotations

import numpy as np
import pytest

from perbench.metrics.analysis import analyze
from tests.test_null_ceiling import METRIC, pool_cells

ROUGE = "best_of_n:rougeL"
WORDS = "best_of_n:words"


def _cells(rerank_cost: float, longer: float | None = None) -> list[dict[str, object]]:
    """pref and a weaker global_bt on a pool whose samples all lose ROUGE-L to greedy decoding (0.30 → 0.20):
    sampling costs 10 points whichever RM re-ranks; pref's pick costs ``rerank_cost`` more on top. With ``longer``,
    lengths too: greedy answers have 100 words, the pool's samples 120 on average (sampling lengthens by 20 whichever
    RM re-ranks), pref's picks ``longer`` words more."""
    rng = np.random.default_rng(11)
    rouge = {"pref": 0.20 - rerank_cost, "global_bt": 0.20, "random_pick": 0.20, "zero_shot": 0.30}
    extra = {"zero_shot:rubric_satisfaction": {"zero_shot": 0.30}, ROUGE: rouge}
    if longer is not None:
        extra[WORDS] = {"pref": 120.0 + longer, "global_bt": 120.0, "random_pick": 120.0, "zero_shot": 100.0}
    cells = pool_cells({"pref": 3.0, "global_bt": 0.5}, rng, users=16, prompts=12, extra=extra)
    for c in cells:  # zero-shot's rows under its own decoder's name
        if c["method"] == "zero_shot":
            c["metric"] = "zero_shot:" + str(c["metric"]).partition(":")[2]
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


def test_the_length_change_is_split_into_sampling_and_re_ranking_in_words() -> None:
    """pref's picks are 8 words longer than a random pick from the same pool, which is 20 words longer than greedy
    decoding: the split says so in words (not points), the sentence says what re-ranking does to length beside
    sampling's part, and length is never counted among the qualities traded away or gained."""
    from perbench.report.costs import trade_off_section

    a = analyze(_cells(0.0, longer=8.0), verdict_metric=METRIC, n_boot=200)
    v = a["verdict"]
    assert v["pick"] == "pref", v["text"]
    row = {t["metric"]: t for t in v["trade_offs"]}[WORDS]
    assert row["sampling"]["value"] == pytest.approx(20.0, abs=0.05) and row["sampling"]["ci"][0] > 19.5
    assert row["reranking"]["value"] == pytest.approx(8.0, abs=0.05) and row["reranking"]["ci"][0] > 7.5
    assert row["delta"] == pytest.approx(28.0, abs=0.05)
    assert row["delta"] == pytest.approx(row["sampling"]["value"] + row["reranking"]["value"])
    text = next(p["text"] for p in v["parts"] if p["kind"] == "trade_offs")
    r, s = row["reranking"], row["sampling"]
    assert (
        f"Length: re-ranking by pref lengthens answers by {r['value']:+.1f} words "
        f"(95% CI [{r['ci'][0]:.1f}, {r['ci'][1]:.1f}]) against a random pick from the same pool" in text
    )
    assert f"whichever reward model re-ranks, lengthens answers by {s['value']:+.1f} words" in text
    assert "changes no other quality reliably: ROUGE-L " in text and "words" not in text.partition("Length:")[0]
    html = trade_off_section(a)
    assert "(1 quality and the length)" in html
    tr = next(t for t in html.split("<tr>") if "Best-of-N · length (words)" in t).partition("</tr>")[0]
    assert "%" not in tr and f"{r['value']:+.3g}" in tr and f"{s['value']:+.3g}" in tr


def test_a_pick_as_long_as_the_pool_is_not_said_to_lengthen_answers() -> None:
    v = analyze(_cells(0.0, longer=0.0), verdict_metric=METRIC, n_boot=200)["verdict"]
    row = {t["metric"]: t for t in v["trade_offs"]}[WORDS]
    assert row["reranking"]["ci"][0] < 0 < row["reranking"]["ci"][1]
    assert "Length: re-ranking by pref does not reliably change answer length (" in v["text"]


def test_without_a_random_pick_the_length_difference_is_said_whole() -> None:
    cells = [c for c in _cells(0.0, longer=8.0) if not (c["method"] == "random_pick" and c["metric"] == WORDS)]
    v = analyze(cells, verdict_metric=METRIC, n_boot=100)["verdict"]
    row = {t["metric"]: t for t in v["trade_offs"]}[WORDS]
    assert row["sampling"] is None and row["reranking"] is None and row["delta"] == pytest.approx(28.0, abs=0.05)
    assert "Length: against zero-shot decoding, pref lengthens answers by +28.0 words" in v["text"]


def test_length_is_never_ranked_correlated_chosen_or_diagnosed() -> None:
    """Words cells (under the decoder that sorts first, with the longest answers from the worst system) enter
    nothing but the verdict's trade-offs: not the metric lists, the method table, a ranking, a margin, the headroom,
    the correlations with upstream accuracy, the predictors' comparison, the power plans or the verdict metric."""
    import json

    from perbench.config import RunConfig
    from perbench.errors import ConfigError
    from perbench.metrics.analysis import plan_sizes

    cells = _cells(0.0, longer=8.0)
    for m, words in (("pref", 90.0), ("global_bt", 400.0)):  # args:words would be the first downstream metric
        cells += [{**c, "metric": "args:words", "value": words} for c in cells if c["method"] == m][:60]
    for m, acc in (("pref", 0.7), ("global_bt", 0.6)):  # upstream accuracy: something to correlate with
        cells += [{**c, "metric": "rm_acc_all", "value": float(acc > 0.65)} for c in cells if c["method"] == m][:60]
    a = analyze(cells, n_boot=100)
    assert a["verdict"]["metric"] == METRIC  # not args:words, though it sorts first
    assert a["metrics"]["descriptive"] == ["args:words", WORDS, "zero_shot:words"]
    assert {t["metric"] for t in a["verdict"]["trade_offs"]} >= {WORDS}
    rest = {k: v for k, v in a.items() if k not in ("metrics", "verdict")}
    rest["verdict"] = {k: v for k, v in a["verdict"].items() if k not in ("trade_offs", "text", "parts")}
    assert ":words" not in json.dumps(rest)
    with pytest.raises(ValueError, match="describes the text"):
        analyze(cells, downstream=[WORDS], n_boot=10)
    with pytest.raises(ValueError, match="length, no quality"):
        plan_sizes(cells, metric=WORDS)
    v = analyze(cells, verdict_metric=WORDS, n_boot=50)["verdict"]
    assert v["metric"] != WORDS and "describes the answers (their length)" in v["metric_note"]
    with pytest.raises(ConfigError, match="verdict_metric"):
        RunConfig.from_dict({"verdict_metric": WORDS})


def test_words_cells_move_no_other_number() -> None:
    """The analysis of a run's cells with its words cells is the analysis without them, but for the words split in the
    trade-offs and the list of descriptive metrics: every value, CI, ranking and verdict stays as it was."""
    cells = _cells(0.08, longer=8.0)
    a = analyze(cells, verdict_metric=METRIC, n_boot=100)
    b = analyze([c for c in cells if not str(c["metric"]).endswith(":words")], verdict_metric=METRIC, n_boot=100)
    assert a["metrics"].pop("descriptive") == [WORDS, "zero_shot:words"] and b["metrics"].pop("descriptive") == []
    trade = a["verdict"].pop("trade_offs")
    assert [t for t in trade if t["metric"] != WORDS] == b["verdict"].pop("trade_offs")
    said = next(p for p in a["verdict"]["parts"] if p["kind"] == "trade_offs")
    head, length, tail = said["text"].partition(" Length: ")
    assert length and tail.startswith("re-ranking by pref lengthens answers by +8.0 words")
    said["text"] = head
    a["verdict"]["text"] = a["verdict"]["text"].replace(length + tail, "")
    assert a == b
