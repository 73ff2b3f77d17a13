"""The large edition's extra rubric users (``load_rubrics(size="large")``): 48 seen and 16 unseen.

Each wants 2-3 poles of the five aspects every default user's wants come from (``register``, ``opening``,
``person``, ``numbers``, ``emphasis``: each met by at least 5 % of the default pool's samples, docs/rubrics.md,
"Reachability"), in a combination that no other user of either edition asks for, so the unseen users' rubrics are
new to every seen user. With the default's 24 seen and 8 unseen users the large edition has 72 seen and 24 unseen.
A user's description (the answer key graders and reports read) is written from its poles.
"""

from __future__ import annotations

from perbench.data.records import AspectPole
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser

#: how a description asks for each pole
WANTS: dict[tuple[str, str], str] = {
    ("register", "formal"): "formal wording (no contractions, slang or exclamation marks)",
    ("register", "casual"): "a casual, chatty tone with contractions",
    ("opening", "direct"): "a one-sentence answer on its own line first",
    ("opening", "context"): "a few sentences of background first",
    ("person", "second_person"): "talk to me directly as 'you'",
    ("person", "impersonal"): "never address me as 'you'",
    ("numbers", "quantified"): "several specific numbers",
    ("numbers", "no_numbers"): "no digits or figures",
    ("emphasis", "bold"): "the key phrases in bold",
    ("emphasis", "plain"): "plain text without bold or headings",
}

#: (user id, seen, ``aspect=pole`` items)
_MORE: tuple[tuple[str, bool, str], ...] = (
    ("u25", True, "register=formal opening=context person=second_person"),
    ("u26", True, "person=impersonal numbers=no_numbers emphasis=plain"),
    ("u27", True, "register=casual opening=context emphasis=plain"),
    ("u28", True, "register=casual person=second_person emphasis=plain"),
    ("u29", True, "register=casual numbers=quantified emphasis=plain"),
    ("u30", True, "opening=direct person=second_person numbers=quantified"),
    ("u31", True, "opening=context numbers=quantified emphasis=bold"),
    ("u32", True, "person=second_person numbers=quantified emphasis=plain"),
    ("u33", True, "register=casual opening=context person=second_person"),
    ("u34", True, "register=formal opening=direct person=second_person"),
    ("u35", True, "person=impersonal numbers=quantified"),
    ("u36", True, "opening=direct numbers=quantified emphasis=bold"),
    ("u37", True, "opening=context numbers=no_numbers"),
    ("u38", True, "person=impersonal numbers=quantified emphasis=plain"),
    ("u39", True, "person=second_person numbers=no_numbers emphasis=plain"),
    ("u40", True, "register=formal opening=context"),
    ("u41", True, "opening=direct numbers=no_numbers emphasis=bold"),
    ("u42", True, "opening=context person=impersonal emphasis=plain"),
    ("u43", True, "register=formal opening=direct person=impersonal"),
    ("u44", True, "register=formal opening=direct emphasis=plain"),
    ("u45", True, "register=casual person=impersonal numbers=quantified"),
    ("u46", True, "register=formal person=second_person numbers=no_numbers"),
    ("u47", True, "register=casual person=second_person numbers=no_numbers"),
    ("u48", True, "register=casual opening=context person=impersonal"),
    ("u49", True, "register=casual person=impersonal numbers=no_numbers"),
    ("u50", True, "opening=direct numbers=quantified emphasis=plain"),
    ("u51", True, "register=formal opening=context numbers=quantified"),
    ("u52", True, "person=impersonal numbers=quantified emphasis=bold"),
    ("u53", True, "opening=direct person=impersonal numbers=quantified"),
    ("u54", True, "register=formal opening=direct"),
    ("u55", True, "register=formal emphasis=plain"),
    ("u56", True, "opening=direct person=impersonal"),
    ("u57", True, "register=casual opening=direct numbers=no_numbers"),
    ("u58", True, "register=casual person=second_person numbers=quantified"),
    ("u59", True, "register=casual opening=direct person=impersonal"),
    ("u60", True, "register=formal opening=context emphasis=bold"),
    ("u61", True, "opening=direct person=impersonal emphasis=plain"),
    ("u62", True, "register=formal opening=context person=impersonal"),
    ("u63", True, "person=impersonal emphasis=bold"),
    ("u64", True, "opening=context person=impersonal numbers=quantified"),
    ("u65", True, "opening=context person=second_person emphasis=plain"),
    ("u66", True, "register=formal numbers=quantified emphasis=plain"),
    ("u67", True, "register=casual numbers=no_numbers"),
    ("u68", True, "register=casual opening=context numbers=quantified"),
    ("u69", True, "numbers=no_numbers emphasis=bold"),
    ("u70", True, "opening=direct person=second_person numbers=no_numbers"),
    ("u71", True, "register=formal person=second_person emphasis=plain"),
    ("u72", True, "register=casual numbers=no_numbers emphasis=plain"),
    ("n09", False, "register=formal person=impersonal numbers=no_numbers"),
    ("n10", False, "register=casual numbers=quantified"),
    ("n11", False, "register=casual person=impersonal emphasis=bold"),
    ("n12", False, "person=second_person numbers=no_numbers emphasis=bold"),
    ("n13", False, "register=casual opening=direct person=second_person"),
    ("n14", False, "opening=direct person=impersonal numbers=no_numbers"),
    ("n15", False, "opening=context numbers=no_numbers emphasis=plain"),
    ("n16", False, "opening=direct person=second_person"),
    ("n17", False, "opening=context person=second_person numbers=quantified"),
    ("n18", False, "register=formal opening=direct emphasis=bold"),
    ("n19", False, "register=casual opening=direct"),
    ("n20", False, "register=casual opening=direct numbers=quantified"),
    ("n21", False, "register=formal person=impersonal emphasis=plain"),
    ("n22", False, "opening=direct emphasis=bold"),
    ("n23", False, "register=casual numbers=quantified emphasis=bold"),
    ("n24", False, "register=casual opening=direct emphasis=bold"),
)


def described(user_id: str, seen: bool, poles: str) -> RubricUser:
    """A rubric user whose description lists its wants in its poles' order."""
    rubric = tuple(AspectPole(*item.split("=")) for item in poles.split())
    asks = [WANTS[(ap.aspect, ap.pole)] for ap in rubric]
    text = ", ".join(asks[:-1]) + f" and {asks[-1]}"
    return RubricUser(user_id, seen, rubric, f"I want {text}.")


MORE_USERS: tuple[RubricUser, ...] = tuple(described(*row) for row in _MORE)


def edition_users(size: str = "default") -> tuple[RubricUser, ...]:
    """The users of an edition of the benchmark: ``default`` (24 seen, 8 unseen) or ``large`` (72 seen, 24 unseen:
    the default's users and :data:`MORE_USERS`, seen users first)."""
    if size != "large":
        return RUBRIC_USERS
    both = RUBRIC_USERS + MORE_USERS
    return tuple(u for u in both if u.seen) + tuple(u for u in both if not u.seen)
