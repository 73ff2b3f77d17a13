"""Rubric satisfaction of generated text: exact, from the checkers, for users with checkable rubrics."""

from __future__ import annotations

from collections.abc import Mapping

from perbench.data.records import User


def rubric_satisfaction(text: str, user: User, annotations: Mapping[str, str | None] | None = None) -> dict[str, float]:
    """Fraction of the user's aspect poles met, and whether all are met (1.0 / 0.0). ``annotations``: the text's
    ``annotate(text)`` verdicts when already computed (a text shared by many users is checked once)."""
    from perbench.data.rubrics.aspects import annotate, rubric_scores

    if not user.rubric:
        raise ValueError(f"user {user.user_id!r} has no checkable rubric")
    sat, every = rubric_scores(annotate(text) if annotations is None else annotations, user.rubric)
    return {"satisfaction": sat, "all": float(every)}


def aspect_report(text: str, user: User) -> list[dict[str, object]]:
    """Per aspect pole of the user's rubric: whether ``text`` lands on it (None: in the checker's dead zone)."""
    from perbench.data.rubrics.aspects import ASPECTS

    out: list[dict[str, object]] = []
    for ap in user.rubric or ():
        verdict = ASPECTS[ap.aspect].check(text)
        out.append({"aspect": ap.aspect, "pole": ap.pole, "met": None if verdict is None else verdict == ap.pole})
    return out
