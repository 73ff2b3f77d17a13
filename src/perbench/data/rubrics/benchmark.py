"""The built-in rubric benchmark: users with checkable rubrics, pairs drawn from a shared candidate pool.

For user u and prompt x: chosen meets every aspect pole of u's rubric; rejected lands on the *opposite*
pole of at least one of them (the hardest such candidate: fewest violated aspects). Both come from the same
pool, so length or style alone cannot separate them across users. The chosen text is also u's gold
reference for x (ROUGE); rubric satisfaction of any generated text is exact, from the checkers.

Same pool is not enough to remove every text-only cue: most chosen *and* rejected candidates are edited ones,
but not equally often, so a scorer that only detects "was this edited" beats 50 % without knowing the user.
The ``personalization_only`` subset removes every such cue: each of its pairs (u, x, a ≻ b) is matched one to
one with a pair (v, x, b ≻ a) of another user of the same group (seen / unseen) and split, so any scorer that
ignores the user gets exactly one of the two right. Partners are existing pairs where possible; otherwise a
*mirror pair* (v, x, b ≻ a) is added for a user v whose rubric b meets and a violates (``mirror_splits``).

The ``consensus`` pair set (``Benchmark.pair_sets``) is the opposite kind of pair: one that every user prefers the
same way, as a general-quality benchmark (RewardBench) assumes. The rubrics conflict by design, so the pool holds
no pair that every user's rubric orders (``consensus_pairs`` counts them). The consensus pairs are built instead:
chosen is a candidate answer to x, rejected a candidate answer to *another* test prompt whose checker verdicts are
identical on all nine aspects (same topic preferred, like LLMBar's "neighbor" instructions). No rubric separates
them; answering the question asked, which every user wants, does. Each pair is evaluated for every user.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from perbench.data.records import CONSENSUS, PARAPHRASED, Benchmark, PreferencePair, Reference, SkipReport
from perbench.data.rubrics import pool_large
from perbench.data.rubrics.aspects import ASPECTS, opposite
from perbench.data.rubrics.prompts import (
    PROMPT_TOPICS,
    RUBRIC_PROMPTS,
    RubricPrompt,
    edition_prompts,
    paraphrased_pairs,
)
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser, rubric_user_context, to_user
from perbench.data.rubrics.users_large import edition_users
from perbench.io import read_jsonl

#: the named subset of pairs on which every user-agnostic scorer scores exactly 0.5
PERSONALIZATION_ONLY = "personalization_only"


def read_pool(path: Path, prompts: Sequence[RubricPrompt] = RUBRIC_PROMPTS) -> dict[str, list[dict[str, Any]]]:
    if not path.exists():
        raise FileNotFoundError(f"rubric pool not found: {path} (build it with `perbench build rubrics`)")
    known = {p.prompt_id for p in prompts}
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for line_no, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{line_no}: expected a JSON object")
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
    mirror_splits: Sequence[str] = ("train", "test"),
    consensus_per_prompt: int = 4,
    paraphrases: int = 0,
    secret_file: str | None = None,
    size: Literal["default", "large"] = "default",
) -> Benchmark:
    """The rubric benchmark from the candidate pool. ``mirror_splits``: the splits where mirror pairs may be
    added so that the ``personalization_only`` subset covers (almost) every pair; ``()`` keeps only the
    hardest-negative pairs (the subset is then the naturally mirrored ones). ``consensus_per_prompt``: how many
    consensus pairs (see the module docstring) each test prompt gets at most, each evaluated for every user
    (0: none). ``paraphrases``: how many rephrasings (0-2) of each test prompt ask every test pair again (the
    ``paraphrased`` pair set, for paraphrase consistency; the checkers read only the answer, so labels hold).
    ``secret_file`` (or ``$PERBENCH_RUBRICS_SECRET``): a private secret that draws which user wants which rubric,
    which prompts are held out and which candidates each pair takes (:mod:`perbench.data.rubrics.secret`).
    ``size``: the edition. ``default``: 24 seen + 8 unseen users, 48 train + 16 test prompts, the shipped pool.
    ``large``: 72 seen + 24 unseen users (:mod:`~perbench.data.rubrics.users_large`), 48 train + 64 test prompts,
    and a pool whose edits cover all 96 users' rubrics, derived from the base responses of ``pool.jsonl`` and
    ``pool_more.jsonl`` (:func:`large_pool`); the default edition's users, prompts, pairs and ids are its own."""
    bad_splits = sorted(set(mirror_splits) - {"train", "test"})
    if bad_splits:
        raise ValueError(f"mirror_splits: unknown splits {bad_splits} (expected 'train' and/or 'test')")
    if isinstance(consensus_per_prompt, bool) or not isinstance(consensus_per_prompt, int) or consensus_per_prompt < 0:
        raise ValueError(f"consensus_per_prompt: expected an integer >= 0, got {consensus_per_prompt!r}")
    if size not in ("default", "large"):
        raise ValueError(f"size: expected 'default' or 'large', got {size!r}")
    from perbench.data.rubrics.build import POOL_PATH
    from perbench.data.rubrics.secret import pair_seed, read_secret, secret_split, secret_users

    rubric_users, prompts = edition_users(size), edition_prompts(size)
    secret = read_secret(secret_file)
    if secret is not None and paraphrases:
        raise ValueError("paraphrases: the paraphrases are written for the public test prompts; a secret draws others")
    if secret is not None:
        rubric_users, prompts = secret_users(rubric_users, secret), secret_split(prompts, secret)
    if pool:
        path = Path(pool)
        by_prompt = read_pool(path, prompts)
    elif size == "large":
        path, by_prompt = pool_large.MORE_POOL_PATH, pool_large.large_pool()
    else:
        path, by_prompt = POOL_PATH, read_pool(POOL_PATH)
    users = {u.user_id: to_user(u) for u in rubric_users}
    train = [p for p in prompts if p.split == "train" and p.prompt_id in by_prompt][:max_train_prompts]
    test = [p for p in prompts if p.split == "test" and p.prompt_id in by_prompt][:max_test_prompts]
    draw = pair_seed(seed, secret)
    skipped = SkipReport()
    pairs: list[PreferencePair] = []
    refs: list[Reference] = []
    for p in train + test:
        cands = by_prompt[p.prompt_id]
        for ru in rubric_users:
            rng = random.Random(f"{draw}:{ru.user_id}:{p.prompt_id}")
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
    added, members, report = mirror_pairs(pairs, by_prompt, seed=seed, splits=tuple(mirror_splits), users=rubric_users)
    pairs += added
    consensus, consensus_report = consensus_pairs(
        test, by_prompt, seed=seed, per_prompt=consensus_per_prompt, users=rubric_users
    )
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
            **({"size": size} if size != "default" else {}),
            "seed": seed,
            "answer_key": "public (rebuildable from the package)" if secret is None else "drawn by a private secret",
            "subsets": {PERSONALIZATION_ONLY: report},
            "pair_sets": {CONSENSUS: consensus_report},
            "user_context": rubric_user_context(users),
        },
        subsets={PERSONALIZATION_ONLY: members},
        pair_sets={
            **({CONSENSUS: consensus} if consensus else {}),
            **({PARAPHRASED: para} if (para := paraphrased_pairs(pairs, paraphrases)) else {}),
        },
    )


def _disagrees(ru: RubricUser, chosen: dict[str, Any], rejected: dict[str, Any]) -> int:
    """How many of ``ru``'s poles ``rejected`` violates, when ``chosen`` meets all of them (else 0)."""
    ann_c, ann_r = chosen["annotations"], rejected["annotations"]
    if not all(ann_c[ap.aspect] == ap.pole for ap in ru.rubric):
        return 0
    return sum(ann_r[ap.aspect] == opposite(ap.aspect, ap.pole) for ap in ru.rubric)


def _tiebreak(seed: int, *parts: str) -> str:
    return hashlib.sha256("|".join((str(seed), *parts)).encode()).hexdigest()


def mirror_pairs(
    pairs: Sequence[PreferencePair],
    by_prompt: dict[str, list[dict[str, Any]]],
    *,
    seed: int = 0,
    splits: tuple[str, ...] = ("train", "test"),
    users: Sequence[RubricUser] = RUBRIC_USERS,
) -> tuple[list[PreferencePair], frozenset[str], dict[str, Any]]:
    """Match every pair (u, x, a ≻ b) one to one with a pair (v, x, b ≻ a), v ≠ u in the same group and split.

    1. existing pairs are matched first (in pair order, the first unmatched reverse pair);
    2. a pair left over, in a split of ``splits``, gets a new mirror pair for a user v whose rubric ``b``
       meets and ``a`` violates (per the checkers): the eligible v with the fewest mirror pairs so far,
       ties broken by a seeded hash. Pairs with no eligible v stay outside the subset (counted).

    Returns (added pairs, ids of the subset: matched originals and their partners, a report for meta).
    """
    cands = {c["cand_id"]: c for rows in by_prompt.values() for c in rows}
    by_id = {ru.user_id: ru for ru in users}

    def key(p: PreferencePair, reverse: bool = False) -> tuple[str, bool, str, str, str]:
        a, b = p.meta["chosen_id"], p.meta["rejected_id"]
        return (p.split, by_id[p.user_id].seen, p.meta["prompt_id"], *((b, a) if reverse else (a, b)))

    by_key: dict[tuple[str, bool, str, str, str], list[str]] = {}
    for p in pairs:
        by_key.setdefault(key(p), []).append(p.pair_id)
    existing = {(p.user_id, p.meta["prompt_id"], p.meta["chosen_id"], p.meta["rejected_id"]) for p in pairs}
    matched: set[str] = set()
    natural = 0
    for p in pairs:
        if p.pair_id in matched:
            continue
        partner = next((q for q in by_key.get(key(p, reverse=True), []) if q not in matched), None)
        if partner is not None:
            matched |= {p.pair_id, partner}
            natural += 1
    added: list[PreferencePair] = []
    load: dict[tuple[str, str], int] = {}
    unmatched = {"train": 0, "test": 0}
    for p in pairs:
        if p.pair_id in matched:
            continue
        pid, a, b = p.meta["prompt_id"], p.meta["chosen_id"], p.meta["rejected_id"]
        eligible = []
        if p.split in splits:
            for v, ru in by_id.items():
                if v == p.user_id or ru.seen != by_id[p.user_id].seen or (v, pid, b, a) in existing:
                    continue
                n_viol = _disagrees(ru, cands[b], cands[a])
                if n_viol:
                    eligible.append((load.get((p.split, v), 0), _tiebreak(seed, v, p.pair_id), v, n_viol))
        if not eligible:
            unmatched[p.split] += 1
            continue
        _, _, v, n_viol = min(eligible)
        load[(p.split, v)] = load.get((p.split, v), 0) + 1
        existing.add((v, pid, b, a))
        q = PreferencePair(
            pair_id=f"{v}-{pid}-mirror-{p.user_id}",
            user_id=v,
            prompt=p.prompt,
            chosen=p.rejected,
            rejected=p.chosen,
            split=p.split,
            meta={"prompt_id": pid, "chosen_id": b, "rejected_id": a, "violations": n_viol, "mirror_of": p.pair_id},
        )
        added.append(q)
        matched |= {p.pair_id, q.pair_id}
    report = {
        "built": "each pair (u, x, a ≻ b) matched one to one with (v, x, b ≻ a) of another user in the same "
        "split and seen/unseen group: existing pairs first, else an added mirror pair for a user whose rubric "
        "b meets and a violates; every user-agnostic scorer gets exactly one pair of each match right",
        "mirror_splits": list(splits),
        "matched_existing": natural,
        "mirror_pairs_added": len(added),
        "left_out": unmatched,
        "pairs": len(matched),
    }
    return added, frozenset(matched), report


def _signature(cand: dict[str, Any]) -> tuple[str | None, ...]:
    """A candidate's checker verdict on every aspect (a pole or None): what every rubric reads of it."""
    return tuple(cand["annotations"][a] for a in sorted(ASPECTS))


def _prefers(ru: RubricUser, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The benchmark's labelling rule: ``a`` meets every pole of ``ru``'s rubric and ``b`` violates one."""
    return all(a["annotations"][ap.aspect] == ap.pole for ap in ru.rubric) and _disagrees(ru, a, b) > 0


def rubric_consensus_counts(
    prompts: Sequence[RubricPrompt],
    by_prompt: dict[str, list[dict[str, Any]]],
    users: Sequence[RubricUser] = RUBRIC_USERS,
) -> dict[str, int]:
    """Ordered candidate pairs (a, b) of one prompt, over ``prompts``: how many the labelling rule orders the same
    way for every user (``every_user_prefers``), and how many some user prefers while no user prefers b to a
    (``no_user_reverses``)."""
    every = pareto = total = 0
    for p in prompts:
        cands = by_prompt[p.prompt_id]
        for a in cands:
            for b in cands:
                if a is b:
                    continue
                total += 1
                fwd = [_prefers(ru, a, b) for ru in users]
                if any(fwd) and not any(_prefers(ru, b, a) for ru in users):
                    pareto += 1
                    every += all(fwd)
    return {"ordered_pairs": total, "every_user_prefers": every, "no_user_reverses": pareto}


def consensus_pairs(
    prompts: Sequence[RubricPrompt],
    by_prompt: dict[str, list[dict[str, Any]]],
    *,
    seed: int = 0,
    per_prompt: int = 4,
    users: Sequence[RubricUser] = RUBRIC_USERS,
) -> tuple[list[PreferencePair], dict[str, Any]]:
    """Pairs every user prefers the same way, one copy per user (see the module docstring).

    For each prompt x of ``prompts`` and each candidate a of x: the twins of a are the candidates of the other
    prompts of ``prompts`` with the same verdict on every aspect (and another text); the rejected response is a
    twin from x's topic when there is one, else from any topic (a seeded choice). Up to ``per_prompt`` of x's
    candidates with a twin are drawn (seeded); each (x, a ≻ b) becomes one pair per user, ``split="test"``."""
    user_ids = sorted(ru.user_id for ru in users)
    twins: dict[tuple[str | None, ...], list[tuple[str, dict[str, Any]]]] = {}
    for p in prompts:
        for c in by_prompt[p.prompt_id]:
            twins.setdefault(_signature(c), []).append((p.prompt_id, c))
    out: list[PreferencePair] = []
    built: list[dict[str, str]] = []
    without = []
    n_same = 0
    for p in prompts if per_prompt else ():
        rng = random.Random(f"{seed}:consensus:{p.prompt_id}")
        options = []
        for a in sorted(by_prompt[p.prompt_id], key=lambda c: c["cand_id"]):
            others = [(q, b) for q, b in twins[_signature(a)] if q != p.prompt_id and b["text"] != a["text"]]
            near = [(q, b) for q, b in others if PROMPT_TOPICS.get(q) == PROMPT_TOPICS.get(p.prompt_id)]
            if others:
                options.append((a, rng.choice(sorted(near or others, key=lambda qb: qb[1]["cand_id"]))))
        if not options:
            without.append(p.prompt_id)
            continue
        for a, (q, b) in sorted(rng.sample(options, min(per_prompt, len(options))), key=lambda ab: ab[0]["cand_id"]):
            same = PROMPT_TOPICS.get(q) == PROMPT_TOPICS.get(p.prompt_id)
            built.append({"prompt_id": p.prompt_id, "chosen_id": a["cand_id"], "rejected_id": b["cand_id"]})
            n_same += same
            for u in user_ids:
                out.append(
                    PreferencePair(
                        pair_id=f"{u}-{p.prompt_id}-consensus-{a['cand_id']}",
                        user_id=u,
                        prompt=p.text,
                        chosen=a["text"],
                        rejected=b["text"],
                        split="test",
                        meta={
                            "prompt_id": p.prompt_id,
                            "chosen_id": a["cand_id"],
                            "rejected_id": b["cand_id"],
                            "rejected_prompt_id": q,
                            "same_topic": same,
                        },
                    )
                )
    report = {
        "built": "chosen answers the prompt; rejected answers another test prompt (same topic where possible) and "
        "has the same checker verdict as chosen on every aspect, so no user's rubric separates them and every "
        "user prefers the answer to the question asked; each pair is evaluated for every user",
        "per_prompt": per_prompt,
        "distinct_pairs": len(built),
        "same_topic": n_same,
        "users": len(user_ids),
        "pairs": len(out),
        "prompts_without_twin": without,
        "rubric_consensus_in_pool": rubric_consensus_counts(prompts, by_prompt, users),
    }
    return out, report
