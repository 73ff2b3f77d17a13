"""The ``numbers`` aspect: its poles, thresholds and checker, and the transforms onto each pole.

Counts digit groups (``3``, ``2.5`` and ``1,000`` are one group each). ``quantified``: at least 2;
``no_numbers``: no ASCII digit at all.
"""

from __future__ import annotations

import random
import re

from perbench.data.rubrics.aspects.aspect import Aspect, Transform
from perbench.data.rubrics.aspects.text import (
    finish,
    insert_sentence,
    parse,
)

_DIGIT_GROUP = re.compile(r"[0-9]+(?:[.,][0-9]+)*")


def _check_numbers(text: str) -> str | None:
    n = len(_DIGIT_GROUP.findall(text))
    if n >= 2:
        return "quantified"
    if n == 0:
        return "no_numbers"
    return None


ASPECT = Aspect(
    "numbers",
    ("quantified", "no_numbers"),
    "Whether the answer gives concrete figures.",
    "quantified: >= 2 digit groups; no_numbers: no digit; exactly 1 group is neither.",
    _check_numbers,
)


# Transforms

_NUMBER_SENTENCES = (
    "Giving it 2 or 3 tries is usually enough to see whether it works.",
    "Setting aside 10 to 15 minutes at a time keeps the effort manageable.",
    "Checking in after 1 or 2 weeks gives a fair picture of progress.",
)

_ONES = [
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    *(
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ),
]

_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))

_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}

_FRACTIONS = {
    (1, 2): "one half",
    (1, 3): "one third",
    (2, 3): "two thirds",
    (1, 4): "one quarter",
    (3, 4): "three quarters",
}


def number_words(n: int) -> str:
    """English words for a non-negative integer (``2024`` -> ``two thousand twenty-four``)."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        t, o = divmod(n, 10)
        return _TENS[t] + ("-" + _ONES[o] if o else "")
    if n < 1000:
        h, r = divmod(n, 100)
        return _ONES[h] + " hundred" + (" " + number_words(r) if r else "")
    for value, name in _SCALES:
        if n >= value:
            q, r = divmod(n, value)
            return number_words(q) + " " + name + (" " + number_words(r) if r else "")
    raise AssertionError("unreachable")


def _ordinal_words(n: int) -> str:
    words = number_words(n)
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:cut], words[cut:]
    if last in _ORDINAL_WORDS:
        return head + _ORDINAL_WORDS[last]
    if last.endswith("y"):
        return head + last[:-1] + "ieth"
    return head + last + "th"


def _numeral_words(m: re.Match[str]) -> str:
    s = m.string
    dollar, whole, frac, suffix, percent = (m.group(i) for i in range(1, 6))
    n = int(whole.replace(",", ""))
    if suffix:
        words = _ordinal_words(n)
    elif frac is not None:
        words = number_words(n) + " point " + " ".join(_ONES[int(d)] for d in frac)
    else:
        words = number_words(n)
    if percent:
        words += " percent"
    if dollar:
        words += " dollars" if words != "one" else " dollar"
    before = s[m.start() - 1] if m.start() > 0 else " "
    after = s[m.end()] if m.end() < len(s) else " "
    if before.isalpha():
        words = " " + words
    if after.isalnum():
        words += " "
    return words


def _to_no_numbers(text: str, rng: random.Random) -> str:
    t = re.sub(r"(?m)^([ \t]*)[0-9]{1,2}[.)][ \t]+(?=\S)", r"\1- ", text)
    t = re.sub(
        r"(?<![0-9])([0-9]+)/([0-9]+)(?![0-9])",
        lambda m: _FRACTIONS.get(
            (int(m.group(1)), int(m.group(2))),
            f"{number_words(int(m.group(1)))} over {number_words(int(m.group(2)))}",
        ),
        t,
    )
    t = re.sub(r"(?<![0-9])([0-9]{1,2}):([0-9]{2})(?![0-9])", r"\1 \2", t)
    t = re.sub(r"(?<=[0-9])[ \t]*[-–][ \t]*(?=[0-9])", " to ", t)
    t = re.sub(
        r"(\$)?([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?(?:(st|nd|rd|th)\b)?(%)?",
        _numeral_words,
        t,
    )
    return re.sub(r"[0-9]", lambda m: " " + _ONES[int(m.group(0))] + " ", t)


_WORD_NUMBERS = {w: i for i, w in enumerate(_ONES) if i >= 2} | {w: 10 * i for i, w in enumerate(_TENS) if i >= 2}

_WORD_NUMBER_RE = re.compile(
    r"\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-(one|two|three|four|five|six|seven|eight|nine)\b"
    r"|\b(" + "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True)) + r")\b"
)


def _word_to_digits(m: re.Match[str]) -> str:
    if m.group(1):
        return str(_WORD_NUMBERS[m.group(1)] + _ONES.index(m.group(2)))
    return str(_WORD_NUMBERS[m.group(3)])


def _to_quantified(text: str, rng: random.Random) -> str:
    converted = _WORD_NUMBER_RE.sub(_word_to_digits, text)
    if _check_numbers(converted) == "quantified":
        return converted
    return finish(insert_sentence(parse(text), rng.choice(_NUMBER_SENTENCES)))


TRANSFORMS: dict[str, Transform] = {"quantified": _to_quantified, "no_numbers": _to_no_numbers}
