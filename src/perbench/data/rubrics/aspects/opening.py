"""The ``opening`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

The first paragraph is the text up to the first blank line. ``direct``: it is plain prose (no list or
heading line) holding exactly one sentence of 1-20 words, i.e. a one-line answer up front.
``context``: it is plain prose holding at least two sentences, i.e. the answer opens with
explanation. A newline always ends a sentence.
"""

from __future__ import annotations

import random

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    Line,
    copy_doc,
    finish,
    has_words,
    opening_of,
    parse,
    prose,
    with_period,
    word_sentences,
    words,
)


def _check_opening(text: str) -> str | None:
    return opening_of(parse(text))


ASPECT = Aspect(
    "opening",
    ("direct", "context"),
    "Whether the answer comes first in one line or is preceded by explanation.",
    "direct: first paragraph is plain prose with exactly one sentence of <= 20 words; context: first "
    "paragraph is plain prose with >= 2 sentences; otherwise neither.",
    _check_opening,
)


# Transforms

_DIRECT_OPENERS = (
    "Short answer: keep it simple and build from there.",
    "In short, a simple and steady approach works best.",
    "The main point comes first, and the details follow below.",
)

_CONTEXT_LEADS = (
    "It depends a little on the situation, but the basics are simple.",
    "There are a few things worth knowing before getting into the details.",
    "This comes up a lot, and the answer depends on a few factors.",
)

_CONTEXT_PARAGRAPH = (
    "This depends a little on the situation.",
    "The points below cover the most common cases.",
)


def _to_direct(text: str, rng: random.Random) -> str:
    doc = copy_doc(parse(text))
    first_para = doc[0]
    first = first_para[0]
    if first.kind == "prose" and first.sentences:
        s1 = first.sentences[0]
        if has_words(s1) and len(words(s1)) <= 20:
            rest_line = Line(first.prefix, "prose", first.sentences[1:])
            rest = [ln for ln in [rest_line, *first_para[1:]] if ln.sentences]
            out = [[Line(first.prefix, "prose", [s1])], *([rest] if rest else []), *doc[1:]]
            rendered = finish(out)
            if _check_opening(rendered) == "direct":
                return rendered
    return finish([[prose(rng.choice(_DIRECT_OPENERS))], *doc])


def _to_context(text: str, rng: random.Random) -> str:
    doc = copy_doc(parse(text))
    first_para = doc[0]
    prose_first = all(ln.kind == "prose" for ln in first_para) and bool(word_sentences(first_para))
    if prose_first and len(doc) >= 2 and all(ln.kind == "prose" for ln in doc[1]) and word_sentences(doc[1]):
        # Drop the one-line answer: merge it into the paragraph that follows.
        head = first_para[-1]
        head.sentences[-1] = with_period(head.sentences[-1])
        nxt = doc[1]
        merged_first = Line(head.prefix, "prose", head.sentences + nxt[0].sentences)
        out = [[*first_para[:-1], merged_first, *nxt[1:]], *doc[2:]]
        rendered = finish(out)
        if _check_opening(rendered) == "context":
            return rendered
    if prose_first:
        first = first_para[0]
        out = copy_doc(doc)
        out[0][0] = Line(first.prefix, "prose", [rng.choice(_CONTEXT_LEADS), *first.sentences])
        rendered = finish(out)
        if _check_opening(rendered) == "context":
            return rendered
    return finish([[prose(*_CONTEXT_PARAGRAPH)], *doc])


TRANSFORMS: dict[str, Transform] = {"direct": _to_direct, "context": _to_context}
