"""The ``format`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

``bulleted``: at least 3 list lines; ``prose``: no list line. A list line starts (after optional
indentation) with ``-``, ``*`` or ``•`` followed by a space, or with ``1.``/``1)`` style numbering
(one or two digits) followed by a space.
"""

from __future__ import annotations

import random

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    LIST_PREFIX,
    Doc,
    Line,
    Para,
    capitalize_first,
    copy_doc,
    finish,
    has_words,
    opening_of,
    parse,
    split_lines,
    split_sentences,
    with_period,
    word_sentences,
    words,
)


def _list_line_count(text: str) -> int:
    return sum(1 for ln in split_lines(text) if LIST_PREFIX.match(ln))


def _check_format(text: str) -> str | None:
    n = _list_line_count(text)
    if n >= 3:
        return "bulleted"
    if n == 0:
        return "prose"
    return None


ASPECT = Aspect(
    "format",
    ("bulleted", "prose"),
    "Whether the answer is laid out as a list or as running text.",
    "bulleted: >= 3 list lines ('- ', '* ', '• ', '1. ', '1) '); prose: no list line; 1-2 is neither.",
    _check_format,
)


# Transforms

_FILLER_BULLETS = ("Keep it simple.", "Check the result.", "Adjust as needed.")


def _split_item(item: str) -> list[str]:
    """Split one list item in two, at a clause boundary near the middle, else at the middle word."""
    toks = item.split()
    if len(words(item)) < 6:
        return [item]
    best: tuple[int, int] | None = None  # (distance to the middle, token index starting part two)
    for i in range(1, len(toks)):
        prev, cur = toks[i - 1], toks[i]
        if prev.endswith((",", ";", ":")) or cur.lower() in ("and", "or", "then", "but"):
            d = abs(i - len(toks) / 2)
            if best is None or d < best[0]:
                best = (int(d), i)
    if best is None and len(words(item)) < 8:
        return [item]
    cut = best[1] if best is not None else len(toks) // 2
    a = " ".join(toks[:cut]).rstrip(",;:")
    b = " ".join(toks[cut:])
    if best is not None and toks[cut].lower() in ("and", "or"):
        b = " ".join(toks[cut + 1 :]) or b
    if not has_words(a) or not has_words(b):
        cut = len(toks) // 2
        a, b = " ".join(toks[:cut]), " ".join(toks[cut:])
    return [a, capitalize_first(b)]


def _bulletize(para: Para) -> Para:
    out: Para = []
    for line in para:
        if line.kind != "prose":
            out.append(line)
            continue
        for s in line.sentences:
            out.append(Line("- ", "list", [s]) if has_words(s) else Line(line.prefix, "prose", [s]))
    return out


def _to_bulleted(text: str, rng: random.Random) -> str:
    doc = copy_doc(parse(text))
    units = sum(1 for p in doc for ln in p if ln.kind == "list") + sum(
        1 for p in doc for ln in p if ln.kind == "prose" for s in ln.sentences if has_words(s)
    )
    opening = opening_of(doc)
    new_doc: Doc = []
    if opening == "context" and len(doc) >= 2 and units - len(word_sentences(doc[0])) >= 3:
        # Keep the explanatory first paragraph as it is and list the rest.
        new_doc.append(doc[0])
        doc = doc[1:]
    else:
        # Keep a lead (one sentence, or two when the text opens with context) in prose before the list.
        k = 2 if opening == "context" and units - 2 >= 3 else 1
        first = doc[0][0]
        if first.kind != "prose" or not first.sentences or not has_words(first.sentences[0]):
            k = 0
        if k and units - k >= 3:
            lead: list[str] = []
            for line in doc[0]:
                while line.kind == "prose" and line.sentences and len(lead) < k:
                    lead.append(line.sentences.pop(0))
            new_doc.append([Line(first.prefix, "prose", lead)])
    for para in doc:
        new_para = _bulletize([ln for ln in para if ln.sentences or ln.kind == "heading"])
        if new_para:
            new_doc.append(new_para)
    if sum(1 for p in new_doc for ln in p if ln.kind == "list") >= 3:
        return finish(new_doc)
    # Fewer than three sentences in all: split items, then pad with generic steps.
    headings = [ln for p in doc for ln in p if ln.kind == "heading"]
    items = [
        item
        for p in doc
        for ln in p
        if ln.kind != "heading"
        for item in (ln.sentences if ln.kind == "prose" else [" ".join(ln.sentences)])
        if has_words(item)
    ]
    while len(items) < 3:
        i = max(range(len(items)), key=lambda k: len(words(items[k])), default=-1)
        parts = _split_item(items[i]) if i >= 0 else []
        if len(parts) < 2:
            break
        items[i : i + 1] = parts
    pad = [b for b in _FILLER_BULLETS if b not in items]
    while len(items) < 3:
        items.append(pad.pop(0))
    out: Doc = [headings] if headings else []
    out.append([Line("- ", "list", [it]) for it in items])
    return finish(out)


def _strip_markers(s: str) -> str:
    while True:
        m = LIST_PREFIX.match(s)
        if not m:
            return s
        s = s[m.end() :]


def _to_prose(text: str, rng: random.Random) -> str:
    new_doc: Doc = []
    for para in parse(text):
        new_para: Para = []
        run: list[str] = []  # consecutive list items, joined into one prose line
        for line in [*para, None]:
            if line is not None and line.kind == "list":
                item = _strip_markers(" ".join(line.sentences)).strip()
                if item:
                    run.append(with_period(capitalize_first(item)) if has_words(item) else item)
                continue
            if run:
                new_para.append(Line("", "prose", split_sentences(" ".join(run))))
                run = []
            if line is not None and line.sentences:
                new_para.append(line)
        if new_para:
            new_doc.append(new_para)
    out = finish(new_doc)
    # A prose line can still look like a list line (e.g. "2. Bake." split off a sentence): unmark it.
    return "\n".join(_strip_markers(ln) for ln in split_lines(out))


TRANSFORMS: dict[str, Transform] = {"bulleted": _to_bulleted, "prose": _to_prose}
