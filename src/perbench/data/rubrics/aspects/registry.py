"""The registry of aspects: every aspect's record and transforms, the verdicts of all aspects on a text
(:func:`annotate`), rubric scoring and :func:`to_pole`."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from perbench.data.records import AspectPole
from perbench.data.rubrics.aspects import closing, emphasis, example, format, length, numbers, opening, person, register
from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import FILLER

_PARTS: tuple[tuple[Aspect, Mapping[str, Transform]], ...] = (
    (length.ASPECT, length.TRANSFORMS),
    (format.ASPECT, format.TRANSFORMS),
    (register.ASPECT, register.TRANSFORMS),
    (opening.ASPECT, opening.TRANSFORMS),
    (closing.ASPECT, closing.TRANSFORMS),
    (example.ASPECT, example.TRANSFORMS),
    (person.ASPECT, person.TRANSFORMS),
    (numbers.ASPECT, numbers.TRANSFORMS),
    (emphasis.ASPECT, emphasis.TRANSFORMS),
)

#: every aspect by name, in the order :func:`annotate` reports them
ASPECTS: dict[str, Aspect] = {a.name: a for a, _ in _PARTS}
_TRANSFORMS: dict[tuple[str, str], Transform] = {(a.name, pole): fn for a, fns in _PARTS for pole, fn in fns.items()}


def _validate(aspect: str, pole: str) -> Aspect:
    if aspect not in ASPECTS:
        raise ValueError(f"unknown aspect {aspect!r} (known: {sorted(ASPECTS)})")
    a = ASPECTS[aspect]
    if pole not in a.poles:
        raise ValueError(f"unknown pole {pole!r} for aspect {aspect!r} (poles: {a.poles})")
    return a


def opposite(aspect: str, pole: str) -> str:
    """The other pole of ``aspect``."""
    return _validate(aspect, pole).opposite(pole)


def annotate(text: str) -> dict[str, str | None]:
    """Every aspect's verdict on ``text`` (a pole name, or None in the dead zone)."""
    from perbench.calls import note

    note("rubric")  # a metric evaluation, as the run's work counters count them
    return {name: a.check(text) for name, a in ASPECTS.items()}


def _verdicts(text: str, rubric: Sequence[AspectPole]) -> list[tuple[str | None, AspectPole]]:
    for ap in rubric:
        _validate(ap.aspect, ap.pole)
    cache: dict[str, str | None] = {}
    out = []
    for ap in rubric:
        if ap.aspect not in cache:
            cache[ap.aspect] = ASPECTS[ap.aspect].check(text)
        out.append((cache[ap.aspect], ap))
    return out


def _scores(verdicts: Sequence[tuple[str | None, AspectPole]]) -> tuple[float, bool]:
    met = sum(1 for v, ap in verdicts if v == ap.pole)
    return (met / len(verdicts) if verdicts else 1.0), met == len(verdicts)


def satisfaction(text: str, rubric: Sequence[AspectPole]) -> float:
    """Fraction of the rubric's aspect poles that ``text`` lands on (1.0 for an empty rubric)."""
    return _scores(_verdicts(text, rubric))[0]


def satisfies_all(text: str, rubric: Sequence[AspectPole]) -> bool:
    return _scores(_verdicts(text, rubric))[1]


def rubric_scores(annotations: Mapping[str, str | None], rubric: Sequence[AspectPole]) -> tuple[float, bool]:
    """(:func:`satisfaction`, :func:`satisfies_all`) of a text from its :func:`annotate` verdicts: a text
    annotated once is scored for any number of rubrics by lookup."""
    for ap in rubric:
        _validate(ap.aspect, ap.pole)
    return _scores([(annotations[ap.aspect], ap) for ap in rubric])


def violates(text: str, rubric: Sequence[AspectPole]) -> bool:
    """True when ``text`` lands on the opposite pole of at least one rubric aspect."""
    return any(v is not None and v != ap.pole for v, ap in _verdicts(text, rubric))


def to_pole(text: str, aspect: str, pole: str, rng: random.Random) -> str:
    """Rewrite ``text`` so that ``ASPECTS[aspect].check(result) == pole``.

    A text already on the pole is returned unchanged. Raises ``ValueError`` for an unknown aspect or
    pole, or for a blank text.
    """
    a = _validate(aspect, pole)
    if not text.strip():
        raise ValueError("to_pole needs a non-blank text")
    if a.check(text) == pole:
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out = _TRANSFORMS[(aspect, pole)](text, rng)
    if not out.strip():
        # Only markers were left to remove (e.g. the text "For example,"): say something neutral instead.
        out = rng.choice(FILLER)
    if a.check(out) != pole:  # pragma: no cover - guarded by the property tests
        raise ValueError(f"could not move the text onto {aspect}={pole}")
    return out
