"""Pref-LaMP (Rezk et al., arXiv 2512.23067), built from LaMP-5 scholarly title generation.

Each LaMP-5 question becomes one pair: prompt = the paper's abstract (the instruction prefix stripped),
chosen = the user's real title (also kept as a :class:`Reference`), rejected = a *hard negative*: the title
most similar to the real one under the bundled sentence encoder, among titles that are not the real one.

Layouts: user-based ``LaMP_5/{train,dev}_{questions,outputs}.json`` (every question is a different user;
the question id is the user id) and time-based ``time/LaMP_5/`` (rows carry ``user_id``; a user has several
questions). ``train`` questions give train pairs, ``dev`` questions test pairs.

Choices the paper leaves open (see ``docs/benchmarks-data.md``):

* Candidate pool: every profile title plus the *train* gold titles. Dev gold titles never serve as a
  negative, so no test answer appears as a rejected response anywhere. Titles equal to the gold (after
  lower-casing and collapsing spaces) are excluded.
* ``negative_pool``: ``other_users`` (titles owned by other users), ``same_profile`` (the user's own
  titles), or ``both``; ``pair.meta["negative_source"]`` records where the negative came from.
* Similarity = cosine between title embeddings (all-MiniLM-L6-v2, mean pooled); ties -> first candidate.
* Seen/unseen users: a seeded ``unseen_fraction`` of users.
* ``profile_pairs=n`` optionally turns each user's first n profile items (with an abstract) into extra
  train pairs mined the same way, giving user-based users their own training signal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perbench.data.benchmarks.lamp5 import LAMP5_PREFIX, lamp5_dir, lamp5_file, profile_items, read_golds, strip_prefix
from perbench.data.benchmarks.pref_lamp_negatives import CandidatePool, TextEncoder, encode_cached, mine_negatives
from perbench.data.policies import assign_unseen
from perbench.data.reading import read_rows
from perbench.data.records import (
    Benchmark,
    PreferencePair,
    ProfileItem,
    Reference,
    SkipReport,
    Split,
    User,
    dedup_pairs,
)
from perbench.data.rows import DataError, ErrorSink, OnError, Row
from perbench.data.user_context import describe_user_context

__all__ = [
    "LAMP5_PREFIX",
    "NEGATIVE_POOLS",
    "NegativePool",
    "TextEncoder",
    "build_pref_lamp",
    "encode_cached",
    "lamp5_dir",
    "lamp5_file",
    "mine_negatives",
    "read_golds",
    "strip_prefix",
]

NegativePool = Literal["other_users", "same_profile", "both"]
NEGATIVE_POOLS: tuple[str, ...] = ("other_users", "same_profile", "both")
_SPLIT_OF: dict[str, Split] = {"train": "train", "dev": "test"}


@dataclass
class _Question:
    qid: str
    user: str
    abstract: str
    title: str
    split: Split
    profile: list[ProfileItem]
    where: str
    lamp_split: str


def build_pref_lamp(
    path: str | Path,
    *,
    encoder: TextEncoder,
    layout: Literal["auto", "user", "time"] = "auto",
    splits: Sequence[str] = ("train", "dev"),
    negative_pool: NegativePool = "other_users",
    unseen_fraction: float = 0.2,
    seed: int = 0,
    profile_pairs: int = 0,
    max_profile: int | None = None,
    cache_embeddings: bool = True,
    on_error: OnError = "raise",
    name: str | None = None,
) -> Benchmark:
    """Build Pref-LaMP from local LaMP-5 files (see the module docstring for the recipe), its negatives mined with
    ``encoder`` (any object with ``encode``; one with a ``cache_key`` has its embeddings cached under the perbench
    cache dir unless ``cache_embeddings=False``).

    :func:`perbench.builders.pref_lamp.load_pref_lamp` (registry ``pref_lamp``) takes an encoder by name too and
    adds the Table-1 similarity check.
    """
    if negative_pool not in NEGATIVE_POOLS:
        raise ValueError(f"negative_pool must be one of {NEGATIVE_POOLS}, got {negative_pool!r}")
    unknown = sorted(set(splits) - set(_SPLIT_OF))
    if unknown:
        raise ValueError(f"unknown LaMP-5 split(s) {unknown}; use 'train' and/or 'dev'")
    folder, kind = lamp5_dir(path, layout)
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    questions: list[_Question] = []
    no_prefix = 0
    rows_read = 0
    for split_name in splits:
        qpath, opath = lamp5_file(folder, split_name, "questions"), lamp5_file(folder, split_name, "outputs")
        golds = read_golds(opath)
        used: set[str] = set()
        for label, line, data in read_rows(qpath, fmt="json"):
            rows_read += 1
            row = Row(label, line, data)
            try:
                qid = row.ident("id")
                abstract, had_prefix = strip_prefix(row.text("input"))
                if not abstract.strip():
                    raise row.error("input", "empty abstract after the instruction prefix")
                profile = profile_items(row)
                has_user = kind == "time" or (kind == "auto" and "user_id" in data)
                user = row.ident("user_id") if has_user else qid
                if qid not in golds:
                    raise row.error("id", f"no gold title with this id in {opath.name}")
            except DataError as e:
                sink(e)
                continue
            no_prefix += not had_prefix
            used.add(qid)
            if max_profile is not None:
                profile = profile[:max_profile]
            questions.append(
                _Question(qid, user, abstract, golds[qid][0], _SPLIT_OF[split_name], profile, row.where, split_name)
            )
        for gid in sorted(set(golds) - used):
            skipped.add("gold_without_question", f"{opath}:{golds[gid][1]}")

    # users and their profiles (union over their questions, first occurrence wins)
    profiles: dict[str, list[ProfileItem]] = {}
    for q in questions:
        have = profiles.setdefault(q.user, [])
        ids = {p.item_id for p in have}
        have.extend(p for p in q.profile if p.item_id not in ids)

    # what to mine for: every question, plus optional profile-derived train pairs
    todo: list[tuple[str, str, str, Split, dict[str, Any]]] = []  # user, prompt, gold, split, meta
    for q in questions:
        todo.append(
            (
                q.user,
                q.abstract,
                q.title,
                q.split,
                {"source": q.where, "question_id": q.qid, "lamp_split": q.lamp_split},
            )
        )
    if profile_pairs > 0:
        for user, items in profiles.items():
            usable = [p for p in items if str(p.meta.get("abstract", "")).strip()]
            for p in usable[:profile_pairs]:
                todo.append(
                    (
                        user,
                        str(p.meta["abstract"]),
                        str(p.meta["title"]),
                        "train",
                        {"source": "profile", "profile_item": p.item_id},
                    )
                )

    pool = CandidatePool()
    for user, items in profiles.items():
        for p in items:
            pool.add(str(p.meta["title"]), user)
    for q in questions:
        if q.split == "train":
            pool.add(q.title, q.user)

    enc = encoder
    queries = [(t[0], t[2]) for t in todo]
    mined: list[tuple[int, str, float] | None] = [None] * len(todo)
    if pool.texts and queries:
        key: str | None = getattr(enc, "cache_key", None) if cache_embeddings else None
        extra = sorted({g for _, g in queries if g not in pool.index})
        emb_all = encode_cached(enc, pool.texts + extra, key)  # one pass: most golds are pool titles too
        emb_pool = emb_all[: len(pool.texts)]
        row_of = {t: len(pool.texts) + i for i, t in enumerate(extra)}
        emb_q = emb_all[[pool.index[g] if g in pool.index else row_of[g] for _, g in queries]]
        mined = mine_negatives(queries, pool, emb_pool, emb_q, negative_pool)

    pairs: list[PreferencePair] = []
    references: list[Reference] = []
    for n, ((user, prompt, gold, split, info), hit) in enumerate(zip(todo, mined, strict=True)):
        if info["source"] == "profile":
            pid = f"lamp5:{user}:profile:{info['profile_item']}"
        else:
            pid = f"lamp5:{info['lamp_split']}:{info['question_id']}"
            references.append(Reference(user, prompt, gold, split))
        if hit is None:
            skipped.add("no_negative", pid)
            continue
        idx, source, sim = hit
        pairs.append(
            PreferencePair(
                pid,
                user,
                prompt,
                gold,
                pool.texts[idx],
                split,
                {**info, "negative_source": source, "negative_similarity": sim, "order": n},
            )
        )
    pairs = dedup_pairs(pairs, skipped)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(profiles) - kept):
        skipped.add("user_without_pairs", uid)
    user_ids = sorted(kept)
    unseen = assign_unseen(user_ids, unseen_fraction, seed)
    users = {u: User(u, seen=u not in unseen, profile=tuple(profiles[u])) for u in user_ids}
    references = [r for r in references if r.user_id in kept]
    meta: dict[str, Any] = {
        "source": str(folder),
        "layout": kind,
        "splits": list(splits),
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "negative_pool": negative_pool,
        "candidate_pool": "profile titles of all users + train gold titles (dev golds never negatives)",
        "candidates": len(pool.texts),
        "encoder": getattr(enc, "name", type(enc).__name__),
        "profile_pairs": profile_pairs,
        "missing_instruction_prefix": no_prefix,
        "split_policy": "LaMP train questions -> train, dev questions -> test",
        "seen_policy": f"seeded fraction {unseen_fraction} unseen (seed {seed})",
        "negative_sources": {
            s: sum(p.meta["negative_source"] == s for p in pairs) for s in ("same_profile", "other_users")
        },
        "user_context": describe_user_context(
            "profile",
            users,
            included=["profile (the user's earlier papers: title and abstract)", "own train pairs"],
            note="real labels: there is no answer key; test gold titles are test references only",
        ),
    }
    return Benchmark(name or "pref_lamp", pairs, users, references, skipped=skipped, meta=meta)
