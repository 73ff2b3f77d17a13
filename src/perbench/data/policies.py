"""Load policies: seeded unseen users and per-user test splits, cutting over-long texts, and re-marking seen
users without train pairs as unseen."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perbench.data.records import Message, PreferencePair, Prompt, Split, User, untrained_seen_users
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
    all) become test, the rest train. A user with two free pairs or more keeps at least one of each; order kept.

    A pair and its mirror (another user's pair the other way round, :func:`~perbench.data.records.mirror_units`)
    always share a split, so each split stays balanced for user-agnostic scorers; a mirrored pair goes to test only
    while both users still want test pairs, so their counts are ``round(fraction * n)`` where mirrors allow."""
    from perbench.data.records import mirror_units

    units = [u for u in mirror_units(pairs) if all(free is None or pairs[i].pair_id in free for i in u)]
    unit_of = {i: u for u in units for i in u}
    by_user: dict[str, list[int]] = {}
    for u in units:
        for i in u:
            by_user.setdefault(pairs[i].user_id, []).append(i)
    target: dict[str, int] = {}
    for user, idx in by_user.items():
        n = len(idx)
        target[user] = min(max(round(fraction * n), 1), n - 1) if n >= 2 else round(fraction * n)
    split: dict[int, Split] = {}
    tests = dict.fromkeys(by_user, 0)

    def assign(unit: list[int], to: Split) -> None:
        for i in unit:
            if split.get(i) == "test":
                tests[pairs[i].user_id] -= 1
            split[i] = to
            tests[pairs[i].user_id] += to == "test"

    for user, idx in sorted(by_user.items()):
        order = sorted(idx)
        random.Random(f"{seed}/{user}").shuffle(order)
        for i in order:
            if i not in split:
                unit = unit_of[i]
                wants = all(tests[pairs[j].user_id] < target[pairs[j].user_id] for j in unit)
                assign(unit, "test" if wants else "train")
    for user, idx in sorted(by_user.items()):  # where mirrors left a user one-sided, flip a unit that can go
        if len(idx) < 2 or 0 < tests[user] < len(idx):
            continue
        to: Split = "train" if tests[user] else "test"
        for i in sorted(idx):
            unit = unit_of[i]
            after = {pairs[j].user_id: tests[pairs[j].user_id] for j in unit}
            for j in unit:
                after[pairs[j].user_id] += 1 if to == "test" else -1
            if all(0 < after[v] < len(by_user[v]) or len(by_user[v]) < 2 for v in after):
                assign(unit, to)
                break
    out = []
    for i, p in enumerate(pairs):
        out.append(replace(p, split=split[i]) if i in split else p)
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


@dataclass
class Cap:
    """``max_prompts`` / ``max_pairs``: a seeded subsample of a large file, deterministic by ``seed``.

    ``max_prompts`` keeps every pair of a seeded choice of that many distinct prompts; ``max_pairs`` then keeps a
    seeded choice of pairs up to that many, a pair and its mirror together (so the cap may keep one fewer). File
    order is kept. A cap is a choice, not a skip: it is recorded in ``meta["cap"]`` and the notes.
    """

    max_pairs: int | None
    max_prompts: int | None
    seed: int
    pairs_before: int = 0
    pairs_after: int = 0
    prompts_before: int = 0
    prompts_after: int = 0
    dropped_users: set[str] = field(default_factory=set)

    @property
    def active(self) -> bool:
        return self.max_pairs is not None or self.max_prompts is not None

    def apply(self, pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
        from perbench.data.records import mirror_units, prompt_identity

        kept = list(pairs)
        self.pairs_before = len(kept)
        prompts = sorted({prompt_identity(p.prompt) for p in kept})
        self.prompts_before = len(prompts)
        if self.max_prompts is not None and len(prompts) > self.max_prompts:
            random.Random(f"{self.seed}/max_prompts").shuffle(prompts)
            chosen = set(prompts[: self.max_prompts])
            kept = [p for p in kept if prompt_identity(p.prompt) in chosen]
        if self.max_pairs is not None and len(kept) > self.max_pairs:
            units = mirror_units(kept)
            random.Random(f"{self.seed}/max_pairs").shuffle(units)
            take: set[int] = set()
            for unit in units:
                if len(take) + len(unit) <= self.max_pairs:
                    take.update(unit)
            kept = [p for i, p in enumerate(kept) if i in take]
        self.pairs_after = len(kept)
        self.prompts_after = len({prompt_identity(p.prompt) for p in kept})
        self.dropped_users = {p.user_id for p in pairs} - {p.user_id for p in kept}
        return kept

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_pairs": self.max_pairs,
            "max_prompts": self.max_prompts,
            "seed": self.seed,
            "pairs": [self.pairs_before, self.pairs_after],
            "prompts": [self.prompts_before, self.prompts_after],
            "users_left_out": len(self.dropped_users),
        }

    def note(self) -> str | None:
        if not self.active or self.pairs_after == self.pairs_before:
            return None
        users = f"; {len(self.dropped_users)} user(s) left without pairs" if self.dropped_users else ""
        return (
            f"capped to {self.pairs_after} of {self.pairs_before} pairs on {self.prompts_after} of "
            f"{self.prompts_before} prompts (max_pairs={self.max_pairs}, max_prompts={self.max_prompts}, seeded by "
            f"seed {self.seed}; a pair and its mirror kept together){users}"
        )
