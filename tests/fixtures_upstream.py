"""Tiny files in the exact upstream layouts: PRB, LaMP-5, PRISM, summarize_from_feedback, persona/domain.

Builders return plain rows (so a test can break one) and writers put them on disk under ``tmp_path``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Rows = list[dict[str, Any]]


def write_jsonl(path: Path, rows: Rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: Rows) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def save_to_disk(path: Path, rows: Rows, split: str | None = None) -> Path:
    import datasets

    ds = datasets.Dataset.from_list(rows)
    obj: Any = datasets.DatasetDict({split: ds}) if split else ds
    obj.save_to_disk(str(path))
    return path


# ------------------------------------------------------------------------------ Personalized RewardBench
PRB_SECRET = "ZEBRAKEY"  # appears in every rubric aspect / narrative and nowhere else


def prb_rows() -> Rows:
    topics = [
        (
            "How do I keep my sourdough starter alive while travelling?",
            "Lifestyle_and_Personal_Development",
            [
                "I bake sourdough bread every weekend and feed my starter twice a day.",
                "My garden tomatoes did badly this year because of the rain.",
                "Travelling with a sourdough starter: dry it into flakes and rehydrate it later.",
                "I prefer short practical answers over long essays.",
            ],
        ),
        (
            "Which jazz albums should a beginner listen to first?",
            "Art_and_Entertainment",
            [
                "Kind of Blue was the first jazz album I loved.",
                "I play piano badly but with enthusiasm.",
                "Beginner jazz listening: start with Blue Train and Time Out.",
                "My cat hates loud music.",
            ],
        ),
        (
            "Is it rude to skip a coworker's wedding?",
            "Society_and_Culture",
            [
                "Office etiquette matters to me; I always send cards.",
                "I skipped a wedding once and sent a generous gift instead.",
                "Cycling to work keeps me sane.",
            ],
        ),
    ]
    rows = []
    for i, (question, category, posts) in enumerate(topics):
        rows.append(
            {
                "id": f"q{i}",
                "question": question,
                "profile": [{"id": f"p{i}-{j}", "category": category, "text": t} for j, t in enumerate(posts)],
                "rubric_aspects": [
                    {
                        "aspect": f"{PRB_SECRET} aspect {i}-a mentions practical steps",
                        "evidence": f"{PRB_SECRET} evidence {i}",
                        "reason": f"{PRB_SECRET} reason {i}",
                    },
                    {
                        "aspect": f"{PRB_SECRET} aspect {i}-b stays under 100 words",
                        "evidence": "",
                        "reason": "",
                    },
                ],
                "narrative": f"{PRB_SECRET} narrative: I want concise, practical advice for question {i}.",
                "category": category,
                "chosen": f"Here are practical steps for question {i}: plan ahead, be concise, follow up.",
                "rejected": f"There are many philosophical perspectives on question {i} to consider at length.",
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- LaMP-5
LAMP5_PREFIX = "Generate a title for the following abstract of a paper: "

# Four topics; users on one topic share many title words, titles on different topics share none.
LAMP_TOPICS: dict[str, list[str]] = {
    "graph": [
        "Graph Neural Networks for Molecular Property Prediction",
        "Graph Neural Networks for Traffic Forecasting",
        "Scalable Graph Neural Networks with Sampling",
        "Graph Attention Networks for Molecular Graphs",
    ],
    "rl": [
        "Deep Reinforcement Learning for Robotic Grasping",
        "Reinforcement Learning for Robotic Manipulation Policies",
        "Offline Reinforcement Learning with Conservative Critics",
        "Reward Shaping in Deep Reinforcement Learning",
    ],
    "speech": [
        "End-to-End Speech Recognition with Transformers",
        "Streaming Speech Recognition on Mobile Devices",
        "Self-Supervised Speech Representations for Recognition",
        "Multilingual Speech Recognition at Scale",
    ],
    "protein": [
        "Protein Structure Prediction using Evolutionary Couplings",
        "Protein Folding Dynamics from Molecular Simulation",
        "Predicting Protein Function from Sequence Alone",
        "Protein Design by Structure Prediction Inversion",
    ],
}


def _abstract(title: str) -> str:
    return f"In this paper we study {title.lower()}. We propose a method and report strong results."


def lamp5_user_based(root: Path) -> Path:
    """``root/LaMP_5/{train,dev}_{questions,outputs}.json``: 8 users (2 per topic), 6 train + 2 dev."""
    folder = root / "LaMP_5"
    questions: dict[str, Rows] = {"train": [], "dev": []}
    golds: dict[str, Rows] = {"train": [], "dev": []}
    n = 0
    for topic, titles in LAMP_TOPICS.items():
        for k in range(2):
            gold = titles[k]
            other = next(t for name, t in LAMP_TOPICS.items() if name != topic)
            profile_titles = [titles[2 + k], other[3 - k]]
            split = "dev" if (topic in ("speech", "protein") and k == 1) else "train"
            qid = f"{topic}{k}"
            questions[split].append(
                {
                    "id": qid,
                    "input": LAMP5_PREFIX + _abstract(gold),
                    "profile": [
                        {"id": f"{qid}-p{j}", "title": t, "abstract": _abstract(t)}
                        for j, t in enumerate(profile_titles)
                    ],
                }
            )
            golds[split].append({"id": qid, "output": gold})
            n += 1
    for split in ("train", "dev"):
        write_json(folder / f"{split}_questions.json", questions[split])
        write_json(folder / f"{split}_outputs.json", {"task": "LaMP_5", "golds": golds[split]})
    return root


def lamp5_time_based(root: Path) -> Path:
    """``root/time/LaMP_5/``: rows carry ``user_id``; 4 users, 2 train questions and 1 dev question each."""
    folder = root / "time" / "LaMP_5"
    questions: dict[str, Rows] = {"train": [], "dev": []}
    golds: dict[str, Rows] = {"train": [], "dev": []}
    for u, titles in enumerate(LAMP_TOPICS.values()):
        for k, title in enumerate(titles[:3]):
            split = "dev" if k == 2 else "train"
            qid = f"t{u}{k}"
            questions[split].append(
                {
                    "id": qid,
                    "user_id": f"user{u}",
                    "input": LAMP5_PREFIX + _abstract(title),
                    "profile": [{"id": f"{qid}-p0", "title": titles[3], "abstract": _abstract(titles[3])}],
                }
            )
            golds[split].append({"id": qid, "output": title})
    for split in ("train", "dev"):
        write_json(folder / f"{split}_questions.json", questions[split])
        write_json(folder / f"{split}_outputs.json", {"task": "LaMP_5", "golds": golds[split]})
    return root


# ----------------------------------------------------------------------------------------------- PRISM
def prism_survey(n_users: int = 8) -> Rows:
    return [
        {
            "user_id": f"user{u}",
            "self_description": f"I am participant {u} and I like direct answers.",
            "system_string": f"Be brief and cite sources, participant {u}.",
            "age": "25-34",
            "order_stated_prefs": ["values", "fluency"],
            "location": {"birth_country": "Narnia"},
        }
        for u in range(n_users)
    ]


def prism_conversation(cid: str, user: str, n_turns: int = 2) -> dict[str, Any]:
    history: Rows = []
    for t in range(n_turns):
        history.append(
            {
                "turn": t,
                "role": "user",
                "content": f"{cid} question at turn {t}?",
                "model_provider": None,
                "model_name": None,
                "score": None,
                "if_chosen": None,
                "within_turn_id": None,
            }
        )
        n_resp = 4 if t == 0 else 2
        for r in range(n_resp):
            history.append(
                {
                    "turn": t,
                    "role": "model",
                    "content": f"{cid} answer {r} at turn {t}.",
                    "model_provider": "acme",
                    "model_name": f"model-{r}",
                    "score": 90 - 10 * r,
                    "if_chosen": r == 0,
                    "within_turn_id": r,
                }
            )
    return {
        "conversation_id": cid,
        "user_id": user,
        "conversation_type": "unguided",
        "opening_prompt": history[0]["content"],
        "conversation_history": history,
    }


def prism_conversations(dialogues: dict[str, int]) -> Rows:
    rows: Rows = []
    for user, n in dialogues.items():
        rows.extend(prism_conversation(f"c-{user}-{d}", user) for d in range(n))
    return rows


def write_prism(root: Path, survey: Rows | None = None, conversations: Rows | None = None) -> Path:
    survey = prism_survey() if survey is None else survey
    if conversations is None:
        conversations = prism_conversations({f"user{u}": (6 if u < 7 else 2) for u in range(8)})
    write_jsonl(root / "survey.jsonl", survey)
    write_jsonl(root / "conversations.jsonl", conversations)
    return root


# ----------------------------------------------------------------------------- summarize_from_feedback
def tldr_rows() -> Rows:
    """13 workers: w00..w09 with 20..11 supervised comparisons, w10 (6), w11 (5), w12 (2); plus noise rows."""
    counts = {f"w{i:02d}": 20 - i for i in range(10)} | {"w10": 6, "w11": 5, "w12": 2}
    rows: Rows = []
    n = 0
    for worker, count in counts.items():
        for k in range(count):
            post_id = f"post{(n + k) % 17}"
            short = f"Short summary {k} of {post_id}."
            long = f"A considerably longer summary number {k} of {post_id}, with extra detail and nuance."
            a, b = (short, long) if k % 2 == 0 else (long, short)
            rows.append(
                {
                    "info": {
                        "id": post_id,
                        "post": f"Post {post_id}: my roommate keeps eating my food.",
                        "title": "roommate",
                        "subreddit": "relationships",
                        "article": None,
                        "site": None,
                    },
                    "split": "train" if k % 3 else "valid1",
                    "summaries": [
                        {"text": " " + a, "policy": "sup2", "note": None},
                        {"text": " " + b, "policy": "sup4_6b", "note": None},
                    ],
                    "choice": k % 2,
                    "worker": worker,
                    "batch": "batch3",
                    "extra": {"confidence": 7},
                }
            )
        n += count
    # a comparison with a non-supervised policy, and a CNN/DM row without a post
    rows.append(
        {
            **rows[0],
            "summaries": [
                {"text": "x summary", "policy": "ppo_xl", "note": None},
                {"text": "y summary longer", "policy": "sup2", "note": None},
            ],
        }
    )
    rows.append({**rows[0], "info": {"id": "cnn1", "post": None, "article": "Some news article."}})
    return rows


# ----------------------------------------------------------------------------- persona / domain styles
def persona_rows() -> Rows:
    hist_a = [{"prompt": "Recommend a snack.", "chosen": "Apple slices.", "rejected": "A large cake."}]
    base = [
        (
            "I am a health-conscious runner.",
            "What should I eat before a race?",
            "Oatmeal and a banana.",
            "A double cheeseburger.",
        ),
        (
            "I am a health-conscious runner.",
            "Best drink after training?",
            "Water with electrolytes.",
            "Cola.",
        ),
        ("I love baroque music.", "Suggest a composer.", "Johann Sebastian Bach.", "A random pop band."),
        ("I love baroque music.", "What instrument should I learn?", "The harpsichord.", "The kazoo."),
    ]
    rows: Rows = []
    for persona, prompt, chosen, rejected in base:
        rows.append(
            {
                "persona": persona,
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "profile": f"Profile text for {persona}",
                "history": hist_a if "runner" in persona else [],
            }
        )
    # the same pair again with different profile/history text: a duplicate by (user, prompt, chosen, rejected)
    rows.append({**rows[0], "profile": "Another profile wording.", "history": []})
    rows.append({**rows[2], "profile": "Yet another wording.", "history": []})
    # a history pair that repeats one of the user's row pairs
    rows.append(
        {
            **rows[1],
            "prompt": "Favourite fruit?",
            "chosen": "Berries.",
            "rejected": "Candy.",
            "history": [
                {
                    "prompt": "Best drink after training?",
                    "chosen": "Water with electrolytes.",
                    "rejected": "Cola.",
                }
            ],
        }
    )
    return rows


DOMAIN_STYLES = ("concise", "formal", "playful", "socratic")


def domain_rows(n_queries: int = 5) -> Rows:
    """Every query answered in 4 styles, with pairwise-distinct lengths within a query."""
    rows: Rows = []
    for q in range(n_queries):
        responses = {}
        for s, style in enumerate(DOMAIN_STYLES):
            responses[style] = f"[{style}] answer to query {q}" + " more" * (s * 3 + q % 2)
        rows.append({"query": f"Explain topic number {q}.", "responses": responses})
    return rows


def domain_rows_shared_responses() -> Rows:
    """Domain-style rows where styles share responses: byte-identical across two styles, identical up to
    whitespace, one empty, and a query repeated with an overlapping set of responses (the layout that made
    per-pair deduplication drop one direction of a mirrored pair)."""
    same = "Photosynthesis turns light into sugar."
    return [
        {
            "query": "Explain photosynthesis.",
            "responses": {"concise": same, "formal": same, "playful": "Plants eat sunshine!", "socratic": "Why green?"},
        },
        {
            "query": "Explain tides.",
            "responses": {
                "concise": "The moon pulls water.",
                "formal": "Tides arise from lunar gravitation.",
                "playful": "The moon pulls  water. ",
                "socratic": "",
            },
        },
        {
            "query": "Explain photosynthesis.",
            "responses": {"concise": same, "formal": "Chlorophyll absorbs light.", "playful": "Plants eat sunshine!"},
        },
        {
            "query": "Explain rainbows.",
            "responses": {
                "concise": "Light splits in drops.",
                "formal": "Refraction and dispersion in droplets.",
                "playful": "Sky crayons!",
                "socratic": "What does a prism do?",
            },
        },
    ]
