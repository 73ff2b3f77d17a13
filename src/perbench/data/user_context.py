"""What a method may know about a user (the *user context*), kept apart from the *answer key*.

User context: what a deployed system could know -- the user's profile items (past posts, past papers, a
self-description or an instruction the user wrote) and their own train pairs. Answer key: whatever decided
the labels -- a rubric, a labelling rule ("prefers shorter summaries"), the style name that picks the chosen
response, Personalized-RewardBench's rubric aspects and narrative. The answer key lives only in
``User.answer_key`` (and the checkable poles in ``User.rubric``, read only by the downstream checker).

**Isolation.** Methods, judges and decoders are never handed a :class:`~perbench.data.records.User`
(which holds the answer key): the runner hands them a :class:`UserView` per user (``RMContext.extra["users"]``,
:meth:`~perbench.data.records.Benchmark.user_views`) and decoders that read users' own data a
:class:`~perbench.data.records.ContextView`. A view holds the user id, whether the user is seen and the
declared user context (the profile items) -- nothing else, so the answer key is not reachable from it. The
consumers that put something about a user into a model's input -- GenARM's user conditioning, the ICL judge,
the ICL / ICL-RAG decoders -- refuse a full record (:func:`require_views`) and read the profile through
:func:`context_items` / :func:`user_text`. :func:`oracle_user_text` is the one way to put the answer key in
context; only a separately named oracle method (``icl_judge_oracle``) calls it, with the answer keys the
runner gives oracle methods alone (``RMContext.extra["answer_keys"]``, :func:`method_inputs`). Where a
loader's user id *is* the answer key (a persona sentence, a style name), the loader replaces it by an opaque
id (:func:`opaque_user_id`), so not even the id carries it; a run then seals every benchmark
(:func:`perbench.data.isolation.seal`: keyed opaque ids for every user and pair, pair metadata dropped), so no id
a method sees can be looked up or guessed. What in-process isolation does not promise is said there.

Each loader records its policy with :func:`describe_user_context` in ``Benchmark.meta["user_context"]``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, TypeVar

#: ``mode`` values of :func:`user_text`: the profile (``auto`` and ``profile`` are the same) or nothing
USER_TEXT_MODES: tuple[str, ...] = ("auto", "profile", "none")
ORACLE_HEADER = "The rule that decided this user's preferences (oracle information):"
CONTEXT_HEADER = "Other things we know about the user:"
#: the declared policies (``Benchmark.meta["user_context"]["policy"]``)
POLICIES: dict[str, str] = {
    "pairs_only": "no user text: methods see the user's own train pairs only",
    "profile": "the user's profile items and their own train pairs",
}


@dataclass(frozen=True)
class ProfileItem:
    """One thing the user wrote or did that a method may read (a past post, a past title, a self-description)."""

    item_id: str
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


class _Pole(Protocol):
    @property
    def aspect(self) -> str: ...
    @property
    def pole(self) -> str: ...


class UserRecord(Protocol):
    """What this module reads of a full user record (:class:`perbench.data.records.User`, which builds on this
    module and so is not imported here)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def user_id(self) -> str: ...
    @property
    def seen(self) -> bool: ...
    @property
    def profile(self) -> tuple[ProfileItem, ...]: ...
    @property
    def rubric(self) -> Sequence[_Pole] | None: ...
    @property
    def answer_key(self) -> Mapping[str, Any] | None: ...


class _Skips(Protocol):
    def add(self, reason: str, where: str = ..., n: int = ..., unit: str | None = ...) -> None: ...


U = TypeVar("U", bound=UserRecord)


@dataclass(frozen=True)
class UserView:
    """What a method, a judge or a decoder is handed about a user: the id, whether the user is seen, and the
    declared user context (the profile items). It does not hold the answer key (nor ``User.meta``)."""

    user_id: str
    seen: bool = True
    profile: tuple[ProfileItem, ...] = ()


def user_view(user: UserRecord) -> UserView:
    """The view of ``user`` that methods receive."""
    return UserView(user.user_id, user.seen, tuple(user.profile))


def user_views(users: Mapping[str, UserRecord]) -> dict[str, UserView]:
    return {uid: user_view(u) for uid, u in users.items()}


def require_views(users: Mapping[str, Any], who: str) -> dict[str, UserView]:
    """``users`` if every value is a :class:`UserView`; a full record is refused (it holds the answer key)."""
    bad = [uid for uid, u in users.items() if not isinstance(u, UserView)]
    if bad:
        raise TypeError(
            f"{who} takes user views (Benchmark.user_views(), perbench.data.user_context.user_views), not full "
            f"user records, which hold the answer key; got {type(users[bad[0]]).__name__} for {bad[0]!r}"
        )
    return dict(users)


def answer_keys(users: Mapping[str, UserRecord]) -> dict[str, str]:
    """Each user's answer key as a readable statement (:func:`answer_key_summary`): for oracle methods only."""
    out = {}
    for uid, u in users.items():
        key = answer_key_summary(u)
        if key is not None:
            out[uid] = key
    return out


def method_inputs(users: Mapping[str, UserRecord], *, oracle: bool = False) -> dict[str, Any]:
    """What a method's ``RMContext.extra`` holds about the users: their views, and for a method registered as an
    oracle (``registry.reward_models`` role ``oracle``; the runner decides, never the method) also their answer
    keys."""
    out: dict[str, Any] = {"users": user_views(users)}
    if oracle:
        out["answer_keys"] = answer_keys(users)
    return out


def opaque_user_id(label: str, prefix: str = "user") -> str:
    """A stable id for a user whose natural id is their answer key (a persona sentence, a style name)."""
    return f"{prefix}-{hashlib.sha256(label.strip().encode('utf-8')).hexdigest()[:10]}"


def context_items(user: UserView | UserRecord | None) -> tuple[ProfileItem, ...]:
    """The profile items a method may read about ``user`` (never the answer key)."""
    return () if user is None else tuple(user.profile)


def user_text(
    user: UserView | UserRecord | None, mode: str = "auto", profile_k: int = 5, max_chars: int = 2000
) -> str | None:
    """The text that describes ``user`` to a model: their first ``profile_k`` profile items as ``- item`` lines,
    cut to ``max_chars``; None when there is nothing (or ``mode="none"``).

    ``mode``: ``auto`` / ``profile`` (the profile) or ``none``. The answer key is never read here: a mode that
    asks for it (``rubric``, ``oracle``) is an error -- use :func:`oracle_user_text` in a method named as an
    oracle."""
    if mode in ("rubric", "oracle"):
        raise ValueError(
            f"user text mode {mode!r} would put the answer key in a method's input; the user context is the "
            f"profile ({'/'.join(USER_TEXT_MODES)}), and the answer key only reaches a separately named oracle "
            "method (icl_judge_oracle)"
        )
    if mode not in USER_TEXT_MODES:
        raise ValueError(f"user text mode must be one of {USER_TEXT_MODES}, got {mode!r}")
    if profile_k < 0:
        raise ValueError(f"profile_k must be ≥ 0, got {profile_k}")
    if user is None or mode == "none":
        return None
    items = context_items(user)[:profile_k]
    if not items:
        return None
    return "\n".join(f"- {it.text}" for it in items)[:max_chars]


def answer_key_summary(user: UserRecord) -> str | None:
    """A readable statement of the user's answer key (``answer_key["rubric_text"]``, else its texts joined)."""
    key = user.answer_key or {}
    summary = key.get("rubric_text")
    if isinstance(summary, str) and summary.strip():
        return summary.strip()
    texts = answer_key_texts(user)
    return "; ".join(texts) if texts else None


def oracle_user_text(
    user: UserView | UserRecord | None, answer_key: str | None, profile_k: int = 5, max_chars: int = 2000
) -> str | None:
    """Answer key + user context, for an oracle upper bound only (the answer key is never cut off)."""
    if user is None:
        return None
    context = user_text(user, "auto", profile_k, max_chars)
    if answer_key is None:
        return context
    text = f"{ORACLE_HEADER}\n{answer_key}"
    if context:
        text += f"\n{CONTEXT_HEADER}\n{context}"
    return text[: max(max_chars, len(ORACLE_HEADER) + 1 + len(answer_key))]


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value.strip()
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _leaves(v)


def answer_key_texts(user: UserRecord) -> list[str]:
    """Every text of the user's answer key (each string in ``User.answer_key``, nested ones included), plus the
    checkable poles as ``aspect=pole``; first occurrence first."""
    out = list(_leaves(user.answer_key or {}))
    out += [f"{ap.aspect}={ap.pole}" for ap in user.rubric or ()]
    return list(dict.fromkeys(out))


def _norm(text: str) -> str:
    """Case, punctuation and whitespace ignored: word characters only, single spaces, padded (so a phrase
    matches whole words)."""
    return " " + " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split()) + " "


def is_phrase(text: str) -> bool:
    """Two words or more: a text specific enough that finding it verbatim elsewhere means it was copied
    (a single word such as a style name or "shorter" also occurs in ordinary responses)."""
    return len(text.split()) >= 2


def leaked_answer_keys(user: UserRecord, text: str) -> list[str]:
    """The answer-key phrases of ``user`` that occur in ``text`` (case, punctuation and whitespace ignored)."""
    haystack = _norm(text)
    return [k for k in answer_key_texts(user) if is_phrase(k) and _norm(k).strip() and _norm(k) in haystack]


def withhold_answer_key(user: U, skipped: _Skips) -> U:
    """``user`` without the profile items that quote their own answer key (each dropped item counted as
    ``profile_item_contains_answer_key``): a file whose profile repeats the persona sentence or rubric would
    otherwise hand the answer key to every method."""
    keep = []
    for it in user.profile:
        if leaked_answer_keys(user, it.text):
            skipped.add("profile_item_contains_answer_key", f"{user.user_id}/{it.item_id}")
        else:
            keep.append(it)
    return user if len(keep) == len(user.profile) else replace(user, profile=tuple(keep))


def describe_user_context(
    policy: str,
    users: Mapping[str, UserRecord],
    *,
    included: Sequence[str],
    withheld: Sequence[str] = (),
    note: str = "",
) -> dict[str, Any]:
    """The record of what reaches methods about each user (``Benchmark.meta["user_context"]``).

    ``included``/``withheld`` name the benchmark's own fields; the counts come from the users themselves, and
    ``answer_key_fields`` lists the fields actually present in ``User.answer_key`` (plus ``rubric`` when users
    have checkable poles)."""
    if policy not in POLICIES:
        raise ValueError(f"user context policy must be one of {sorted(POLICIES)}, got {policy!r}")
    fields = sorted({k for u in users.values() for k in (u.answer_key or {})})
    if any(u.rubric for u in users.values()):
        fields.append("rubric")
    out: dict[str, Any] = {
        "policy": policy,
        "description": POLICIES[policy],
        "included": list(included),
        "withheld_answer_key": list(withheld),
        "answer_key_fields": fields,
        "users": len(users),
        "users_with_profile": sum(bool(u.profile) for u in users.values()),
        "users_with_answer_key": sum(bool(u.answer_key or u.rubric) for u in users.values()),
    }
    if note:
        out["note"] = note
    return out


def derived_user_context(users: Mapping[str, UserRecord]) -> dict[str, Any]:
    """The policy of a benchmark whose loader declared none, read off its users."""
    has_profile = any(u.profile for u in users.values())
    return describe_user_context(
        "profile" if has_profile else "pairs_only",
        users,
        included=["profile", "own train pairs"] if has_profile else ["own train pairs"],
        withheld=["answer_key"] if any(u.answer_key or u.rubric for u in users.values()) else [],
        note="derived from the users (the loader declared no policy)",
    )
