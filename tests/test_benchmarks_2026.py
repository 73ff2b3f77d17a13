"""The 2026 comparison benchmarks (RewardBench 2, SynthesizeMe's PersonalRewardBench, RMGAP, PersonalLLM, LaMP-4,
LongLaMP), listwise scoring (best-of-k, RewardBench 2's Ties rule) and paraphrase consistency."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench import registry
from perbench.data.records import PARAPHRASED, Benchmark, PreferencePair
from perbench.data.rows import DataError
from perbench.metrics.listwise import best_of_k_lists, consistency_values, paraphrase_units, ties_prompt_scores
from perbench.metrics.rm_accuracy import pair_outcomes
from tests.fixtures_listwise import (
    longlamp_rows,
    personalllm_rows,
    rb2_rows,
    rmgap_rows,
    synthesizeme_rows,
    write_lamp4,
)
from tests.fixtures_upstream import write_jsonl, write_parquet

NEW = ("synthesizeme", "rewardbench2", "rmgap", "personalllm", "lamp_gen")


def scored(pairs: list[PreferencePair], score: Callable[[PreferencePair, str], float]) -> tuple[Any, Any]:
    return (
        np.array([score(p, p.chosen) for p in pairs], np.float64),
        np.array([score(p, p.rejected) for p in pairs], np.float64),
    )


def fixture_source(name: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    if name == "lamp_gen":
        return write_lamp4(tmp_path / "LaMP_4"), {}
    rows = {"synthesizeme": synthesizeme_rows, "rewardbench2": rb2_rows, "rmgap": rmgap_rows,
            "personalllm": personalllm_rows}[name]()  # fmt: skip
    return write_jsonl(tmp_path / f"{name}.jsonl", rows), {}


# ----------------------------------------------------------------------------------------------- loading
def test_counts_match_the_fixtures_by_construction(tmp_path: Path) -> None:
    rb2 = registry.benchmarks.get("rewardbench2")(write_jsonl(tmp_path / "rb2.jsonl", rb2_rows()))
    # 3 rows × 1 chosen × 3 rejected, Ties: 2 ref rows × 1 × 2 and 2 tied rows × 3 × 2
    assert len(rb2.pairs) == 9 + 4 + 12 and set(rb2.users) == {"anyone"} and rb2.meta["evaluation_only"]
    assert len({p.meta["list_id"] for p in rb2.pairs}) == 7
    sm = registry.benchmarks.get("synthesizeme")(write_jsonl(tmp_path / "sm.jsonl", synthesizeme_rows()))
    assert len(sm.train_pairs()) == 9 and len(sm.test_pairs()) == 6 and sm.skipped.counts["val_row_not_used"] == 3
    assert registry.benchmarks.get("synthesizeme")(tmp_path / "sm.jsonl", val="train").train_pairs().__len__() == 12
    gap = registry.benchmarks.get("rmgap")(write_jsonl(tmp_path / "gap.jsonl", rmgap_rows()))
    # 3 instances × 4 prompt groups × 3 paraphrases × 3 losers; one unit per (group, winner, loser)
    assert len(gap.pairs) == 3 * 4 * 3 * 3 and len(paraphrase_units(gap.pairs)) == 3 * 4 * 3
    pl = registry.benchmarks.get("personalllm")(write_jsonl(tmp_path / "pl.jsonl", personalllm_rows()), n_users=5)
    assert len(pl.pairs) == 4 * 5 * 3 and len(pl.train_pairs()) == 3 * 5 * 3
    assert all(u.answer_key and set(u.answer_key["weights"]) == {"gemma_2b", "llama3_sfairx", "oasst_deberta_v3"}
               for u in pl.users.values())  # fmt: skip
    lamp = registry.benchmarks.get("lamp_gen")(write_lamp4(tmp_path / "LaMP_4"))
    # 5 questions, and each user's 2 profile items as train pairs (LaMP's protocol gives the profile)
    assert len(lamp.pairs) == 5 + 5 * 2 and len(lamp.references) == 5 and lamp.pairs[0].prompt.startswith("Article 100")
    train_golds = {p.chosen for p in lamp.pairs if p.split == "train"}
    assert all(p.rejected in train_golds and p.rejected != p.chosen for p in lamp.pairs)
    long = registry.benchmarks.get("lamp_gen")(write_jsonl(tmp_path / "ll.jsonl", longlamp_rows()), task="LongLaMP")
    assert len(long.pairs) == 6 and set(long.users) == {"R0", "R1"} and all(u.profile for u in long.users.values())


def test_parquet_and_saved_dataset_load_alike(tmp_path: Path) -> None:
    from tests.fixtures_upstream import save_to_disk

    load = registry.benchmarks.get("synthesizeme")
    a = load(write_jsonl(tmp_path / "a.jsonl", synthesizeme_rows()))
    b = load(write_parquet(tmp_path / "a.parquet", synthesizeme_rows()))
    c = load(save_to_disk(tmp_path / "saved", synthesizeme_rows(), split="train"))
    key = sorted((p.user_id, p.chosen, p.split) for p in a.pairs)
    assert (
        key
        == sorted((p.user_id, p.chosen, p.split) for p in b.pairs)
        == sorted((p.user_id, p.chosen, p.split) for p in c.pairs)
    )


def _edit(rows: list[dict[str, Any]], i: int, **change: Any) -> list[dict[str, Any]]:
    rows[i] = {**rows[i], **change}
    return rows


@pytest.mark.parametrize(
    ("name", "rows", "field"),
    [
        ("rewardbench2", _edit(rb2_rows(), 1, num_correct=2), "num_correct"),
        ("rewardbench2", _edit(rb2_rows(), 3, id="r0"), "id"),
        ("rewardbench2", _edit(rb2_rows(), 0, chosen="one text"), "chosen"),
        ("rewardbench2", _edit(rb2_rows(), 2, rejected=[]), "rejected"),
        ("synthesizeme", _edit(synthesizeme_rows(), 4, split="holdout"), "split"),
        ("synthesizeme", _edit(synthesizeme_rows(), 2, chosen={"role": "assistant"}), "chosen.content"),
        ("synthesizeme", _edit(synthesizeme_rows(), 5, context=[{"role": "narrator", "content": "x"}]), "context.0.role"),  # noqa: E501
        ("synthesizeme", _edit(synthesizeme_rows(), 5, context=[{"role": "bot", "content": "x"}]), "context.0.role"),
        ("synthesizeme", _edit(synthesizeme_rows(), 4, chosen={"role": "user", "content": "x"}), "chosen.role"),
        ("rmgap", _edit(rmgap_rows(), 1, domain="Reasonning"), "domain"),
        ("rmgap", _edit(rmgap_rows(), 1, responses=[{"key": "response1", "text": "only one"}]), "responses"),
        ("rmgap", _edit(rmgap_rows(), 0, prompt_groups=None, group_id="g0", chosen="concise"), "prompt_groups"),
        ("rewardbench2", _edit(rb2_rows(), 0, subset="Facts"), "subset"),
        ("rewardbench2", _edit(rb2_rows(), 4, chosen=["one"], num_correct=1), "chosen"),
        ("personalllm", _edit(personalllm_rows(), 2, response_5="a fifth"), "response_5"),
        ("personalllm", _edit(personalllm_rows(), 2, response_3_gemma_2b="high"), "response_3_gemma_2b"),
    ],
)  # fmt: skip
def test_a_wrong_row_is_a_located_error(tmp_path: Path, name: str, rows: list[dict[str, Any]], field: str) -> None:
    src = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    with pytest.raises(DataError) as err:
        registry.benchmarks.get(name)(src)
    assert err.value.field == field and str(src) in str(err.value) and err.value.line is not None
    skipped = registry.benchmarks.get(name)(src, on_error="skip")
    assert skipped.skipped.total() > 0  # counted, not silently dropped


def test_a_partial_lamp4_folder_is_a_located_error(tmp_path: Path) -> None:
    root = write_lamp4(tmp_path / "LaMP_4")
    (root / "dev_outputs.json").write_text(json.dumps({"task": "LaMP_4", "golds": [{"id": "200", "output": "x"}]}))
    with pytest.raises(DataError, match=r"dev_questions\.json:2: field 'id': no gold output with id '201'"):
        registry.benchmarks.get("lamp_gen")(root)
    (root / "dev_outputs.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"dev_outputs\.json"):
        registry.benchmarks.get("lamp_gen")(root)


# ---------------------------------------------------------------------------------------------- listwise
def _by_text(table: dict[str, float]) -> Callable[[PreferencePair, str], float]:
    return lambda p, text: table[text]


def test_rewardbench2_ties_composite_reproduced_by_hand(tmp_path: Path) -> None:
    """RewardBench 2's Ties rule: 0.30 tied accuracy + 0.30 ref accuracy + 0.20 correctness preferred + 0.20 the
    hard variant + 0.01 the tanh margin term; worked out by hand for two prompts."""
    bench = registry.benchmarks.get("rewardbench2")(write_jsonl(tmp_path / "rb2.jsonl", rb2_rows()))
    q0, q1 = "Name a primary colour.", "Name a prime number below ten."
    table = {
        f"Ref answer to {q0}": 5.0, f"Wrong 0 to {q0}": 1.0, f"Wrong 1 to {q0}": 2.0,
        f"Right 0 to {q0}": 4.0, f"Right 1 to {q0}": 5.0, f"Right 2 to {q0}": 6.0,
        f"Ref answer to {q1}": 1.0, f"Wrong 0 to {q1}": 3.0, f"Wrong 1 to {q1}": 0.0,
        f"Right 0 to {q1}": 10.0, f"Right 1 to {q1}": 10.5, f"Right 2 to {q1}": 11.0,
    }  # fmt: skip
    ties = [p for p in bench.pairs if p.meta.get("ties_kind")]
    # a ref and a tied list of one prompt share their wrong answers' texts, hence their scores
    per, summary = ties_prompt_scores(ties, *scored(ties, _by_text(table)))
    # prompt 0: both accurate, tied margin 4 − 2 = 2 not > spread 2, tanh(2/2 − 1) = 0  ->  0.6
    # prompt 1: ref margin 1 − 3 = −2 (wrong), tied spread 1 and margin 10 − 3 = 7 > 1 (preferred), min(−2, 7) = −2
    # not > 1 (not preferred when hard), tanh(−2/1 − 1)
    expect1 = 0.30 + 0.20 + 0.01 * math.tanh(-3.0)
    assert per[0][1] == pytest.approx(0.6) and per[1][1] == pytest.approx(expect1)
    assert summary["score"] == pytest.approx(0.30 * 1.0 + 0.30 * 0.5 + 0.20 * 0.5 + 0.0 + 0.01 * math.tanh(-3.0) / 2)
    assert summary["score"] == pytest.approx(np.mean([v for _, v in per.values()]))  # cells average to the score
    assert summary["ref_accuracy"] == 0.5 and summary["tied_accuracy"] == 1.0


def test_best_of_four_on_rewardbench2_rows_and_the_tie_rule(tmp_path: Path) -> None:
    bench = registry.benchmarks.get("rewardbench2")(write_jsonl(tmp_path / "rb2.jsonl", rb2_rows()))
    regular = [p for p in bench.pairs if not p.meta.get("ties_kind")]
    by_row = {"0": (3.0, [1.0, 2.0, 0.0]), "1": (2.0, [2.0, 1.0, 0.0]), "2": (1.0, [3.0, 0.0, 0.0])}

    def score(p: PreferencePair, text: str) -> float:
        w, ls = by_row[p.meta["list_id"]]
        return w if text == p.chosen else ls[int(p.pair_id.rsplit(":", 1)[1])]

    s_w, s_l = scored(regular, score)
    strict = best_of_k_lists(regular, s_w, s_l, tie="strict")
    half = best_of_k_lists(regular, s_w, s_l, tie="half")
    assert [v.value for v in strict] == [1.0, 0.0, 0.0] and [v.value for v in half] == [1.0, 0.5, 0.0]
    assert {v.size for v in strict} == {4}
    for tie in ("strict", "half"):  # a judge's per-pair outcomes give the same list values as the scores
        judged = best_of_k_lists(regular, s_w, s_l, tie=tie, judge_outcomes=pair_outcomes(s_w, s_l, tie))  # type: ignore[arg-type]
        assert [v.value for v in judged] == [v.value for v in (strict if tie == "strict" else half)]
    assert not best_of_k_lists([p for p in bench.pairs if p.meta.get("ties_kind") == "tied"], s_w[:0], s_l[:0])


# ------------------------------------------------------------------------------------- rubric paraphrases
@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from perbench.data.rubrics.build import assemble_pool
    from perbench.data.rubrics.prompts import RUBRIC_PROMPTS
    from perbench.io import atomic_write_jsonl

    styles = {
        "brief": "Start with the basics. Keep it simple and steady.",
        "list": "Here are some tips:\n- Plan ahead.\n- Keep notes.\n- Review weekly.\n- Ask for help early.",
        "casual": "Hey, you're gonna love this! Just try it and see what works for you, it's super easy.",
        "formal": "It is advisable to proceed methodically. For example, one may allocate 30 minutes each day "
        "to the task. Consistency over 4 weeks typically produces measurable improvement.",
    }
    out = tmp_path_factory.mktemp("pool") / "pool.jsonl"
    atomic_write_jsonl(out, assemble_pool({p.prompt_id: dict(styles) for p in RUBRIC_PROMPTS[:16]}, seed=0))
    return out


def test_rubric_paraphrases_give_user_agnostic_scorers_the_same_value_on_every_phrasing(pool: Path) -> None:
    """The checkers read only the answer, so a paraphrased test pair keeps its label. Exact invariants: a scorer of
    the response alone scores every phrasing of a prompt the same, so its consistency equals its accuracy on each
    phrasing; and any user-agnostic scorer, even one that reads the prompt, gets exactly ½ on the
    personalization-only pairs under every phrasing (their mirrors are paraphrased with them)."""
    from perbench.data.rubrics.benchmark import load_rubrics

    bench: Benchmark = load_rubrics(str(pool), paraphrases=2)
    para = bench.pair_sets[PARAPHRASED]
    test = bench.test_pairs()
    assert len(para) == 2 * len(test) and {p.meta["paraphrase"] for p in para} == {1, 2}
    pairs = test + para
    units = paraphrase_units(pairs)
    assert len(units) == len(test) and all(len(u) == 3 for u in units)
    mirrored = bench.subsets["personalization_only"]

    def phrasing(p: PreferencePair) -> int:
        return int(p.meta.get("paraphrase", 0))

    def origin(p: PreferencePair) -> str:
        return str(p.meta.get("paraphrase_of", p.pair_id))

    import hashlib

    def digest(*parts: str) -> float:
        return int(hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8], 16) / 2**32

    agnostic = {
        "length": lambda p, t: float(len(t)),
        "response hash": lambda p, t: digest(t),
        "prompt and response hash": lambda p, t: digest(str(p.prompt), t),
    }
    for name, f in agnostic.items():
        s_w, s_l = scored(pairs, f)
        out = pair_outcomes(s_w, s_l, "half")
        for k in (0, 1, 2):
            on = [
                i
                for i, p in enumerate(pairs)
                if phrasing(p) == k and p.meta.get("paraphrase_of", p.pair_id) in mirrored
            ]
            assert on and out[on].mean() == 0.5, (name, k)
        if name != "prompt and response hash":
            acc = [out[[i for i, p in enumerate(pairs) if phrasing(p) == k]].mean() for k in (0, 1, 2)]
            assert acc[0] == acc[1] == acc[2] == consistency_values(units, out).mean(), name


def test_paraphrases_parameter_is_checked(pool: Path) -> None:
    from perbench.data.rubrics.benchmark import load_rubrics

    with pytest.raises(ValueError, match="paraphrases"):
        load_rubrics(str(pool), paraphrases=3)
    assert PARAPHRASED not in load_rubrics(str(pool)).pair_sets


# ------------------------------------------------------------------------------------------ CLI and runs
def test_list_shows_the_new_benchmarks_and_validate_loads_each_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perbench.cli import main

    assert main(["list", "benchmarks", "--sizes"]) == 0
    out = capsys.readouterr().out
    for name in NEW:
        assert f"  {name} " in out
    assert "not Ma et al.'s prb" in out
    for name in NEW:
        src, _ = fixture_source(name, tmp_path)
        assert main(["validate", "--benchmark", name, str(src)]) == 0, name
        assert "status       : OK" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "bad.jsonl", _edit(rb2_rows(), 1, num_correct=2))
    assert main(["validate", "--benchmark", "rewardbench2", str(bad)]) == 1
    assert f"{bad}:2: field 'num_correct'" in capsys.readouterr().out
    assert main(["validate", "--benchmark", "personalllm", str(tmp_path / "personalllm.jsonl"), "--param",
                 "n_users=3"]) == 0  # fmt: skip
    assert "pairs kept   : 36" in capsys.readouterr().out


def _tiny(benchmark: dict[str, Any], out: Path, **more: Any) -> Any:
    from perbench.config import RunConfig

    return RunConfig.from_dict(
        {
            "benchmark": benchmark,
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "methods": ["global_bt"],
            "decoders": [],
            "bootstrap": 10,
            "bertscore": False,
            "out_dir": str(out),
            "device": "cpu",
            **more,
        }
    )


@pytest.mark.parametrize("name", NEW)
def test_a_tiny_run_on_each_fixture(name: str, tmp_path: Path) -> None:
    from perbench.api import run

    src, params = fixture_source(name, tmp_path)
    bench = registry.benchmarks.get(name)(src, **params)
    got = run(_tiny({"name": name, "source": str(src), **params}, tmp_path / "runs"))
    res = json.loads(got.results_path.read_text())  # as written: non-finite values are null
    length = res["upstream"]["length"]["rm_accuracy"]
    assert length["all"]["n_pairs"] == len(bench.test_pairs())
    lists = {(p.user_id, p.meta.get("list_id")) for p in bench.test_pairs() if p.meta.get("list_id") is not None}
    regular = [ls for ls in lists if not any(p.meta.get("ties_kind") for p in bench.test_pairs()
                                             if (p.user_id, p.meta.get("list_id")) == ls)]  # fmt: skip
    if regular:
        assert length["all"]["best_of_k"]["lists"] == len(regular)
    assert isinstance(length["all"]["ties"], int)  # the tied-pair count on every benchmark
    if name == "rewardbench2":
        assert res["config"]["tie_policy"] == "half"  # RewardBench 2's own rule unless the config says otherwise
        assert length["all"]["rewardbench2_ties"]["prompts_with_both"] == 2
        subsets = length["all"]["rewardbench2"]
        assert set(subsets) == {"Factuality", "Math", "Ties", "mean_over_subsets", "rule"}
        parts = [subsets[s] for s in ("Factuality", "Math", "Ties")]
        assert subsets["mean_over_subsets"] == pytest.approx(sum(parts) / 3)
    else:
        assert res["config"]["tie_policy"] == "strict"
    if name == "rmgap":
        assert length["all"]["paraphrase_consistency"]["units"] == 36
        assert length["all"]["rmgap"]["Consistency"]["Avg"] == 1.0  # length ignores the prompt
    if bench.subsets.get("personalization_only"):
        assert length["pers_only"]["accuracy"] == 0.5
    if bench.train_pairs():
        assert "rm_accuracy" in res["upstream"]["global_bt"]
    else:
        assert "no train pairs" in res["upstream"]["global_bt"]["not_applicable"]


def test_listwise_and_consistency_are_per_system_predictors(pool: Path, tmp_path: Path) -> None:
    """On a rubric run with paraphrases and RewardBench 2 / RMGAP as upstream benchmarks, best-of-k, the Ties score
    and paraphrase consistency are in results.json per system, in cells.jsonl and among the validity predictors."""
    from perbench.api import run

    rb2 = write_jsonl(tmp_path / "rb2.jsonl", rb2_rows())
    gap = write_jsonl(tmp_path / "gap.jsonl", rmgap_rows())
    cfg = _tiny(
        {"name": "rubrics", "pool": str(pool), "paraphrases": 2},
        tmp_path / "runs",
        methods=["global_bt", "mpu"],
        systems={"train_fraction": [0.25, 0.5, 1.0]},
        decoders=["zero_shot", {"name": "best_of_n", "n": 2}],
        max_new_tokens=6,
        max_test_prompts=2,
        max_gen_users=2,
        shot_curve=[1],
        upstream_benchmarks=[{"name": "rewardbench2", "source": str(rb2)}, {"name": "rmgap", "source": str(gap)}],
    )
    got = run(cfg)
    res = got.results
    systems = set(res["upstream"])
    for m in systems:
        acc = res["upstream"][m]["rm_accuracy"]
        assert acc["all"]["paraphrase_consistency"]["units"] > 0, m
        assert acc["paraphrased"]["n_pairs"] == 2 * acc["all"]["n_pairs"] and "users" not in acc["paraphrased"], m
        on_rb2 = acc["on_rewardbench2"]
        assert on_rb2["best_of_k"]["lists"] == 3 and on_rb2["rewardbench2_ties"]["score"] is not None
        assert acc["on_rmgap"]["paraphrase_consistency"]["units"] == 36 and acc["on_rmgap"]["best_of_k"]["lists"] == 36
    cells = [json.loads(x) for x in (got.run_dir / "cells.jsonl").read_text().splitlines()]
    metrics = {c["metric"] for c in cells}
    for metric in ("rm_consistency", "rm_acc_paraphrased", "rm_acc_on_rewardbench2@bok", "rm_acc_on_rewardbench2@ties",
                   "rm_acc_on_rmgap@bok", "rm_acc_on_rmgap@consistency"):  # fmt: skip
        assert {c["method"] for c in cells if c["metric"] == metric} == systems, metric
    strangers = {c["user"] for c in cells if c["metric"] == "rm_acc_on_rmgap@bok"}  # one user, its id sealed
    assert len(strangers) == 1 and next(iter(strangers)).startswith("rmgap/user-")
    v = res["analysis"]["validity"]
    assert {"rm_consistency", "rm_acc_on_rewardbench2@bok", "rm_acc_on_rmgap@consistency"} <= set(v["predictors"])
    assert metrics >= set(v["predictors"])


# ------------------------------------------------------------------------ PersonalLLM's exact ground truth
def _tiny_classifier(tiny_lm: Any, path: Path, seed: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = tiny_lm.tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, num_labels=1,
    )  # fmt: skip
    torch.manual_seed(seed)
    LlamaForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture
def personalllm_with_models(tiny_lm: Any, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """PersonalLLM-layout rows whose score columns are the scores of two (tiny) reward models on their folders."""
    from perbench.rewards.base import RMContext, ScoreItem
    from perbench.rewards.hub_rm import HubRM

    folders = {rm: _tiny_classifier(tiny_lm, tmp_path / rm, k) for k, rm in enumerate(("rm_a", "rm_b"))}
    rows = []
    for i in range(4):
        row: dict[str, Any] = {"prompt": f"Question {i}: how can I sleep better?", "split": "test" if i else "train"}
        for j in range(1, 4):
            row[f"response_{j}"] = f"Answer {j} to question {i}: " + "rest well " * j
        rows.append(row)
    for rm, folder in folders.items():
        model = HubRM(model=folder)
        model.fit([], RMContext())
        for row in rows:
            got = model.score([ScoreItem("", row["prompt"], row[f"response_{j}"]) for j in range(1, 4)])
            row.update({f"response_{j}_{rm}": float(s) for j, s in zip(range(1, 4), got, strict=True)})
    return write_jsonl(tmp_path / "pl.jsonl", rows), folders


def test_personalllm_reward_models_give_every_text_its_exact_per_user_reward(
    personalllm_with_models: tuple[Path, dict[str, str]],
) -> None:
    from perbench.metrics.simulated import SimulatedUsers

    src, folders = personalllm_with_models
    load = registry.benchmarks.get("personalllm")
    observed = {"standardisation": "observed"}  # rm_a, rm_b have no published constants
    assert SimulatedUsers.of(load(src, n_users=3, **observed)) is None  # without the models: upstream only
    with pytest.raises(ValueError, match="no path for"):
        load(src, n_users=3, reward_model_paths={"rm_a": folders["rm_a"]}, **observed)
    bench = load(src, n_users=3, reward_model_paths=folders, **observed)
    truth = SimulatedUsers.of(bench)
    assert truth is not None
    for p in bench.pairs:
        got = truth.score([p.chosen, p.rejected], [(p.prompt, p.user_id)] * 2, bench.users)
        assert got[0] is not None and got[1] is not None
        assert got[0] - got[1] == pytest.approx(p.meta["reward_gap"], abs=1e-4)  # the loader's r_u, recomputed


def test_best_of_n_is_scored_by_the_simulated_users_reward(
    personalllm_with_models: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    from perbench.api import run

    src, folders = personalllm_with_models
    bench = {"name": "personalllm", "source": str(src), "n_users": 3, "reward_model_paths": folders,
             "standardisation": "observed"}  # fmt: skip
    cfg = _tiny(bench, tmp_path / "runs", decoders=["zero_shot", {"name": "best_of_n", "n": 2}], max_new_tokens=6,
                max_test_prompts=1, max_gen_users=2)  # fmt: skip
    res = run(cfg).results
    bon = res["downstream"]["best_of_n(n=2)[global_bt]"]
    assert bon["personal_reward"]["n"] > 0 and np.isfinite(bon["personal_reward"]["mean"])
    assert "personal_reward" in res["downstream"]["zero_shot"]
