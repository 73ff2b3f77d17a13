"""The ``example`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

``has_example``: contains "for example", "for instance", "e.g.", "such as" or "example:" (any case);
``no_example``: contains none of them.
"""

from __future__ import annotations

import random
import re

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    at_sentence_start,
    case_like,
    finish,
    insert_sentence,
    parse,
    tidy,
)

_EXAMPLE_RE = re.compile(
    r"(?i)\bfor[ \t]+example\b|\bfor[ \t]+instance\b|\be\.g\.|\bsuch[ \t]+as\b|\bexample(?:\*\*|[ \t])*:"
)


def _check_example(text: str) -> str | None:
    return "has_example" if _EXAMPLE_RE.search(text) else "no_example"


ASPECT = Aspect(
    "example",
    ("has_example", "no_example"),
    "Whether the answer gives an explicit example.",
    "has_example: contains 'for example', 'for instance', 'e.g.', 'such as' or 'example:'; no_example: none of them.",
    _check_example,
)


# Transforms

_EXAMPLES = (
    "For example, setting aside a fixed time each week makes a new habit much easier to keep.",
    "For instance, a short checklist can prevent the most common mistakes.",
    "For example, trying a smaller version first shows quickly what works and what does not.",
)

_FOR_EXAMPLE_RE = re.compile(
    r"(?i)(?P<lead>,[ \t]*)?\bfor[ \t]+(?:example|instance)\b"
    r"(?P<trail>(?:\*\*)?[ \t]*[,:](?:\*\*)?)?[ \t]*(?P<next>[a-z])?"
)


def _drop_for_example(m: re.Match[str]) -> str:
    nxt = m.group("next") or ""
    if at_sentence_start(m.string, m.start()):
        return nxt.upper()
    if m.group("trail") or not nxt:
        return " " + nxt  # "This is, for example, true" -> "This is true"
    return " like " + nxt  # "fruits for example apples" -> "fruits like apples"


def _to_has_example(text: str, rng: random.Random) -> str:
    return finish(insert_sentence(parse(text), rng.choice(_EXAMPLES)))


def _to_no_example(text: str, rng: random.Random) -> str:
    t = text
    for _ in range(5):
        t = _FOR_EXAMPLE_RE.sub(_drop_for_example, t)
        t = re.sub(r"(?i)\bsuch[ \t]+as\b", lambda m: case_like(m.group(0), "like"), t)
        t = re.sub(r"(?i)\be\.g\.(?:[ \t]*,)?", lambda m: case_like(m.group(0), "like"), t)
        t = re.sub(r"(?i)\b(example)(?=(?:\*\*|[ \t])*:)", lambda m: case_like(m.group(1), "illustration"), t)
        t = tidy(t)
        if not _EXAMPLE_RE.search(t):
            return t
    return _EXAMPLE_RE.sub("", t)


TRANSFORMS: dict[str, Transform] = {"has_example": _to_has_example, "no_example": _to_no_example}
