"""Personalized RewardBench (Ma et al., arXiv 2604.07343): one question, one user, one chosen/rejected pair.

Rows (hub ``QiyaoMa/Personalized-RewardBench``, configs = three LaMP-QA categories, split ``test``):
``id``, ``question``, ``profile`` (the user's past posts ``{id, category, text}``), ``rubric_aspects``,
``narrative``, ``category``, ``chosen``, ``rejected``.

Choices we make (see ``docs/benchmarks-data.md``):

* **One user per row.** The row id is the user id, so every "per-user" number is a per-row number, and
  macro-over-users equals micro-over-pairs. Users have no training pairs: the benchmark is evaluation-only,
  so every user is marked *unseen* with an empty few-shot set.
* **The answer key never reaches a pair.** ``rubric_aspects`` and ``narrative`` describe what the chosen
  response was told to cover; they live only in ``User.answer_key`` (for downstream rubric judging) -- not in
  any prompt or response. Methods see the user context: the profile posts (an aspect's ``evidence`` may quote
  them; the posts stay, they are the user's own history).
* ``include_profile=k`` prepends the top-k posts ranked by BM25 (``bm25s``) similarity to the question,
  each formatted ``Post i (Category: c):\\n{text}``. The reference code used contriever; BM25 keeps this
  offline and deterministic (ties keep the profile's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perbench.data.reading import detect_format, read_rows
from perbench.data.records import Benchmark, PreferencePair, ProfileItem, SkipReport, User, dedup_pairs
from perbench.data.rows import DataError, ErrorSink, OnError, Row, check_text, type_name
from perbench.data.user_context import describe_user_context

PRB_HUB_ID = "QiyaoMa/Personalized-RewardBench"
PRB_CONFIGS: tuple[str, ...] = (
    "Art_and_Entertainment",
    "Lifestyle_and_Personal_Development",
    "Society_and_Culture",
)
PROFILE_HEADER = "Posts previously written by the user:"


def bm25_rank(query: str, docs: Sequence[str]) -> list[int]:
    """Indices of ``docs`` by BM25 score for ``query``, best first; ties keep the original order."""
    if not docs:
        return []
    import bm25s

    corpus_tokens = bm25s.tokenize(list(docs), stopwords="en", show_progress=False, return_ids=False)
    if not any(corpus_tokens):
        return list(range(len(docs)))
    query_tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
    # bm25s cannot index an empty document: give empty ones a token no query contains.
    corpus_tokens = [toks or ["\x00empty"] for toks in corpus_tokens]
    retriever = bm25s.BM25()
    retriever.index(corpus_tokens, show_progress=False)
    scores = retriever.get_scores(query_tokens) if query_tokens else [0.0] * len(docs)
    return sorted(range(len(docs)), key=lambda i: (-float(scores[i]), i))


def format_posts(items: Sequence[ProfileItem]) -> str:
    """``Post i (Category: c):\\n{text}`` blocks, numbered from 1 in the given order."""
    blocks = []
    for i, item in enumerate(items, 1):
        category = item.meta.get("category") or "unknown"
        blocks.append(f"Post {i} (Category: {category}):\n{item.text}")
    return "\n\n".join(blocks)


def profile_prompt(question: str, profile: Sequence[ProfileItem], k: int) -> str:
    """The question, preceded by the user's top-``k`` posts by BM25 similarity (unchanged when k = 0)."""
    if k <= 0 or not profile:
        return question
    order = bm25_rank(question, [p.text for p in profile])[:k]
    return f"{PROFILE_HEADER}\n\n{format_posts([profile[i] for i in order])}\n\nQuestion: {question}"


def _rubric_aspects(row: Row) -> list[dict[str, str]]:
    value = row.get("rubric_aspects")
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise row.error("rubric_aspects", f"expected a list, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise row.error(f"rubric_aspects.{i}", f"expected an object, got {type_name(item)}")
        entry = {}
        for key in ("aspect", "evidence", "reason"):
            v = item.get(key)
            if v is not None and not isinstance(v, str):
                raise row.error(f"rubric_aspects.{i}.{key}", f"expected a string, got {type_name(v)}")
            entry[key] = v or ""
        if not entry["aspect"].strip():
            raise row.error(f"rubric_aspects.{i}.aspect", "empty text")
        out.append(entry)
    return out


def _profile(row: Row) -> list[ProfileItem]:
    items = []
    for i, post in enumerate(row.seq("profile")):
        if not isinstance(post, Mapping):
            raise row.error(f"profile.{i}", f"expected an {{id, category, text}} object, got {type_name(post)}")
        if post.get("text") is None:
            raise row.error(f"profile.{i}.text", "missing")
        text = check_text(row, f"profile.{i}.text", post["text"])
        category = post.get("category")
        if category is not None and not isinstance(category, str):
            raise row.error(f"profile.{i}.category", f"expected a string, got {type_name(category)}")
        post_id = post.get("id", i)
        items.append(ProfileItem(str(post_id), text, {"category": category}))
    return items


def rubric_summary(aspects: Sequence[Mapping[str, str]]) -> str:
    """The answer key as judge-readable text (downstream judging only -- never shown to a reward model)."""
    lines = []
    for a in aspects:
        reason = f" -- {a['reason']}" if a.get("reason") else ""
        lines.append(f"- {a['aspect']}{reason}")
    return "\n".join(lines)


def load_prb(
    source: str | Path = PRB_HUB_ID,
    *,
    config: str | Sequence[str] | None = None,
    split: str = "test",
    include_profile: int = 0,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load Personalized RewardBench from a JSONL/JSON/Parquet file, a ``save_to_disk`` folder, or the hub.

    ``config``: one LaMP-QA category or several; for the hub id, ``None`` loads all three (user ids are
    then prefixed ``<config>/``). Local files hold whatever they hold; ``config`` is ignored for them.
    """
    if include_profile < 0:
        raise ValueError(f"include_profile must be >= 0, got {include_profile}")
    kind = fmt or detect_format(source)
    sources: list[tuple[str | None, dict[str, Any]]]
    if kind == "hub":
        configs = list(PRB_CONFIGS) if config is None else [config] if isinstance(config, str) else list(config)
        unknown = sorted(set(configs) - set(PRB_CONFIGS))
        if unknown:
            raise ValueError(f"unknown Personalized RewardBench config(s) {unknown}; use {list(PRB_CONFIGS)}")
        sources = [(c, {"fmt": kind, "split": split, "config": c}) for c in configs]
    else:
        sources = [(None, {"fmt": kind, "split": split if kind == "hf_disk" else None, "config": None})]
    prefix = len(sources) > 1

    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    pairs: list[PreferencePair] = []
    users: dict[str, User] = {}
    first_at: dict[str, str] = {}
    rows_read = 0
    for cfg, kwargs in sources:
        for label, line, data in read_rows(source, **kwargs):
            rows_read += 1
            row = Row(label, line, data)
            try:
                row_id = row.ident("id")
                user_id = f"{cfg}/{row_id}" if prefix and cfg else row_id
                if user_id in first_at:
                    raise row.error("id", f"duplicate id {row_id!r} (first at {first_at[user_id]})")
                question = row.text("question")
                chosen = row.text("chosen")
                rejected = row.text("rejected")
                profile = _profile(row)
                aspects = _rubric_aspects(row)
                narrative = row.opt_text("narrative")
                category = row.opt_text("category") or cfg
            except DataError as e:
                sink(e)
                continue
            first_at[user_id] = row.where
            prompt = profile_prompt(question, profile, include_profile)
            pairs.append(
                PreferencePair(
                    f"prb:{user_id}",
                    user_id,
                    prompt,
                    chosen,
                    rejected,
                    "test",
                    {
                        "source": row.where,
                        "question": question,
                        "category": category,
                        "profile_posts_in_prompt": min(include_profile, len(profile)),
                    },
                )
            )
            users[user_id] = User(
                user_id,
                seen=False,
                profile=tuple(profile),
                meta={"category": category, "question": question},
                answer_key={"rubric_aspects": aspects, "narrative": narrative, "rubric_text": rubric_summary(aspects)},
            )
    pairs = dedup_pairs(pairs, skipped)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(users) - kept):
        skipped.add("user_without_pairs", uid)
        del users[uid]
    meta = {
        "source": str(source),
        "configs": [c for c, _ in sources if c] or None,
        "split": split,
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "include_profile": include_profile,
        "profile_retrieval": ("bm25s (BM25, English stopwords), ties in profile order" if include_profile else None),
        "users": "one user per row (user id = row id): per-user results are per-row",
        "seen_policy": "evaluation-only: every user unseen, no few-shot pairs",
        # by design: methods that fit on train pairs are reported not applicable, not an error
        "evaluation_only": True,
        "split_policy": "every pair test",
        "answer_key": "rubric_aspects/narrative kept in User.answer_key only; never in pairs",
        "user_context": describe_user_context(
            "profile",
            users,
            included=["profile (past posts)"],
            withheld=["rubric_aspects", "narrative"],
            note="evaluation-only: no train pairs"
            + (f"; top-{include_profile} posts in the prompt" if include_profile else ""),
        ),
    }
    return Benchmark(name or "prb", pairs, users, skipped=skipped, meta=meta, weighting="pair")
