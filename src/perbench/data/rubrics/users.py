"""The rubric users: 24 seen and 8 unseen users, each wanting 2-3 checkable aspect poles.

The rubrics conflict on purpose. Within the seen group, and again within the unseen group, every aspect
pole that some user asks for has its opposite pole asked for by another user, so no single global
reward model can satisfy everyone. Unseen users ask for combinations that no seen user has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perbench.data.records import AspectPole, User
from perbench.data.user_context import describe_user_context


@dataclass(frozen=True)
class RubricUser:
    user_id: str
    seen: bool
    rubric: tuple[AspectPole, ...]
    description: str  # one sentence: the answer key, for graders, reports and oracle methods only


def _u(user_id: str, seen: bool, poles: str, description: str) -> RubricUser:
    """``poles`` is a space-separated list of ``aspect=pole`` items."""
    rubric = tuple(AspectPole(*item.split("=")) for item in poles.split())
    return RubricUser(user_id, seen, rubric, description)


RUBRIC_USERS: tuple[RubricUser, ...] = (
    # ---- seen users -----------------------------------------------------------------------------
    _u(
        "u01",
        True,
        "length=concise format=bulleted emphasis=bold",
        "I want short answers of 60 words or fewer, laid out as a bulleted list, with the key phrases in bold.",
    ),
    _u(
        "u02",
        True,
        "length=detailed format=prose register=formal",
        "I want thorough answers of at least 120 words, written as formal paragraphs of prose with no lists, "
        "contractions, slang or exclamation marks.",
    ),
    _u(
        "u03",
        True,
        "register=casual person=second_person",
        "I like a relaxed, chatty tone with contractions and casual words, talking to me directly as 'you'.",
    ),
    _u(
        "u04",
        True,
        "opening=direct length=concise",
        "Give me the answer in a single short opening sentence on its own line, and keep the whole reply to "
        "60 words or fewer.",
    ),
    _u(
        "u05",
        True,
        "opening=context example=has_example length=detailed",
        "I like answers that open with a paragraph of background, include an explicit example, and run to "
        "at least 120 words.",
    ),
    _u(
        "u06",
        True,
        "closing=asks register=casual",
        "I want a casual, friendly reply that ends by asking me a follow-up question.",
    ),
    _u(
        "u07",
        True,
        "closing=no_question register=formal person=impersonal",
        "I want formal, impersonal answers that never address me as 'you' and do not end with any questions.",
    ),
    _u(
        "u08",
        True,
        "example=has_example numbers=quantified",
        "I want concrete answers that give an explicit example and several specific numbers.",
    ),
    _u(
        "u09",
        True,
        "example=no_example numbers=no_numbers format=prose",
        "I prefer running prose with no examples, no figures or digits, and no lists.",
    ),
    _u(
        "u10",
        True,
        "person=second_person closing=asks",
        "Talk to me directly as 'you', and finish by asking me a question.",
    ),
    _u(
        "u11",
        True,
        "person=impersonal emphasis=plain length=concise",
        "I want brief answers of 60 words or fewer, in an impersonal voice without 'you', and with no bold "
        "text or headings.",
    ),
    _u(
        "u12",
        True,
        "emphasis=bold opening=direct numbers=quantified",
        "Lead with a one-sentence answer, put the key points in bold, and include specific numbers.",
    ),
    _u(
        "u13",
        True,
        "emphasis=plain format=prose closing=no_question",
        "I want plain paragraphs with no markdown formatting at all and no questions at the end.",
    ),
    _u(
        "u14",
        True,
        "format=bulleted numbers=quantified register=formal",
        "I want a formal bulleted list with concrete figures, and no contractions, slang or exclamation marks.",
    ),
    _u(
        "u15",
        True,
        "length=detailed opening=context person=second_person",
        "I want long answers of at least 120 words that start with some background and speak to me as 'you'.",
    ),
    _u(
        "u16",
        True,
        "register=casual example=has_example emphasis=bold",
        "Keep it casual and chatty, give me an example, and bold the important bits.",
    ),
    _u(
        "u17",
        True,
        "opening=direct closing=no_question example=no_example",
        "Start with a one-line answer, skip the examples, and do not end with a question.",
    ),
    _u(
        "u18",
        True,
        "length=concise register=formal closing=asks",
        "I want a brief, formal reply of 60 words or fewer that ends with a question to me.",
    ),
    _u(
        "u19",
        True,
        "format=bulleted person=impersonal opening=direct",
        "Open with a single short sentence, then give a bulleted list, written impersonally without 'you'.",
    ),
    _u(
        "u20",
        True,
        "numbers=no_numbers register=casual length=detailed",
        "I like long, casual, chatty answers of at least 120 words that avoid digits and figures.",
    ),
    _u(
        "u21",
        True,
        "opening=context emphasis=plain closing=no_question",
        "Ease into the answer with a few sentences of context, use no bold or headings, and do not end with "
        "a question.",
    ),
    _u(
        "u22",
        True,
        "closing=asks format=prose example=has_example",
        "Write in prose rather than lists, include an example, and close by asking me a question.",
    ),
    _u(
        "u23",
        True,
        "example=no_example numbers=quantified emphasis=bold",
        "Give me specific numbers with the key figures in bold, but skip the examples.",
    ),
    _u(
        "u24",
        True,
        "numbers=no_numbers person=second_person format=bulleted",
        "Give me a bulleted list addressed to me as 'you', with no digits or figures.",
    ),
    # ---- unseen users: new combinations, conflicting among themselves ---------------------------
    _u(
        "n01",
        False,
        "length=concise example=has_example person=impersonal",
        "I want short answers of 60 words or fewer that include an example and never address me as 'you'.",
    ),
    _u(
        "n02",
        False,
        "length=detailed example=no_example person=second_person",
        "I want long answers of at least 120 words, addressed to me as 'you', without any examples.",
    ),
    _u(
        "n03",
        False,
        "format=bulleted closing=asks register=casual",
        "Give me a casual bulleted list and end by asking me a question.",
    ),
    _u(
        "n04",
        False,
        "format=prose closing=no_question register=formal",
        "I want formal prose with no lists, no contractions or slang, and no question at the end.",
    ),
    _u(
        "n05",
        False,
        "opening=direct numbers=no_numbers emphasis=plain",
        "Open with a one-line answer, avoid digits entirely, and use no bold or headings.",
    ),
    _u(
        "n06",
        False,
        "opening=context numbers=quantified emphasis=bold",
        "Start with some background, give concrete numbers, and bold the key points.",
    ),
    _u(
        "n07",
        False,
        "length=concise register=formal emphasis=bold",
        "I want a brief, formal answer of 60 words or fewer with the key phrases in bold.",
    ),
    _u(
        "n08",
        False,
        "length=detailed register=casual emphasis=plain",
        "I like long, casual answers of at least 120 words in plain text without bold or headings.",
    ),
)


def to_user(r: RubricUser) -> User:
    """The benchmark record for a rubric user. The rubric decided chosen vs rejected, so the description and the
    poles are the answer key (``User.answer_key``, ``User.rubric`` for the checker); no profile: methods see the
    user's pairs only."""
    return User(
        user_id=r.user_id,
        seen=r.seen,
        rubric=r.rubric,
        answer_key={"rubric_text": r.description, "aspect_poles": [f"{ap.aspect}={ap.pole}" for ap in r.rubric]},
    )


def rubric_user_context(users: Mapping[str, User]) -> dict[str, Any]:
    """``Benchmark.meta["user_context"]`` of the built-in rubric benchmark: pairs only, the rubric withheld."""
    return describe_user_context(
        "pairs_only",
        users,
        included=["own train pairs"],
        withheld=["rubric description", "rubric aspect poles"],
    )
