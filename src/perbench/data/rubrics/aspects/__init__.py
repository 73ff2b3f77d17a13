"""Checkable style aspects for the rubrics benchmark, and transforms that move a text onto a pole.

Every aspect has two poles and a checker ``check(text) -> pole | None``. The poles of one aspect are
mutually exclusive by construction; ``None`` means the text sits in the aspect's documented dead zone
(for example 61-119 words for ``length``). Each aspect is one module of this package, holding its poles,
thresholds (documented in the module), checker and transforms: :mod:`.length`, :mod:`.format`,
:mod:`.register`, :mod:`.opening`, :mod:`.closing`, :mod:`.example`, :mod:`.person`, :mod:`.numbers` and
:mod:`.emphasis`. :mod:`.text` holds the text structure they share (lines, paragraphs, sentences, words)
and :mod:`.registry` the registry (:data:`ASPECTS`, :func:`annotate`, :func:`opposite`, rubric scoring).

``to_pole(text, aspect, pole, rng)`` rewrites a text so that the aspect's checker returns ``pole``; it
changes as little as practical and tries (without guaranteeing it) to leave the other aspects alone.
"""

from __future__ import annotations

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.numbers import number_words
from perbench.data.rubrics.aspects.register import casual_count
from perbench.data.rubrics.aspects.registry import (
    ASPECTS,
    annotate,
    opposite,
    rubric_scores,
    satisfaction,
    satisfies_all,
    to_pole,
    violates,
)
from perbench.data.rubrics.aspects.text import word_count

__all__ = [
    "ASPECTS",
    "Aspect",
    "Transform",
    "annotate",
    "casual_count",
    "number_words",
    "opposite",
    "rubric_scores",
    "satisfaction",
    "satisfies_all",
    "to_pole",
    "violates",
    "word_count",
]
