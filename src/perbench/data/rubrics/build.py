"""Build the candidate pool of the rubric benchmark (``perbench build rubrics``), deterministically from a seed.

For every prompt:

1. the bundled policy writes a few *base* responses, each steered by a style instruction that is not part
   of the benchmark prompt (so a reward model never sees it); this module takes them from a ``write``
   function, and ``build_pool`` (:mod:`perbench.builders.rubric_pool`) passes the policy's;
2. *edited* candidates are derived from the bases by the checkers' post-editing transforms: a greedy set
   cover picks full pole assignments so that every user's rubric is met by at least one candidate,
   and most candidates violate some other users' rubrics (the rejected side of their pairs);
3. every candidate is annotated by every checker.

The pool is one JSON line per candidate: ``{prompt_id, cand_id, source, text, annotations}``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from perbench.data.records import AspectPole
from perbench.data.rubrics.aspects import ASPECTS, annotate, satisfies_all, to_pole
from perbench.data.rubrics.prompts import RUBRIC_PROMPTS, RubricPrompt
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser
from perbench.io import atomic_write_jsonl

POOL_PATH = Path(__file__).with_name("pool.jsonl")

STYLES = {
    "brief": "Answer in two or three short sentences.",
    "list": "Answer with a detailed bulleted list of steps or tips.",
    "casual": "Answer casually and warmly, like texting a friend, and address the reader as 'you'.",
    "formal": "Answer formally in two detailed paragraphs and include a concrete example.",
}
#: edit order: structure first, length last (length edits keep the other verdicts where they can)
EDIT_ORDER = (
    "format",
    "opening",
    "example",
    "person",
    "numbers",
    "register",
    "emphasis",
    "closing",
    "length",
)


def cover_assignments(
    rng: random.Random, n_edits: int, users: Sequence[RubricUser] = RUBRIC_USERS
) -> list[dict[str, str]]:
    """Greedy set cover of the users' rubrics by full pole assignments (seeded tie-breaks)."""
    rubrics = [dict((ap.aspect, ap.pole) for ap in u.rubric) for u in users]
    uncovered = list(range(len(rubrics)))
    rng.shuffle(uncovered)
    out: list[dict[str, str]] = []
    while len(out) < n_edits:
        if not uncovered:  # everyone covered: add random assignments for more variety of negatives
            uncovered = list(range(len(rubrics)))
            rng.shuffle(uncovered)
        assignment: dict[str, str] = {}
        for i in list(uncovered):
            r = rubrics[i]
            if all(assignment.get(a, p) == p for a, p in r.items()):
                assignment.update(r)
                uncovered.remove(i)
        for a in ASPECTS:  # fill the rest at random, so candidates differ on every aspect
            assignment.setdefault(a, rng.choice(ASPECTS[a].poles))
        out.append(assignment)
    return out


def apply_assignment(text: str, assignment: dict[str, str], rng: random.Random) -> str:
    for _ in range(2):  # a second pass repairs verdicts a later edit disturbed
        for aspect in EDIT_ORDER:
            if aspect in assignment and ASPECTS[aspect].check(text) != assignment[aspect]:
                try:
                    text = to_pole(text, aspect, assignment[aspect], rng)
                except ValueError:
                    continue
    return text


class BaseRequest(NamedTuple):
    """One base response to write: ``prompt`` (style instruction + benchmark prompt) sampled with ``seed``."""

    key: str  # "<prompt_id>:<style>"
    prompt: str
    seed: int


#: the policy's sampled response to each request, in order (:mod:`perbench.builders.rubric_pool` runs the policy)
WriteResponses = Callable[[Sequence[BaseRequest]], Sequence[str]]


def base_requests(prompts: Sequence[RubricPrompt], *, seed: int = 0) -> list[BaseRequest]:
    """Every prompt once per style, each with its own seed (so the samples do not depend on batching)."""
    return [
        BaseRequest(f"{p.prompt_id}:{style}", f"{instr}\n\n{p.text}", seed * 7919 + i)
        for i, (p, (style, instr)) in enumerate((p, s) for p in prompts for s in STYLES.items())
    ]


def generate_bases(
    prompts: Sequence[RubricPrompt], write: WriteResponses, *, seed: int = 0
) -> dict[str, dict[str, str]]:
    """prompt_id -> style -> ``write``'s response to ``style instruction + prompt`` (an empty one: a fixed
    fallback text)."""
    reqs = base_requests(prompts, seed=seed)
    texts = list(write(reqs))
    if len(texts) != len(reqs):
        raise ValueError(f"the pool's writer returned {len(texts)} responses for {len(reqs)} requests")
    bases: dict[str, dict[str, str]] = {p.prompt_id: {} for p in prompts}
    for r, text in zip(reqs, texts, strict=True):
        pid, style = r.key.split(":")
        bases[pid][style] = text or "I am not sure."
    return bases


def assemble_pool(
    bases: dict[str, dict[str, str]],
    *,
    seed: int = 0,
    n_edits: int = 8,
    users: Sequence[RubricUser] = RUBRIC_USERS,
) -> list[dict[str, Any]]:
    """Base responses + edits covering ``users``' rubrics, deduplicated and annotated by every checker."""
    rows: list[dict[str, Any]] = []
    for pid, by_style in bases.items():
        rng = random.Random(f"{seed}:{pid}")
        cands = [(f"base-{s}", t) for s, t in by_style.items()]
        for j, assignment in enumerate(cover_assignments(rng, n_edits, users)):
            src_name, src_text = cands[j % len(by_style)]
            cands.append((f"edit{j}<-{src_name}", apply_assignment(src_text, assignment, rng)))
        seen: set[str] = set()
        for ci, (source, text) in enumerate(cands):
            if text in seen:
                continue
            seen.add(text)
            rows.append(
                {
                    "prompt_id": pid,
                    "cand_id": f"{pid}-c{ci:02d}",
                    "source": source,
                    "text": text,
                    "annotations": annotate(text),
                }
            )
    return rows


def write_pool(
    write: WriteResponses, out: Path | None = None, *, seed: int = 0, limit: int | None = None, n_edits: int = 8
) -> Path:
    """The pool from ``write``'s base responses (``perbench build rubrics`` passes the policy's: ``build_pool`` in
    :mod:`perbench.builders.rubric_pool`), written to ``out`` (default: the shipped pool)."""
    prompts = RUBRIC_PROMPTS[:limit] if limit else RUBRIC_PROMPTS
    bases = generate_bases(prompts, write, seed=seed)
    out = out or POOL_PATH
    atomic_write_jsonl(out, assemble_pool(bases, seed=seed, n_edits=n_edits))
    return out


def base_responses(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """prompt_id -> style -> the base response, read back from a pool's ``base-<style>`` rows (in ``STYLES``
    order, as :func:`generate_bases` returns them)."""
    found: dict[str, dict[str, str]] = {}
    for r in rows:
        source = str(r.get("source", ""))
        if source.startswith("base-"):
            found.setdefault(str(r["prompt_id"]), {})[source.removeprefix("base-")] = str(r["text"])
    return {pid: {s: by_style[s] for s in STYLES if s in by_style} for pid, by_style in found.items()}


def reassemble_pool(pool: Path | None = None, out: Path | None = None, seed: int = 0, n_edits: int = 8) -> Path:
    """Re-derive a pool's edited candidates from its own base responses, for the current users and checkers (no
    generation): what ``build_pool`` with the same seed writes when the policy gives the same bases. Run it
    after changing a user's rubric or a checker."""
    import json

    src = pool or POOL_PATH
    rows = []
    for line_no, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{src}:{line_no}: invalid JSON ({e.msg})") from None
        for f in ("prompt_id", "text"):
            if not isinstance(row.get(f), str) or not row[f]:
                raise ValueError(f"{src}:{line_no}: field {f!r}: expected a non-empty string")
        rows.append(row)
    bases = base_responses(rows)
    if not bases:
        raise ValueError(f"{src}: no base responses (rows whose 'source' is 'base-<style>') to re-derive edits from")
    out = out or src
    atomic_write_jsonl(out, assemble_pool(bases, seed=seed, n_edits=n_edits))
    return out


def coverage(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Share of (user, prompt) with at least one satisfying candidate."""
    by_prompt: dict[str, list[str]] = {}
    for r in rows:
        by_prompt.setdefault(r["prompt_id"], []).append(r["text"])
    hit = total = 0
    for texts in by_prompt.values():
        for u in RUBRIC_USERS:
            rubric: tuple[AspectPole, ...] = u.rubric
            total += 1
            hit += any(satisfies_all(t, rubric) for t in texts)
    return {"covered": hit / max(total, 1), "pairs": float(total)}
