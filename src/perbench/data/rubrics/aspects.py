"""Checkable style aspects for the rubrics benchmark, and transforms that move a text onto a pole.

Every aspect has two poles and a checker ``check(text) -> pole | None``. The poles of one aspect are
mutually exclusive by construction; ``None`` means the text sits in the aspect's documented dead zone
(for example 61-119 words for ``length``). The aspects and thresholds:

``length``
    ``concise``: at most 60 words; ``detailed``: at least 120 words. A word is a whitespace-separated
    token holding a letter or digit; list markers and heading hashes are not words.
``format``
    ``bulleted``: at least 3 list lines; ``prose``: no list line. A list line starts (after optional
    indentation) with ``-``, ``*`` or ``•`` followed by a space, or with ``1.``/``1)`` style numbering
    (one or two digits) followed by a space.
``register``
    ``formal``: no contraction, no casual marker and no ``!``; ``casual``: contractions and casual markers
    together occur at least twice. Contractions are ``n't`` forms, ``'re 've 'll 'd 'm`` forms and ``'s``
    after a pronoun (it's, that's, there's, let's, ...); possessives do not count. Casual markers are the
    whole words hey, gonna, wanna, gotta, kinda, sorta, super, awesome, lol, yeah, yep, nope, btw, totally.
``opening``
    The first paragraph is the text up to the first blank line. ``direct``: it is plain prose (no list or
    heading line) holding exactly one sentence of 1-20 words, i.e. a one-line answer up front.
    ``context``: it is plain prose holding at least two sentences, i.e. the answer opens with
    explanation. A newline always ends a sentence.
``closing``
    Looks at the last paragraph. ``asks``: its last sentence ends with ``?`` (trailing quotes, brackets
    and markdown ``*``/``_`` ignored); ``no_question``: it has no ``?`` at all.
``example``
    ``has_example``: contains "for example", "for instance", "e.g.", "such as" or "example:" (any case);
    ``no_example``: contains none of them.
``person``
    Counts whole words you, your, yours, yourself, yourselves (so "you're" counts once).
    ``second_person``: at least 2; ``impersonal``: none.
``numbers``
    Counts digit groups (``3``, ``2.5`` and ``1,000`` are one group each). ``quantified``: at least 2;
    ``no_numbers``: no ASCII digit at all.
``emphasis``
    ``bold``: contains a markdown bold span ``**...**`` on one line; ``plain``: no ``**`` anywhere and no
    markdown heading line (``#`` to ``######`` followed by a space or the end of the line).

``to_pole(text, aspect, pole, rng)`` rewrites a text so that the aspect's checker returns ``pole``; it
changes as little as practical and tries (without guaranteeing it) to leave the other aspects alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from perbench.data.records import AspectPole

# ---------------------------------------------------------------------------------------------------
# Text structure: lines, paragraphs, sentences, words


_ALNUM = re.compile(r"[^\W_]")
_LIST_PREFIX = re.compile(r"^[ \t]*(?:[-*•]|\d{1,2}[.)])[ \t]+(?=\S)")
_HEADING_PREFIX = re.compile(r"^[ \t]*#{1,6}(?:[ \t]+|$)")
_SENT_SPLIT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]])|(?<=[.!?]\*\*))[ \t]+")
_ABBREVIATIONS = frozenset({"e.g.", "i.e.", "vs.", "mr.", "mrs.", "ms.", "dr."})
_TERMINAL = re.compile(r"[.!?][\"'”’)\]*_]*$")


def _lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def _words(s: str) -> list[str]:
    return [t for t in s.split() if _ALNUM.search(t)]


def _has_words(s: str) -> bool:
    return _ALNUM.search(s) is not None


def _split_sentences(content: str) -> list[str]:
    content = content.strip()
    if not content:
        return []
    out: list[str] = []
    for piece in _SENT_SPLIT.split(content):
        if not piece:
            continue
        if out:
            last_token = out[-1].rsplit(None, 1)[-1].lower().lstrip("([\"'")
            if last_token in _ABBREVIATIONS:
                out[-1] = out[-1] + " " + piece
                continue
        out.append(piece)
    return out


@dataclass
class _Line:
    prefix: str  # indentation plus list marker or heading hashes
    kind: str  # "list" | "heading" | "prose"
    sentences: list[str]


_Para = list[_Line]
_Doc = list[_Para]


def _parse_line(raw: str) -> _Line:
    line = raw.rstrip()
    m = _LIST_PREFIX.match(line)
    if m:
        return _Line(m.group(0), "list", _split_sentences(line[m.end() :]))
    h = _HEADING_PREFIX.match(line)
    if h:
        prefix = h.group(0) if h.group(0).endswith((" ", "\t")) else h.group(0) + " "
        return _Line(prefix, "heading", _split_sentences(line[h.end() :]))
    indent = line[: len(line) - len(line.lstrip())]
    return _Line(indent, "prose", _split_sentences(line))


def _parse(text: str) -> _Doc:
    doc: _Doc = []
    cur: _Para = []
    for raw in _lines(text):
        if not raw.strip():
            if cur:
                doc.append(cur)
                cur = []
            continue
        cur.append(_parse_line(raw))
    if cur:
        doc.append(cur)
    return doc


def _render_line(line: _Line) -> str:
    return (line.prefix + " ".join(line.sentences)).rstrip()


def _render(doc: _Doc) -> str:
    paras = ["\n".join(r for r in (_render_line(ln) for ln in p) if r.strip()) for p in doc]
    return "\n\n".join(p for p in paras if p)


def _copy(doc: _Doc) -> _Doc:
    return [[_Line(ln.prefix, ln.kind, list(ln.sentences)) for ln in p] for p in doc]


def _content(line: str) -> str:
    m = _LIST_PREFIX.match(line) or _HEADING_PREFIX.match(line)
    return line[m.end() :] if m else line


def word_count(text: str) -> int:
    """Words as the ``length`` aspect counts them (list markers and heading hashes excluded)."""
    return sum(len(_words(_content(ln))) for ln in _lines(text))


def _word_sentences(para: _Para) -> list[str]:
    return [s for ln in para for s in ln.sentences if _has_words(s)]


def _ends_terminal(s: str) -> bool:
    return _TERMINAL.search(s.rstrip()) is not None


def _with_period(s: str) -> str:
    """``s`` ending in sentence punctuation (a trailing ``:`` ``;`` ``,`` or dash becomes a period)."""
    s = s.rstrip()
    if _ends_terminal(s):
        return s
    return re.sub(r"[\s:;,\-–—]+$", "", s) + "."


def _case_like(src: str, repl: str) -> str:
    if not repl:
        return repl
    if len(src) > 1 and src.isupper():
        return repl.upper()
    if src[:1].isupper():
        return repl[:1].upper() + repl[1:]
    return repl


def _capitalize_first(s: str) -> str:
    for i, ch in enumerate(s):
        if ch.isalpha():
            return s[:i] + ch.upper() + s[i + 1 :]
        if ch.isalnum():
            return s
    return s


def _at_sentence_start(s: str, i: int) -> bool:
    line = s[:i].rsplit("\n", 1)[-1]
    if re.fullmatch(r"[ \t]*(?:(?:[-*•]|\d{1,2}[.)])[ \t]+|#{1,6}[ \t]+)?(?:\*\*|[\"'(])?[ \t]*", line):
        return True
    return re.search(r"[.!?][\"'”’)\]*]*[ \t]+$", line) is not None


def _tidy(text: str) -> str:
    """Undo the spacing damage of word removals, line by line (indentation is kept)."""
    out = []
    for line in _lines(text):
        line = re.sub(r"(?<=\S)[ \t]{2,}(?=\S)", " ", line)
        line = re.sub(r"(?<=\S)[ \t]+(?=[.,;:?!](?:\s|$))", "", line)
        line = re.sub(r",+(?=[.!?])", "", line)
        out.append(line.rstrip())
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------
# Checkers


_CONTRACTION_NT = re.compile(r"(?i)\b([a-z]+)n['’]t\b")
_CONTRACTION_S = re.compile(r"(?i)\b(it|that|there|here|what|who|where|how|he|she|let)['’]s\b")
_CONTRACTION_OTHER = re.compile(r"(?i)\b([a-z]+)['’](re|ve|ll|d|m)\b")
_CASUAL_WORDS = (
    "hey",
    "gonna",
    "wanna",
    "gotta",
    "kinda",
    "sorta",
    "super",
    "awesome",
    "lol",
    "yeah",
    "yep",
    "nope",
    "btw",
    "totally",
)
_CASUAL_RE = re.compile(r"(?i)\b(?:" + "|".join(_CASUAL_WORDS) + r")\b")
_EXAMPLE_RE = re.compile(
    r"(?i)\bfor[ \t]+example\b|\bfor[ \t]+instance\b|\be\.g\.|\bsuch[ \t]+as\b|\bexample(?:\*\*|[ \t])*:"
)
_YOU_RE = re.compile(r"(?i)\byou(?:rs?|rself|rselves)?\b")
_DIGIT_GROUP = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_BOLD_RE = re.compile(r"\*\*[^*\n]*[^*\s][^*\n]*\*\*")


def _contraction_count(text: str) -> int:
    return sum(len(p.findall(text)) for p in (_CONTRACTION_NT, _CONTRACTION_S, _CONTRACTION_OTHER))


def casual_count(text: str) -> int:
    """Contractions plus casual markers, the quantity the ``register`` aspect thresholds."""
    return _contraction_count(text) + len(_CASUAL_RE.findall(text))


def _check_length(text: str) -> str | None:
    n = word_count(text)
    if n <= 60:
        return "concise"
    if n >= 120:
        return "detailed"
    return None


def _list_line_count(text: str) -> int:
    return sum(1 for ln in _lines(text) if _LIST_PREFIX.match(ln))


def _check_format(text: str) -> str | None:
    n = _list_line_count(text)
    if n >= 3:
        return "bulleted"
    if n == 0:
        return "prose"
    return None


def _check_register(text: str) -> str | None:
    n = casual_count(text)
    if n >= 2:
        return "casual"
    if n == 0 and "!" not in text:
        return "formal"
    return None


def _opening_of(doc: _Doc) -> str | None:
    if not doc:
        return None
    first = doc[0]
    if any(ln.kind != "prose" for ln in first):
        return None
    sents = _word_sentences(first)
    if len(sents) >= 2:
        return "context"
    if len(sents) == 1 and len(_words(sents[0])) <= 20:
        return "direct"
    return None


def _check_opening(text: str) -> str | None:
    return _opening_of(_parse(text))


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t*_\"'”’)]").endswith("?")


def _closing_of(doc: _Doc) -> str | None:
    if not doc:
        return None
    last = doc[-1]
    sents = [s for ln in last for s in ln.sentences]
    if sents and _is_question(sents[-1]):
        return "asks"
    if not any("?" in s for s in sents):
        return "no_question"
    return None


def _check_closing(text: str) -> str | None:
    return _closing_of(_parse(text))


def _check_example(text: str) -> str | None:
    return "has_example" if _EXAMPLE_RE.search(text) else "no_example"


def _check_person(text: str) -> str | None:
    n = len(_YOU_RE.findall(text))
    if n >= 2:
        return "second_person"
    if n == 0:
        return "impersonal"
    return None


def _check_numbers(text: str) -> str | None:
    n = len(_DIGIT_GROUP.findall(text))
    if n >= 2:
        return "quantified"
    if n == 0:
        return "no_numbers"
    return None


def _has_heading(text: str) -> bool:
    return any(_HEADING_PREFIX.match(ln) for ln in _lines(text))


def _check_emphasis(text: str) -> str | None:
    if _BOLD_RE.search(text):
        return "bold"
    if "**" not in text and not _has_heading(text):
        return "plain"
    return None


@dataclass(frozen=True)
class Aspect:
    """A checkable style dimension with two mutually exclusive poles."""

    name: str
    poles: tuple[str, str]
    description: str
    thresholds: str
    check: Callable[[str], str | None]

    def opposite(self, pole: str) -> str:
        if pole not in self.poles:
            raise ValueError(f"unknown pole {pole!r} for aspect {self.name!r} (poles: {self.poles})")
        return self.poles[1] if pole == self.poles[0] else self.poles[0]


ASPECTS: dict[str, Aspect] = {
    a.name: a
    for a in (
        Aspect(
            "length",
            ("concise", "detailed"),
            "How long the answer is.",
            "concise: <= 60 words; detailed: >= 120 words; 61-119 words is neither.",
            _check_length,
        ),
        Aspect(
            "format",
            ("bulleted", "prose"),
            "Whether the answer is laid out as a list or as running text.",
            "bulleted: >= 3 list lines ('- ', '* ', '• ', '1. ', '1) '); prose: no list line; 1-2 is neither.",
            _check_format,
        ),
        Aspect(
            "register",
            ("formal", "casual"),
            "Formal versus chatty wording.",
            "formal: no contraction, no casual marker, no '!'; casual: >= 2 contractions and casual markers "
            "counted together; otherwise neither.",
            _check_register,
        ),
        Aspect(
            "opening",
            ("direct", "context"),
            "Whether the answer comes first in one line or is preceded by explanation.",
            "direct: first paragraph is plain prose with exactly one sentence of <= 20 words; context: first "
            "paragraph is plain prose with >= 2 sentences; otherwise neither.",
            _check_opening,
        ),
        Aspect(
            "closing",
            ("asks", "no_question"),
            "Whether the answer ends by asking the reader something.",
            "asks: the last sentence of the last paragraph ends with '?'; no_question: no '?' anywhere in "
            "the last paragraph; otherwise neither.",
            _check_closing,
        ),
        Aspect(
            "example",
            ("has_example", "no_example"),
            "Whether the answer gives an explicit example.",
            "has_example: contains 'for example', 'for instance', 'e.g.', 'such as' or 'example:'; "
            "no_example: none of them.",
            _check_example,
        ),
        Aspect(
            "person",
            ("second_person", "impersonal"),
            "Whether the answer addresses the reader as 'you'.",
            "second_person: >= 2 of you/your/yours/yourself/yourselves; impersonal: none; exactly 1 is neither.",
            _check_person,
        ),
        Aspect(
            "numbers",
            ("quantified", "no_numbers"),
            "Whether the answer gives concrete figures.",
            "quantified: >= 2 digit groups; no_numbers: no digit; exactly 1 group is neither.",
            _check_numbers,
        ),
        Aspect(
            "emphasis",
            ("bold", "plain"),
            "Whether key phrases are marked up in bold.",
            "bold: contains a markdown **bold** span; plain: no '**' and no markdown heading; otherwise neither.",
            _check_emphasis,
        ),
    )
}


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

    note("rubric")
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


# ---------------------------------------------------------------------------------------------------
# Sentence banks used by the transforms (all neutral on the other aspects: no "you", digits,
# contractions, casual markers, example markers, question or exclamation marks, or bold).

_FILLER = (
    "It usually helps to start with the simplest version and adjust from there.",
    "Small, steady changes tend to last longer than big changes made all at once.",
    "Keeping short notes on what worked makes the next attempt easier.",
    "If something feels unclear, it is worth slowing down and checking the basics first.",
    "Most problems of this kind become easier once the first step is done.",
    "A little planning ahead saves time and avoids common mistakes later.",
    "Different situations call for slightly different choices, so some flexibility is useful.",
    "It is also sensible to check the result afterwards and make small corrections.",
    "Patience matters here, because good results often take a few tries.",
    "Asking someone with experience can save a lot of trial and error.",
    "Being consistent is more important than being perfect on the first attempt.",
    "Simple tools and clear habits are often enough to get good results.",
    "When in doubt, choose the option that is easiest to undo.",
    "Reviewing progress every so often helps keep things on track.",
    "Comfort and safety should come before speed in almost every case.",
    "Over time, the process becomes familiar and takes much less effort.",
)
_FILLER_BULLETS = ("Keep it simple.", "Check the result.", "Adjust as needed.")
_DIRECT_OPENERS = (
    "Short answer: keep it simple and build from there.",
    "In short, a simple and steady approach works best.",
    "The main point comes first, and the details follow below.",
)
_CONTEXT_LEADS = (
    "It depends a little on the situation, but the basics are simple.",
    "There are a few things worth knowing before getting into the details.",
    "This comes up a lot, and the answer depends on a few factors.",
)
_CONTEXT_PARAGRAPH = (
    "This depends a little on the situation.",
    "The points below cover the most common cases.",
)
_QUESTIONS = (
    "Would more detail on any part of this help?",
    "Does that cover what was needed?",
    "Which part would be most useful to expand on?",
    "Should I go into more detail on any step?",
)
_EXAMPLES = (
    "For example, setting aside a fixed time each week makes a new habit much easier to keep.",
    "For instance, a short checklist can prevent the most common mistakes.",
    "For example, trying a smaller version first shows quickly what works and what does not.",
)
_YOU_SENTENCES = (
    "You can adjust the details to fit your own situation.",
    "Start with what you already have and adjust as you go.",
    "You will get better results if you keep things simple at first.",
)
_NUMBER_SENTENCES = (
    "Giving it 2 or 3 tries is usually enough to see whether it works.",
    "Setting aside 10 to 15 minutes at a time keeps the effort manageable.",
    "Checking in after 1 or 2 weeks gives a fair picture of progress.",
)
_CASUAL_SENTENCES = (
    "Honestly, it's gonna get easier pretty fast.",
    "It's kinda easier than it sounds, honestly.",
    "Don't stress too much, it's totally doable.",
)


# ---------------------------------------------------------------------------------------------------
# Structural helpers shared by the transforms


def _prose(*sentences: str) -> _Line:
    return _Line("", "prose", list(sentences))


def _insert_paragraph(doc: _Doc, para: _Para) -> _Doc:
    """Insert ``para`` without touching the first paragraph and, where possible, the closing sentence."""
    doc = _copy(doc)
    if len(doc) >= 2:
        return [*doc[:-1], para, doc[-1]]
    only = doc[0]
    last = only[-1]
    if _closing_of(doc) == "asks" and last.sentences:
        n = len(_word_sentences(only))
        if n >= 3:
            question = last.sentences.pop()
            rest = [ln for ln in only if ln.sentences or ln is not last]
            return [rest, para, [_Line(last.prefix, last.kind, [question])]]
        if n == 2 and last.kind == "prose" and len(last.sentences) >= 2:
            # Two sentences ending in a question: put the new sentences between them.
            added = [s for ln in para for s in ln.sentences]
            last.sentences[-1:-1] = added
            last.sentences[-len(added) - 2] = _with_period(last.sentences[-len(added) - 2])
            return [only]
    return [only, para]


def _insert_sentence(doc: _Doc, sentence: str) -> _Doc:
    """Insert one sentence away from the opening sentence and the closing sentence where possible."""
    doc = _copy(doc)
    if len(doc) >= 2:
        return [*doc[:-1], [_prose(sentence)], doc[-1]]
    para = doc[0]
    positions = [(li, si) for li, ln in enumerate(para) if ln.kind != "heading" for si in range(len(ln.sentences))]
    candidates = [(li, si) for li, si in positions[:-1] if _has_words(para[li].sentences[si])]
    chosen = next((c for c in candidates if _ends_terminal(para[c[0]].sentences[c[1]])), None)
    if chosen is None:
        chosen = next((c for c in candidates if not para[c[0]].sentences[c[1]].rstrip().endswith(":")), None)
    if chosen is None:
        return [para, [_prose(sentence)]]
    li, si = chosen
    line = para[li]
    line.sentences[si] = _with_period(line.sentences[si])
    line.sentences.insert(si + 1, sentence)
    return [para]


def _finish(doc: _Doc) -> str:
    return _render(doc)


# ---------------------------------------------------------------------------------------------------
# length


def _cut_words(sentence: str, limit: int) -> str:
    out: list[str] = []
    n = 0
    for tok in sentence.split():
        if _has_words(tok):
            if n >= limit:
                break
            n += 1
        out.append(tok)
    return _with_period(" ".join(out))


def _to_concise(text: str, rng: random.Random) -> str:
    doc = _parse(text)
    tail: str | None = None
    if _closing_of(doc) == "asks":
        q = [s for ln in doc[-1] for s in ln.sentences][-1]
        if len(_words(q)) <= 20:
            tail = q
    budget = 60 - (len(_words(tail)) if tail else 0)
    new_doc: _Doc = []
    used = 0
    stop = False
    for para in doc:
        new_para: _Para = []
        for line in para:
            kept: list[str] = []
            for s in line.sentences:
                n = len(_words(s))
                if used + n > budget:
                    stop = True
                    break
                kept.append(s)
                used += n
            if kept:
                new_para.append(_Line(line.prefix, line.kind, kept))
            if stop:
                break
        if new_para:
            new_doc.append(new_para)
        if stop:
            break
    # Drop a dangling heading or list intro ("Here are the steps:") left at the cut.
    while new_doc:
        last_line = new_doc[-1][-1]
        dangling = last_line.kind == "heading" or (
            bool(last_line.sentences) and last_line.sentences[-1].rstrip(" *_").endswith(":")
        )
        if not dangling or (sum(len(p) for p in new_doc) == 1 and len(last_line.sentences) <= 1):
            break
        if last_line.kind != "heading":
            last_line.sentences.pop()
        if not last_line.sentences or last_line.kind == "heading":
            new_doc[-1].pop()
        if not new_doc[-1]:
            new_doc.pop()
    if not any(_has_words(s) for p in new_doc for ln in p if ln.kind != "heading" for s in ln.sentences):
        first = next((s for p in doc for ln in p for s in ln.sentences if _has_words(s)), "")
        new_doc = [[_prose(_cut_words(first, max(1, budget - 1)))]]
    if tail is not None and _closing_of(new_doc) != "asks":
        new_doc.append([_prose(tail)])
    return _finish(new_doc)


def _to_detailed(text: str, rng: random.Random) -> str:
    need = 120 - word_count(text)
    filler: list[str] = []
    pool: list[str] = []
    while need > 0:
        if not pool:
            pool = list(_FILLER)
            rng.shuffle(pool)
        s = pool.pop()
        filler.append(s)
        need -= len(_words(s))
    return _finish(_insert_paragraph(_parse(text), [_prose(*filler)]))


# ---------------------------------------------------------------------------------------------------
# format


def _split_item(item: str) -> list[str]:
    """Split one list item in two, at a clause boundary near the middle, else at the middle word."""
    toks = item.split()
    if len(_words(item)) < 6:
        return [item]
    best: tuple[int, int] | None = None  # (distance to the middle, token index starting part two)
    for i in range(1, len(toks)):
        prev, cur = toks[i - 1], toks[i]
        if prev.endswith((",", ";", ":")) or cur.lower() in ("and", "or", "then", "but"):
            d = abs(i - len(toks) / 2)
            if best is None or d < best[0]:
                best = (int(d), i)
    if best is None and len(_words(item)) < 8:
        return [item]
    cut = best[1] if best is not None else len(toks) // 2
    a = " ".join(toks[:cut]).rstrip(",;:")
    b = " ".join(toks[cut:])
    if best is not None and toks[cut].lower() in ("and", "or"):
        b = " ".join(toks[cut + 1 :]) or b
    if not _has_words(a) or not _has_words(b):
        cut = len(toks) // 2
        a, b = " ".join(toks[:cut]), " ".join(toks[cut:])
    return [a, _capitalize_first(b)]


def _bulletize(para: _Para) -> _Para:
    out: _Para = []
    for line in para:
        if line.kind != "prose":
            out.append(line)
            continue
        for s in line.sentences:
            out.append(_Line("- ", "list", [s]) if _has_words(s) else _Line(line.prefix, "prose", [s]))
    return out


def _to_bulleted(text: str, rng: random.Random) -> str:
    doc = _copy(_parse(text))
    units = sum(1 for p in doc for ln in p if ln.kind == "list") + sum(
        1 for p in doc for ln in p if ln.kind == "prose" for s in ln.sentences if _has_words(s)
    )
    opening = _opening_of(doc)
    new_doc: _Doc = []
    if opening == "context" and len(doc) >= 2 and units - len(_word_sentences(doc[0])) >= 3:
        # Keep the explanatory first paragraph as it is and list the rest.
        new_doc.append(doc[0])
        doc = doc[1:]
    else:
        # Keep a lead (one sentence, or two when the text opens with context) in prose before the list.
        k = 2 if opening == "context" and units - 2 >= 3 else 1
        first = doc[0][0]
        if first.kind != "prose" or not first.sentences or not _has_words(first.sentences[0]):
            k = 0
        if k and units - k >= 3:
            lead: list[str] = []
            for line in doc[0]:
                while line.kind == "prose" and line.sentences and len(lead) < k:
                    lead.append(line.sentences.pop(0))
            new_doc.append([_Line(first.prefix, "prose", lead)])
    for para in doc:
        new_para = _bulletize([ln for ln in para if ln.sentences or ln.kind == "heading"])
        if new_para:
            new_doc.append(new_para)
    if sum(1 for p in new_doc for ln in p if ln.kind == "list") >= 3:
        return _finish(new_doc)
    # Fewer than three sentences in all: split items, then pad with generic steps.
    headings = [ln for p in doc for ln in p if ln.kind == "heading"]
    items = [
        item
        for p in doc
        for ln in p
        if ln.kind != "heading"
        for item in (ln.sentences if ln.kind == "prose" else [" ".join(ln.sentences)])
        if _has_words(item)
    ]
    while len(items) < 3:
        i = max(range(len(items)), key=lambda k: len(_words(items[k])), default=-1)
        parts = _split_item(items[i]) if i >= 0 else []
        if len(parts) < 2:
            break
        items[i : i + 1] = parts
    pad = [b for b in _FILLER_BULLETS if b not in items]
    while len(items) < 3:
        items.append(pad.pop(0))
    out: _Doc = [headings] if headings else []
    out.append([_Line("- ", "list", [it]) for it in items])
    return _finish(out)


def _strip_markers(s: str) -> str:
    while True:
        m = _LIST_PREFIX.match(s)
        if not m:
            return s
        s = s[m.end() :]


def _to_prose(text: str, rng: random.Random) -> str:
    new_doc: _Doc = []
    for para in _parse(text):
        new_para: _Para = []
        run: list[str] = []  # consecutive list items, joined into one prose line
        for line in [*para, None]:
            if line is not None and line.kind == "list":
                item = _strip_markers(" ".join(line.sentences)).strip()
                if item:
                    run.append(_with_period(_capitalize_first(item)) if _has_words(item) else item)
                continue
            if run:
                new_para.append(_Line("", "prose", _split_sentences(" ".join(run))))
                run = []
            if line is not None and line.sentences:
                new_para.append(line)
        if new_para:
            new_doc.append(new_para)
    out = _finish(new_doc)
    # A prose line can still look like a list line (e.g. "2. Bake." split off a sentence): unmark it.
    return "\n".join(_strip_markers(ln) for ln in _lines(out))


# ---------------------------------------------------------------------------------------------------
# register

_NT_SPECIAL = {"can't": "cannot", "won't": "will not", "shan't": "shall not", "ain't": "is not"}
_OTHER_EXPANSION = {"re": "are", "ve": "have", "ll": "will", "d": "would", "m": "am"}
_FORMAL_SWAP = {
    "gonna": "going to",
    "wanna": "want to",
    "gotta": "have to",
    "kinda": "somewhat",
    "sorta": "somewhat",
    "super": "very",
    "awesome": "excellent",
    "yeah": "yes",
    "yep": "yes",
    "nope": "no",
    "btw": "incidentally",
    "totally": "completely",
}
_DROP_RE = re.compile(r"(?i)\b(?:hey(?:[ \t]+there)?|lol)\b(?P<punct>[ \t]*[,!.]*)(?P<space>[ \t]*)(?P<next>[a-z])?")


def _expand_nt(m: re.Match[str]) -> str:
    full = m.group(0)
    key = full.lower().replace("’", "'")
    if key in _NT_SPECIAL:
        return _case_like(full, _NT_SPECIAL[key])
    out = m.group(1) + " not"
    return out.upper() if full.isupper() and len(full) > 1 else out


def _expand_s(m: re.Match[str]) -> str:
    word = m.group(1)
    return word + (" us" if word.lower() == "let" else " is")


def _expand_other(m: re.Match[str]) -> str:
    return m.group(1) + " " + _case_like(m.group(2), _OTHER_EXPANSION[m.group(2).lower()])


def _drop_casual(m: re.Match[str]) -> str:
    nxt = m.group("next") or ""
    if _at_sentence_start(m.string, m.start()):
        return nxt.upper()
    punct = m.group("punct").replace(",", "").strip()
    return punct + m.group("space") + nxt


def _to_formal(text: str, rng: random.Random) -> str:
    t = _CONTRACTION_NT.sub(_expand_nt, text)
    t = _CONTRACTION_S.sub(_expand_s, t)
    t = _CONTRACTION_OTHER.sub(_expand_other, t)
    t = _DROP_RE.sub(_drop_casual, t)
    t = _CASUAL_RE.sub(lambda m: _case_like(m.group(0), _FORMAL_SWAP.get(m.group(0).lower(), "")), t)
    t = re.sub(r"\?+!+[?!]*|!+\?+[?!]*", "?", t)
    t = re.sub(r"!+", ".", t)
    return _tidy(t)


_CONTRACT_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (
        re.compile(r"(?i)\b(do|does|did|is|are|was|were|has|have|had|could|would|should|must)[ \t]+not\b"),
        lambda m: m.group(1) + "n't",
    ),
    (re.compile(r"(?i)\bcan(?:not|[ \t]+not)\b"), lambda m: _case_like(m.group(0), "can't")),
    (re.compile(r"(?i)\bwill[ \t]+not\b"), lambda m: _case_like(m.group(0), "won't")),
    (
        re.compile(r"(?i)\b(it|that|there|here|what|who|he|she)[ \t]+is(?=[ \t]+[a-z])"),
        lambda m: m.group(1) + "'s",
    ),
    (re.compile(r"(?i)\b(you|we|they)[ \t]+are(?=[ \t]+[a-z])"), lambda m: m.group(1) + "'re"),
    (re.compile(r"\bI[ \t]+am(?=[ \t]+[a-z])"), lambda m: "I'm"),
    (re.compile(r"(?i)\b(I|you|we|they|it|he|she)[ \t]+will(?=[ \t]+[a-z])"), lambda m: m.group(1) + "'ll"),
)


def _to_casual(text: str, rng: random.Random) -> str:
    t = text
    for pattern, repl in _CONTRACT_RULES:
        t = pattern.sub(repl, t)
    if casual_count(t) >= 2:
        return t
    t = re.sub(r"\bvery\b", "super", t)
    if casual_count(t) >= 2:
        return t
    return _finish(_insert_sentence(_parse(t), rng.choice(_CASUAL_SENTENCES)))


# ---------------------------------------------------------------------------------------------------
# opening


def _to_direct(text: str, rng: random.Random) -> str:
    doc = _copy(_parse(text))
    first_para = doc[0]
    first = first_para[0]
    if first.kind == "prose" and first.sentences:
        s1 = first.sentences[0]
        if _has_words(s1) and len(_words(s1)) <= 20:
            rest_line = _Line(first.prefix, "prose", first.sentences[1:])
            rest = [ln for ln in [rest_line, *first_para[1:]] if ln.sentences]
            out = [[_Line(first.prefix, "prose", [s1])], *([rest] if rest else []), *doc[1:]]
            rendered = _finish(out)
            if _check_opening(rendered) == "direct":
                return rendered
    return _finish([[_prose(rng.choice(_DIRECT_OPENERS))], *doc])


def _to_context(text: str, rng: random.Random) -> str:
    doc = _copy(_parse(text))
    first_para = doc[0]
    prose_first = all(ln.kind == "prose" for ln in first_para) and bool(_word_sentences(first_para))
    if prose_first and len(doc) >= 2 and all(ln.kind == "prose" for ln in doc[1]) and _word_sentences(doc[1]):
        # Drop the one-line answer: merge it into the paragraph that follows.
        head = first_para[-1]
        head.sentences[-1] = _with_period(head.sentences[-1])
        nxt = doc[1]
        merged_first = _Line(head.prefix, "prose", head.sentences + nxt[0].sentences)
        out = [[*first_para[:-1], merged_first, *nxt[1:]], *doc[2:]]
        rendered = _finish(out)
        if _check_opening(rendered) == "context":
            return rendered
    if prose_first:
        first = first_para[0]
        out = _copy(doc)
        out[0][0] = _Line(first.prefix, "prose", [rng.choice(_CONTEXT_LEADS), *first.sentences])
        rendered = _finish(out)
        if _check_opening(rendered) == "context":
            return rendered
    return _finish([[_prose(*_CONTEXT_PARAGRAPH)], *doc])


# ---------------------------------------------------------------------------------------------------
# closing


def _to_asks(text: str, rng: random.Random) -> str:
    return _finish([*_parse(text), [_prose(rng.choice(_QUESTIONS))]])


def _to_no_question(text: str, rng: random.Random) -> str:
    doc = _copy(_parse(text))
    while doc and _closing_of(doc) != "no_question":
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
    return _finish(doc)


# ---------------------------------------------------------------------------------------------------
# example

_FOR_EXAMPLE_RE = re.compile(
    r"(?i)(?P<lead>,[ \t]*)?\bfor[ \t]+(?:example|instance)\b"
    r"(?P<trail>(?:\*\*)?[ \t]*[,:](?:\*\*)?)?[ \t]*(?P<next>[a-z])?"
)


def _drop_for_example(m: re.Match[str]) -> str:
    nxt = m.group("next") or ""
    if _at_sentence_start(m.string, m.start()):
        return nxt.upper()
    if m.group("trail") or not nxt:
        return " " + nxt  # "This is, for example, true" -> "This is true"
    return " like " + nxt  # "fruits for example apples" -> "fruits like apples"


def _to_has_example(text: str, rng: random.Random) -> str:
    return _finish(_insert_sentence(_parse(text), rng.choice(_EXAMPLES)))


def _to_no_example(text: str, rng: random.Random) -> str:
    t = text
    for _ in range(5):
        t = _FOR_EXAMPLE_RE.sub(_drop_for_example, t)
        t = re.sub(r"(?i)\bsuch[ \t]+as\b", lambda m: _case_like(m.group(0), "like"), t)
        t = re.sub(r"(?i)\be\.g\.(?:[ \t]*,)?", lambda m: _case_like(m.group(0), "like"), t)
        t = re.sub(r"(?i)\b(example)(?=(?:\*\*|[ \t])*:)", lambda m: _case_like(m.group(1), "illustration"), t)
        t = _tidy(t)
        if not _EXAMPLE_RE.search(t):
            return t
    return _EXAMPLE_RE.sub("", t)


# ---------------------------------------------------------------------------------------------------
# person

_IMPERSONAL_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\bthank[ \t]+you\b"), "thanks"),
    (re.compile(r"(?i)\byou['’]re\b"), "people are"),
    (re.compile(r"(?i)\byou['’]ve\b"), "people have"),
    (re.compile(r"(?i)\byou['’]ll\b"), "people will"),
    (re.compile(r"(?i)\byou['’]d\b"), "people would"),
    (re.compile(r"(?i)\byourselves\b"), "themselves"),
    (re.compile(r"(?i)\byourself\b"), "oneself"),
    (re.compile(r"(?i)\byours\b"), "theirs"),
    (re.compile(r"(?i)\byour[ \t]+own\b"), "their own"),
    (re.compile(r"(?i)\byour\b"), "the"),
    (re.compile(r"(?i)\byou\b"), "people"),
)


def _to_impersonal(text: str, rng: random.Random) -> str:
    t = text
    for pattern, repl in _IMPERSONAL_RULES:
        t = _sub_like(pattern, repl, t)
    return t


def _sub_like(pattern: re.Pattern[str], repl: str, text: str) -> str:
    return pattern.sub(lambda m: _case_like(m.group(0), repl), text)


def _to_second_person(text: str, rng: random.Random) -> str:
    return _finish(_insert_sentence(_parse(text), rng.choice(_YOU_SENTENCES)))


# ---------------------------------------------------------------------------------------------------
# numbers

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
    return _finish(_insert_sentence(_parse(text), rng.choice(_NUMBER_SENTENCES)))


# ---------------------------------------------------------------------------------------------------
# emphasis


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
        if _has_words(span.replace("*", "")):
            return offset, offset + len(span)
    return None


def _to_bold(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    for i, line in enumerate(lines):
        m = _LIST_PREFIX.match(line) or _HEADING_PREFIX.match(line)
        start = m.end() if m else 0
        content = line[start:]
        if not _has_words(content):
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


# ---------------------------------------------------------------------------------------------------
# Dispatch

_TRANSFORMS: dict[tuple[str, str], Callable[[str, random.Random], str]] = {
    ("length", "concise"): _to_concise,
    ("length", "detailed"): _to_detailed,
    ("format", "bulleted"): _to_bulleted,
    ("format", "prose"): _to_prose,
    ("register", "formal"): _to_formal,
    ("register", "casual"): _to_casual,
    ("opening", "direct"): _to_direct,
    ("opening", "context"): _to_context,
    ("closing", "asks"): _to_asks,
    ("closing", "no_question"): _to_no_question,
    ("example", "has_example"): _to_has_example,
    ("example", "no_example"): _to_no_example,
    ("person", "second_person"): _to_second_person,
    ("person", "impersonal"): _to_impersonal,
    ("numbers", "quantified"): _to_quantified,
    ("numbers", "no_numbers"): _to_no_numbers,
    ("emphasis", "bold"): _to_bold,
    ("emphasis", "plain"): _to_plain,
}


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
        out = rng.choice(_FILLER)
    if a.check(out) != pole:  # pragma: no cover - guarded by the property tests
        raise ValueError(f"could not move the text onto {aspect}={pole}")
    return out
