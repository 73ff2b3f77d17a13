"""The large edition of the rubric benchmark (``size: large``): 96 users × 64 test prompts, every want reachable, and
the default edition unchanged by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from perbench.data.rubrics import pool_large
from perbench.data.rubrics.aspects import opposite
from perbench.data.rubrics.benchmark import load_rubrics
from perbench.data.rubrics.build import STYLES
from perbench.data.rubrics.prompts import MORE_PROMPTS, RUBRIC_PROMPTS, edition_prompts
from perbench.data.rubrics.reachability import read_snapshot, unreachable_wants
from perbench.data.rubrics.users import RUBRIC_USERS
from perbench.data.rubrics.users_large import MORE_USERS, edition_users
from perbench.io import atomic_write_jsonl

#: the default edition's fingerprint before the large edition existed: the default run's numbers must not move
DEFAULT_FINGERPRINT = "066f6c1449ac6522"


@pytest.fixture(scope="module")
def more_bases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Hand-written base responses for the extra prompts (the shipped ones are the policy's), in place of
    ``pool_more.jsonl``, with one cache for the module (the large pool is derived once)."""
    texts = {
        "brief": "Start with the basics. Keep it simple and steady.",
        "list": "Here are some tips:\n- Plan ahead.\n- Keep notes.\n- Review weekly.\n- Ask for help early.",
        "casual": "Hey, you're gonna love this! Just try it and see what works for you, it's super easy.",
        "formal": "It is advisable to proceed methodically. For example, one may allocate 30 minutes each day "
        "to the task. Consistency over 4 weeks typically produces measurable improvement.",
    }
    rows = [
        {"prompt_id": p.prompt_id, "cand_id": f"{p.prompt_id}-c{i:02d}", "source": f"base-{s}", "text": texts[s]}
        for p in MORE_PROMPTS
        for i, s in enumerate(STYLES)
    ]
    folder = tmp_path_factory.mktemp("more")
    path = folder / "pool_more.jsonl"
    atomic_write_jsonl(path, rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool_large, "MORE_POOL_PATH", path)
        mp.setenv("PERBENCH_CACHE", str(folder / "cache"))
        yield path


def test_the_default_edition_is_unchanged() -> None:
    bench = load_rubrics()
    assert bench.fingerprint() == DEFAULT_FINGERPRINT
    assert len(bench.users) == 32 and "size" not in bench.meta
    assert edition_users() == RUBRIC_USERS and edition_prompts() == RUBRIC_PROMPTS
    assert not {p.prompt_id for p in RUBRIC_PROMPTS} & {p.prompt_id for p in MORE_PROMPTS}
    assert len(MORE_PROMPTS) == 48 and {p.split for p in MORE_PROMPTS} == {"test"}


def test_the_large_edition_has_96_users_and_64_test_prompts(more_bases: Path) -> None:
    users = edition_users("large")
    assert len(users) == 96 and sum(not u.seen for u in users) == 24
    assert len({u.user_id for u in users}) == 96
    # no two users of either edition want the same poles: every unseen rubric is new to every seen user
    rubrics = [frozenset((ap.aspect, ap.pole) for ap in u.rubric) for u in users]
    assert len(set(rubrics)) == 96
    for group in (True, False):  # the rubrics conflict within each group: every wanted pole's opposite is wanted too
        wanted = {(ap.aspect, ap.pole) for u in users if u.seen is group for ap in u.rubric}
        assert all((a, opposite(a, p)) in wanted for a, p in wanted)
    bench = load_rubrics(size="large", consensus_per_prompt=0)
    assert bench.meta["prompts"] == {"train": 48, "test": 64} and bench.meta["size"] == "large"
    assert len(bench.seen_users) == 72 and len(bench.unseen_users) == 24
    test_users = {p.user_id for p in bench.pairs if p.split == "test"}
    assert len(test_users) == 96
    # the pool's edits cover the 96 rubrics: almost no (user, prompt) lacks a candidate meeting its rubric
    assert bench.skipped.total() <= 0.02 * 96 * 112


def test_every_large_want_is_reachable_in_the_default_pool() -> None:
    """The extra users want only poles the default policy reaches at the default length (docs/rubrics.md)."""
    below = unreachable_wants(read_snapshot().all_texts(), MORE_USERS)
    assert not below, below


def test_the_large_pool_is_derived_once(more_bases: Path) -> None:
    first = pool_large.large_pool(more=more_bases)  # derived here or by an earlier test of the module
    assert set(first) == {p.prompt_id for p in RUBRIC_PROMPTS + MORE_PROMPTS}
    assert all(len(rows) > len(STYLES) for rows in first.values())
    calls: list[int] = []
    real = pool_large.assemble_pool

    def counting(*a: object, **k: object) -> object:
        calls.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    pool_large.assemble_pool = counting  # type: ignore[assignment]
    try:
        again = pool_large.large_pool(more=more_bases)
    finally:
        pool_large.assemble_pool = real
    assert again == first and calls == []  # read back from the cache
