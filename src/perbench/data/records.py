"""Typed records: preference pairs, users, gold references, and the Benchmark that holds them."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "test"]
SPLITS: tuple[str, ...] = ("train", "test")


@dataclass(frozen=True)
class Message:
    role: str
    content: str


Prompt = str | tuple[Message, ...]


def prompt_text(prompt: Prompt) -> str:
    """A plain-text view of a prompt (the last user turn for chat prompts), used by retrieval and reports."""
    if isinstance(prompt, str):
        return prompt
    users = [m.content for m in prompt if m.role == "user"]
    return users[-1] if users else (prompt[-1].content if prompt else "")


def prompt_messages(prompt: Prompt) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m.role, "content": m.content} for m in prompt]


def prompt_key(prompt: Prompt) -> str:
    return json.dumps(prompt_messages(prompt), ensure_ascii=False, sort_keys=True)


def content_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PreferencePair:
    pair_id: str
    user_id: str
    prompt: Prompt
    chosen: str
    rejected: str
    split: Split = "test"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def content_key(self) -> str:
        """Identity by content: (user, prompt, chosen, rejected)."""
        return content_hash(self.user_id, prompt_key(self.prompt), self.chosen, self.rejected)


@dataclass(frozen=True)
class ProfileItem:
    item_id: str
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class AspectPole:
    """One checkable rubric requirement: the text must land on ``pole`` of ``aspect``."""

    aspect: str
    pole: str


@dataclass(frozen=True)
class User:
    user_id: str
    seen: bool = True
    profile: tuple[ProfileItem, ...] = ()
    rubric_text: str | None = None
    rubric: tuple[AspectPole, ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Reference:
    """A gold completion for (user, prompt), e.g. the user's real title in Pref-LaMP."""

    user_id: str
    prompt: Prompt
    text: str
    split: Split = "test"


@dataclass
class SkipReport:
    """Counted, never silent: what a loader dropped and why."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, where: str = "") -> None:
        self.counts[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if where and len(ex) < 5:
            ex.append(where)

    def merge(self, other: SkipReport) -> None:
        for reason, n in other.counts.items():
            self.counts[reason] += n
            ex = self.examples.setdefault(reason, [])
            ex.extend(other.examples.get(reason, [])[: max(0, 5 - len(ex))])

    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total(), "counts": dict(self.counts), "examples": self.examples}


@dataclass
class Benchmark:
    """Pairs + users + references, with train/test and seen/unseen splits.

    Seen users: ``train`` pairs fit reward models, ``test`` pairs evaluate them.
    Unseen users: ``train`` pairs are their ordered few-shot set (adaptation only), ``test`` pairs evaluate.
    """

    name: str
    pairs: list[PreferencePair]
    users: dict[str, User]
    references: list[Reference] = field(default_factory=list)
    skipped: SkipReport = field(default_factory=SkipReport)
    meta: dict[str, Any] = field(default_factory=dict)
    weighting: Literal["pair", "row"] = "pair"

    def __post_init__(self) -> None:
        unknown = sorted({p.user_id for p in self.pairs} - set(self.users))
        if unknown:
            raise ValueError(f"benchmark {self.name!r}: pairs name unknown users {unknown[:5]}")

    @property
    def seen_users(self) -> list[str]:
        return sorted(u for u, rec in self.users.items() if rec.seen)

    @property
    def unseen_users(self) -> list[str]:
        return sorted(u for u, rec in self.users.items() if not rec.seen)

    def select(
        self, *, split: str | None = None, seen: bool | None = None, user: str | None = None
    ) -> list[PreferencePair]:
        out = []
        for p in self.pairs:
            if split is not None and p.split != split:
                continue
            if seen is not None and self.users[p.user_id].seen != seen:
                continue
            if user is not None and p.user_id != user:
                continue
            out.append(p)
        return out

    def train_pairs(self) -> list[PreferencePair]:
        """Pairs a reward model may be fit on: the seen users' train split."""
        return self.select(split="train", seen=True)

    def fewshot(self, user_id: str, n: int | None = None) -> list[PreferencePair]:
        """An unseen user's ordered few-shot set (their train split), first ``n`` shots."""
        shots = self.select(split="train", user=user_id)
        return shots if n is None else shots[:n]

    def test_pairs(self, seen: bool | None = None) -> list[PreferencePair]:
        return self.select(split="test", seen=seen)

    def reference(self, user_id: str, prompt: Prompt) -> Reference | None:
        key = prompt_key(prompt)
        for r in self.references:
            if r.user_id == user_id and prompt_key(r.prompt) == key:
                return r
        return None

    def fingerprint(self) -> str:
        """Content hash of everything a result depends on."""
        parts = [self.name]
        parts += [p.content_key() + p.split for p in self.pairs]
        parts += [f"{u}:{r.seen}:{r.rubric}:{r.rubric_text}:{len(r.profile)}" for u, r in sorted(self.users.items())]
        parts += [content_hash(r.user_id, prompt_key(r.prompt), r.text) for r in self.references]
        return content_hash(*parts)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pairs": len(self.pairs),
            "users_seen": len(self.seen_users),
            "users_unseen": len(self.unseen_users),
            "train_pairs": len(self.train_pairs()),
            "test_pairs_seen": len(self.test_pairs(seen=True)),
            "test_pairs_unseen": len(self.test_pairs(seen=False)),
            "references": len(self.references),
            "weighting": self.weighting,
            "skipped": self.skipped.to_dict(),
        }


def dedup_pairs(pairs: Iterable[PreferencePair], skipped: SkipReport) -> list[PreferencePair]:
    """Drop exact duplicates by (user, prompt, chosen, rejected) and degenerate pairs; counts go to ``skipped``."""
    seen: set[str] = set()
    out: list[PreferencePair] = []
    for p in pairs:
        if not p.chosen.strip() or not p.rejected.strip():
            skipped.add("empty_response", p.pair_id)
            continue
        if p.chosen == p.rejected:
            skipped.add("chosen_equals_rejected", p.pair_id)
            continue
        key = p.content_key()
        if key in seen:
            skipped.add("duplicate_pair", p.pair_id)
            continue
        seen.add(key)
        out.append(p)
    return out
