"""The built-in rubric benchmark: users with checkable rubrics, pairs drawn from a shared candidate pool.

For user u and prompt x: chosen meets every aspect pole of u's rubric; rejected lands on the *opposite*
pole of at least one of them (the hardest such candidate: fewest violated aspects). Both come from the same
pool, so length or style alone cannot separate them across users. The chosen text is also u's gold
reference for x (ROUGE); rubric satisfaction of any generated text is exact, from the checkers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from perbench.data.records import Benchmark, PreferencePair, Reference, SkipReport
from perbench.data.rubrics.aspects import ASPECTS, opposite
from perbench.data.rubrics.prompts import RUBRIC_PROMPTS
from perbench.data.rubrics.users import RUBRIC_USERS, to_user


def read_pool(path: Path) -> dict[str, list[dict[str, Any]]]:
    if not path.exists():
        raise FileNotFoundError(f"rubric pool not found: {path} (build it with `perbench build rubrics`)")
    known = {p.prompt_id for p in RUBRIC_PROMPTS}
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: invalid JSON ({e.msg})") from None
            for f in ("prompt_id", "cand_id", "text"):
                if not isinstance(row.get(f), str) or not row[f]:
                    raise ValueError(f"{path}:{line_no}: field {f!r}: expected a non-empty string")
            if row["prompt_id"] not in known:
                raise ValueError(f"{path}:{line_no}: field 'prompt_id': unknown prompt {row['prompt_id']!r}")
            # annotations are recomputed from the text: the checkers are the ground truth, not the file
            row["annotations"] = {a: spec.check(row["text"]) for a, spec in ASPECTS.items()}
            by_prompt.setdefault(row["prompt_id"], []).append(row)
    return by_prompt


def load_rubrics(
    pool: str | None = None,
    seed: int = 0,
    max_train_prompts: int | None = None,
    max_test_prompts: int | None = None,
) -> Benchmark:
    from perbench.data.rubrics.build import POOL_PATH

    path = Path(pool) if pool else POOL_PATH
    by_prompt = read_pool(path)
    users = {u.user_id: to_user(u) for u in RUBRIC_USERS}
    train = [p for p in RUBRIC_PROMPTS if p.split == "train" and p.prompt_id in by_prompt][:max_train_prompts]
    test = [p for p in RUBRIC_PROMPTS if p.split == "test" and p.prompt_id in by_prompt][:max_test_prompts]
    skipped = SkipReport()
    pairs: list[PreferencePair] = []
    refs: list[Reference] = []
    for p in train + test:
        cands = by_prompt[p.prompt_id]
        for ru in RUBRIC_USERS:
            rng = random.Random(f"{seed}:{ru.user_id}:{p.prompt_id}")
            good = [c for c in cands if all(c["annotations"][ap.aspect] == ap.pole for ap in ru.rubric)]
            bad = []
            for c in cands:
                v = sum(c["annotations"][ap.aspect] == opposite(ap.aspect, ap.pole) for ap in ru.rubric)
                if v:
                    bad.append((v, c))
            where = f"{ru.user_id}/{p.prompt_id}"
            if not good:
                skipped.add("no_candidate_meets_rubric", where)
                continue
            if not bad:
                skipped.add("no_candidate_violates_rubric", where)
                continue
            chosen = rng.choice(good)
            fewest = min(v for v, _ in bad)
            rejected = rng.choice([c for v, c in bad if v == fewest])
            pairs.append(
                PreferencePair(
                    pair_id=f"{ru.user_id}-{p.prompt_id}",
                    user_id=ru.user_id,
                    prompt=p.text,
                    chosen=chosen["text"],
                    rejected=rejected["text"],
                    split=p.split,
                    meta={
                        "prompt_id": p.prompt_id,
                        "chosen_id": chosen["cand_id"],
                        "rejected_id": rejected["cand_id"],
                        "violations": fewest,
                    },
                )
            )
            refs.append(Reference(ru.user_id, p.text, chosen["text"], p.split))
    return Benchmark(
        name="rubrics",
        pairs=pairs,
        users=users,
        references=refs,
        skipped=skipped,
        meta={
            "pool": str(path),
            "candidates": sum(len(v) for v in by_prompt.values()),
            "prompts": {"train": len(train), "test": len(test)},
            "seed": seed,
        },
    )
