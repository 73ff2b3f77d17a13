"""Typed records: preference pairs, users, gold references, and the Benchmark that holds them."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from perbench.data.user_context import ProfileItem as ProfileItem  # defined there, a record of this module
from perbench.data.user_context import UserView, derived_user_context, user_views

Split = Literal["train", "test"]
#: the pair set (``Benchmark.pair_sets``) of consensus pairs: every user of the benchmark prefers chosen to rejected
CONSENSUS = "consensus"
#: the pair set of test pairs asked again under paraphrased prompts (``meta["paraphrase_of"]`` = the original pair id)
PARAPHRASED = "paraphrased"
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


@lru_cache(maxsize=8192)
def prompt_key(prompt: Prompt) -> str:
    """The canonical JSON of a prompt's messages: one key for equal prompts, whatever their Python form."""
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


#: the unit a skip reason counts when it is not a preference pair (every other reason counts pairs)
REASON_UNITS: dict[str, str] = {
    "user_without_pairs": "user",
    "user_below_min_dialogues": "user",
    "profile_item_contains_answer_key": "profile_item",
    "gold_without_question": "row",
    "fewer_than_two_styles": "row",
    "turn_without_chosen": "turn",
    "turn_with_several_chosen": "turn",
    "turn_with_single_response": "turn",
}


@dataclass
class SkipReport:
    """Counted, never silent: what a loader dropped and why.

    Every reason has one unit. Pairs are the unit of results, so a reason counts the preference pairs it
    removed unless :data:`REASON_UNITS` (or ``unit=`` at the first ``add``) names another unit (users left
    without pairs, withheld profile items, rows that could hold no pair). :meth:`total` counts pairs only.
    """

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, where: str = "", n: int = 1, unit: str | None = None) -> None:
        """Count ``n`` dropped things (pairs unless the reason's unit says otherwise), with ``where`` as example."""
        unit = unit or self.units.get(reason) or REASON_UNITS.get(reason, "pair")
        known = self.units.setdefault(reason, unit)
        if known != unit:
            raise ValueError(f"skip reason {reason!r} counts {known}s, not {unit}s")
        self.counts[reason] += n
        ex = self.examples.setdefault(reason, [])
        if where and len(ex) < 5:
            ex.append(where)

    def merge(self, other: SkipReport) -> None:
        for reason, n in other.counts.items():
            self.add(reason, n=n, unit=other.unit(reason))
            ex = self.examples.setdefault(reason, [])
            ex.extend(other.examples.get(reason, [])[: max(0, 5 - len(ex))])

    def unit(self, reason: str) -> str:
        return self.units.get(reason) or REASON_UNITS.get(reason, "pair")

    def total(self) -> int:
        """Pairs dropped, over every reason that counts pairs."""
        return sum(n for r, n in self.counts.items() if self.unit(r) == "pair")

    def other(self) -> dict[str, int]:
        """Dropped things that are not pairs, by unit (e.g. ``{"user": 2}``)."""
        out: Counter[str] = Counter()
        for r, n in self.counts.items():
            if self.unit(r) != "pair":
                out[self.unit(r)] += n
        return dict(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total(),
            "unit": "pair",
            "other": self.other(),
            "counts": dict(self.counts),
            "units": {r: self.unit(r) for r in self.counts},
            "examples": self.examples,
        }


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


#: characters that change no visible text: zero-width space, (non-)joiners, word joiner, byte-order mark
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def canonical_text(text: str) -> str:
    """``text`` in Unicode NFC without zero-width characters: two spellings that look identical agree."""
    return unicodedata.normalize("NFC", text).translate(_ZERO_WIDTH)


def normalize_text(text: str) -> str:
    """The form texts are compared in: :func:`canonical_text`, runs of whitespace as one space, ends stripped."""
    return " ".join(canonical_text(text).split())


def is_blank(text: str) -> bool:
    """The one emptiness rule: nothing visible is left once the text is in :func:`normalize_text` form (the form
    ids and dedup compare in), so a response that is only whitespace or zero-width characters is empty."""
    return not normalize_text(text)


def prompt_identity(prompt: Prompt) -> str:
    """A prompt as deduplication compares it: every text in :func:`normalize_text` form."""
    if isinstance(prompt, str):
        return prompt_key(normalize_text(prompt))
    return prompt_key(tuple(Message(m.role.strip(), normalize_text(m.content)) for m in prompt))


def pair_identity(pair: PreferencePair) -> str:
    """What deduplication compares: (user, prompt, chosen, rejected), whitespace and Unicode-form differences
    ignored (:func:`normalize_text`)."""
    return content_hash(
        pair.user_id, prompt_identity(pair.prompt), normalize_text(pair.chosen), normalize_text(pair.rejected)
    )


def mirror_units(pairs: Sequence[PreferencePair]) -> list[list[int]]:
    """The pairs (by index) grouped as deduplication, splits and caps must keep them together.

    A pair (u, x, a ≻ b) is matched, one to one and in order, with the earliest unmatched pair (v, x, b ≻ a) of
    another user in the same split: its *mirror*. On a benchmark whose pairs come in such mirrors any
    user-agnostic scorer gets exactly ½ (ties ½), and only while both halves stay together. A unit is a matched
    pair of indices or one unmatched index, in the order of its first index. Texts compare as
    :func:`normalize_text`.
    """
    waiting: dict[tuple[str, bool], list[int]] = {}
    partner: dict[int, int] = {}
    for i, p in enumerate(pairs):
        a, b = normalize_text(p.chosen), normalize_text(p.rejected)
        if a == b:
            continue
        lo, hi = sorted((a, b))
        key = content_hash(p.split, prompt_identity(p.prompt), lo, hi)
        forward = a < b
        queue = waiting.get((key, not forward), [])
        j = next((k for k, q in enumerate(queue) if pairs[q].user_id != p.user_id), None)
        if j is None:
            waiting.setdefault((key, forward), []).append(i)
        else:
            q = queue.pop(j)
            partner[q], partner[i] = i, q
    return [[i, partner[i]] if i in partner else [i] for i in range(len(pairs)) if partner.get(i, len(pairs)) > i]


def mirrored_ids(pairs: Sequence[PreferencePair]) -> frozenset[str]:
    """Ids of the pairs whose mirror another user holds in the same split: the personalization-only subset, on
    which any user-agnostic scorer gets exactly ½ (ties ½)."""
    return frozenset(pairs[i].pair_id for unit in mirror_units(pairs) if len(unit) == 2 for i in unit)


def degenerate_reason(pair: PreferencePair) -> str | None:
    """``empty_response`` (a side is blank: :func:`is_blank`), ``chosen_equals_rejected`` (the sides are equal up
    to whitespace and invisible characters) or None for a usable pair."""
    if is_blank(pair.chosen) or is_blank(pair.rejected):
        return "empty_response"
    if normalize_text(pair.chosen) == normalize_text(pair.rejected):
        return "chosen_equals_rejected"
    return None


MIRROR_REASON = "mirror_of_skipped_pair"


def dedup_units(
    units: Iterable[Sequence[PreferencePair]], skipped: SkipReport, *, dedup: bool = True
) -> list[PreferencePair]:
    """Drop degenerate pairs and (``dedup``) repeats of an earlier kept pair, keeping or dropping each unit whole.

    A unit is a group of pairs that must stay together: a pair alone, or a mirrored pair (user A prefers x to y,
    user B prefers y to x) whose two directions keep a benchmark balanced. When one pair of a unit is dropped,
    the others go too, counted as ``mirror_of_skipped_pair``; every dropped pair is counted once, in pairs.
    Duplicates compare (user, prompt, chosen, rejected) with whitespace differences ignored (:func:`pair_identity`).
    """
    seen: set[str] = set()
    out: list[PreferencePair] = []
    for unit in units:
        reasons: list[str | None] = [degenerate_reason(p) for p in unit]
        keys = [pair_identity(p) for p in unit]
        if dedup and not any(reasons):
            local: set[str] = set()
            for i, key in enumerate(keys):
                if key in seen or key in local:
                    reasons[i] = "duplicate_pair"
                local.add(key)
        if any(reasons):
            for p, reason in zip(unit, reasons, strict=True):
                skipped.add(reason or MIRROR_REASON, p.pair_id)
            continue
        seen.update(keys)
        out.extend(unit)
    return out


def dedup_pairs(pairs: Iterable[PreferencePair], skipped: SkipReport, *, dedup: bool = True) -> list[PreferencePair]:
    """Drop degenerate pairs and (``dedup``) duplicates, keeping mirrored pairs together (:func:`mirror_units`): a
    duplicate's mirror goes with it, counted as ``mirror_of_skipped_pair``. Order kept; counts go to ``skipped``."""
    pairs = list(pairs)
    units = [[pairs[i] for i in unit] for unit in mirror_units(pairs)]
    position = {id(p): i for i, p in enumerate(pairs)}
    return sorted(dedup_units(units, skipped, dedup=dedup), key=lambda p: position[id(p)])


def untrained_seen_users(pairs: Iterable[PreferencePair], seen: Mapping[str, bool]) -> list[str]:
    """Seen users (``seen[user]``) without a train pair, when some seen user has train pairs; else none.

    Such a user was never seen in training; evaluating them as seen would score them with a model that knows
    nothing of them (e.g. an average head) under the wrong label."""
    trained = {p.user_id for p in pairs if p.split == "train" and seen.get(p.user_id, False)}
    if not trained:
        return []
    return sorted(u for u, is_seen in seen.items() if is_seen and u not in trained)
