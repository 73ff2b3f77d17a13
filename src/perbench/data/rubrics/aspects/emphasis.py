"""The ``emphasis`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

``bold``: contains a markdown bold span ``**...**`` on one line; ``plain``: no ``**`` anywhere and no
markdown heading line (``#`` to ``######`` followed by a space or the end of the line).
"""

from __future__ import annotations

import random
import re

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    HEADING_PREFIX,
    LIST_PREFIX,
    has_words,
    split_lines,
)

_BOLD_RE = re.compile(r"\*\*[^*\n]*[^*\s][^*\n]*\*\*")


def _has_heading(text: str) -> bool:
    return any(HEADING_PREFIX.match(ln) for ln in split_lines(text))


def _check_emphasis(text: str) -> str | None:
    if _BOLD_RE.search(text):
        return "bold"
    if "**" not in text and not _has_heading(text):
        return "plain"
    return None


ASPECT = Aspect(
    "emphasis",
    ("bold", "plain"),
    "Whether key phrases are marked up in bold.",
    "bold: contains a markdown **bold** span; plain: no '**' and no markdown heading; otherwise neither.",
    _check_emphasis,
)


# Transforms


def _bold_span(content: str) -> tuple[int, int] | None:
    """(start, end) of the phrase to embolden in a line's content: the whole line when short, else its
    first clause, else its first four words."""
    stripped = content.strip()
    offset = content.index(stripped) if stripped else 0
    toks = list(re.finditer(r"\S+", stripped))
    if not toks:
        return None
    candidates: list[int] = []
    if len(toks) <= 8:
        candidates.append(toks[-1].end())
    for i, tok in enumerate(toks[:8]):
        if i >= 1 and tok.group(0).endswith((",", ":", ";")):
            candidates.append(tok.end())
            break
    candidates.append(toks[min(len(toks), 4) - 1].end())
    candidates.append(toks[-1].end())
    for end in candidates:
        span = stripped[:end].rstrip(".,:;!?")
        if has_words(span.replace("*", "")):
            return offset, offset + len(span)
    return None


def _to_bold(text: str, rng: random.Random) -> str:
    lines = split_lines(text)
    for i, line in enumerate(lines):
        m = LIST_PREFIX.match(line) or HEADING_PREFIX.match(line)
        start = m.end() if m else 0
        content = line[start:]
        if not has_words(content):
            continue
        span = _bold_span(content)
        if span is None:
            continue
        a, b = start + span[0], start + span[1]
        phrase = line[a:b].replace("*", "").strip()
        lines[i] = line[:a] + "**" + phrase + "**" + line[b:]
        return "\n".join(lines)
    for i, line in enumerate(lines):
        if line.strip():
            lines[i] = "**Note:** " + line.strip()
            break
    return "\n".join(lines)


def _to_plain(text: str, rng: random.Random) -> str:
    t = text
    for _ in range(10):
        while "**" in t:
            t = t.replace("**", "")
        t = re.sub(r"(?m)^[ \t]*#{1,6}(?:[ \t]+|$)", "", t)
        if _check_emphasis(t) == "plain":
            break
    return t


TRANSFORMS: dict[str, Transform] = {"bold": _to_bold, "plain": _to_plain}
