"""Deduplication and mirrors: degenerate and repeated pairs dropped (counted), mirrored pairs kept together."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from perbench.data.pairs import PreferencePair, content_hash, is_blank, normalize_text, pair_identity, prompt_identity
from perbench.data.skips import SkipReport

#: what a pair's mirror must share with it and whose it must not be: (the question asked, who asks it)
MirrorKey = Callable[[PreferencePair], tuple[str, str]]


def by_prompt_and_user(pair: PreferencePair) -> tuple[str, str]:
    return prompt_identity(pair.prompt), pair.user_id


def mirror_units(pairs: Sequence[PreferencePair], key: MirrorKey = by_prompt_and_user) -> list[list[int]]:
    """The pairs (by index) grouped as deduplication, splits and caps must keep them together.

    A pair (u, x, a ≻ b) is matched, one to one and in order, with the earliest unmatched pair (v, x, b ≻ a) of
    another user in the same split: its *mirror*. On a benchmark whose pairs come in such mirrors any
    user-agnostic scorer gets exactly ½ (ties ½), and only while both halves stay together. A unit is a matched
    pair of indices or one unmatched index, in the order of its first index. Texts compare as
    :func:`normalize_text`. ``key``: what "same prompt" and "another user" mean (default the prompt and the user;
    a benchmark whose preference is stated in the prompt, like RMGAP's prompt groups, passes its own).
    """
    waiting: dict[tuple[str, bool], list[int]] = {}
    partner: dict[int, int] = {}
    owners = [key(p) for p in pairs]
    for i, p in enumerate(pairs):
        a, b = normalize_text(p.chosen), normalize_text(p.rejected)
        if a == b:
            continue
        lo, hi = sorted((a, b))
        h = content_hash(p.split, owners[i][0], lo, hi)
        forward = a < b
        queue = waiting.get((h, not forward), [])
        j = next((k for k, q in enumerate(queue) if owners[q][1] != owners[i][1]), None)
        if j is None:
            waiting.setdefault((h, forward), []).append(i)
        else:
            q = queue.pop(j)
            partner[q], partner[i] = i, q
    return [[i, partner[i]] if i in partner else [i] for i in range(len(pairs)) if partner.get(i, len(pairs)) > i]


def mirrored_ids(pairs: Sequence[PreferencePair], key: MirrorKey = by_prompt_and_user) -> frozenset[str]:
    """Ids of the pairs whose mirror another user holds in the same split: the personalization-only subset, on
    which any user-agnostic scorer gets exactly ½ (ties ½)."""
    return frozenset(pairs[i].pair_id for unit in mirror_units(pairs, key) if len(unit) == 2 for i in unit)


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
