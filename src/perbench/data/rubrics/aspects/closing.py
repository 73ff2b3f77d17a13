"""The ``closing`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

Looks at the last paragraph. ``asks``: its last sentence ends with ``?`` (trailing quotes, brackets
and markdown ``*``/``_`` ignored); ``no_question``: it has no ``?`` at all.
"""

from __future__ import annotations

import random
import re

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    closing_of,
    copy_doc,
    finish,
    parse,
    prose,
)


def _check_closing(text: str) -> str | None:
    return closing_of(parse(text))


ASPECT = Aspect(
    "closing",
    ("asks", "no_question"),
    "Whether the answer ends by asking the reader something.",
    "asks: the last sentence of the last paragraph ends with '?'; no_question: no '?' anywhere in "
    "the last paragraph; otherwise neither.",
    _check_closing,
)


# Transforms

_QUESTIONS = (
    "Would more detail on any part of this help?",
    "Does that cover what was needed?",
    "Which part would be most useful to expand on?",
    "Should I go into more detail on any step?",
)


def _to_asks(text: str, rng: random.Random) -> str:
    return finish([*parse(text), [prose(rng.choice(_QUESTIONS))]])


def _to_no_question(text: str, rng: random.Random) -> str:
    doc = copy_doc(parse(text))
    while doc and closing_of(doc) != "no_question":
        last = doc[-1]
        total = sum(len(ln.sentences) for p in doc for ln in p)
        hit = next(
            (li, si)
            for li in range(len(last) - 1, -1, -1)
            for si in range(len(last[li].sentences) - 1, -1, -1)
            if "?" in last[li].sentences[si]
        )
        li, si = hit
        if total > 1:
            last[li].sentences.pop(si)
            if not last[li].sentences:
                last.pop(li)
            if not last:
                doc.pop()
        else:
            last[li].sentences[si] = re.sub(r"\?+", ".", last[li].sentences[si])
    return finish(doc)


TRANSFORMS: dict[str, Transform] = {"asks": _to_asks, "no_question": _to_no_question}
