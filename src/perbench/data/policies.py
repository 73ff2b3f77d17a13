"""Load policies: seeded unseen users and per-user test splits, cutting over-long texts, and re-marking seen
users without train pairs as unseen."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perbench.data.records import Message, PreferencePair, Prompt, User, untrained_seen_users
from perbench.errors import ConfigError

#: default ``max_chars``: far beyond any model input we build, so only runaway texts are cut
DEFAULT_MAX_CHARS = 100_000


def assign_unseen(user_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded ``round(fraction * n)`` of the sorted user ids; stable across runs and machines."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"unseen_fraction must be in [0, 1), got {fraction}")
    ids = sorted(user_ids)
    n = round(fraction * len(ids))
    random.Random(seed).shuffle(ids)
    return set(ids[:n])


def assign_test_split(
    pairs: Sequence[PreferencePair], fraction: float, seed: int, free: set[str] | None = None
) -> list[PreferencePair]:
    """A seeded per-user split: ``round(fraction * n)`` of each user's ``n`` free pairs (ids in ``free``, default
    all) become test, the rest train. A user with two free pairs or more keeps at least one of each; order kept."""
    by_user: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        if free is None or p.pair_id in free:
            by_user.setdefault(p.user_id, []).append(i)
    test: set[int] = set()
    for user, idx in sorted(by_user.items()):
        n = len(idx)
        n_test = round(fraction * n)
        if n >= 2:
            n_test = min(max(n_test, 1), n - 1)
        order = list(idx)
        random.Random(f"{seed}/{user}").shuffle(order)
        test.update(order[:n_test])
    out = []
    for i, p in enumerate(pairs):
        free_pair = free is None or p.pair_id in free
        out.append(replace(p, split="test" if i in test else "train") if free_pair else p)
    return out


def truncate_pair(pair: PreferencePair, max_chars: int | None) -> tuple[PreferencePair, tuple[str, ...]]:
    """``pair`` with texts over ``max_chars`` cut: a response keeps its first ``max_chars`` characters, a prompt
    (each message of a chat prompt) its last ``max_chars``. Returns the pair and the parts that were cut."""
    if max_chars is None:
        return pair, ()
    parts: list[str] = []
    chosen, rejected = pair.chosen, pair.rejected
    if len(chosen) > max_chars:
        chosen = chosen[:max_chars]
        parts.append("chosen")
    if len(rejected) > max_chars:
        rejected = rejected[:max_chars]
        parts.append("rejected")
    prompt: Prompt = pair.prompt
    if isinstance(prompt, str):
        if len(prompt) > max_chars:
            prompt = prompt[-max_chars:]
            parts.append("prompt")
    elif any(len(m.content) > max_chars for m in prompt):
        prompt = tuple(Message(m.role, m.content[-max_chars:]) for m in prompt)
        parts.append("prompt")
    if not parts:
        return pair, ()
    meta = {**pair.meta, "truncated": parts}
    return replace(pair, prompt=prompt, chosen=chosen, rejected=rejected, meta=meta), tuple(parts)


@dataclass
class Truncations:
    """Counts of pairs cut by ``max_chars``, for ``meta["truncated"]``."""

    max_chars: int | None
    pairs: int = 0
    parts: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "chosen": 0, "rejected": 0})
    examples: list[str] = field(default_factory=list)

    def apply(self, pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
        out = []
        for p in pairs:
            cut, parts = truncate_pair(p, self.max_chars)
            if parts:
                self.pairs += 1
                for part in parts:
                    self.parts[part] += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{p.meta.get('source', p.pair_id)} ({', '.join(parts)})")
            out.append(cut)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"max_chars": self.max_chars, "pairs": self.pairs, "parts": dict(self.parts), "examples": self.examples}

    def note(self) -> str | None:
        if not self.pairs:
            return None
        return (
            f"{self.pairs} pair(s) had a text over max_chars={self.max_chars} characters and were cut "
            f"(responses keep their start, prompts their end): {self.parts}"
        )


def demote_untrained(users: Mapping[str, User], pairs: Sequence[PreferencePair]) -> tuple[dict[str, User], list[str]]:
    """Users re-marked unseen because they are seen but have no train pair while the benchmark has train pairs
    (they were never seen in training: they get few-shot adaptation like any unseen user)."""
    demoted = untrained_seen_users(pairs, {u: rec.seen for u, rec in users.items()})
    out = {u: replace(rec, seen=False) if u in demoted else rec for u, rec in users.items()}
    return out, demoted


def demotion_note(demoted: Sequence[str]) -> str:
    shown = ", ".join(repr(u) for u in demoted[:5]) + (" ..." if len(demoted) > 5 else "")
    return (
        f"{len(demoted)} seen user(s) without a train pair are evaluated as unseen (few-shot adaptation only, "
        f"never trained on): {shown}"
    )
