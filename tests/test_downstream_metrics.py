"""Downstream metrics: RGD-induced policy accuracy, win rate, ROUGE, BERTScore, the rubric judge."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from perbench.data.records import User
from perbench.decoding.greedy import ZeroShot
from perbench.decoding.token_ranker import TokenRanker
from perbench.metrics.judge import RubricJudge, judge_prompt, parse_score
from perbench.metrics.policy_accuracy import (
    RGDInputs,
    rgd_policy_accuracy,
    rgd_policy_inputs,
    rgd_policy_logprob,
)
from perbench.metrics.text import bertscore, rouge
from perbench.metrics.win_rate import win_outcomes, win_rate
from perbench.models.chat import encode_pair
from perbench.models.generate import GenRequest
from perbench.rewards.base import ScoreItem
from perbench.rewards.features import FeatureExtractor
from tests.conftest import random_linear_rm
from tests.test_end_to_end import tiny_pool  # noqa: F401 - fixture


@pytest.fixture(autouse=True, scope="module")
def _one_thread():  # type: ignore[no-untyped-def]
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


ITEMS = [
    ScoreItem("u", "How do I boil an egg?", "Put it in boiling water for seven minutes."),
    ScoreItem("v", "Name three colours.", "Red, green and blue."),
    ScoreItem("u", "hi", ""),
]


# ---------------------------------------------------------------------------------------------- RGD policy
def _brute_force(policy, rm_lm, rm, item, k):  # type: ignore[no-untyped-def]
    """No cache, no tree: one full RM forward per (position, candidate)."""
    ids, T, _ = encode_pair(policy.tokenizer, item.prompt, item.response, 1024)
    P = len(ids) - T
    top, rew, hit = [], [], []
    with torch.no_grad():
        for t in range(T):
            h = policy.model.get_decoder()(input_ids=torch.tensor([ids[: P + t]])).last_hidden_state[0, -1]
            lp = torch.log_softmax(policy.model.get_output_embeddings()(h), -1)
            tl, c = lp.topk(k)
            feats = torch.stack(
                [
                    rm_lm.model.get_decoder()(input_ids=torch.tensor([[*ids[: P + t], int(v)]])).last_hidden_state[
                        0, -1
                    ]
                    for v in c
                ]
            )
            top.append(tl.numpy())
            rew.append(rm.reward_from_features([item.user_id] * k, feats).numpy())
            hit.append(next((j for j in range(k) if int(c[j]) == ids[P + t]), -1))
    return np.array(top), np.array(rew), np.array(hit)


def test_rgd_inputs_match_brute_force(tiny_lm, tiny_lm_b, store):  # type: ignore[no-untyped-def]
    for backbone in (tiny_lm, tiny_lm_b):  # shared backbone (policy's cache reused) and a separate RM
        rm = random_linear_rm(FeatureExtractor(backbone, store), scale=3.0)
        got = rgd_policy_inputs(tiny_lm, rm, ITEMS[:2], k=4, chunk_tokens=12)  # several tree chunks
        for it, g in zip(ITEMS[:2], got, strict=True):
            top, rew, hit = _brute_force(tiny_lm, backbone, rm, it, 4)
            assert np.allclose(g.top_lp, top, atol=1e-4)
            assert np.allclose(g.rewards, rew, atol=1e-4)
            assert (g.hit == hit).all()
    empty = rgd_policy_inputs(tiny_lm, rm, ITEMS[2:], k=4)[0]
    assert empty.top_lp.shape == (0, 4) and rgd_policy_logprob(empty, 1.0) == (0.0, 0)


def test_rgd_logprob_and_misses() -> None:
    top = np.log(np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]))
    rew = np.array([[0.0, 0.0, 0.0], [0.0, math.log(2.0), 0.0]])
    # w = 1: step 0 keeps (0.5, 0.3, 0.2); step 1 becomes (0.6, 0.6, 0.1) / 1.3
    lp, miss = rgd_policy_logprob(RGDInputs(top, rew, np.array([1, 1])), 1.0)
    assert miss == 0 and lp == pytest.approx(math.log(0.3) + math.log(0.6 / 1.3))
    assert rgd_policy_logprob(RGDInputs(top, rew, np.array([0, -1])), 1.0) == (float("-inf"), 1)
    good = RGDInputs(top, rew, np.array([0, 0]))
    missed = RGDInputs(top, rew, np.array([-1, 0]))
    res = rgd_policy_accuracy([good, missed, missed], [missed, good, missed], ["a", "b", "c"], 1.0, n_boot=0)
    assert res["sum"]["accuracy"] == pytest.approx(1 / 3)  # win, loss, tie (both −inf: wrong under strict)
    assert res["sum"]["ties"] == 1
    assert res["miss_rate"] == pytest.approx(4 / 6) and res["pairs_both_miss"] == 1
    assert res["token_miss_rate"] == pytest.approx(4 / 12)


def test_rgd_inputs_token_level(tiny_lm, store):  # type: ignore[no-untyped-def]
    rm = TokenRanker().init_random(FeatureExtractor(tiny_lm, store), users=["u", "v"], seed=1)
    got = rgd_policy_inputs(tiny_lm, rm, ITEMS[:1], k=3)[0]
    ids, T, _ = encode_pair(tiny_lm.tokenizer, ITEMS[0].prompt, ITEMS[0].response, 1024)
    with torch.no_grad():
        h = tiny_lm.model.get_decoder()(input_ids=torch.tensor([ids])).last_hidden_state[0, len(ids) - T - 1]
        c = torch.log_softmax(tiny_lm.model.get_output_embeddings()(h), -1).topk(3).indices
    assert np.allclose(got.rewards[0], rm.candidate_rewards(["u"], h[None], c[None])[0].numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------------- win rate
def test_win_rate_of_an_rm_against_itself_is_one_half(tiny_lm, store):  # type: ignore[no-untyped-def]
    rm = random_linear_rm(FeatureExtractor(tiny_lm, store), scale=2.0)
    targets = [(it.prompt, it.user_id) for it in ITEMS[:2]]
    reqs = [GenRequest(p, u, 0) for p, u in targets]
    texts = [g.text or "(empty)" for g in ZeroShot().generate(tiny_lm, reqs, None, max_new_tokens=4)]
    res = win_rate(rm, targets, texts, texts)
    assert res["win_rate"] == 0.5 and res["ties"] == 2
    assert win_outcomes(np.array([2.0, 1.0, 1.0, np.nan]), np.array([1.0, 2.0, 1.0, 0.0])).tolist()[:3] == [
        1.0,
        0.0,
        0.5,
    ]
    other = win_rate(rm, targets, ["Put it in boiling water.", "Red."], ["A B C", "Blue."])
    assert other["wins"] + other["ties"] + other["losses"] == 2


# ---------------------------------------------------------------------------------------------- ROUGE
def test_rouge_hand_checked() -> None:
    # "the cat sat on the mat" vs "the cat lay on the mat": unigrams the×2, cat, on, mat match: 5/6 each way,
    # F1 = 5/6; LCS = "the cat on the mat" = 5 tokens -> ROUGE-L F1 = 5/6 as well.
    # "running dogs" vs reference "the dog runs": stemmed run, dog vs the, dog, run -> P = 2/2, R = 2/3,
    # F1 = 0.8; LCS = 1 (order differs) -> P = 1/2, R = 1/3, F1 = 2·(1/6)/(5/6) = 0.4.
    # Disjoint strings score 0.
    r = rouge(
        ["the cat sat on the mat", "running dogs", "apple"],
        ["the cat lay on the mat", "the dog runs", "pear"],
    )
    assert r["rouge1"] == pytest.approx([5 / 6, 0.8, 0.0])
    assert r["rougeL"] == pytest.approx([5 / 6, 0.4, 0.0])
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    ref = scorer.score("the dog runs", "running dogs")
    assert r["rouge1"][1] == pytest.approx(ref["rouge1"].fmeasure)


# ---------------------------------------------------------------------------------------------- BERTScore
def test_bertscore_identity_and_symmetry() -> None:
    a = ["The weather is lovely today.", "A short title about graph neural networks"]
    b = ["It is raining heavily this afternoon.", "Graph networks for molecule property prediction"]
    same = bertscore(a, a)
    assert np.allclose(same, 1.0, atol=1e-6)
    assert np.allclose(bertscore(a, b), bertscore(b, a), atol=1e-6)  # F1 is symmetric in (cand, ref)
    assert (bertscore(a, b) < 1.0 - 1e-3).all()


# ---------------------------------------------------------------------------------------------- judge
def test_judge_parsing_and_failure_counting(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    assert parse_score("Score: 2") == 2 and parse_score("**Score:** 1") == 1
    assert parse_score("score = [0]") == 0
    assert parse_score("Score: 2.") == 2 and parse_score(" 1 ") == 1
    assert parse_score("Score: 5") is None and parse_score("Score: 1.5") is None
    assert parse_score("great!") is None
    aspects = [
        {"aspect": "mentions budget", "evidence": "", "reason": "user is frugal"},
        {"aspect": "uses metric units", "evidence": "posts in km", "reason": ""},
    ]
    users = [
        User("a", meta={"question": "Q1", "answer_key": {"rubric_aspects": aspects}}),
        User("b", meta={"question": "Q2", "answer_key": {"rubric_aspects": aspects[:1]}}),
        User("c"),
    ]  # no rubric: NaN, no judge call
    answers = iter(["Score: 2", "I think it is fine", "**Score:** 1"])
    seen: list[str] = []

    def fake(prompts):  # type: ignore[no-untyped-def]
        seen.extend(prompts)
        return [next(answers) for _ in prompts]

    j = RubricJudge(fake)
    items = j.score(["resp A", "resp B", "resp C"], users)
    assert [it.scores for it in items] == [[2, None], [1], []]
    assert items[0].score == pytest.approx(0.5) and items[0].score_parsed == pytest.approx(1.0)
    assert math.isnan(items[2].score)
    s = RubricJudge.summary(items)
    assert s["parse_failures"] == 1 and s["aspects"] == 3 and s["parse_failure_rate"] == pytest.approx(1 / 3)
    assert s["score"] == pytest.approx((0.5 + 0.5) / 2) and j.calls == 3 and j.failures == 1
    assert seen[0] == judge_prompt("Q1", "resp A", aspects[0]) and "user is frugal" in seen[0]
    # a real (tiny random) judge LM: whatever it says is parsed or counted, never silently dropped
    lm_items = RubricJudge(tiny_lm, max_new_tokens=3).score(["resp"], users[:1])
    assert len(lm_items[0].scores) == 2


# ---------------------------------------------------------------------------------------------- runner
def test_run_with_every_decoder(tiny_pool, tmp_path, monkeypatch):  # type: ignore[no-untyped-def] # noqa: F811
    """One run: zero-shot, ARGS, GenARM, Best-of-N and ICL-RAG side by side, with deltas, win rates and
    Best-of-N curves in results.json and the report; a rerun recomputes nothing."""
    from perbench.api import run
    from tests.test_end_to_end import tiny_config

    monkeypatch.setattr("perbench.device.set_threads", lambda: None)  # keep this module's single thread

    cfg = tiny_config(tiny_pool, tmp_path).override(
        methods=[{"name": "global_bt"}, {"name": "genarm", "steps": 2, "batch_size": 2}],
        baselines=[],
        decoders=[
            "zero_shot",
            {"name": "args", "k": 4, "w": 1.0},
            {"name": "genarm"},
            {"name": "best_of_n", "n": 4},
            {"name": "icl_rag", "k": 2},
        ],
        max_new_tokens=6,
        max_test_prompts=2,
        max_gen_users=2,
        max_pool_prompts=2,  # Best-of-N: every user on 2 test prompts (GenARM scores each user's pool anew)
        pa_rgd=True,
        shot_curve=[1],
    )
    res = run(cfg).results
    down = res["downstream"]
    g = "genarm(batch_size=2,steps=2)"
    assert set(down) == {
        "zero_shot",
        "args(k=4,w=1.0)[global_bt]",
        f"genarm[{g}]",
        "best_of_n(n=4)[global_bt]",
        f"best_of_n(n=4)[{g}]",
        "icl_rag(k=2)",
    }
    skipped = {(s["decoder"], s["method"]) for s in res["skipped_combinations"]}
    assert skipped == {("args(k=4,w=1.0)", g), ("genarm", "global_bt")}
    for label, d in down.items():
        assert 0.0 <= d["rubric_satisfaction"]["mean"] <= 1.0
        if label != "zero_shot":
            assert "rubric_satisfaction" in d["vs"]["zero_shot"]
        if not label.startswith(("zero_shot", "icl_rag")):
            assert 0.0 <= d["rm_win"]["mean"] <= 1.0 and d["rm_win"]["n"] == d["n"]
            assert "rubric_satisfaction" in d["vs"]["icl_rag(k=2)"]
    # ICL-RAG's effective context: how many pairs and profile items its prompts held, per decoder and per row
    ctx = down["icl_rag(k=2)"]["effective_context"]
    assert 1 <= ctx["pairs"]["max"] <= 2 and ctx["profile_items"]["max"] == 0 and ctx["shots"] == cfg.shots
    rows = [json.loads(x) for x in (cfg.run_dir() / "samples.jsonl").read_text().splitlines()]
    icl_rows = [r for r in rows if r.get("decoder") == "icl_rag(k=2)"]
    assert icl_rows and all(0 <= r["context_pairs"] <= 2 and r["context_profile_items"] == 0 for r in icl_rows)
    bons = ("best_of_n(n=4)[global_bt]", f"best_of_n(n=4)[{g}]")
    for label in bons:
        c = down[label]["bon_curve"]["rubric_satisfaction"]
        assert c["n"] == [1, 2, 4]
        assert all(o >= q - 1e-12 for o, q in zip(c["oracle"], c["quality"], strict=True))
        # every user on each of the 2 pool prompts, from one pool per prompt
        assert down[label]["n"] == 2 * 32 and down[label]["pool"] == {**down[label]["pool"], "prompts": 2, "pool": 4}
    # both RMs re-ranked the same pool: identical oracle curves, and N = 1 is the same sample for both
    a, b = (down[x]["bon_curve"]["rubric_satisfaction"] for x in bons)
    assert a["oracle"] == b["oracle"] and a["quality"][0] == b["quality"][0]
    pa = res["upstream"]["global_bt"]["policy_accuracy"]["seen"]
    assert pa["headline"] == "tilt" and pa["w0"] == pa["policy_sum"]
    assert 0.0 <= pa["miss_rate"] <= 1.0 and pa["k"] == 4 and "rgd_mean" in pa  # w, k of the deployed ARGS
    # one weight per RM: each guided row is reported next to the policy accuracy at its decoder's own weight,
    # ARGS's w on r; GenARM's α on log π_r, which is α/β on GenARM's reward r = β·log π_r (β = 0.1 here)
    assert pa["w"] == 1.0 and "args(k=4,w=1.0)" in pa["w_source"]
    gen_pa = res["upstream"][g]["policy_accuracy"]
    assert gen_pa["seen"]["w"] == pytest.approx(1.0 / 0.1) and "genarm" in gen_pa["seen"]["w_source"]
    paired = {label: d.get("policy_accuracy") for label, d in down.items()}
    assert paired["args(k=4,w=1.0)[global_bt]"]["w"] == 1.0
    assert paired[f"genarm[{g}]"]["w"] == pytest.approx(10.0)
    assert paired["args(k=4,w=1.0)[global_bt]"]["seen"]["tilt"] == pa["tilt"]
    assert paired[f"genarm[{g}]"]["unseen"]["tilt"] == gen_pa["unseen"]["tilt"]
    assert all(paired[x] is None for x in ("zero_shot", "icl_rag(k=2)", *bons))  # no weight on a reward
    again = run(cfg)
    html = (again.run_dir / "report.html").read_text()
    assert "Best-of-N" in html and "difference to zero-shot" in html and "RGD-induced" in html
    assert again.results["work"]["computed"] == {} and again.results["downstream"] == down


def test_runner_quality_uses_the_judge_for_answer_key_rubrics(tiny_lm, tmp_path):  # type: ignore[no-untyped-def]
    from perbench.config import RunConfig
    from perbench.data.records import Benchmark, PreferencePair
    from perbench.runner.scoring import Scoring
    from perbench.runner.state import RunState
    from perbench.runner.stores import Stores

    aspects = [{"aspect": "mentions cost"}, {"aspect": "gives an example"}]
    users = {
        "a": User("a", seen=False, meta={"question": "Q?", "answer_key": {"rubric_aspects": aspects}}),
        "b": User("b", seen=False),
    }
    pairs = [PreferencePair(f"p{u}", u, "Q?", "yes", "no") for u in users]
    cfg = RunConfig.from_dict({"out_dir": str(tmp_path), "policy": "tiny-random", "rm_backbone": "tiny-random"})
    state = RunState(cfg, tmp_path, Benchmark("t", pairs, users), Stores.in_memory())
    calls: list[str] = []

    def fake(prompts):  # type: ignore[no-untyped-def]
        calls.extend(prompts)
        return ["Score: 2" if "Requirement: mentions cost" in p else "no idea" for p in prompts]

    state.judge, state.judge_lm = RubricJudge(fake), tiny_lm
    scoring = Scoring(state)
    q = scoring.quality(["it costs 5 euros", "it costs 5 euros"], [("Q?", "a"), ("Q?", "b")])
    assert q[0] == {"judge_score": 0.5, "judge_failures": 1.0, "judge_aspects": 2.0} and q[1] == {}
    assert len(calls) == 2
    scoring.quality(["it costs 5 euros"], [("Q?", "a")])  # cached by (judge, user, prompt, text)
    assert len(calls) == 2 and state.units.reused["judge"] == 1


def test_bertscore_empty_text_scores_zero() -> None:
    f1 = bertscore(["", "a cat sat on the mat", "  "], ["a cat", "a cat sat on the mat", "x"])
    assert f1[0] == 0.0 and f1[2] == 0.0 and f1[1] > 0.99
