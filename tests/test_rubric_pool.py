from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from perbench.builders.rubric_pool import build_pool
from perbench.data.records import Benchmark, PreferencePair, User
from perbench.data.rubrics.aspects import satisfies_all, violates
from perbench.data.rubrics.benchmark import PERSONALIZATION_ONLY, load_rubrics
from perbench.data.rubrics.build import STYLES, BaseRequest, assemble_pool, coverage, write_pool
from perbench.metrics.rm_accuracy import pair_outcomes
from perbench.rewards.base import ScoreItem
from perbench.rewards.baselines import LengthRM, RandomRM


def test_pool_build_is_deterministic_and_covers_every_user(tmp_path: Path) -> None:
    a = build_pool(out=tmp_path / "a.jsonl", policy="tiny-random", limit=2, max_new_tokens=8, seed=3)
    b = build_pool(out=tmp_path / "b.jsonl", policy="tiny-random", limit=2, max_new_tokens=8, seed=3)
    assert a.read_text() == b.read_text()
    rows = [json.loads(x) for x in a.read_text().splitlines()]
    assert {r["prompt_id"] for r in rows} == {"p01", "p02"}
    assert all(set(r["annotations"]) >= {"length", "format", "register"} for r in rows)
    assert coverage(rows)["covered"] >= 0.9


def test_the_pool_recipe_takes_its_base_responses_from_a_function(tmp_path: Path) -> None:
    """No model in the data room: the recipe asks a function for the base responses (an empty one gets a fixed
    text) and refuses a function that answers a different number of requests."""
    asked: list[BaseRequest] = []

    def write(requests: Sequence[BaseRequest]) -> list[str]:
        asked.extend(requests)
        return ["" if i == 0 else f"Boil water for {r.key}. Add the egg. Wait." for i, r in enumerate(requests)]

    rows = [json.loads(x) for x in write_pool(write, tmp_path / "p.jsonl", seed=3, limit=2).read_text().splitlines()]
    assert [r.key for r in asked] == [f"{p}:{s}" for p in ("p01", "p02") for s in STYLES]
    assert len({r.seed for r in asked}) == len(asked) and all(r.prompt.startswith(STYLES[r.key[4:]]) for r in asked)
    bases = {r["source"]: r["text"] for r in rows if r["prompt_id"] == "p01" and r["source"].startswith("base-")}
    assert bases[f"base-{next(iter(STYLES))}"] == "I am not sure."
    with pytest.raises(ValueError, match="returned 1 responses for 8 requests"):
        write_pool(lambda requests: ["one"], tmp_path / "q.jsonl", limit=2)


def test_pairs_follow_rubrics(tmp_path: Path) -> None:
    bases = {
        "p01": {"x": "Boil water. Add the egg.", "y": "Well, you know, it's easy! Just do it, it's fine."},
        "p04": {"x": "Pick a time. Stick to it.", "y": "Honestly? You'll figure it out, it's no big deal."},
    }
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in assemble_pool(bases, seed=1)))
    bench = load_rubrics(pool=str(path))
    assert bench.pairs, "some pairs must be built"
    for p in bench.pairs:
        rubric = bench.users[p.user_id].rubric
        assert rubric is not None
        assert satisfies_all(p.chosen, rubric)
        assert violates(p.rejected, rubric)
        assert p.split == ("test" if p.meta["prompt_id"] == "p04" else "train")
    # every (user, prompt) is either a hardest-negative pair or a counted skip; mirror pairs come on top
    originals = [p for p in bench.pairs if "mirror_of" not in p.meta]
    assert len(originals) + bench.skipped.total() == len(bench.users) * 2
    assert bench.references and all(r.text for r in bench.references)


def test_pool_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "pool.jsonl"
    path.write_text('{"prompt_id": "p01", "cand_id": "c", "text": "ok"}\n{"prompt_id": "p01", "cand_id": "d"}\n')
    with pytest.raises(ValueError, match=r"pool.jsonl:2: field 'text'"):
        load_rubrics(pool=str(path))
    path.write_text('{"prompt_id": "zzz", "cand_id": "c", "text": "ok"}\n')
    with pytest.raises(ValueError, match=r"pool.jsonl:1: field 'prompt_id': unknown prompt"):
        load_rubrics(pool=str(path))


def test_shipped_pool_loads() -> None:
    from perbench.data.rubrics.build import POOL_PATH

    if not POOL_PATH.exists():
        pytest.skip("pool not built yet")
    bench = load_rubrics()
    s = bench.summary()
    assert s["users_seen"] >= 24 and s["users_unseen"] >= 8
    assert s["train_pairs"] > 500 and s["test_pairs_unseen"] > 50
    assert bench.skipped.total() < 0.1 * len(bench.pairs)


# ---- the personalization-only subset ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped() -> Benchmark:
    from perbench.data.rubrics.build import POOL_PATH

    if not POOL_PATH.exists():
        pytest.skip("pool not built yet")
    return load_rubrics()


def _edited() -> dict[str, bool]:
    """cand_id -> whether the candidate is an edit of a base response (the pool's ``source``)."""
    from perbench.data.rubrics.build import POOL_PATH

    rows = [json.loads(x) for x in POOL_PATH.read_text(encoding="utf-8").splitlines() if x.strip()]
    return {r["cand_id"]: r["source"].startswith("edit") for r in rows}


def _hash_linear(dim: int = 64, seed: int = 7) -> Callable[[PreferencePair, str], float]:
    """A fixed random linear scorer over hashed words of prompt + response: user-agnostic, text-sensitive."""
    w = np.random.default_rng(seed).standard_normal(dim)

    def f(p: PreferencePair, y: str) -> float:
        x = np.zeros(dim)
        for tok in f"{p.prompt} {y}".lower().split():
            x[int(hashlib.sha256(tok.encode()).hexdigest()[:8], 16) % dim] += 1.0
        return float(w @ x)

    return f


def _agnostic_accuracy(pairs: list[PreferencePair], scorer: Callable[[PreferencePair, str], float]) -> float:
    """Pair-weighted accuracy, ties ½, of a scorer that sees only (prompt, response)."""
    c = np.asarray([scorer(p, p.chosen) for p in pairs])
    r = np.asarray([scorer(p, p.rejected) for p in pairs])
    return float(pair_outcomes(c, r, "half").mean())


def _groups(bench: Benchmark, pairs: list[PreferencePair]) -> dict[str, list[PreferencePair]]:
    seen = {u: rec.seen for u, rec in bench.users.items()}
    return {
        "train_seen": [p for p in pairs if p.split == "train" and seen[p.user_id]],
        "train_unseen": [p for p in pairs if p.split == "train" and not seen[p.user_id]],
        "test_seen": [p for p in pairs if p.split == "test" and seen[p.user_id]],
        "test_unseen": [p for p in pairs if p.split == "test" and not seen[p.user_id]],
    }


def test_personalization_only_subset_gives_every_user_agnostic_scorer_exactly_half(shipped: Benchmark) -> None:
    bench = shipped
    sub = bench.subset(PERSONALIZATION_ONLY)
    edited = _edited()
    length = LengthRM()
    rand = RandomRM(seed=3)
    scorers: dict[str, Callable[[PreferencePair, str], float]] = {
        "length": lambda p, y: float(length.score([ScoreItem(p.user_id, p.prompt, y)])[0]),
        "random": lambda p, y: float(rand.score([ScoreItem(p.user_id, p.prompt, y)])[0]),
        "hash_linear": _hash_linear(),
        "edited": lambda p, y: float(edited[p.meta["chosen_id"] if y == p.chosen else p.meta["rejected_id"]]),
    }
    for group, pairs in _groups(bench, sub).items():
        # the structure: every (prompt, a ≻ b) has its (prompt, b ≻ a) in the same group, from another user
        fwd = Counter((p.meta["prompt_id"], p.chosen, p.rejected) for p in pairs)
        assert fwd == Counter((p.meta["prompt_id"], p.rejected, p.chosen) for p in pairs), group
        for name, f in scorers.items():
            assert _agnostic_accuracy(pairs, f) == 0.5, (group, name)
    # the cue this removes: on the hardest-negative pairs "was this edited" alone beats chance
    originals = [p for p in bench.pairs if "mirror_of" not in p.meta]
    assert _agnostic_accuracy(originals, scorers["edited"]) > 0.53


def test_personalization_only_subset_is_large_and_its_mirror_pairs_follow_rubrics(shipped: Benchmark) -> None:
    bench = shipped
    sizes = bench.summary()["subsets"][PERSONALIZATION_ONLY]
    assert sizes["test_pairs_seen"] >= 300 and sizes["test_pairs_unseen"] >= 50 and sizes["train_pairs"] >= 1000
    report = bench.meta["subsets"][PERSONALIZATION_ONLY]
    assert report["pairs"] == sizes["pairs"] == len(bench.subset(PERSONALIZATION_ONLY))
    assert report["mirror_pairs_added"] == sum("mirror_of" in p.meta for p in bench.pairs) > 0
    by_id = {p.pair_id: p for p in bench.pairs}
    for p in bench.pairs:
        if "mirror_of" not in p.meta:
            continue
        src = by_id[p.meta["mirror_of"]]
        rubric = bench.users[p.user_id].rubric
        assert rubric is not None and p.user_id != src.user_id
        assert (p.chosen, p.rejected, p.prompt, p.split) == (src.rejected, src.chosen, src.prompt, src.split)
        assert bench.users[p.user_id].seen == bench.users[src.user_id].seen
        assert satisfies_all(p.chosen, rubric) and violates(p.rejected, rubric)
    assert len({p.pair_id for p in bench.pairs}) == len(bench.pairs)
    assert len({p.content_key() for p in bench.pairs}) == len(bench.pairs)


def test_personalization_only_subset_is_deterministic_and_optional(shipped: Benchmark) -> None:
    again = load_rubrics()
    assert again.subsets == shipped.subsets and again.fingerprint() == shipped.fingerprint()
    plain = load_rubrics(mirror_splits=())
    assert not any("mirror_of" in p.meta for p in plain.pairs)
    natural = plain.subset(PERSONALIZATION_ONLY)  # only pairs that already had a reverse partner
    assert 0 < len(natural) < len(plain.pairs) and len(natural) % 2 == 0
    assert plain.fingerprint() != shipped.fingerprint()
    test_only = load_rubrics(mirror_splits=["test"])
    assert {p.split for p in test_only.pairs if "mirror_of" in p.meta} == {"test"}
    with pytest.raises(ValueError, match="mirror_splits: unknown splits"):
        load_rubrics(mirror_splits=["dev"])


def test_benchmark_subset_api() -> None:
    users = {"a": User("a"), "b": User("b")}
    pairs = [PreferencePair("1", "a", "x", "p", "q"), PreferencePair("2", "b", "x", "q", "p")]
    bench = Benchmark("t", pairs, users, subsets={"mirrored": frozenset({"2"})})
    assert bench.subset("mirrored") == [pairs[1]]
    assert bench.subset("mirrored", pairs[:1]) == []
    assert bench.summary()["subsets"]["mirrored"]["test_pairs_seen"] == 1
    with pytest.raises(KeyError, match="no pair subset 'other'"):
        bench.subset("other")
    with pytest.raises(ValueError, match="subset 'bad' names unknown pair ids"):
        Benchmark("t", pairs, users, subsets={"bad": frozenset({"3"})})
    assert "subsets" not in Benchmark("t", pairs, users).summary()


def test_shipped_pool_is_derived_for_the_current_users(tmp_path: Path) -> None:
    """The shipped pool's edits are what the build derives from its base responses for today's users and checkers:
    a changed rubric without a rebuilt pool fails here."""
    from perbench.data.rubrics.build import POOL_PATH, reassemble_pool

    out = reassemble_pool(out=tmp_path / "again.jsonl")
    assert out.read_text(encoding="utf-8") == POOL_PATH.read_text(encoding="utf-8")
    no_bases = tmp_path / "edits.jsonl"
    no_bases.write_text('{"prompt_id": "p01", "cand_id": "c", "source": "edit0<-base-brief", "text": "ok"}\n')
    with pytest.raises(ValueError, match="no base responses"):
        reassemble_pool(no_bases, out=tmp_path / "x.jsonl")
    no_bases.write_text('{"prompt_id": "p01", "source": "base-brief", "text": "ok"}\n{"prompt_id": "p01"}\n')
    with pytest.raises(ValueError, match=r"edits.jsonl:2: field 'text'"):
        reassemble_pool(no_bases, out=tmp_path / "x.jsonl")
