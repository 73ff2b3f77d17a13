"""The ``person`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

Counts whole words you, your, yours, yourself, yourselves (so "you're" counts once).
``second_person``: at least 2; ``impersonal``: none.
"""

from __future__ import annotations

import random
import re

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    case_like,
    finish,
    insert_sentence,
    parse,
)

_YOU_RE = re.compile(r"(?i)\byou(?:rs?|rself|rselves)?\b")


def _check_person(text: str) -> str | None:
    n = len(_YOU_RE.findall(text))
    if n >= 2:
        return "second_person"
    if n == 0:
        return "impersonal"
    return None


ASPECT = Aspect(
    "person",
    ("second_person", "impersonal"),
    "Whether the answer addresses the reader as 'you'.",
    "second_person: >= 2 of you/your/yours/yourself/yourselves; impersonal: none; exactly 1 is neither.",
    _check_person,
)


# Transforms

_YOU_SENTENCES = (
    "You can adjust the details to fit your own situation.",
    "Start with what you already have and adjust as you go.",
    "You will get better results if you keep things simple at first.",
)

_IMPERSONAL_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\bthank[ \t]+you\b"), "thanks"),
    (re.compile(r"(?i)\byou['’]re\b"), "people are"),
    (re.compile(r"(?i)\byou['’]ve\b"), "people have"),
    (re.compile(r"(?i)\byou['’]ll\b"), "people will"),
    (re.compile(r"(?i)\byou['’]d\b"), "people would"),
    (re.compile(r"(?i)\byourselves\b"), "themselves"),
    (re.compile(r"(?i)\byourself\b"), "oneself"),
    (re.compile(r"(?i)\byours\b"), "theirs"),
    (re.compile(r"(?i)\byour[ \t]+own\b"), "their own"),
    (re.compile(r"(?i)\byour\b"), "the"),
    (re.compile(r"(?i)\byou\b"), "people"),
)


def _to_impersonal(text: str, rng: random.Random) -> str:
    t = text
    for pattern, repl in _IMPERSONAL_RULES:
        t = _sub_like(pattern, repl, t)
    return t


def _sub_like(pattern: re.Pattern[str], repl: str, text: str) -> str:
    return pattern.sub(lambda m: case_like(m.group(0), repl), text)


def _to_second_person(text: str, rng: random.Random) -> str:
    return finish(insert_sentence(parse(text), rng.choice(_YOU_SENTENCES)))


TRANSFORMS: dict[str, Transform] = {"second_person": _to_second_person, "impersonal": _to_impersonal}
