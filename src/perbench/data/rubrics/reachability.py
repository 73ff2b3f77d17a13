"""Which rubric wants a pool of generations reaches: each pole's share of the samples, every user's rarest want,
and a short witness text for a rubric.

A want (one ``aspect=pole`` of a user's rubric) is *reachable* in a pool when at least :data:`FLOOR` of the
pool's samples land on it: below that, a Best-of-N decoder has nothing to select for that user, whatever its
reward model knows. The built-in users want only poles that the default run's pool reaches (docs/rubrics.md,
"Reachability"). ``default_pool.jsonl`` holds that pool: the bundled policy's 32 samples for each of the 16 test
prompts, drawn with the default config's seed, temperature, top-p and ``max_new_tokens`` exactly as a run draws
them (``bench/rubric_reachability.py --write-default`` writes it; its first line is the sampling spec).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perbench.data.records import AspectPole
from perbench.data.rubrics.aspects import ASPECTS, annotate
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser
from perbench.io import read_jsonl

#: the least share of pool samples on which a default user's want must be met
FLOOR = 0.05
DEFAULT_POOL_PATH = Path(__file__).with_name("default_pool.jsonl")
#: what a witness starts from: one plain sentence, on no pole that needs adding words
_SEED_TEXT = "Start with the simplest step."


@dataclass(frozen=True)
class PoolSnapshot:
    """A sampled pool: how it was drawn (``spec``) and prompt_id -> its samples' texts, in sample order."""

    spec: dict[str, Any]
    texts: dict[str, list[str]]

    def all_texts(self) -> list[str]:
        return [t for row in self.texts.values() for t in row]


def write_snapshot(path: Path, spec: Mapping[str, Any], texts: Mapping[str, Sequence[str]]) -> None:
    from perbench.io import atomic_write_jsonl

    rows: list[dict[str, Any]] = [{"kind": "spec", **spec}]
    rows += [{"prompt_id": pid, "sample": j, "text": t} for pid, row in texts.items() for j, t in enumerate(row)]
    atomic_write_jsonl(path, rows)


def read_snapshot(path: Path = DEFAULT_POOL_PATH) -> PoolSnapshot:
    spec: dict[str, Any] | None = None
    texts: dict[str, dict[int, str]] = {}
    for line_no, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{line_no}: expected a JSON object")
        if row.get("kind") == "spec":
            spec = {k: v for k, v in row.items() if k != "kind"}
            continue
        for f, tp in (("prompt_id", str), ("sample", int), ("text", str)):
            if not isinstance(row.get(f), tp):
                raise ValueError(f"{path}:{line_no}: field {f!r}: expected {tp.__name__}")
        texts.setdefault(row["prompt_id"], {})[row["sample"]] = row["text"]
    if spec is None:
        raise ValueError(f'{path}: no spec line (a row with "kind": "spec")')
    return PoolSnapshot(spec, {pid: [row[j] for j in sorted(row)] for pid, row in texts.items()})


def pole_shares(texts: Sequence[str]) -> dict[tuple[str, str | None], float]:
    """(aspect, pole) -> share of ``texts`` the aspect's checker puts on that pole; (aspect, None) is the dead
    zone's share."""
    if not texts:
        raise ValueError("pole_shares: no texts")
    counts: dict[tuple[str, str | None], int] = {}
    for t in texts:
        for aspect, verdict in annotate(t).items():
            counts[(aspect, verdict)] = counts.get((aspect, verdict), 0) + 1
    return {
        (name, pole): counts.get((name, pole), 0) / len(texts)
        for name, spec in ASPECTS.items()
        for pole in (*spec.poles, None)
    }


def wanted_by(users: Sequence[RubricUser] = RUBRIC_USERS) -> dict[tuple[str, str], list[str]]:
    """(aspect, pole) -> ids of the users who want it."""
    out: dict[tuple[str, str], list[str]] = {}
    for u in users:
        for ap in u.rubric:
            out.setdefault((ap.aspect, ap.pole), []).append(u.user_id)
    return out


def unreachable_wants(
    texts: Sequence[str], users: Sequence[RubricUser] = RUBRIC_USERS, floor: float = FLOOR
) -> list[tuple[str, str, float]]:
    """(user id, ``aspect=pole``, share) of every want met by fewer than ``floor`` of ``texts``."""
    shares = pole_shares(texts)
    return [
        (u.user_id, f"{ap.aspect}={ap.pole}", shares[(ap.aspect, ap.pole)])
        for u in users
        for ap in u.rubric
        if shares[(ap.aspect, ap.pole)] < floor
    ]


def prompts_satisfiable(pools: Mapping[str, Sequence[str]], rubric: Sequence[AspectPole]) -> int:
    """On how many prompts at least one sample of the pool meets the whole rubric (an oracle pick satisfies it)."""
    return sum(
        any(all(a[ap.aspect] == ap.pole for ap in rubric) for a in (annotate(t) for t in texts))
        for texts in pools.values()
    )


def witness(rubric: Sequence[AspectPole], seed: int = 0) -> str:
    """A short text that meets every want of ``rubric``: one plain sentence moved onto each pole by the
    benchmark's own transforms (:func:`~perbench.data.rubrics.build.apply_assignment`). Its word count bounds how
    few words the rubric needs (a whitespace-separated word is at least one token)."""
    from perbench.data.rubrics.build import apply_assignment

    return apply_assignment(_SEED_TEXT, {ap.aspect: ap.pole for ap in rubric}, random.Random(seed))
