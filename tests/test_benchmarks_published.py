"""The published benchmarks as their authors release and score them: each loader reads its fixture in the upstream
layout, each published metric equals the upstream rule written out here independently, chat roles are mapped
before any template sees them, every loader's personalization-only split gives a user-/prompt-agnostic scorer
exactly 0.5, and the published splits stay apart."""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench import registry
from perbench.data.records import Benchmark, PreferencePair
from perbench.data.rows import DataError
from perbench.metrics.listwise import ties_prompt_scores
from perbench.metrics.rm_accuracy import pair_outcomes
from perbench.metrics.rmgap import rmgap_metrics
from perbench.runner.cells import Cells
from perbench.runner.listwise import listwise
from tests.fixtures_listwise import (
    PERSONALLLM_RMS,
    longlamp_rows,
    personalllm_rows,
    rb2_rows,
    rmgap_rows,
    synthesizeme_rows,
    write_lamp4,
)
from tests.fixtures_upstream import write_jsonl


def text_score(text: str) -> float:
    """A scorer that reads nothing but the response (user- and prompt-agnostic), with ties (7 values)."""
    return float(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 7)


def prompt_score(prompt: Any, text: str) -> float:
    """A scorer that reads the prompt too, with ties (5 values)."""
    return float(int(hashlib.sha256(f"{prompt}\x00{text}".encode()).hexdigest()[:8], 16) % 5)


def pair_scores(pairs: list[PreferencePair], f: Any) -> dict[str, np.ndarray]:
    return {
        "chosen": np.array([f(p.prompt, p.chosen) for p in pairs], np.float64),
        "rejected": np.array([f(p.prompt, p.rejected) for p in pairs], np.float64),
    }


def load(name: str, tmp_path: Path, rows: list[dict[str, Any]], **params: Any) -> Benchmark:
    return registry.benchmarks.get(name)(write_jsonl(tmp_path / f"{name}.jsonl", rows), **params)


# -------------------------------------------------------------------------------------------------- RMGAP
def upstream_rmgap(rows: list[dict[str, Any]], f: Any) -> dict[str, dict[str, float]]:
    """RMGAP's rule from its task runner, from the raw rows: every prompt scores the four responses in key order;
    Pair / BoN strict per domain; Consistency the (score desc, key) ranking equal under the three prompts;
    Avg the mean over domains."""
    wins: dict[str, float] = defaultdict(float)
    total: dict[str, int] = defaultdict(int)
    bon: dict[str, list[int]] = defaultdict(list)
    cons: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        text = {r["key"]: r["text"] for r in row["responses"]}
        keys = sorted(text)
        for group in row["prompt_groups"]:
            ranks = []
            for prompt in group["prompts"]:
                s = [f(prompt["text"], text[k]) for k in keys]
                w = keys.index(group["winner"])
                losers = [x for i, x in enumerate(s) if i != w]
                wins[row["domain"]] += sum(s[w] > x for x in losers)
                total[row["domain"]] += len(losers)
                bon[row["domain"]].append(int(all(s[w] > x for x in losers)))
                ranks.append([k for k, _ in sorted(zip(keys, s, strict=True), key=lambda ks: (-ks[1], ks[0]))])
            cons[row["domain"]].append(int(all(r == ranks[0] for r in ranks)))
    domains = sorted(total)
    out = {
        "Pair": {d: wins[d] / total[d] for d in domains},
        "BoN": {d: sum(bon[d]) / len(bon[d]) for d in domains},
        "Consistency": {d: sum(cons[d]) / len(cons[d]) for d in domains},
    }
    for table in out.values():
        table["Avg"] = sum(table[d] for d in domains) / len(domains)
    return out


def test_rmgap_release_layout_loads_and_its_metrics_are_rmgaps(tmp_path: Path) -> None:
    rows = rmgap_rows()
    bench = load("rmgap", tmp_path, rows)
    assert len(bench.pairs) == 3 * 4 * 3 * 3
    for f in (prompt_score, lambda _prompt, text: text_score(text)):
        s = pair_scores(bench.pairs, f)
        got = rmgap_metrics(bench.pairs, s["chosen"], s["rejected"])
        want = upstream_rmgap(rows, f)
        for metric in ("Pair", "BoN", "Consistency"):
            assert got[metric] == pytest.approx(want[metric], abs=1e-12), metric
    # the macro mean is not the micro mean here (two Chat instances, one Writing)
    s = pair_scores(bench.pairs, prompt_score)
    micro = float(np.mean(pair_outcomes(s["chosen"], s["rejected"], "strict")))
    assert rmgap_metrics(bench.pairs, s["chosen"], s["rejected"])["Pair"]["Avg"] != pytest.approx(micro)
    # a prompt-agnostic scorer ranks the responses alike under every paraphrase: Consistency 1
    s = pair_scores(bench.pairs, lambda _prompt, text: len(text))
    assert rmgap_metrics(bench.pairs, s["chosen"], s["rejected"])["Consistency"]["Avg"] == 1.0


def test_rmgap_metrics_reach_results_under_their_published_names(tmp_path: Path) -> None:
    bench = load("rmgap", tmp_path, rmgap_rows())
    s = pair_scores(bench.pairs, prompt_score)
    outcome = pair_outcomes(s["chosen"], s["rejected"], "strict")
    out = listwise(Cells("g"), "m", bench.pairs, s, outcome, judge=False, tie="strict")
    assert out["rmgap"]["Pair"] == pytest.approx(upstream_rmgap(rmgap_rows(), prompt_score)["Pair"])
    assert "paraphrase_consistency" in out  # perbench's own variant, under its own name
    judged = listwise(Cells("g"), "j", bench.pairs, s, outcome, judge=True, tie="strict")
    assert "not applicable" in judged["rmgap"]["na"]


def test_rmgap_flat_rows_are_a_located_error_naming_the_layout(tmp_path: Path) -> None:
    flat = [{"id": "0", "group_id": "g0", "prompt": "Hi?", "responses": ["a", "b"], "chosen": 0}]
    src = write_jsonl(tmp_path / "flat.jsonl", flat)
    with pytest.raises(DataError, match=r"flat\.jsonl:1: field 'prompt_groups': missing \(this row is flat.*"
                       r"RMGAP's data/test\.jsonl layout"):  # fmt: skip
        registry.benchmarks.get("rmgap")(src)
    rows = rmgap_rows()
    rows[1]["prompt_groups"][2]["winner"] = "response9"
    with pytest.raises(DataError) as err:
        load("rmgap", tmp_path, rows)
    assert err.value.line == 2 and err.value.field == "prompt_groups.2.winner"
    rows = rmgap_rows()
    rows[0]["prompt_groups"][0]["prompts"].pop()
    with pytest.raises(DataError, match="expected 3 entries"):
        load("rmgap", tmp_path, rows)


# ---------------------------------------------------------------------------------------------- RewardBench 2
def upstream_rb2(rows: list[dict[str, Any]], f: Any) -> dict[str, float]:
    """RewardBench 2's scoring from the raw rows: a non-Ties row scores 1/#max when its chosen (first) response
    is at the max, else 0, averaged per subset; Ties by its composite over (kind, prompt id) groups."""
    per: dict[str, list[float]] = defaultdict(list)
    groups: dict[tuple[str, int], list[tuple[bool, float]]] = defaultdict(list)
    for row in rows:
        scores = [f(row["prompt"], t) for t in [*row["chosen"], *row["rejected"]]]
        if row["subset"] == "Ties":
            kind, pid = row["id"].split(":")
            groups[(kind, int(pid))] += [(i < row["num_correct"], s) for i, s in enumerate(scores)]
            continue
        top = max(scores)
        per[row["subset"]].append(1 / sum(s == top for s in scores) if scores[0] == top else 0.0)
    out = {k: float(np.mean(v)) for k, v in per.items()}
    stats = {}
    for key, samples in groups.items():
        good = [s for c, s in samples if c]
        bad = [s for c, s in samples if not c]
        stats[key] = (min(good) - max(bad) > 0, max(good) - min(good) if len(good) > 1 else None, min(good) - max(bad))
    ref = {pid: v for (k, pid), v in stats.items() if k == "ref"}
    tied = {pid: v for (k, pid), v in stats.items() if k == "tied"}
    both = sorted(set(ref) & set(tied))
    d = np.array([tied[p][1] for p in both], np.float64)
    m_t = np.array([tied[p][2] for p in both])
    m_r = np.array([ref[p][2] for p in both])
    with np.errstate(divide="ignore", invalid="ignore"):
        margin = np.nan_to_num(np.tanh(np.minimum(m_r, m_t) / d - 1), nan=0.0)
    out["Ties"] = float(
        0.30 * np.mean([v[0] for v in tied.values()])
        + 0.30 * np.mean([v[0] for v in ref.values()])
        + 0.20 * np.mean(m_t > d)
        + 0.20 * np.mean(np.minimum(m_r, m_t) > d)
        + 0.01 * np.mean(margin)
    )
    return out


def rb2_with_shared_reference() -> list[dict[str, Any]]:
    """RewardBench 2's Ties lists share texts: prompt 0's reference answer is also one of its tied answers."""
    rows = rb2_rows()
    ref, tied = rows[3], rows[4]
    tied["chosen"] = [ref["chosen"][0], *tied["chosen"][1:]]
    return rows


def test_rewardbench2_accuracy_and_ties_are_rb2s_under_any_run_tie_policy(tmp_path: Path) -> None:
    rows = rb2_with_shared_reference()
    bench = load("rewardbench2", tmp_path, rows)
    assert len(bench.pairs) == 9 + 4 + 12  # the shared reference answer's pairs are kept in both lists

    def coarse(_prompt: Any, text: str) -> float:  # ties at the top happen
        return float(text_score(text) // 3)

    want = upstream_rb2(rows, coarse)
    s = pair_scores(bench.pairs, coarse)
    for tie in ("strict", "half"):
        out = listwise(Cells("g"), "m", bench.pairs, s, pair_outcomes(s["chosen"], s["rejected"], tie), judge=False,
                       tie=tie)  # fmt: skip
        got = out["rewardbench2"]
        for subset, value in want.items():
            assert got[subset] == pytest.approx(value, abs=1e-12), (tie, subset)
        assert got["mean_over_subsets"] == pytest.approx(np.mean(list(want.values())), abs=1e-12)
        assert out["rewardbench2_ties"]["score"] == pytest.approx(want["Ties"], abs=1e-12)
    ties = [p for p in bench.pairs if p.meta.get("ties_kind")]
    _, summary = ties_prompt_scores(ties, *pair_scores(ties, coarse).values())
    assert summary["score"] == pytest.approx(want["Ties"], abs=1e-12)


def test_rewardbench2_subset_names_follow_rb2s_spelling_and_tie_rule_is_its_default(tmp_path: Path) -> None:
    from perbench.config import RunConfig
    from perbench.runner.run import benchmark_tie_policy

    rows = rb2_rows()
    rows[0]["subset"] = "factuality"
    assert {p.meta["subset"] for p in load("rewardbench2", tmp_path, rows).pairs} == {"Factuality", "Math", "Ties"}
    base = {"methods": ["global_bt"], "decoders": [], "policy": "tiny-random", "rm_backbone": "tiny-random"}
    cfg = RunConfig.from_dict({"benchmark": {"name": "rewardbench2", "source": "x"}, **base})
    assert benchmark_tie_policy(cfg).tie_policy == "half"
    given = RunConfig.from_dict({"benchmark": {"name": "rewardbench2", "source": "x"}, "tie_policy": "strict", **base})
    assert benchmark_tie_policy(given).tie_policy == "strict"  # a config that says so keeps its rule
    other = RunConfig.from_dict({"benchmark": {"name": "rmgap", "source": "x"}, **base})
    assert benchmark_tie_policy(other).tie_policy == "strict"


# ----------------------------------------------------------------------------------------------- PersonalLLM
#: PersonalLLM's data/constants.py (mean, sd) for the fixture's reward models, written out independently
PUBLISHED = {
    "gemma_2b": (4.3304170169830325, 2.038611338958803),
    "llama3_sfairx": (1.0637639780044557, 2.953017385451928),
    "oasst_deberta_v3": (2.8976835689097644, 1.7207868789061331),
}


def test_personalllm_users_come_from_the_published_standardisation(tmp_path: Path) -> None:
    from perbench.data.benchmarks.personalllm import PERSONALLLM_HUB_ID

    assert PERSONALLLM_HUB_ID == "namkoong-lab/PersonalLLM"
    rows = personalllm_rows()
    bench = load("personalllm", tmp_path, rows, n_users=6, seed=3)
    rms = sorted(PERSONALLLM_RMS)
    for uid, user in bench.users.items():
        w = np.array([user.answer_key["weights"][rm] for rm in rms])  # type: ignore[index]
        mine = [p for p in bench.pairs if p.user_id == uid]
        for row in rows:
            z = np.array([[(row[f"response_{j}_{rm}"] - PUBLISHED[rm][0]) / PUBLISHED[rm][1] for rm in rms]
                          for j in range(1, 5)])  # fmt: skip
            r = z @ w
            best = int(np.argmax(r))
            got = [p for p in mine if p.prompt == row["prompt"]]
            assert {p.chosen for p in got} == {row[f"response_{best + 1}"]}
            gaps = sorted(p.meta["reward_gap"] for p in got)
            assert gaps == pytest.approx(sorted(r[best] - r[j] for j in range(4) if j != best), abs=1e-12)
    observed = load("personalllm", tmp_path, rows, n_users=6, seed=3, standardisation="observed")
    assert observed.meta["standardisation"] != bench.meta["standardisation"]
    renamed = [{k.replace("gemma_2b", "my_rm"): v for k, v in r.items()} for r in rows]
    with pytest.raises(DataError, match="publishes no standardisation for \\['my_rm'\\]"):
        load("personalllm", tmp_path, renamed)


@pytest.mark.parametrize(("n_users", "why"), [(True, "integer"), (0, "integer"), (400_000, "max_pairs")])
def test_personalllm_sizes_what_it_builds(tmp_path: Path, n_users: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        load("personalllm", tmp_path, personalllm_rows(), n_users=n_users, max_pairs=1_000_000)


# ------------------------------------------------------------------------------------ personalization-only
def synthesizeme_shared() -> list[dict[str, Any]]:
    """PersonalRewardBench rows where two users judged the same conversation the opposite way round."""
    rows = synthesizeme_rows()
    extra = copy.deepcopy(rows[4])  # user0's first test row
    extra["user_id"] = "user1"
    extra["chosen"], extra["rejected"] = extra["rejected"], extra["chosen"]
    return [*rows, extra]


@pytest.mark.parametrize(
    ("name", "rows", "params", "agnostic"),
    [
        ("synthesizeme", synthesizeme_shared(), {}, "user"),
        ("personalllm", personalllm_rows(), {"n_users": 8}, "user"),
        ("rmgap", rmgap_rows(), {}, "prompt"),
    ],
)
def test_personalization_only_split_gives_an_agnostic_scorer_exactly_one_half(
    tmp_path: Path, name: str, rows: list[dict[str, Any]], params: dict[str, Any], agnostic: str
) -> None:
    bench = load(name, tmp_path, rows, **params)
    ids = bench.subsets.get("personalization_only")
    assert ids, name
    sub = [p for p in bench.pairs if p.pair_id in ids]
    for f in (text_score, len, lambda t: 0.0):  # ties included: every tie counts ½ on this split
        s = pair_scores(sub, lambda _prompt, text, f=f: float(f(text)))
        assert float(np.mean(pair_outcomes(s["chosen"], s["rejected"], "half"))) == 0.5, (name, agnostic)


def test_benchmarks_without_repeated_pairs_have_no_personalization_only_split(tmp_path: Path) -> None:
    # one general user (RewardBench 2), every question its own user (LaMP-4), users with their own prompts
    for bench in (
        load("rewardbench2", tmp_path, rb2_rows()),
        registry.benchmarks.get("lamp_gen")(write_lamp4(tmp_path / "LaMP_4")),
        load("synthesizeme", tmp_path, synthesizeme_rows()),
    ):
        assert "personalization_only" not in bench.subsets, bench.name


# ------------------------------------------------------------------------------------------------ chat roles
QWEN_STYLE = (
    "{%- for message in messages %}"
    "{%- if message.role in ['user', 'system', 'assistant'] %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)  # renders the three chat roles only, as Qwen2.5-Instruct's template does: any other turn vanishes


def test_chat_roles_are_mapped_in_one_place_and_unknown_ones_refused() -> None:
    from perbench.data.benchmarks.common import CHAT_ROLES, chat_role
    from perbench.data.rows import Row

    row = Row("f.jsonl", 3, {})
    meant = {"model": "assistant", "Bot": "assistant", "gpt": "assistant", "chatbot": "assistant",
             "assistant": "assistant", "human": "user", " USER ": "user", "system": "system"}  # fmt: skip
    for name, role in meant.items():
        assert chat_role(row, "context.0.role", name) == role
    assert set(CHAT_ROLES.values()) == {"user", "assistant", "system"}
    with pytest.raises(DataError, match=r"f\.jsonl:3: field 'context\.1\.role': unknown role 'narrator'"):
        chat_role(row, "context.1.role", "narrator")


def test_synthesizeme_model_turns_survive_two_chat_templates(tiny_lm: Any, tmp_path: Path) -> None:
    from perbench.models.chat import encode_prompt

    bench = load("synthesizeme", tmp_path, synthesizeme_rows())
    contexts = [p.prompt for p in bench.pairs if not isinstance(p.prompt, str)]
    assert len(contexts) == 3  # each user's multi-turn test row
    qwen = copy.copy(tiny_lm.tokenizer)
    qwen.chat_template = QWEN_STYLE
    for tok in (tiny_lm.tokenizer, qwen):  # SmolLM2's template (bundled) and a Qwen-style one
        assert tok.chat_template
        for prompt in contexts:
            assert {m.role for m in prompt} <= {"user", "assistant"}
            text = tok.decode(encode_prompt(tok, prompt))
            for m in prompt:
                assert f"<|im_start|>{m.role}\n{m.content}<|im_end|>" in text, (m, text)
            assert "<|im_start|>model" not in text
    # the same context read without the mapping loses the model turn under the Qwen-style template
    raw = [
        {"role": "user", "content": "hi"},
        {"role": "model", "content": "MODELTURN"},
        {"role": "user", "content": "x"},
    ]
    assert "MODELTURN" not in qwen.apply_chat_template(raw, tokenize=False)


def test_prism_reads_model_turns_through_the_shared_role_map(tmp_path: Path) -> None:
    from tests.fixtures_upstream import prism_conversations, write_prism

    convs = prism_conversations({f"user{u}": 6 for u in range(8)})
    convs[0]["conversation_history"][1]["role"] = "chatbot"
    bench = registry.benchmarks.get("prism")(write_prism(tmp_path / "prism", conversations=convs), min_dialogues=1)
    assert all(m.role in ("user", "assistant") for p in bench.pairs for m in p.prompt)  # type: ignore[union-attr]
    convs[0]["conversation_history"][1]["role"] = "narrator"
    with pytest.raises(DataError, match=r"conversation_history\.1\.role': unknown role 'narrator'"):
        registry.benchmarks.get("prism")(write_prism(tmp_path / "prism2", conversations=convs), min_dialogues=1)


# ---------------------------------------------------------------------------------------------- LaMP splits
def test_longlamp_keeps_val_and_test_apart(tmp_path: Path) -> None:
    rows = longlamp_rows()
    for r in rows[:3]:
        if r["split"] == "test":
            r["split"] = "val"
    src = write_jsonl(tmp_path / "ll.jsonl", rows)
    load_ll = registry.benchmarks.get("lamp_gen")
    test = load_ll(src, task="LongLaMP")
    val = load_ll(src, task="LongLaMP", split="val")
    assert {p.meta["source"] for p in test.test_pairs()} == {f"{src}:6"}
    assert {p.meta["source"] for p in val.test_pairs()} == {f"{src}:3"}
    assert test.skipped.counts["split_not_evaluated"] == 1 and val.skipped.counts["split_not_evaluated"] == 1
    with pytest.raises(ValueError, match="published evaluation splits"):
        load_ll(src, task="LongLaMP", split="dev")


def test_lamp4_dev_users_adapt_from_their_profile(tmp_path: Path) -> None:
    root = write_lamp4(tmp_path / "LaMP_4")
    bench = registry.benchmarks.get("lamp_gen")(root)
    dev = sorted({p.user_id for p in bench.test_pairs() if not bench.users[p.user_id].seen})
    assert dev == ["200", "201"] and all(not bench.users[u].seen for u in dev)
    for u in dev:
        shots = bench.fewshot(u, 4)
        assert [p.prompt for p in shots] == ["Old article 0.", "Old article 1."]
        assert [p.chosen for p in shots] == [f"Old headline 0 of {u}", f"Old headline 1 of {u}"]
    assert all(bench.users[u].seen for u in ("100", "101", "102"))
    none = registry.benchmarks.get("lamp_gen")(root, profile_shots=0)
    assert not none.train_pairs() or all(p.split == "test" or p.user_id in ("100", "101", "102") for p in none.pairs)
    import json

    qs = json.loads((root / "dev_questions.json").read_text())
    qs[1]["id"] = "101"  # also a train question
    (root / "dev_questions.json").write_text(json.dumps(qs))
    with pytest.raises(DataError, match=r"dev_questions\.json:2: field 'id': question id '101' again"):
        registry.benchmarks.get("lamp_gen")(root)


# ------------------------------------------------------------------------------------------------- validate
def test_validate_runs_a_named_benchmarks_pre_run_checks_and_counts_users(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from perbench.cli import main

    src = write_jsonl(tmp_path / "sm.jsonl", synthesizeme_rows())
    assert main(["validate", "--benchmark", "synthesizeme", str(src)]) == 0
    out = capsys.readouterr().out
    assert "user ids     : 3 user(s): 3 seen, 0 unseen; 3 with test pairs" in out and "None" not in out
    cfg = {"benchmark": {"name": "synthesizeme", "source": str(src)}, "methods": ["global_bt"], "decoders": [],
           "policy": "tiny-random", "rm_backbone": "tiny-random", "out_dir": str(tmp_path / "runs")}  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["validate", "--config", str(path)]) == 0
    assert "status       : OK" in capsys.readouterr().out
    # the config's checks of the loader's parameters, located in the config
    cfg["benchmark"] = {"name": "personalllm", "source": str(write_jsonl(tmp_path / "pl.jsonl", personalllm_rows())),
                        "n_users": True}  # fmt: skip
    path.write_text(yaml.safe_dump(cfg))
    assert main(["validate", "--config", str(path)]) == 2
    assert f"{path}:2: benchmark.n_users: expected an integer, got true" in capsys.readouterr().err
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{**synthesizeme_rows()[0], "context": [{"role": "narrator", "content": "x"}]}]
    )
    cfg["benchmark"] = {"name": "synthesizeme", "source": str(src)}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["validate", "--config", str(path), str(bad)]) == 1  # FILE in place of the config's source
    assert f"{bad}:1: field 'context.0.role': unknown role 'narrator'" in capsys.readouterr().out
