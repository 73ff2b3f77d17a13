"""Text structure shared by the aspects' checkers and transforms: lines, paragraphs, sentences and
words; how a text opens and closes; and the edits that insert a sentence or a paragraph."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ALNUM = re.compile(r"[^\W_]")

LIST_PREFIX = re.compile(r"^[ \t]*(?:[-*•]|\d{1,2}[.)])[ \t]+(?=\S)")

HEADING_PREFIX = re.compile(r"^[ \t]*#{1,6}(?:[ \t]+|$)")

_SENT_SPLIT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]])|(?<=[.!?]\*\*))[ \t]+")

_ABBREVIATIONS = frozenset({"e.g.", "i.e.", "vs.", "mr.", "mrs.", "ms.", "dr."})

_TERMINAL = re.compile(r"[.!?][\"'”’)\]*_]*$")


def split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def words(s: str) -> list[str]:
    return [t for t in s.split() if _ALNUM.search(t)]


def has_words(s: str) -> bool:
    return _ALNUM.search(s) is not None


def split_sentences(content: str) -> list[str]:
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
class Line:
    prefix: str  # indentation plus list marker or heading hashes
    kind: str  # "list" | "heading" | "prose"
    sentences: list[str]


Para = list[Line]

Doc = list[Para]


def _parse_line(raw: str) -> Line:
    line = raw.rstrip()
    m = LIST_PREFIX.match(line)
    if m:
        return Line(m.group(0), "list", split_sentences(line[m.end() :]))
    h = HEADING_PREFIX.match(line)
    if h:
        prefix = h.group(0) if h.group(0).endswith((" ", "\t")) else h.group(0) + " "
        return Line(prefix, "heading", split_sentences(line[h.end() :]))
    indent = line[: len(line) - len(line.lstrip())]
    return Line(indent, "prose", split_sentences(line))


def parse(text: str) -> Doc:
    doc: Doc = []
    cur: Para = []
    for raw in split_lines(text):
        if not raw.strip():
            if cur:
                doc.append(cur)
                cur = []
            continue
        cur.append(_parse_line(raw))
    if cur:
        doc.append(cur)
    return doc


def _render_line(line: Line) -> str:
    return (line.prefix + " ".join(line.sentences)).rstrip()


def render(doc: Doc) -> str:
    paras = ["\n".join(r for r in (_render_line(ln) for ln in p) if r.strip()) for p in doc]
    return "\n\n".join(p for p in paras if p)


def copy_doc(doc: Doc) -> Doc:
    return [[Line(ln.prefix, ln.kind, list(ln.sentences)) for ln in p] for p in doc]


def line_content(line: str) -> str:
    m = LIST_PREFIX.match(line) or HEADING_PREFIX.match(line)
    return line[m.end() :] if m else line


def word_count(text: str) -> int:
    """Words as the ``length`` aspect counts them (list markers and heading hashes excluded)."""
    return sum(len(words(line_content(ln))) for ln in split_lines(text))


def word_sentences(para: Para) -> list[str]:
    return [s for ln in para for s in ln.sentences if has_words(s)]


def ends_terminal(s: str) -> bool:
    return _TERMINAL.search(s.rstrip()) is not None


def with_period(s: str) -> str:
    """``s`` ending in sentence punctuation (a trailing ``:`` ``;`` ``,`` or dash becomes a period)."""
    s = s.rstrip()
    if ends_terminal(s):
        return s
    return re.sub(r"[\s:;,\-–—]+$", "", s) + "."


def case_like(src: str, repl: str) -> str:
    if not repl:
        return repl
    if len(src) > 1 and src.isupper():
        return repl.upper()
    if src[:1].isupper():
        return repl[:1].upper() + repl[1:]
    return repl


def capitalize_first(s: str) -> str:
    for i, ch in enumerate(s):
        if ch.isalpha():
            return s[:i] + ch.upper() + s[i + 1 :]
        if ch.isalnum():
            return s
    return s


def at_sentence_start(s: str, i: int) -> bool:
    line = s[:i].rsplit("\n", 1)[-1]
    if re.fullmatch(r"[ \t]*(?:(?:[-*•]|\d{1,2}[.)])[ \t]+|#{1,6}[ \t]+)?(?:\*\*|[\"'(])?[ \t]*", line):
        return True
    return re.search(r"[.!?][\"'”’)\]*]*[ \t]+$", line) is not None


def tidy(text: str) -> str:
    """Undo the spacing damage of word removals, line by line (indentation is kept)."""
    out = []
    for line in split_lines(text):
        line = re.sub(r"(?<=\S)[ \t]{2,}(?=\S)", " ", line)
        line = re.sub(r"(?<=\S)[ \t]+(?=[.,;:?!](?:\s|$))", "", line)
        line = re.sub(r",+(?=[.!?])", "", line)
        out.append(line.rstrip())
    return "\n".join(out)


def opening_of(doc: Doc) -> str | None:
    if not doc:
        return None
    first = doc[0]
    if any(ln.kind != "prose" for ln in first):
        return None
    sents = word_sentences(first)
    if len(sents) >= 2:
        return "context"
    if len(sents) == 1 and len(words(sents[0])) <= 20:
        return "direct"
    return None


def is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t*_\"'”’)]").endswith("?")


def closing_of(doc: Doc) -> str | None:
    if not doc:
        return None
    last = doc[-1]
    sents = [s for ln in last for s in ln.sentences]
    if sents and is_question(sents[-1]):
        return "asks"
    if not any("?" in s for s in sents):
        return "no_question"
    return None


# Edits shared by the transforms (the filler sentences are neutral on every other aspect)

FILLER = (
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


def prose(*sentences: str) -> Line:
    return Line("", "prose", list(sentences))


def insert_paragraph(doc: Doc, para: Para) -> Doc:
    """Insert ``para`` without touching the first paragraph and, where possible, the closing sentence."""
    doc = copy_doc(doc)
    if len(doc) >= 2:
        return [*doc[:-1], para, doc[-1]]
    only = doc[0]
    last = only[-1]
    if closing_of(doc) == "asks" and last.sentences:
        n = len(word_sentences(only))
        if n >= 3:
            question = last.sentences.pop()
            rest = [ln for ln in only if ln.sentences or ln is not last]
            return [rest, para, [Line(last.prefix, last.kind, [question])]]
        if n == 2 and last.kind == "prose" and len(last.sentences) >= 2:
            # Two sentences ending in a question: put the new sentences between them.
            added = [s for ln in para for s in ln.sentences]
            last.sentences[-1:-1] = added
            last.sentences[-len(added) - 2] = with_period(last.sentences[-len(added) - 2])
            return [only]
    return [only, para]


def insert_sentence(doc: Doc, sentence: str) -> Doc:
    """Insert one sentence away from the opening sentence and the closing sentence where possible."""
    doc = copy_doc(doc)
    if len(doc) >= 2:
        return [*doc[:-1], [prose(sentence)], doc[-1]]
    para = doc[0]
    positions = [(li, si) for li, ln in enumerate(para) if ln.kind != "heading" for si in range(len(ln.sentences))]
    candidates = [(li, si) for li, si in positions[:-1] if has_words(para[li].sentences[si])]
    chosen = next((c for c in candidates if ends_terminal(para[c[0]].sentences[c[1]])), None)
    if chosen is None:
        chosen = next((c for c in candidates if not para[c[0]].sentences[c[1]].rstrip().endswith(":")), None)
    if chosen is None:
        return [para, [prose(sentence)]]
    li, si = chosen
    line = para[li]
    line.sentences[si] = with_period(line.sentences[si])
    line.sentences.insert(si + 1, sentence)
    return [para]


def finish(doc: Doc) -> str:
    return render(doc)
