"""Typed records: preference pairs, users, gold references, and the Benchmark that holds them.

The pair records and their identity live in :mod:`perbench.data.pairs`, skip counts in :mod:`perbench.data.skips`,
deduplication and mirrors in :mod:`perbench.data.dedup`; all are importable from here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from perbench.data.dedup import MIRROR_REASON as MIRROR_REASON
from perbench.data.dedup import dedup_pairs as dedup_pairs
from perbench.data.dedup import dedup_units as dedup_units
from perbench.data.dedup import degenerate_reason as degenerate_reason
from perbench.data.dedup import mirror_units as mirror_units
from perbench.data.dedup import mirrored_ids as mirrored_ids
from perbench.data.dedup import untrained_seen_users as untrained_seen_users
from perbench.data.pairs import SPLITS as SPLITS
from perbench.data.pairs import Message as Message
from perbench.data.pairs import PreferencePair as PreferencePair
from perbench.data.pairs import Prompt as Prompt
from perbench.data.pairs import Split as Split
from perbench.data.pairs import canonical_text as canonical_text
from perbench.data.pairs import content_hash as content_hash
from perbench.data.pairs import is_blank as is_blank
from perbench.data.pairs import normalize_text as normalize_text
from perbench.data.pairs import pair_identity as pair_identity
from perbench.data.pairs import prompt_identity as prompt_identity
from perbench.data.pairs import prompt_key as prompt_key
from perbench.data.pairs import prompt_messages as prompt_messages
from perbench.data.pairs import prompt_text as prompt_text
from perbench.data.skips import REASON_UNITS as REASON_UNITS
from perbench.data.skips import SkipReport as SkipReport
from perbench.data.user_context import ProfileItem as ProfileItem  # defined there, a record of this module
from perbench.data.user_context import UserView, derived_user_context, user_views

#: the pair set (``Benchmark.pair_sets``) of consensus pairs: every user of the benchmark prefers chosen to rejected
CONSENSUS = "consensus"
#: the pair set of test pairs asked again under paraphrased prompts (``meta["paraphrase_of"]`` = the original pair id)
PARAPHRASED = "paraphrased"


@dataclass(frozen=True)
class AspectPole:
    """One checkable rubric requirement: the text must land on ``pole`` of ``aspect``."""

    aspect: str
    pole: str


@dataclass(frozen=True)
class User:
    """A user: ``profile`` is the user context (what a method may read, see :mod:`perbench.data.user_context`);
    ``answer_key`` (what decided the labels: rubric, labelling rule, style name, PRB's aspects and narrative)
    and ``rubric`` (checkable aspect poles, for the downstream checker) are for graders and reports only.
    A ``meta["answer_key"]`` given at construction is moved to ``answer_key``: it has one place."""

    user_id: str
    seen: bool = True
    profile: tuple[ProfileItem, ...] = ()
    rubric: tuple[AspectPole, ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    answer_key: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if "answer_key" in self.meta:
            if self.answer_key is not None:
                raise ValueError(f"user {self.user_id!r}: answer key given both as answer_key= and meta['answer_key']")
            meta = dict(self.meta)
            object.__setattr__(self, "answer_key", meta.pop("answer_key"))
            object.__setattr__(self, "meta", meta)


@dataclass(frozen=True)
class ContextView:
    """What a decoder that reads users' own data (ICL, ICL-RAG) is handed: each user's :class:`UserView` and the
    train pairs it may show — a seen user's train pairs (those the RMs are fit on), an unseen user's first
    ``shots`` (those every RM adapts from; all when ``shots`` is None). No answer key, no test pair."""

    users: Mapping[str, UserView]
    pairs: Mapping[str, tuple[PreferencePair, ...]]
    shots: int | None = None


@dataclass(frozen=True)
class Reference:
    """A gold completion for (user, prompt), e.g. the user's real title in Pref-LaMP."""

    user_id: str
    prompt: Prompt
    text: str
    split: Split = "test"


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
    #: named pair subsets: name -> pair ids (e.g. ``"personalization_only"``: pairs mirrored across users)
    subsets: dict[str, frozenset[str]] = field(default_factory=dict)
    #: named evaluation-only pair sets outside ``pairs`` (never trained on, never in a split's accuracy), e.g.
    #: ``"consensus"``: pairs every user prefers the same way, one copy per user (see :data:`CONSENSUS`)
    pair_sets: dict[str, list[PreferencePair]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted({p.user_id for p in self.pairs} - set(self.users))
        if unknown:
            raise ValueError(f"benchmark {self.name!r}: pairs name unknown users {unknown[:5]}")
        if "user_context" not in self.meta:  # what reaches methods about a user is always on record
            self.meta["user_context"] = derived_user_context(self.users)
        ids = {p.pair_id for p in self.pairs}
        for name, members in self.subsets.items():
            missing = sorted(members - ids)
            if missing:
                raise ValueError(f"benchmark {self.name!r}: subset {name!r} names unknown pair ids {missing[:5]}")
        for name, extra in self.pair_sets.items():
            strangers = sorted({p.user_id for p in extra} - set(self.users))
            if strangers:
                raise ValueError(f"benchmark {self.name!r}: pair set {name!r} names unknown users {strangers[:5]}")
            clash = sorted({p.pair_id for p in extra} & ids)
            if clash:
                raise ValueError(f"benchmark {self.name!r}: pair set {name!r} reuses pair ids {clash[:5]}")

    def subset(self, name: str, pairs: Iterable[PreferencePair] | None = None) -> list[PreferencePair]:
        """The pairs (of ``pairs``, default all, order kept) that belong to the named subset."""
        if name not in self.subsets:
            raise KeyError(f"benchmark {self.name!r} has no pair subset {name!r} (it has {sorted(self.subsets)})")
        members = self.subsets[name]
        return [p for p in (self.pairs if pairs is None else pairs) if p.pair_id in members]

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

    def user_views(self) -> dict[str, UserView]:
        """What methods, judges and decoders are handed about each user (no answer key)."""
        return user_views(self.users)

    def context_view(self, shots: int | None = None) -> ContextView:
        """The users' views and the train pairs a decoder may show: seen users all of theirs, unseen users their
        first ``shots`` (:meth:`fewshot`; None: all)."""
        if shots is not None and shots < 0:
            raise ValueError(f"shots must be ≥ 0 or None, got {shots}")
        pairs: dict[str, tuple[PreferencePair, ...]] = {}
        for uid, u in self.users.items():
            mine = self.fewshot(uid)
            pairs[uid] = tuple(mine if u.seen or shots is None else mine[:shots])
        return ContextView(self.user_views(), pairs, shots)

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
        parts += [
            f"{u}:{r.seen}:{r.rubric}:{json.dumps(r.answer_key, sort_keys=True, default=str)}:"
            + content_hash(*(it.text for it in r.profile))
            for u, r in sorted(self.users.items())
        ]
        parts += [content_hash(r.user_id, prompt_key(r.prompt), r.text) for r in self.references]
        parts += [f"subset:{n}:" + content_hash(*sorted(ids)) for n, ids in sorted(self.subsets.items())]
        parts += [
            f"set:{n}:" + content_hash(*(p.content_key() for p in ps)) for n, ps in sorted(self.pair_sets.items())
        ]
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
            **({"subsets": {n: self._subset_sizes(n) for n in sorted(self.subsets)}} if self.subsets else {}),
            **({"pair_sets": {n: self._set_sizes(n) for n in sorted(self.pair_sets)}} if self.pair_sets else {}),
        }

    def _set_sizes(self, name: str) -> dict[str, int]:
        ps = self.pair_sets[name]
        return {
            "pairs": len(ps),
            "users": len({p.user_id for p in ps}),
            "prompts": len({prompt_key(p.prompt) for p in ps}),
            "distinct_pairs": len({(prompt_key(p.prompt), p.chosen, p.rejected) for p in ps}),
        }

    def _subset_sizes(self, name: str) -> dict[str, int]:
        sel = self.subset(name)
        return {
            "pairs": len(sel),
            "train_pairs": sum(p.split == "train" and self.users[p.user_id].seen for p in sel),
            "test_pairs_seen": sum(p.split == "test" and self.users[p.user_id].seen for p in sel),
            "test_pairs_unseen": sum(p.split == "test" and not self.users[p.user_id].seen for p in sel),
        }
