"""Benchmarks from the field, each on tiny files in the exact upstream layout (tests/fixtures_upstream.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench.builders.pref_lamp import LAMP5_PREFIX, encode_cached, format_table1, load_pref_lamp
from perbench.data.benchmarks.persona import load_domain_styles, load_persona, style_user
from perbench.data.benchmarks.prb import bm25_rank, load_prb
from perbench.data.benchmarks.prism import load_prism
from perbench.data.benchmarks.tldr import load_tldr
from perbench.data.loaders import DataError
from perbench.data.records import Benchmark, Message, PreferencePair, Prompt, prompt_text
from perbench.data.user_context import opaque_user_id
from tests.fixtures_upstream import (
    DOMAIN_STYLES,
    PRB_SECRET,
    domain_rows,
    lamp5_time_based,
    lamp5_user_based,
    persona_rows,
    prb_rows,
    prism_conversation,
    prism_conversations,
    prism_survey,
    save_to_disk,
    tldr_rows,
    write_json,
    write_jsonl,
    write_parquet,
    write_prism,
)


def accuracy(pairs: list[PreferencePair], score: Callable[[str, Prompt, str], float]) -> float:
    """Strict accuracy: a tie counts as wrong."""
    right = sum(score(p.user_id, p.prompt, p.chosen) > score(p.user_id, p.prompt, p.rejected) for p in pairs)
    return right / len(pairs)


# ------------------------------------------------------------------------------ Personalized RewardBench
def test_prb_loads_jsonl_parquet_and_saved_dataset_alike(tmp_path: Path) -> None:
    rows = prb_rows()
    a = load_prb(write_jsonl(tmp_path / "prb.jsonl", rows))
    b = load_prb(write_parquet(tmp_path / "prb.parquet", rows))
    c = load_prb(save_to_disk(tmp_path / "prb_ds", rows, split="test"))
    assert [p.content_key() for p in a.pairs] == [p.content_key() for p in b.pairs]
    assert [p.content_key() for p in a.pairs] == [p.content_key() for p in c.pairs]
    assert len(a.pairs) == 3 and a.weighting == "pair"


def test_prb_one_user_per_row_all_unseen_eval_only(tmp_path: Path) -> None:
    bench = load_prb(write_jsonl(tmp_path / "prb.jsonl", prb_rows()))
    assert sorted(bench.users) == ["q0", "q1", "q2"]
    assert bench.unseen_users == ["q0", "q1", "q2"] and bench.train_pairs() == []
    assert all(bench.fewshot(u) == [] for u in bench.users)
    assert "per-row" in bench.meta["users"]
    assert len(bench.users["q0"].profile) == 4


@pytest.mark.parametrize("k", [0, 2, 10])
def test_prb_answer_key_never_reaches_a_pair(tmp_path: Path, k: int) -> None:
    rows = prb_rows()
    bench = load_prb(write_jsonl(tmp_path / "prb.jsonl", rows), include_profile=k)
    secrets = [PRB_SECRET]
    for r in rows:
        secrets.append(r["narrative"])
        for a in r["rubric_aspects"]:
            secrets += [s for s in a.values() if s]
    for p in bench.pairs:
        fields = [prompt_text(p.prompt), p.chosen, p.rejected, json.dumps(p.meta)]
        for s in secrets:
            assert all(s not in f for f in fields), (p.pair_id, s)
    for user in bench.users.values():
        assert all(PRB_SECRET not in item.text for item in user.profile)
        assert "answer_key" not in user.meta and user.answer_key is not None
        key = user.answer_key
        assert PRB_SECRET in key["narrative"] and PRB_SECRET in key["rubric_text"]


def test_prb_include_profile_bm25_top_k_format(tmp_path: Path) -> None:
    bench = load_prb(write_jsonl(tmp_path / "prb.jsonl", prb_rows()), include_profile=1)
    prompt = bench.pairs[0].prompt
    assert isinstance(prompt, str)
    first = "Post 1 (Category: Lifestyle_and_Personal_Development):\nTravelling with a sourdough starter"
    assert first in prompt
    assert "Post 2" not in prompt
    assert prompt.endswith("How do I keep my sourdough starter alive while travelling?")
    plain = load_prb(tmp_path / "prb.jsonl")
    assert plain.pairs[0].prompt == "How do I keep my sourdough starter alive while travelling?"
    assert bm25_rank("jazz album", ["my cat", "a jazz album", "jazz"])[0] == 1
    assert bm25_rank("nothing matches", ["a", "b"]) == [0, 1]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"chosen": None}, "chosen': missing"),
        ({"question": 5}, "question': expected a string, got int"),
        ({"rejected": "  "}, "rejected': empty text"),
        ({"profile": [{"id": "x", "category": "c"}]}, "profile.0.text': missing"),
        ({"profile": "not a list"}, "profile': expected a list, got str"),
        ({"rubric_aspects": [{"aspect": 3}]}, "rubric_aspects.0.aspect': expected a string, got int"),
        ({"id": "q0"}, "id': duplicate id 'q0'"),
    ],
)
def test_prb_malformed_rows_name_file_line_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    rows = prb_rows()
    rows[1].update(change)
    path = write_jsonl(tmp_path / "prb.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_prb(path)
    assert f"prb.jsonl:2: field '{field}" in str(err.value)
    bench = load_prb(path, on_error="skip")
    assert len(bench.pairs) == 2 and bench.skipped.total() == 1


# ---------------------------------------------------------------------------------------------- LaMP-5
@pytest.fixture(scope="module")
def encoder() -> Any:
    from perbench.models.encoder import load_encoder

    return load_encoder("minilm", device="cpu")


class HashEncoder:
    """A cheap stand-in for the sentence encoder: hashed bag of lower-cased words, unit norm."""

    name = "hash-bow"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 256), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.asarray(out / np.maximum(norms, 1e-9), dtype=np.float32)


@pytest.fixture(scope="module")
def lamp_user(tmp_path_factory: pytest.TempPathFactory, encoder: Any) -> tuple[Path, Benchmark]:
    root = lamp5_user_based(tmp_path_factory.mktemp("lamp"))
    return root, load_pref_lamp(root, encoder=encoder, unseen_fraction=0.25, seed=1)


def test_pref_lamp_pairs_references_and_profiles(lamp_user: tuple[Path, Benchmark]) -> None:
    root, bench = lamp_user
    assert len(bench.pairs) == 8 and len(bench.references) == 8
    assert len(bench.users) == 8 and len(bench.unseen_users) == 2  # user-based: question id = user id
    dev_golds = {g["output"] for g in json.loads((root / "LaMP_5" / "dev_outputs.json").read_text())["golds"]}
    for p in bench.pairs:
        assert isinstance(p.prompt, str) and not p.prompt.startswith(LAMP5_PREFIX)
        assert p.prompt.startswith("In this paper we study")
        assert p.chosen != p.rejected and p.rejected not in dev_golds  # dev answers never serve as negatives
        assert p.meta["negative_source"] == "other_users"
        ref = bench.reference(p.user_id, p.prompt)
        assert ref is not None and ref.text == p.chosen and ref.split == p.split
    assert {p.split for p in bench.pairs if p.user_id in ("speech1", "protein1")} == {"test"}
    item = bench.users["graph0"].profile[0]
    assert item.text.startswith('"Scalable Graph Neural Networks with Sampling" is a title for "In this')
    assert item.meta["title"] == "Scalable Graph Neural Networks with Sampling"


def test_pref_lamp_table1_mined_beats_random_on_every_metric(lamp_user: tuple[Path, Benchmark]) -> None:
    _, bench = lamp_user
    t = bench.meta["table1"]
    assert t["n"] == 8
    for metric in ("rouge1", "rougeL", "bertscore"):
        assert t["mined"][metric] > t["random"][metric], metric
    text = format_table1(t)
    assert "ROUGE-1" in text and "BERTScore" in text and "24.6" in text


def test_pref_lamp_same_profile_pool_and_time_layout(tmp_path: Path) -> None:
    root = lamp5_user_based(tmp_path)
    bench = load_pref_lamp(root, encoder=HashEncoder(), negative_pool="same_profile", with_table1=False)
    for p in bench.pairs:
        titles = [i.meta["title"] for i in bench.users[p.user_id].profile]
        assert p.meta["negative_source"] == "same_profile" and p.rejected in titles
    lamp5_time_based(tmp_path)
    timed = load_pref_lamp(tmp_path, layout="time", encoder=HashEncoder(), unseen_fraction=0.0, with_table1=False)
    assert sorted(timed.users) == ["user0", "user1", "user2", "user3"] and timed.meta["layout"] == "time"
    for u in timed.users:
        assert len(timed.select(user=u, split="train")) == 2 and len(timed.select(user=u, split="test")) == 1
    extra = load_pref_lamp(root, encoder=HashEncoder(), profile_pairs=1, with_table1=False)
    assert len(extra.pairs) == 16 and sum(p.meta["source"] == "profile" for p in extra.pairs) == 8


def _break_lamp(root: Path, split: str, edit: Callable[[list[dict[str, Any]], dict[str, Any]], None]) -> None:
    folder = root / "LaMP_5"
    questions = json.loads((folder / f"{split}_questions.json").read_text())
    outputs = json.loads((folder / f"{split}_outputs.json").read_text())
    edit(questions, outputs)
    write_json(folder / f"{split}_questions.json", questions)
    write_json(folder / f"{split}_outputs.json", outputs)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda q, o: o["golds"].pop(1), "train_questions.json:2: field 'id': no gold title with this id"),
        (
            lambda q, o: q[1]["profile"][0].update(title=7),
            "train_questions.json:2: field 'profile.0.title': expected",
        ),
        (lambda q, o: q[1].update(input=LAMP5_PREFIX + "  "), "train_questions.json:2: field 'input': empty"),
        (lambda q, o: q[1].pop("input"), "train_questions.json:2: field 'input': missing"),
        (lambda q, o: o["golds"][0].update(output=""), "train_outputs.json:1: field 'output': empty text"),
    ],
)
def test_pref_lamp_malformed_rows(tmp_path: Path, edit: Any, message: str) -> None:
    root = lamp5_user_based(tmp_path)
    _break_lamp(root, "train", edit)
    with pytest.raises(DataError) as err:
        load_pref_lamp(root, encoder=HashEncoder(), with_table1=False)
    assert message in str(err.value)


def test_pref_lamp_time_layout_needs_user_id(tmp_path: Path) -> None:
    lamp5_time_based(tmp_path)
    path = tmp_path / "time" / "LaMP_5" / "dev_questions.json"
    rows = json.loads(path.read_text())
    del rows[2]["user_id"]
    write_json(path, rows)
    with pytest.raises(DataError, match=r"dev_questions\.json:3: field 'user_id': missing"):
        load_pref_lamp(tmp_path, layout="time", encoder=HashEncoder(), with_table1=False)


def test_pref_lamp_download_layout_and_embedding_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = lamp5_user_based(tmp_path / "flat")
    nested = tmp_path / "nested" / "LaMP_5"
    for split in ("train", "dev"):
        for kind in ("questions", "outputs"):
            name = f"{split}_{kind}.json"
            (nested / split).mkdir(parents=True, exist_ok=True)
            (nested / split / name).write_text((root / "LaMP_5" / name).read_text())
    a = load_pref_lamp(root, encoder=HashEncoder(), with_table1=False)
    b = load_pref_lamp(tmp_path / "nested", encoder=HashEncoder(), with_table1=False)
    assert [p.content_key() for p in a.pairs] == [p.content_key() for p in b.pairs]

    calls: list[int] = []

    class Counting:
        def encode(self, texts: list[str]) -> Any:
            calls.append(len(texts))
            return HashEncoder().encode(texts)

    monkeypatch.setenv("PERBENCH_CACHE", str(tmp_path / "cache"))
    first = encode_cached(Counting(), ["a title", "another title"], "encoder=test")
    second = encode_cached(Counting(), ["a title", "another title"], "encoder=test")
    assert calls == [2] and (first == second).all()


def test_pref_lamp_named_encoder_caches_by_its_path_and_loads_only_to_encode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named encoder's embeddings are cached under its resolved path; found in the cache, nothing loads (the
    recipe in data/ only ever sees an encoder object)."""
    import perbench.models.encoder as encoder_module

    root = lamp5_user_based(tmp_path / "lamp")
    monkeypatch.setenv("PERBENCH_CACHE", str(tmp_path / "cache"))
    first = load_pref_lamp(root, encoder="minilm", with_table1=False)
    assert len(list((tmp_path / "cache" / "pref_lamp").glob("emb-*.npy"))) == 1

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the encoder loaded although its embeddings are cached")

    monkeypatch.setattr(encoder_module, "load_encoder", refuse)
    again = load_pref_lamp(root, encoder="minilm", with_table1=False)
    assert [(p.rejected, p.meta["negative_similarity"]) for p in again.pairs] == [
        (p.rejected, p.meta["negative_similarity"]) for p in first.pairs
    ]
    assert again.meta["encoder"] == "minilm"


# ----------------------------------------------------------------------------------------------- PRISM
def test_prism_pairs_prompts_and_lore_split(tmp_path: Path) -> None:
    bench = load_prism(write_prism(tmp_path))
    assert len(bench.users) == 7 and bench.skipped.counts["user_below_min_dialogues"] == 1
    assert len(bench.pairs) == 7 * 6 * (3 + 1)  # turn 0: chosen vs 3 siblings; turn 1: vs 1
    assert len(bench.unseen_users) == 1  # round(0.2 * 7)
    for u in bench.users:
        train_dialogues = {p.meta["conversation_id"] for p in bench.select(user=u, split="train")}
        test_dialogues = {p.meta["conversation_id"] for p in bench.select(user=u, split="test")}
        assert len(train_dialogues) == 3 and len(test_dialogues) == 3 and not train_dialogues & test_dialogues
    turn1 = next(p for p in bench.pairs if p.meta["turn"] == 1)
    cid = turn1.meta["conversation_id"]
    assert turn1.prompt == (
        Message("user", f"{cid} question at turn 0?"),
        Message("assistant", f"{cid} answer 0 at turn 0."),
        Message("user", f"{cid} question at turn 1?"),
    )
    assert turn1.chosen == f"{cid} answer 0 at turn 1." and turn1.rejected == f"{cid} answer 1 at turn 1."
    unseen = bench.unseen_users[0]
    shots = bench.fewshot(unseen)
    assert len(shots) == 12 and [s.meta["conversation_id"] for s in shots] == sorted(
        (s.meta["conversation_id"] for s in shots), key=lambda c: int(c.rsplit("-", 1)[1])
    )
    again = load_prism(tmp_path)
    assert again.fingerprint() == bench.fingerprint()


def test_prism_survey_fields_become_profile_and_meta(tmp_path: Path) -> None:
    bench = load_prism(write_prism(tmp_path))
    user = bench.users["user0"]
    assert [p.item_id for p in user.profile] == ["self_description", "system_string"]
    assert user.profile[1].text == "Be brief and cite sources, participant 0." and user.answer_key is None
    assert user.meta["survey"]["age"] == "25-34" and user.meta["dialogues"] == 6


def test_prism_counts_turns_without_a_choice(tmp_path: Path) -> None:
    convs = prism_conversations({f"user{u}": 6 for u in range(2)})
    for utt in convs[0]["conversation_history"]:
        if utt["role"] == "model" and utt["turn"] == 1:
            utt["if_chosen"] = False
    bench = load_prism(write_prism(tmp_path, prism_survey(2), convs), unseen_fraction=0.0)
    assert bench.skipped.counts["turn_without_chosen"] == 1
    assert len(bench.pairs) == 2 * 6 * 4 - 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(user_id="stranger"), "field 'user_id': unknown user 'stranger'"),
        (
            lambda c: c["conversation_history"][1].pop("if_chosen"),
            "field 'conversation_history.1.if_chosen': missing",
        ),
        (
            lambda c: c["conversation_history"][0].update(content=5),
            "field 'conversation_history.0.content': expected a string, got int",
        ),
        (
            lambda c: c["conversation_history"][2].update(content=" "),
            "field 'conversation_history.2.content': empty",
        ),
        (lambda c: c.pop("conversation_history"), "field 'conversation_history': missing"),
    ],
)
def test_prism_malformed_conversations(tmp_path: Path, edit: Any, message: str) -> None:
    convs = prism_conversations({"user0": 6})
    edit(convs[3])
    write_prism(tmp_path, prism_survey(1), convs)
    with pytest.raises(DataError) as err:
        load_prism(tmp_path)
    assert f"conversations.jsonl:4: {message}" in str(err.value)


def test_prism_malformed_survey(tmp_path: Path) -> None:
    survey = prism_survey(2)
    survey.append(dict(survey[0]))
    write_prism(tmp_path, survey, [prism_conversation("c1", "user0")])
    with pytest.raises(DataError, match=r"survey\.jsonl:3: field 'user_id': duplicate user"):
        load_prism(tmp_path)


# ---------------------------------------------------------------------------------------------- TL;DR
def test_tldr_pal_protocol(tmp_path: Path) -> None:
    bench = load_tldr(write_jsonl(tmp_path / "cmp.jsonl", tldr_rows()), unseen_min_comparisons=5, n_shot=2)
    assert bench.seen_users == [f"w{i:02d}" for i in range(10)] and bench.unseen_users == ["w10", "w11"]
    counts = bench.skipped.counts
    assert counts["not_both_supervised"] == 1 and counts["no_reddit_post"] == 1
    assert counts["worker_below_min_comparisons"] == 2
    for p in bench.pairs:
        assert isinstance(p.prompt, str)
        assert p.prompt.startswith("Human: Post ") and p.prompt.endswith(" Assistant:")
        shorter = (bench.users[p.user_id].answer_key or {})["prefers"] == "shorter"
        assert (len(p.chosen) < len(p.rejected)) == shorter
        assert p.chosen == p.chosen.strip()
    prefers = [(bench.users[f"w0{r}"].answer_key or {})["prefers"] for r in range(10)]
    assert prefers == ["longer"] * 3 + ["shorter"] * 3 + ["longer"] * 4
    for u in bench.unseen_users:
        assert len(bench.fewshot(u)) == 2 and len(bench.select(user=u, split="test")) >= 3
    for u in bench.seen_users:
        train = {p.meta["post_id"] for p in bench.select(user=u, split="train")}
        test = {p.meta["post_id"] for p in bench.select(user=u, split="test")}
        assert train and test and not train & test


def test_tldr_lore_protocol_real_labels_and_caps(tmp_path: Path) -> None:
    rows = tldr_rows()
    path = write_jsonl(tmp_path / "cmp.jsonl", rows)
    bench = load_tldr(path, protocol="lore", max_train_per_seen=5, max_fewshot_per_unseen=2)
    assert len(bench.seen_users) + len(bench.unseen_users) == 13  # every worker has train and valid rows
    assert abs(len(bench.seen_users) - len(bench.unseen_users)) <= 1
    for u in bench.seen_users:
        assert len(bench.select(user=u, split="train")) <= 5
    for u in bench.unseen_users:
        assert len(bench.fewshot(u)) <= 2
    assert bench.skipped.counts["over_train_cap"] > 0 and bench.skipped.counts["over_fewshot_cap"] > 0
    by_line = {f"tldr:cmp.jsonl:{i + 1}": r for i, r in enumerate(rows)}
    for p in bench.pairs:
        row = by_line[p.pair_id]
        assert p.chosen == row["summaries"][row["choice"]]["text"].strip()
        assert (p.split == "train") == (row["split"] == "train")


def test_tldr_reads_every_split_of_a_saved_dataset(tmp_path: Path) -> None:
    rows = tldr_rows()[:-2]
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] != "train"]
    import datasets

    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(train), "validation": datasets.Dataset.from_list(valid)}
    ).save_to_disk(str(tmp_path / "ds"))
    bench = load_tldr(tmp_path / "ds", protocol="lore")
    assert bench.meta["rows_read"] == len(rows)
    assert any("[validation]" in p.meta["source"] for p in bench.pairs)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"choice": 2}, "field 'choice': expected 0 or 1, got 2"),
        (
            {"summaries": [{"text": 5, "policy": "sup2"}, {"text": "b", "policy": "sup2"}]},
            "field 'summaries.0.text': expected a string, got int",
        ),
        ({"summaries": [{"text": "a", "policy": "sup2"}]}, "field 'summaries': expected 2 summaries, got 1"),
        ({"worker": None}, "field 'worker': missing (null)"),
        ({"info": {"id": "p", "post": "  "}}, "field 'info.post': empty text"),
    ],
)
def test_tldr_malformed_rows(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    rows = tldr_rows()
    rows[4].update(change)
    with pytest.raises(DataError) as err:
        load_tldr(write_jsonl(tmp_path / "cmp.jsonl", rows))
    assert f"cmp.jsonl:5: {message}" in str(err.value)


def test_tldr_reads_a_folder_of_upstream_batch_files(tmp_path: Path) -> None:
    rows = tldr_rows()
    write_jsonl(tmp_path / "cmp" / "batch3.json", rows[:100])
    write_jsonl(tmp_path / "cmp" / "batch4.json", rows[100:])
    folder = load_tldr(tmp_path / "cmp", unseen_min_comparisons=5, n_shot=2)
    single = load_tldr(write_jsonl(tmp_path / "all.jsonl", rows), unseen_min_comparisons=5, n_shot=2)
    assert len(folder.pairs) == len(single.pairs) and folder.meta["rows_read"] == len(rows)


def test_tldr_lore_needs_the_split_field(tmp_path: Path) -> None:
    rows = tldr_rows()
    del rows[0]["split"]
    with pytest.raises(DataError, match=r"cmp\.jsonl:1: field 'split': missing"):
        load_tldr(write_jsonl(tmp_path / "cmp.jsonl", rows), protocol="lore")


# ------------------------------------------------------------------------------- persona / domain styles
def test_persona_rows_dedup_history_and_rubric(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "persona.jsonl", persona_rows())
    bench = load_persona(path)
    sentence = "I am a health-conscious runner."
    runner = opaque_user_id(sentence)  # the persona sentence is the answer key: the id is an opaque hash of it
    assert sorted(bench.users) == sorted([runner, opaque_user_id("I love baroque music.")])
    assert bench.users[runner].answer_key == {"rubric_text": sentence}
    assert bench.skipped.counts["duplicate_pair"] == 3  # two repeated rows + one repeated history pair
    assert bench.skipped.counts["history_equals_row_pair"] == 1
    assert [p.prompt for p in bench.train_pairs()] == ["Recommend a snack."]
    assert len(bench.test_pairs()) == 5 and bench.weighting == "pair"
    # the profile item that quotes the persona sentence (the answer key) is withheld, and counted
    assert [i.text for i in bench.users[runner].profile] == ["Another profile wording."]
    assert bench.skipped.counts["profile_item_contains_answer_key"] == 2  # one per persona
    rows_weighted = load_persona(path, dedup=False)
    assert rows_weighted.weighting == "row" and len(rows_weighted.test_pairs()) == 7


def test_persona_malformed_history(tmp_path: Path) -> None:
    rows = persona_rows()
    rows[2]["history"] = [{"prompt": "p", "chosen": "c"}]
    with pytest.raises(DataError, match=r"persona\.jsonl:3: field 'history\.0\.rejected': missing"):
        load_persona(write_jsonl(tmp_path / "persona.jsonl", rows))


def _hash_score(seed: int) -> Callable[[str, Prompt, str], float]:
    def score(user: str, prompt: Prompt, response: str) -> float:
        del user  # user-agnostic: the same (prompt, response) gets the same score for every user
        digest = hashlib.sha256(f"{seed}|{prompt_text(prompt)}|{response}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    return score


def test_domain_styles_user_agnostic_scorers_get_exactly_half(tmp_path: Path) -> None:
    bench = load_domain_styles(write_jsonl(tmp_path / "dom.jsonl", domain_rows()))
    style = {u: str((r.answer_key or {})["style"]) for u, r in bench.users.items()}
    assert sorted(style.values()) == sorted(DOMAIN_STYLES) and sorted(bench.users) == sorted(
        map(style_user, style.values())
    )
    assert len(bench.pairs) == 5 * 4 * 3
    scorers: dict[str, Callable[[str, Prompt, str], float]] = {
        "length": lambda u, x, y: float(len(y)),
        "random": _hash_score(seed=7),
        "fixed": lambda u, x, y: float(sum(map(ord, y)) % 997 + len(prompt_text(x))),
    }
    for name, score in scorers.items():
        assert accuracy(bench.pairs, score) == 0.5, name
    oracle = accuracy(bench.pairs, lambda u, x, y: float(y.startswith(f"[{style[u]}]")))
    assert oracle == 1.0


def test_domain_styles_list_form_split_and_errors(tmp_path: Path) -> None:
    rows = [
        {"query": r["query"], "responses": [{"style": s, "response": t} for s, t in r["responses"].items()]}
        for r in domain_rows()
    ]
    bench = load_domain_styles(write_jsonl(tmp_path / "dom.jsonl", rows), train_fraction=0.4, unseen_styles=["playful"])
    assert len(bench.pairs) == 60 and len(bench.train_pairs()) == 2 * 12 - 6
    assert bench.unseen_users == [style_user("playful")]
    bad = domain_rows()
    bad[2]["responses"]["formal"] = ""  # an empty response drops only the pairs it is in (counted in pairs)
    dropped = load_domain_styles(write_jsonl(tmp_path / "dom2.jsonl", bad))
    assert dropped.skipped.counts["empty_response"] == 6 and len(dropped.pairs) == 60 - 6
    bad[2]["responses"]["formal"] = 7
    with pytest.raises(DataError, match=r"dom2\.jsonl:3: field 'responses\.formal': expected a string, got int"):
        load_domain_styles(write_jsonl(tmp_path / "dom2.jsonl", bad))
    one = [{"query": "q", "responses": {"concise": "x"}}, *domain_rows(1)]
    assert load_domain_styles(write_jsonl(tmp_path / "dom3.jsonl", one)).skipped.counts["fewer_than_two_styles"] == 1


# -------------------------------------------------------------------------------------------- registry
def test_registry_entries_resolve_with_defaults(tmp_path: Path) -> None:
    from perbench.registry import benchmarks

    names = ["prb", "pref_lamp", "prism", "tldr", "persona", "domain_styles"]
    for name in names:
        entry = benchmarks.entry(name)
        assert {"rm_backbone", "policy", "k", "w"} <= set(entry.defaults)
        assert callable(benchmarks.get(name))
    assert benchmarks.entry("tldr").defaults["rm_backbone"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert benchmarks.entry("prism").defaults["rm_backbone"] == "Qwen/Qwen2.5-0.5B-Instruct"
    bench = benchmarks.get("domain_styles")(source=write_jsonl(tmp_path / "d.jsonl", domain_rows(2)))
    assert len(bench.pairs) == 24


def test_domain_styles_parquet_struct_with_a_missing_style(tmp_path: Path) -> None:
    rows = domain_rows(3)
    del rows[0]["responses"]["socratic"]  # the Parquet struct stores it as null
    bench = load_domain_styles(write_parquet(tmp_path / "dom.parquet", rows))
    assert len(bench.pairs) == 3 * 2 + 2 * 12
    assert accuracy(bench.pairs, lambda u, x, y: float(len(y))) == 0.5
