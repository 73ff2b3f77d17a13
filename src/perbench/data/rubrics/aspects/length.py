"""The ``length`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

``concise``: at most 60 words; ``detailed``: at least 120 words. A word is a whitespace-separated
token holding a letter or digit; list markers and heading hashes are not words.
"""

from __future__ import annotations

import random

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    FILLER,
    Doc,
    Line,
    Para,
    closing_of,
    finish,
    has_words,
    insert_paragraph,
    parse,
    prose,
    with_period,
    word_count,
    words,
)


def _check_length(text: str) -> str | None:
    n = word_count(text)
    if n <= 60:
        return "concise"
    if n >= 120:
        return "detailed"
    return None


ASPECT = Aspect(
    "length",
    ("concise", "detailed"),
    "How long the answer is.",
    "concise: <= 60 words; detailed: >= 120 words; 61-119 words is neither.",
    _check_length,
)


# Transforms


def _cut_words(sentence: str, limit: int) -> str:
    out: list[str] = []
    n = 0
    for tok in sentence.split():
        if has_words(tok):
            if n >= limit:
                break
            n += 1
        out.append(tok)
    return with_period(" ".join(out))


def _to_concise(text: str, rng: random.Random) -> str:
    doc = parse(text)
    tail: str | None = None
    if closing_of(doc) == "asks":
        q = [s for ln in doc[-1] for s in ln.sentences][-1]
        if len(words(q)) <= 20:
            tail = q
    budget = 60 - (len(words(tail)) if tail else 0)
    new_doc: Doc = []
    used = 0
    stop = False
    for para in doc:
        new_para: Para = []
        for line in para:
            kept: list[str] = []
            for s in line.sentences:
                n = len(words(s))
                if used + n > budget:
                    stop = True
                    break
                kept.append(s)
                used += n
            if kept:
                new_para.append(Line(line.prefix, line.kind, kept))
            if stop:
                break
        if new_para:
            new_doc.append(new_para)
        if stop:
            break
    # Drop a dangling heading or list intro ("Here are the steps:") left at the cut.
    while new_doc:
        last_line = new_doc[-1][-1]
        dangling = last_line.kind == "heading" or (
            bool(last_line.sentences) and last_line.sentences[-1].rstrip(" *_").endswith(":")
        )
        if not dangling or (sum(len(p) for p in new_doc) == 1 and len(last_line.sentences) <= 1):
            break
        if last_line.kind != "heading":
            last_line.sentences.pop()
        if not last_line.sentences or last_line.kind == "heading":
            new_doc[-1].pop()
        if not new_doc[-1]:
            new_doc.pop()
    if not any(has_words(s) for p in new_doc for ln in p if ln.kind != "heading" for s in ln.sentences):
        first = next((s for p in doc for ln in p for s in ln.sentences if has_words(s)), "")
        new_doc = [[prose(_cut_words(first, max(1, budget - 1)))]]
    if tail is not None and closing_of(new_doc) != "asks":
        new_doc.append([prose(tail)])
    return finish(new_doc)


def _to_detailed(text: str, rng: random.Random) -> str:
    need = 120 - word_count(text)
    filler: list[str] = []
    pool: list[str] = []
    while need > 0:
        if not pool:
            pool = list(FILLER)
            rng.shuffle(pool)
        s = pool.pop()
        filler.append(s)
        need -= len(words(s))
    return finish(insert_paragraph(parse(text), [prose(*filler)]))


TRANSFORMS: dict[str, Transform] = {"concise": _to_concise, "detailed": _to_detailed}
