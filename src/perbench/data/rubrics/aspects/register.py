"""The ``register`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

``formal``: no contraction, no casual marker and no ``!``; ``casual``: contractions and casual markers
together occur at least twice. Contractions are ``n't`` forms, ``'re 've 'll 'd 'm`` forms and ``'s``
after a pronoun (it's, that's, there's, let's, ...); possessives do not count. Casual markers are the
whole words hey, gonna, wanna, gotta, kinda, sorta, super, awesome, lol, yeah, yep, nope, btw, totally.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    at_sentence_start,
    case_like,
    finish,
    insert_sentence,
    parse,
    tidy,
)

_CONTRACTION_NT = re.compile(r"(?i)\b([a-z]+)n['’]t\b")

_CONTRACTION_S = re.compile(r"(?i)\b(it|that|there|here|what|who|where|how|he|she|let)['’]s\b")

_CONTRACTION_OTHER = re.compile(r"(?i)\b([a-z]+)['’](re|ve|ll|d|m)\b")

_CASUAL_WORDS = (
    "hey",
    "gonna",
    "wanna",
    "gotta",
    "kinda",
    "sorta",
    "super",
    "awesome",
    "lol",
    "yeah",
    "yep",
    "nope",
    "btw",
    "totally",
)

_CASUAL_RE = re.compile(r"(?i)\b(?:" + "|".join(_CASUAL_WORDS) + r")\b")


def _contraction_count(text: str) -> int:
    return sum(len(p.findall(text)) for p in (_CONTRACTION_NT, _CONTRACTION_S, _CONTRACTION_OTHER))


def casual_count(text: str) -> int:
    """Contractions plus casual markers, the quantity the ``register`` aspect thresholds."""
    return _contraction_count(text) + len(_CASUAL_RE.findall(text))


def _check_register(text: str) -> str | None:
    n = casual_count(text)
    if n >= 2:
        return "casual"
    if n == 0 and "!" not in text:
        return "formal"
    return None


ASPECT = Aspect(
    "register",
    ("formal", "casual"),
    "Formal versus chatty wording.",
    "formal: no contraction, no casual marker, no '!'; casual: >= 2 contractions and casual markers "
    "counted together; otherwise neither.",
    _check_register,
)


# Transforms

_CASUAL_SENTENCES = (
    "Honestly, it's gonna get easier pretty fast.",
    "It's kinda easier than it sounds, honestly.",
    "Don't stress too much, it's totally doable.",
)

_NT_SPECIAL = {"can't": "cannot", "won't": "will not", "shan't": "shall not", "ain't": "is not"}

_OTHER_EXPANSION = {"re": "are", "ve": "have", "ll": "will", "d": "would", "m": "am"}

_FORMAL_SWAP = {
    "gonna": "going to",
    "wanna": "want to",
    "gotta": "have to",
    "kinda": "somewhat",
    "sorta": "somewhat",
    "super": "very",
    "awesome": "excellent",
    "yeah": "yes",
    "yep": "yes",
    "nope": "no",
    "btw": "incidentally",
    "totally": "completely",
}

_DROP_RE = re.compile(r"(?i)\b(?:hey(?:[ \t]+there)?|lol)\b(?P<punct>[ \t]*[,!.]*)(?P<space>[ \t]*)(?P<next>[a-z])?")


def _expand_nt(m: re.Match[str]) -> str:
    full = m.group(0)
    key = full.lower().replace("’", "'")
    if key in _NT_SPECIAL:
        return case_like(full, _NT_SPECIAL[key])
    out = m.group(1) + " not"
    return out.upper() if full.isupper() and len(full) > 1 else out


def _expand_s(m: re.Match[str]) -> str:
    word = m.group(1)
    return word + (" us" if word.lower() == "let" else " is")


def _expand_other(m: re.Match[str]) -> str:
    return m.group(1) + " " + case_like(m.group(2), _OTHER_EXPANSION[m.group(2).lower()])


def _drop_casual(m: re.Match[str]) -> str:
    nxt = m.group("next") or ""
    if at_sentence_start(m.string, m.start()):
        return nxt.upper()
    punct = m.group("punct").replace(",", "").strip()
    return punct + m.group("space") + nxt


def _to_formal(text: str, rng: random.Random) -> str:
    t = _CONTRACTION_NT.sub(_expand_nt, text)
    t = _CONTRACTION_S.sub(_expand_s, t)
    t = _CONTRACTION_OTHER.sub(_expand_other, t)
    t = _DROP_RE.sub(_drop_casual, t)
    t = _CASUAL_RE.sub(lambda m: case_like(m.group(0), _FORMAL_SWAP.get(m.group(0).lower(), "")), t)
    t = re.sub(r"\?+!+[?!]*|!+\?+[?!]*", "?", t)
    t = re.sub(r"!+", ".", t)
    return tidy(t)


_CONTRACT_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (
        re.compile(r"(?i)\b(do|does|did|is|are|was|were|has|have|had|could|would|should|must)[ \t]+not\b"),
        lambda m: m.group(1) + "n't",
    ),
    (re.compile(r"(?i)\bcan(?:not|[ \t]+not)\b"), lambda m: case_like(m.group(0), "can't")),
    (re.compile(r"(?i)\bwill[ \t]+not\b"), lambda m: case_like(m.group(0), "won't")),
    (
        re.compile(r"(?i)\b(it|that|there|here|what|who|he|she)[ \t]+is(?=[ \t]+[a-z])"),
        lambda m: m.group(1) + "'s",
    ),
    (re.compile(r"(?i)\b(you|we|they)[ \t]+are(?=[ \t]+[a-z])"), lambda m: m.group(1) + "'re"),
    (re.compile(r"\bI[ \t]+am(?=[ \t]+[a-z])"), lambda m: "I'm"),
    (re.compile(r"(?i)\b(I|you|we|they|it|he|she)[ \t]+will(?=[ \t]+[a-z])"), lambda m: m.group(1) + "'ll"),
)


def _to_casual(text: str, rng: random.Random) -> str:
    t = text
    for pattern, repl in _CONTRACT_RULES:
        t = pattern.sub(repl, t)
    if casual_count(t) >= 2:
        return t
    t = re.sub(r"\bvery\b", "super", t)
    if casual_count(t) >= 2:
        return t
    return finish(insert_sentence(parse(t), rng.choice(_CASUAL_SENTENCES)))


TRANSFORMS: dict[str, Transform] = {"formal": _to_formal, "casual": _to_casual}
