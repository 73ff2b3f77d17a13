"""The rubric users: 24 seen and 8 unseen users, each wanting 2-3 checkable aspect poles.

The rubrics conflict on purpose. Within the seen group, and again within the unseen group, every aspect
pole that some user asks for has its opposite pole asked for by another user, so no single global
reward model can satisfy everyone. Unseen users ask for combinations that no seen user has.

Every want is one the default policy reaches at the default run's length (``max_new_tokens``): the users ask
only for poles of ``register``, ``opening``, ``person``, ``numbers`` and ``emphasis``, each met by at least 5 % of
the default Best-of-N pool's samples. ``length``, ``format``, ``closing`` and ``example`` stay checkable, but a
56-token answer, cut off mid-sentence, almost never reaches 120 words, three list lines, a closing question or an
example marker (docs/rubrics.md, "Reachability").
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
        "emphasis=bold opening=context",
        "Ease into the answer with a few sentences of background, and put the key phrases in bold.",
    ),
    _u(
        "u02",
        True,
        "register=formal opening=context emphasis=plain",
        "I want formal answers that open with a few sentences of background, with no contractions, slang, "
        "exclamation marks, bold text or headings.",
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
        "opening=direct emphasis=plain",
        "Give me the answer in a single short opening sentence on its own line, in plain text with no bold "
        "or headings.",
    ),
    _u(
        "u05",
        True,
        "opening=context numbers=no_numbers register=formal",
        "I like formal answers that open with some background and avoid digits and figures, with no "
        "contractions, slang or exclamation marks.",
    ),
    _u(
        "u06",
        True,
        "register=casual opening=context",
        "I want a casual, friendly reply with contractions and casual words that eases in with a few "
        "sentences of context.",
    ),
    _u(
        "u07",
        True,
        "register=formal person=impersonal",
        "I want formal, impersonal answers that never address me as 'you' and use no contractions, slang or "
        "exclamation marks.",
    ),
    _u(
        "u08",
        True,
        "numbers=quantified opening=context",
        "I want answers that open with some background and give several specific numbers.",
    ),
    _u(
        "u09",
        True,
        "numbers=no_numbers emphasis=plain",
        "I prefer plain text with no digits or figures and no bold or headings.",
    ),
    _u(
        "u10",
        True,
        "person=second_person emphasis=plain",
        "Talk to me directly as 'you', in plain text without bold or headings.",
    ),
    _u(
        "u11",
        True,
        "person=impersonal emphasis=plain",
        "I want answers in an impersonal voice without 'you', and with no bold text or headings.",
    ),
    _u(
        "u12",
        True,
        "opening=direct numbers=quantified",
        "Lead with a one-sentence answer on its own line, and include specific numbers.",
    ),
    _u(
        "u13",
        True,
        "register=formal emphasis=plain numbers=no_numbers",
        "I want formal plain paragraphs with no contractions, slang, exclamation marks, markdown formatting or digits.",
    ),
    _u(
        "u14",
        True,
        "numbers=quantified register=formal",
        "I want formal answers with concrete figures, and no contractions, slang or exclamation marks.",
    ),
    _u(
        "u15",
        True,
        "opening=context person=second_person",
        "I want answers that start with some background and speak to me as 'you'.",
    ),
    _u(
        "u16",
        True,
        "register=casual emphasis=bold",
        "Keep it casual and chatty, and bold the important bits.",
    ),
    _u(
        "u17",
        True,
        "opening=direct numbers=no_numbers",
        "Start with a one-line answer on its own, and avoid digits and figures.",
    ),
    _u(
        "u18",
        True,
        "register=formal person=second_person",
        "I want a formal reply addressed to me as 'you', with no contractions, slang or exclamation marks.",
    ),
    _u(
        "u19",
        True,
        "person=impersonal numbers=no_numbers",
        "I want answers written impersonally without 'you', with no digits or figures.",
    ),
    _u(
        "u20",
        True,
        "numbers=no_numbers register=casual opening=context",
        "I like casual, chatty answers that ease in with some context and avoid digits and figures.",
    ),
    _u(
        "u21",
        True,
        "opening=context emphasis=plain",
        "Ease into the answer with a few sentences of context, and use no bold or headings.",
    ),
    _u(
        "u22",
        True,
        "numbers=quantified emphasis=plain",
        "Give me specific numbers in plain text, without bold or headings.",
    ),
    _u(
        "u23",
        True,
        "numbers=quantified emphasis=bold",
        "Give me specific numbers with the key figures in bold.",
    ),
    _u(
        "u24",
        True,
        "numbers=no_numbers person=second_person",
        "Talk to me as 'you', with no digits or figures.",
    ),
    # ---- unseen users: new combinations, conflicting among themselves ---------------------------
    _u(
        "n01",
        False,
        "person=impersonal opening=context",
        "I want answers that open with some background and never address me as 'you'.",
    ),
    _u(
        "n02",
        False,
        "person=second_person numbers=quantified",
        "Speak to me directly as 'you' and give me several specific numbers.",
    ),
    _u(
        "n03",
        False,
        "register=casual person=impersonal",
        "I like a casual, chatty tone with contractions and casual words, but never addressed to me as 'you'.",
    ),
    _u(
        "n04",
        False,
        "register=formal numbers=no_numbers",
        "I want formal wording with no contractions, slang or exclamation marks, and no digits or figures.",
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
        "emphasis=bold person=second_person",
        "Talk to me directly as 'you' and bold the key points.",
    ),
    _u(
        "n07",
        False,
        "register=formal emphasis=bold",
        "I want a formal answer with the key phrases in bold and no contractions, slang or exclamation marks.",
    ),
    _u(
        "n08",
        False,
        "register=casual emphasis=plain",
        "I like casual answers in plain text without bold or headings.",
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
