"""LLM-judge rubric scoring for benchmarks whose rubrics are not checkable (Personalized RewardBench).

Each rubric aspect of the user (``User.answer_key["rubric_aspects"]``, a list of
``{aspect, evidence, reason}`` — the answer key, never shown to a reward model) is scored 0 / 1 / 2 by a
judge (0 = not addressed, 1 = partially, 2 = fully), one judge call per (response, aspect), as in the
paper's downstream evaluation. The judge is any function from prompts to raw outputs — by default greedy
decoding of a :class:`LoadedLM` with its chat template.

Parsing: the first ``Score: N`` (N ∈ {0, 1, 2}; markdown bold and brackets allowed); failing that, an output
that is just a digit 0–2. Anything else is a **parse failure**: counted and reported (never silent),
scored 0 in ``score`` (as wrong — the reference code silently counted failures as one fixed answer) and
left out of ``score_parsed``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perbench.data.records import User
from perbench.models.loader import LoadedLM

JudgeFn = Callable[[Sequence[str]], list[str]]

JUDGE_TEMPLATE = """You are grading how well a response covers one requirement of a specific user.

Question:
{question}

Response:
{response}

Requirement: {aspect}{details}

Score the response on this requirement only: 0 = not addressed, 1 = partially addressed, 2 = fully addressed.
Answer with one line in the form "Score: <0, 1 or 2>"."""

_SCORE = re.compile(r"score\s*\**\s*[:=]?\s*\**\s*\[?\s*([0-2])(?!\d|\.\d)", re.IGNORECASE)
_BARE = re.compile(r"^\s*\**\[?([0-2])\]?\**\s*\.?\s*$")


def parse_score(text: str) -> int | None:
    """0 / 1 / 2, or None when the output cannot be parsed."""
    m = _SCORE.search(text)
    if m:
        return int(m.group(1))
    m = _BARE.match(text)
    return int(m.group(1)) if m else None


def rubric_aspects(user: User) -> list[dict[str, str]]:
    key = user.answer_key or {}
    aspects = key.get("rubric_aspects") if isinstance(key, Mapping) else None
    return [dict(a) for a in aspects or []]


def judge_prompt(question: str, response: str, aspect: Mapping[str, str]) -> str:
    details = ""
    if aspect.get("reason"):
        details += f"\nWhy it matters to this user: {aspect['reason']}"
    if aspect.get("evidence"):
        details += f"\nEvidence from the user's history: {aspect['evidence']}"
    return JUDGE_TEMPLATE.format(
        question=question.strip(),
        response=response.strip() or "(empty)",
        aspect=aspect["aspect"].strip(),
        details=details,
    )


def lm_judge(lm: LoadedLM, *, max_new_tokens: int = 16, batch_size: int = 8) -> JudgeFn:
    """Greedy decoding of ``lm`` as a judge function."""
    from perbench.models.generate import GenRequest, generate_plain

    def judge(prompts: Sequence[str]) -> list[str]:
        from perbench.calls import note

        note("judge", len(prompts))
        out: list[str] = []
        for s in range(0, len(prompts), batch_size):
            reqs = [GenRequest(p, "judge", 0) for p in prompts[s : s + batch_size]]
            out += [g.text for g in generate_plain(lm, reqs, max_new_tokens)]
        return out

    return judge


@dataclass
class JudgedItem:
    scores: list[int | None]  # per aspect; None = parse failure
    raw: list[str] = field(repr=False)

    @property
    def n_failed(self) -> int:
        return sum(s is None for s in self.scores)

    @property
    def score(self) -> float:
        """Mean aspect score / 2 in [0, 1]; failures count 0; NaN for a user without aspects."""
        if not self.scores:
            return float("nan")
        return sum(s or 0 for s in self.scores) / (2 * len(self.scores))

    @property
    def score_parsed(self) -> float:
        """Mean over the parsed aspects only (NaN if none parsed)."""
        ok = [s for s in self.scores if s is not None]
        return sum(ok) / (2 * len(ok)) if ok else float("nan")


class RubricJudge:
    """Score responses against each user's rubric aspects with a judge (a LoadedLM or a judge function)."""

    def __init__(self, judge: LoadedLM | JudgeFn, *, max_new_tokens: int = 16, batch_size: int = 8) -> None:
        self.judge: JudgeFn = (
            lm_judge(judge, max_new_tokens=max_new_tokens, batch_size=batch_size)
            if isinstance(judge, LoadedLM)
            else judge
        )
        self.name = judge.name if isinstance(judge, LoadedLM) else getattr(judge, "__name__", "judge")
        self.calls = 0
        self.failures = 0

    def score(
        self, responses: Sequence[str], users: Sequence[User], questions: Sequence[str] | None = None
    ) -> list[JudgedItem]:
        """One :class:`JudgedItem` per response; ``questions`` default to ``User.meta["question"]``."""
        if len(responses) != len(users) or (questions is not None and len(questions) != len(users)):
            raise ValueError("RubricJudge.score: responses, users and questions must have the same length")
        prompts: list[str] = []
        spans: list[tuple[int, int]] = []
        for i, (resp, user) in enumerate(zip(responses, users, strict=True)):
            q = questions[i] if questions is not None else str(user.meta.get("question", ""))
            start = len(prompts)
            prompts += [judge_prompt(q, resp, a) for a in rubric_aspects(user)]
            spans.append((start, len(prompts)))
        raw = self.judge(prompts) if prompts else []
        if len(raw) != len(prompts):
            raise ValueError(f"judge returned {len(raw)} outputs for {len(prompts)} prompts")
        parsed = [parse_score(r) for r in raw]
        self.calls += len(prompts)
        self.failures += sum(p is None for p in parsed)
        return [JudgedItem(parsed[a:b], raw[a:b]) for a, b in spans]

    @staticmethod
    def summary(items: Sequence[JudgedItem]) -> dict[str, Any]:
        import numpy as np

        scores = np.array([it.score for it in items], np.float64)
        parsed = np.array([it.score_parsed for it in items], np.float64)
        n_aspects = sum(len(it.scores) for it in items)
        failed = sum(it.n_failed for it in items)
        return {
            "score": float(np.nanmean(scores)) if np.isfinite(scores).any() else float("nan"),
            "score_parsed": float(np.nanmean(parsed)) if np.isfinite(parsed).any() else float("nan"),
            "n": len(items),
            "aspects": n_aspects,
            "parse_failures": failed,
            "parse_failure_rate": failed / n_aspects if n_aspects else float("nan"),
            "failure_policy": "a parse failure scores 0 in 'score' and is excluded from 'score_parsed'",
        }
