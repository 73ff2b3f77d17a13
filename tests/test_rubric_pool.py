from __future__ import annotations

import json
from pathlib import Path

import pytest

from perbench.data.rubrics.aspects import satisfies_all, violates
from perbench.data.rubrics.benchmark import load_rubrics
from perbench.data.rubrics.build import assemble_pool, build_pool, coverage


def test_pool_build_is_deterministic_and_covers_every_user(tmp_path: Path) -> None:
    a = build_pool(out=tmp_path / "a.jsonl", policy="tiny-random", limit=2, max_new_tokens=8, seed=3)
    b = build_pool(out=tmp_path / "b.jsonl", policy="tiny-random", limit=2, max_new_tokens=8, seed=3)
    assert a.read_text() == b.read_text()
    rows = [json.loads(x) for x in a.read_text().splitlines()]
    assert {r["prompt_id"] for r in rows} == {"p01", "p02"}
    assert all(set(r["annotations"]) >= {"length", "format", "register"} for r in rows)
    assert coverage(rows)["covered"] >= 0.9


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
    # every (user, prompt) is either a pair or a counted skip
    assert len(bench.pairs) + bench.skipped.total() == len(bench.users) * 2
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
