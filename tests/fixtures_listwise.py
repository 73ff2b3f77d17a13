"""Tiny files in the published layouts of RewardBench 2, SynthesizeMe's PersonalRewardBench, RMGAP, PersonalLLM,
LaMP-4 and LongLaMP, written from their schemas. Builders return plain rows (so a test can break one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures_upstream import write_json

Rows = list[dict[str, Any]]


def rb2_rows() -> Rows:
    """Two Factuality rows and one Math row (1 chosen vs 3 rejected), and Ties prompts 0 and 1 as ref/tied rows."""
    rows: Rows = []
    for i, (subset, q) in enumerate([("Factuality", "Who wrote Hamlet?"), ("Factuality", "What is H2O?"),
                                     ("Math", "What is 7 times 8?")]):  # fmt: skip
        rows.append(
            {
                "id": str(i),
                "prompt": q,
                "chosen": [f"The correct answer to '{q}', stated carefully."],
                "rejected": [f"A wrong answer {j} to '{q}'." for j in range(3)],
                "num_correct": 1,
                "subset": subset,
                "total_completions": 4,
                "models": ["m0", "m1", "m2", "m3"],
            }
        )
    for pid, q in enumerate(["Name a primary colour.", "Name a prime number below ten."]):
        rows.append(
            {"id": f"ref:{pid}", "prompt": q, "chosen": [f"Ref answer to {q}"],
             "rejected": [f"Wrong {j} to {q}" for j in range(2)], "num_correct": 1, "subset": "Ties"}
        )  # fmt: skip
        rows.append(
            {"id": f"tied:{pid}", "prompt": q, "chosen": [f"Right {j} to {q}" for j in range(3)],
             "rejected": [f"Wrong {j} to {q}" for j in range(2)], "num_correct": 3, "subset": "Ties"}
        )  # fmt: skip
    return rows


def synthesizeme_rows() -> Rows:
    """3 users × (3 train, 1 val, 2 test) rows; contexts are chat lists, responses ``{role, content}``. As in
    PersonalRewardBench, the assistant's earlier turns are written ``role: "model"``: the last test row of every user
    has a three-turn context."""
    rows: Rows = []
    for u in range(3):
        for k, split in enumerate(["train", "train", "train", "val", "test", "test"]):
            q = f"User {u} question {k}: what should I cook tonight?"
            context = [{"role": "user", "content": q}]
            if k == 5:
                context = [
                    {"role": "user", "content": f"User {u} opener: I have rice and eggs."},
                    {"role": "model", "content": f"MODELTURN{u}: fried rice is quick with those."},
                    {"role": "user", "content": q},
                ]
            rows.append(
                {
                    "user_id": f"user{u}",
                    "context": context,
                    "chosen": {"role": "assistant", "content": f"A {'short' if u else 'long detailed'} answer {k}."},
                    "rejected": {"role": "assistant", "content": f"A {'long detailed' if u else 'short'} answer {k}."},
                    "split": split,
                    "chosen_score": 5,
                    "rejected_score": 2,
                    "prediction_azure/gpt-4o-mini-240718": "First",
                    "agreement": True,
                }
            )
    return rows


RMGAP_KEYS = ("response1", "response2", "response3", "response4")
RMGAP_STYLES = ("concise", "detailed", "bulleted", "casual")


def rmgap_rows() -> Rows:
    """Three instances in RMGAP's release layout (``data/test.jsonl``, its README and schema test): four ``{key, text}``
    responses, four prompt groups each naming a ``winner`` key and holding three paraphrased prompts (base + two
    rewrites). Instances 0 and 2 (Chat) give every group another winner; instance 1 (Writing) two groups the same one;
    two Chat instances and one Writing instance make the macro mean over domains differ from the micro mean."""
    rows: Rows = []
    instances = [
        ("Chat", "water my plants", RMGAP_KEYS),
        ("Writing", "write a thank-you note", RMGAP_KEYS[:3] + RMGAP_KEYS[:1]),
        ("Chat", "plan a picnic", RMGAP_KEYS[1:] + RMGAP_KEYS[:1]),
    ]
    for i, (domain, topic, winners) in enumerate(instances):
        responses = [
            {"key": k, "text": f"{s.title()} answer about how to {topic}."}
            for k, s in zip(RMGAP_KEYS, RMGAP_STYLES, strict=True)
        ]
        groups = [
            {
                "group": g + 1,
                "winner": w,
                "prompts": [
                    {
                        "role": "base",
                        "text": f"How do I {topic} (case {g})? I like {RMGAP_STYLES[RMGAP_KEYS.index(w)]} answers.",
                    },
                    {
                        "role": "rewrite",
                        "text": f"Best way to {topic} (case {g}), in a {RMGAP_STYLES[RMGAP_KEYS.index(w)]} way?",
                    },
                    {"role": "rewrite", "text": f"Tips to {topic} (g{g}), {RMGAP_STYLES[RMGAP_KEYS.index(w)]} please."},
                ],
            }
            for g, w in enumerate(winners)
        ]
        rows.append(
            {
                "id": f"rmgap-{i}",
                "domain": domain,
                "source": "fixture",
                "models": {k: "gen" for k in RMGAP_KEYS},
                "responses": responses,
                "prompt_groups": groups,
                "style_assignments": {f"r{j + 1}": {"tone": s} for j, s in enumerate(RMGAP_STYLES)},
            }
        )
    return rows


PERSONALLLM_RMS = ("gemma_2b", "llama3_sfairx", "oasst_deberta_v3")


def personalllm_rows() -> Rows:
    """4 prompts (3 train, 1 test) × 4 responses, each with a score column per reward model."""
    rows: Rows = []
    for i in range(4):
        row: dict[str, Any] = {"prompt": f"Prompt {i}: how do I stay motivated?", "subset": "test",
                               "split": "test" if i == 3 else "train"}  # fmt: skip
        for j in range(1, 5):
            row[f"response_{j}"] = f"Response {j} to prompt {i}" + " with more words" * j
            row[f"response_{j}_model"] = f"gen{j}"
            for k, rm in enumerate(PERSONALLLM_RMS):
                row[f"response_{j}_{rm}"] = float((j * (k + 1) + i) % 5) + 0.1 * k * j
        rows.append(row)
    return rows


def write_lamp4(root: Path) -> Path:
    """A LaMP-4 folder: 3 train and 2 dev questions, each its own user, with golds in the outputs files."""
    for split, ids in (("train", ["100", "101", "102"]), ("dev", ["200", "201"])):
        qs = [
            {
                "id": q,
                "input": f"Generate a headline for the following article: Article {q} about local news and weather.",
                "profile": [
                    {"id": f"{q}-p{j}", "title": f"Old headline {j} of {q}", "text": f"Old article {j}."}
                    for j in range(2)
                ],
            }
            for q in ids
        ]
        write_json(root / f"{split}_questions.json", qs)
        golds = [{"id": q, "output": f"Headline {q}: weather and local news today"} for q in ids]
        write_json(root / f"{split}_outputs.json", {"task": "LaMP_4", "golds": golds})
    return root


def longlamp_rows() -> Rows:
    """2 users × (2 train + 1 test) rows in LongLaMP's review-writing shape."""
    rows: Rows = []
    for u in range(2):
        for k, split in enumerate(["train", "train", "test"]):
            rows.append(
                {
                    "reviewerId": f"R{u}",
                    "input": f"Write a review of product {k} rated {3 + u} stars.",
                    "output": f"Reviewer {u} on product {k}: solid build, {'loved' if u else 'liked'} it overall.",
                    "profile": [{"reviewText": f"Earlier review {j} by {u}.", "summary": "ok"} for j in range(2)],
                    "split": split,
                }
            )
    return rows
