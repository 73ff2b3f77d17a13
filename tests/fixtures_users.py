"""A few users with known preferences and their pairs, for the tests that check a method or decoder per user
(test_user_guidance, test_policy_accuracy, test_fidelity): built here once, each test choosing its texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perbench.data.records import Benchmark, PreferencePair, ProfileItem, User


def opposite_pairs(
    prompts: Sequence[str], yes: Sequence[str], no: Sequence[str], users: tuple[str, str] = ("u0", "u1")
) -> list[PreferencePair]:
    """For prompt i, one pair per user (``p{i}{user}``): the first user prefers ``yes[i]``, the second ``no[i]``."""
    out = []
    for i, prompt in enumerate(prompts):
        for u in users:
            c, r = (yes[i], no[i]) if u == users[0] else (no[i], yes[i])
            out.append(PreferencePair(f"p{i}{u}", u, prompt, c, r))
    return out


def users_of(pairs: Sequence[PreferencePair]) -> dict[str, User]:
    """A seen user, with no profile, for every user of ``pairs`` (first occurrence first)."""
    return {u: User(u) for u in dict.fromkeys(p.user_id for p in pairs)}


def profiled_users(profiles: Mapping[str, tuple[str, str]]) -> dict[str, User]:
    """``{user: (item id, text)}`` -> users whose profile is that one item."""
    return {u: User(u, profile=(ProfileItem(item_id, text),)) for u, (item_id, text) in profiles.items()}


def train_and_test(pairs: Sequence[PreferencePair], name: str = "b") -> Benchmark:
    """A benchmark whose train pairs are copies of ``pairs`` (same ids, split ``train``) and whose test pairs are
    ``pairs``, every user seen."""
    train = [PreferencePair(p.pair_id, p.user_id, p.prompt, p.chosen, p.rejected, "train") for p in pairs]
    return Benchmark(name, train + list(pairs), users_of(pairs))
