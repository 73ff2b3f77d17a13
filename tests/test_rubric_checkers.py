"""Checkers, transforms, users and prompts of the built-in rubrics benchmark."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from perbench.data.records import AspectPole, User
from perbench.data.rubrics.aspects import (
    ASPECTS,
    annotate,
    casual_count,
    number_words,
    opposite,
    satisfaction,
    satisfies_all,
    to_pole,
    violates,
    word_count,
)
from perbench.data.rubrics.prompts import PROMPT_TOPICS, RUBRIC_PROMPTS
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser, to_user

# A varied set of texts, written to look like what a small LLM produces: short and long answers,
# bullets, numbering, markdown, casual chatter, questions, stray whitespace and odd punctuation.
TEXTS: list[str] = [
    "Yes.",
    "Boil the rice for ten minutes, then let it rest.",
    "Rinse the rice first. Use a ratio of 1 cup rice to 2 cups water. Cover and simmer on low heat. "
    "Let it rest before fluffing it with a fork.",
    "Here are some tips:\n- Rinse the rice\n- Use less water\n- Let it rest\n- Fluff with a fork",
    "1. Preheat the oven to 350F.\n2. Mix the flour and sugar.\n3. Bake for 25 minutes.\n4. Let it cool.",
    "# How to save money\n\n**Budget first.** Track every expense for a month.\n\n## Tips\n\n"
    "* Cook at home\n* Cancel unused subscriptions\n* Buy in bulk",
    "Hey! You're gonna love this. It's super easy, and you don't need anything fancy lol. "
    "Just grab a pan and you're set!",
    "Have you tried turning it off and on again?",
    "Why does this happen? Usually the cache is full. Clearing it helps. Does that make sense?",
    "What's your budget? That's the first thing to figure out.\n\nThen you can pick a plan that fits. Want me to help?",
    "   Indented line with trailing spaces.   \n\n\n   Another paragraph here.   \n",
    "For example, you could try apples, pears, e.g. fruits such as these. Example: an apple a day.",
    "The answer depends on many factors including the season, the weather, the region, the kind of soil, "
    "and the amount of water available where the plants grow, as well as the care given to them by the "
    "gardener over the course of the whole year and beyond that, which matters a great deal in practice.",
    " ".join(["This is a sentence with exactly ten words in it."] * 15),
    "**Note:** this is important.\n\nKeep the pan hot. Add oil. Add the eggs. Stir gently. Serve warm.",
    "Step one: gather supplies\nStep two: clean the area\nStep three: paint",
    "It costs about $1,200 per year, roughly 15% of the budget, or 3.5 times more than in 2019. Pay it on the 1st.",
    "I can't say for sure, but it isn't hard. We'll see. They'd agree, I'm sure. Won't hurt to try!",
    "- single bullet line\n- second bullet",
    "???",
    "Thank you for asking! Your plan looks fine to me. Make sure you save your work and back up "
    "yourself... I mean your files.",
    "Short.\n\n- a\n- b\n- c\n\nDone?",
    "To get started:\n\n1) Open the settings\n2) Choose Wi-Fi\n3) Restart the router\n\n"
    "If it still fails, call support. Is it working now?",
    "Sure thing\r\n\r\nJust do it",
    "## Steps\n\n1. Mix.\n2. Bake.\n\n3. Serve.\n\n**Enjoy!**  \n",
    "Honestly it's kinda simple: 1/2 cup of sugar, 5:30 bake time, and 10-15 minutes to cool. Sound good? Cool. " * 6,
]


def words(n: int) -> str:
    return " ".join(["word"] * (n - 1) + ["end."]) if n else ""


def check(aspect: str, text: str) -> str | None:
    return ASPECTS[aspect].check(text)


# ---------------------------------------------------------------------------------------------------
# registry


def test_aspect_registry() -> None:
    assert len(ASPECTS) >= 9
    for name, a in ASPECTS.items():
        assert a.name == name
        assert len(set(a.poles)) == 2
        assert a.description and a.thresholds
        assert opposite(name, a.poles[0]) == a.poles[1]
        assert opposite(name, a.poles[1]) == a.poles[0]
    assert set(annotate("Hello there.")) == set(ASPECTS)


# ---------------------------------------------------------------------------------------------------
# each pole and its boundaries


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, "concise"),
        (59, "concise"),
        (60, "concise"),
        (61, None),
        (119, None),
        (120, "detailed"),
        (121, "detailed"),
    ],
)
def test_length_boundaries(n: int, expected: str | None) -> None:
    assert word_count(words(n)) == n
    assert check("length", words(n)) == expected


def test_length_ignores_markers() -> None:
    text = "## Tips\n" + "\n".join(f"{i}. step" for i in range(1, 10)) + "\n- * ---"
    assert word_count(text) == 10  # "Tips" plus nine "step"; markers, hashes and "---" are not words


def test_format() -> None:
    assert check("format", "- a\n- b\n- c") == "bulleted"
    assert check("format", "- a\n- b") is None
    assert check("format", "Just prose here.\nAnd more prose.") == "prose"
    assert check("format", "1. a\n2) b\n  • c") == "bulleted"
    assert check("format", "* a\n* b\n10. c") == "bulleted"
    # not list lines: bold at line start, decimals, a dash without a space, a bare marker
    assert check("format", "**Bold** start\n1.5 cups of flour\n-5 degrees\n-\n2024. A year") == "prose"


def test_register() -> None:
    assert check("register", "This is a formal answer. It uses no contractions.") == "formal"
    assert check("register", "This is a formal answer!") is None
    assert check("register", "It's fine.") is None
    assert check("register", "It's fine and you don't need more.") == "casual"
    assert check("register", "It's super fine.") == "casual"
    assert check("register", "Yeah, gonna do it.") == "casual"
    # possessives, "cool", and words containing a marker are not casual
    assert check("register", "John's book is cool; they said hello to Heyward.") == "formal"
    assert casual_count("I'm sure they'll say we've done what's needed, lol") == 5


def test_opening() -> None:
    one = " ".join(["word"] * 19) + " end."
    assert check("opening", one + "\n\nMore text. Even more.") == "direct"
    assert check("opening", "word " + one + "\n\nMore text.") is None  # 21 words
    assert check("opening", "Yes.") == "direct"
    assert check("opening", "First sentence. Second sentence.\n\nMore.") == "context"
    assert check("opening", "First line\nSecond line\n\nMore.") == "context"  # a newline ends a sentence
    assert check("opening", "Here are tips:\n- a\n- b") is None  # a list in the first paragraph
    assert check("opening", "# Title\n\nAnswer.") is None
    assert check("opening", "Use fruit, e.g. apples.\n\nMore.") == "direct"  # "e.g." does not end a sentence


def test_closing() -> None:
    assert check("closing", "Intro.\n\nDoes that help?") == "asks"
    assert check("closing", "Intro.\n\nDoes that help? I hope so.") is None
    assert check("closing", "Any questions?\n\nAll done.") == "no_question"
    assert check("closing", "Intro.\n\n**Any questions?**") == "asks"
    assert check("closing", "- a\n- b\n- Ready to start?") == "asks"
    assert check("closing", "Plain statement.") == "no_question"


def test_example() -> None:
    for marker in (
        "For example, x.",
        "for instance x",
        "e.g. apples",
        "fruit such as pears",
        "Example: x",
        "**Example:** x",
    ):
        assert check("example", marker) == "has_example", marker
    assert check("example", "An example of this is rare. Examples abound.") == "no_example"


def test_person() -> None:
    assert check("person", "You can do it, and your plan is fine.") == "second_person"
    assert check("person", "You're right.") is None
    assert check("person", "Watch it on YouTube; people enjoy it.") == "impersonal"
    assert check("person", "Do it yourself, if you like.") == "second_person"


def test_numbers() -> None:
    assert check("numbers", "Use 3 eggs and 2 cups.") == "quantified"
    assert check("numbers", "Use 3 eggs.") is None
    assert check("numbers", "It costs 1,000 dollars.") is None  # one group
    assert check("numbers", "Add 2.5 cups, then 3 more.") == "quantified"
    assert check("numbers", "Use three eggs.") == "no_numbers"


def test_emphasis() -> None:
    assert check("emphasis", "This is **key** here.") == "bold"
    assert check("emphasis", "# Heading\n\n**Key** point.") == "bold"
    assert check("emphasis", "# Heading\n\nPlain text.") is None
    assert check("emphasis", "A stray ** marker.") is None
    assert check("emphasis", "Just *italic* text, and #hashtag.") == "plain"


# ---------------------------------------------------------------------------------------------------
# mutual exclusivity: independent restatements of the documented thresholds never both hold

_LIST = re.compile(r"^[ \t]*(?:[-*•]|\d{1,2}[.)])[ \t]+\S", re.M)
_YOU = re.compile(r"(?i)\byou(?:rs?|rself|rselves)?\b")
_HEADING = re.compile(r"^[ \t]*#{1,6}(?:[ \t]|$)", re.M)
_EXAMPLE = re.compile(r"(?i)for[ \t]+example|for[ \t]+instance|e\.g\.|such[ \t]+as|example(?:\*\*|[ \t])*:")

_POLE_RULES: dict[str, tuple[Callable[[str], bool], Callable[[str], bool]]] = {
    "length": (lambda t: word_count(t) <= 60, lambda t: word_count(t) >= 120),
    "format": (lambda t: len(_LIST.findall(t)) >= 3, lambda t: not _LIST.search(t)),
    "register": (lambda t: casual_count(t) == 0 and "!" not in t, lambda t: casual_count(t) >= 2),
    "example": (lambda t: bool(_EXAMPLE.search(t)), lambda t: not _EXAMPLE.search(t)),
    "person": (lambda t: len(_YOU.findall(t)) >= 2, lambda t: not _YOU.search(t)),
    "numbers": (
        lambda t: len(re.findall(r"[0-9]+(?:[.,][0-9]+)*", t)) >= 2,
        lambda t: not re.search("[0-9]", t),
    ),
    "emphasis": (
        lambda t: bool(re.search(r"\*\*[^*\n]*[^*\s][^*\n]*\*\*", t)),
        lambda t: "**" not in t and not _HEADING.search(t),
    ),
}


def _all_texts() -> list[str]:
    out = list(TEXTS)
    rng = random.Random(0)
    for t in TEXTS:
        for name, a in ASPECTS.items():
            out.append(to_pole(t, name, rng.choice(a.poles), rng))
    return out


def test_poles_are_mutually_exclusive() -> None:
    texts = _all_texts()
    for name, a in ASPECTS.items():
        for t in texts:
            verdict = a.check(t)
            assert verdict in (None, *a.poles)
            if name in _POLE_RULES:
                first, second = _POLE_RULES[name]
                holds = [p for p, rule in zip(a.poles, (first, second), strict=True) if rule(t)]
                assert len(holds) <= 1, (name, t)
                assert verdict == (holds[0] if holds else None), (name, t)
    # opening and closing: necessary conditions of each pole, which contradict each other
    for t in texts:
        paras = [p for p in re.split(r"\n[ \t]*\n", t.replace("\r", "").strip()) if p.strip()]
        first_lines = paras[0].splitlines()
        if check("opening", t) == "direct":  # exactly one sentence, so exactly one line
            assert len(first_lines) == 1, t
        if check("opening", t) == "context":  # two sentences: two lines, or a sentence end inside a line
            assert len(first_lines) >= 2 or re.search(r"[.!?]\S*[ \t]+\S", paras[0]), t
        last = paras[-1]
        if check("closing", t) == "asks":
            assert last.rstrip(" \t*_\"')").endswith("?"), t
        if check("closing", t) == "no_question":
            assert "?" not in last, t


# ---------------------------------------------------------------------------------------------------
# transforms


def test_to_pole_postcondition_on_every_text_and_pole() -> None:
    for i, text in enumerate(TEXTS):
        for name, a in ASPECTS.items():
            for pole in a.poles:
                out = to_pole(text, name, pole, random.Random(i))
                assert a.check(out) == pole, (name, pole, text, out)
                assert out.strip()


def test_to_pole_chains_reach_a_full_rubric() -> None:
    rng = random.Random(1)
    for text in TEXTS:
        for _ in range(3):
            rubric = [AspectPole(n, rng.choice(a.poles)) for n, a in ASPECTS.items()]
            rng.shuffle(rubric)
            out = text
            for ap in rubric:
                out = to_pole(out, ap.aspect, ap.pole, rng)
            assert check(rubric[-1].aspect, out) == rubric[-1].pole
            assert out.strip()


def test_to_pole_is_deterministic_and_keeps_on_pole_texts() -> None:
    for text in TEXTS:
        for name, a in ASPECTS.items():
            for pole in a.poles:
                first = to_pole(text, name, pole, random.Random(7))
                assert first == to_pole(text, name, pole, random.Random(7))
                if a.check(text) == pole:
                    assert first == text


def test_to_pole_rejects_bad_input() -> None:
    rng = random.Random(0)
    with pytest.raises(ValueError, match="tone"):
        to_pole("Hi.", "tone", "warm", rng)
    with pytest.raises(ValueError, match="huge"):
        to_pole("Hi.", "length", "huge", rng)
    with pytest.raises(ValueError, match="blank"):
        to_pole("  \n ", "length", "concise", rng)


def test_marker_only_texts_stay_non_blank() -> None:
    rng = random.Random(0)
    for text, aspect, pole in [
        ("For example,", "example", "no_example"),
        ("**", "emphasis", "plain"),
        ("Hey!", "register", "formal"),
    ]:
        out = to_pole(text, aspect, pole, rng)
        assert out.strip() and check(aspect, out) == pole


def test_concise_truncates_at_sentence_boundaries_and_keeps_the_closing_question() -> None:
    text = " ".join(f"Sentence number {i} has seven words." for i in range(20)) + "\n\nDoes that help?"
    out = to_pole(text, "length", "concise", random.Random(0))
    assert word_count(out) <= 60
    assert out.endswith("Does that help?")
    assert all(s.endswith((".", "?")) for s in out.split("\n\n"))


def test_detailed_keeps_first_paragraph_and_closing_question() -> None:
    text = "Yes, rinse it.\n\nThen cook it gently. Is that clear?"
    out = to_pole(text, "length", "detailed", random.Random(0))
    assert out.startswith("Yes, rinse it.\n\n")
    assert out.endswith("Then cook it gently. Is that clear?")
    assert check("opening", out) == "direct" and check("closing", out) == "asks"


def test_format_transforms() -> None:
    rng = random.Random(0)
    prose = to_pole(TEXTS[4], "format", "prose", rng)
    assert prose == "Preheat the oven to 350F. Mix the flour and sugar. Bake for 25 minutes. Let it cool."
    bullets = to_pole(TEXTS[2], "format", "bulleted", rng)
    assert bullets.startswith("Rinse the rice first.\n\n- Use a ratio")


def test_register_transforms() -> None:
    rng = random.Random(0)
    formal = to_pole(TEXTS[6], "register", "formal", rng)
    assert formal == (
        "You are going to love this. It is very easy, and you do not need anything fancy. "
        "Just grab a pan and you are set."
    )
    casual = to_pole("It is easy and you do not need a pan.", "register", "casual", rng)
    assert casual == "It's easy and you don't need a pan."


def test_person_and_numbers_transforms() -> None:
    rng = random.Random(0)
    assert to_pole("Your oven should be hot before you start.", "person", "impersonal", rng) == (
        "The oven should be hot before people start."
    )
    assert to_pole(TEXTS[16], "numbers", "no_numbers", rng) == (
        "It costs about one thousand two hundred dollars per year, roughly fifteen percent of the budget, "
        "or three point five times more than in two thousand nineteen. Pay it on the first."
    )
    assert to_pole("Use two eggs and three cups.", "numbers", "quantified", rng) == "Use 2 eggs and 3 cups."
    assert number_words(21) == "twenty-one" and number_words(1_000_001) == "one million one"


def test_example_and_emphasis_transforms() -> None:
    rng = random.Random(0)
    assert to_pole("Try fruit, such as pears. This is, for example, true.", "example", "no_example", rng) == (
        "Try fruit, like pears. This is true."
    )
    assert to_pole("For example, rinse it.", "example", "no_example", rng) == "Rinse it."
    assert to_pole("Rinse the rice.", "emphasis", "bold", rng) == "**Rinse the rice**."
    assert to_pole("# Title\n\n**Key** idea.", "emphasis", "plain", rng) == "Title\n\nKey idea."


# ---------------------------------------------------------------------------------------------------
# rubric scoring


def test_satisfaction_and_violates() -> None:
    rubric = (
        AspectPole("length", "concise"),
        AspectPole("closing", "asks"),
        AspectPole("person", "second_person"),
    )
    text = "You can do it. Want your notes?"
    assert satisfaction(text, rubric) == 1.0 and satisfies_all(text, rubric) and not violates(text, rubric)
    text = "Do it now. Notes help."
    assert satisfaction(text, rubric) == pytest.approx(1 / 3)
    assert not satisfies_all(text, rubric) and violates(text, rubric)  # impersonal, no question
    text = "You can do it."  # person in the dead zone, closing on the wrong pole
    assert satisfaction(text, rubric) == pytest.approx(1 / 3) and violates(text, rubric)
    text = "You can do it. Done? Yes."  # closing and person both in their dead zones: no violation
    assert satisfaction(text, rubric) == pytest.approx(1 / 3) and not violates(text, rubric)
    assert satisfaction(text, ()) == 1.0
    with pytest.raises(ValueError, match="'tone'"):
        satisfaction(text, (AspectPole("tone", "warm"),))
    with pytest.raises(ValueError, match="'huge'"):
        violates(text, (AspectPole("length", "huge"),))


# ---------------------------------------------------------------------------------------------------
# users


def _poles(group: list[RubricUser]) -> set[tuple[str, str]]:
    return {(ap.aspect, ap.pole) for u in group for ap in u.rubric}


def test_user_set_invariants() -> None:
    seen = [u for u in RUBRIC_USERS if u.seen]
    unseen = [u for u in RUBRIC_USERS if not u.seen]
    assert len(seen) >= 24 and len(unseen) >= 8
    ids = [u.user_id for u in RUBRIC_USERS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"u\d\d", u.user_id) for u in seen)
    assert all(re.fullmatch(r"n\d\d", u.user_id) for u in unseen)
    for u in RUBRIC_USERS:
        aspects = [ap.aspect for ap in u.rubric]
        assert 2 <= len(aspects) <= 3 and len(set(aspects)) == len(aspects), u.user_id
        for ap in u.rubric:
            assert ap.pole in ASPECTS[ap.aspect].poles, u.user_id
        assert u.description.strip().endswith(".") and u.description.count(". ") == 0, u.user_id
    for group in (seen, unseen):
        used = _poles(group)
        for aspect, pole in used:
            assert (aspect, opposite(aspect, pole)) in used, (aspect, pole)
    seen_sets = {frozenset(u.rubric) for u in seen}
    assert len(seen_sets) == len(seen)
    assert all(frozenset(u.rubric) not in seen_sets for u in unseen)


def test_to_user() -> None:
    r = RUBRIC_USERS[0]
    u = to_user(r)
    assert isinstance(u, User)
    assert (u.user_id, u.seen, u.rubric, u.profile) == (r.user_id, r.seen, r.rubric, ())
    assert u.answer_key is not None and u.answer_key["rubric_text"] == r.description


# ---------------------------------------------------------------------------------------------------
# prompts


def test_prompt_invariants() -> None:
    assert len(RUBRIC_PROMPTS) >= 64
    ids = [p.prompt_id for p in RUBRIC_PROMPTS]
    assert len(ids) == len(set(ids))
    assert len({p.text for p in RUBRIC_PROMPTS}) == len(RUBRIC_PROMPTS)
    assert sum(p.split == "train" for p in RUBRIC_PROMPTS) == 48
    assert sum(p.split == "test" for p in RUBRIC_PROMPTS) == 16
    topics = {PROMPT_TOPICS[p.prompt_id] for p in RUBRIC_PROMPTS if p.split == "test"}
    assert len(topics) == len(set(PROMPT_TOPICS.values())) >= 8
    assert all(p.text.endswith("?") for p in RUBRIC_PROMPTS)
