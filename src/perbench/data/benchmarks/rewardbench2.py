"""RewardBench 2 (allenai): best-of-4 over six domains, one general (non-personalized) user.

Rows (hub ``allenai/reward-bench-2``, split ``test``): ``id``, ``prompt`` (a string), ``chosen`` (a list of
responses), ``rejected`` (a list), ``num_correct`` (the length of ``chosen``), ``subset`` (Factuality, Precise IF,
Math, Safety, Focus, Ties); other columns (``total_completions``, ``models``, ...) are kept in nothing.

Pairs: one per (chosen, rejected) response, sharing ``meta["list_id"]`` = the row id, so that best-of-k accuracy
(the chosen response above all three rejected ones, :mod:`perbench.metrics.listwise`) is computed on the list.
Outside Ties a row holds exactly one chosen response. Ties rows are ``ref:N`` (one correct answer) or ``tied:N``
(several) and every correct answer is paired with every incorrect one; they are scored by RewardBench 2's own
composite (``meta["ties_kind"]``, ``meta["ties_prompt"]``). Every pair belongs to one user (``user``, default
``anyone``): the benchmark measures general quality, has no train pairs, and is evaluation-only.

RewardBench 2's rules, applied: a subset is one of the six (any letter case, written in RewardBench 2's); a ``tied``
row holds at least two correct answers; a Ties prompt id without both its ``ref`` and its ``tied`` row is counted
(``meta["ties_incomplete"]``: the composite scores only ids with both). Lists share pairs on purpose (a ``ref``
answer is also one of its ``tied`` answers), so pairs are not deduplicated across lists. Scored with RewardBench 2's
tie rule by default (the registry's ``tie_policy: half``: a tie at the top scores 1/#max).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perbench.data.benchmarks.common import finish, int_field, rows_of, text_list
from perbench.data.records import Benchmark, PreferencePair, SkipReport, User
from perbench.data.rows import DataError, ErrorSink, OnError
from perbench.data.user_context import describe_user_context

RB2_HUB_ID = "allenai/reward-bench-2"
RB2_SUBSETS: tuple[str, ...] = ("Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties")
_CANONICAL = {s.lower(): s for s in RB2_SUBSETS}
_TIES_ID = re.compile(r"^(ref|tied):(\d+)$")


def load_rewardbench2(
    source: str | Path = RB2_HUB_ID,
    *,
    split: str = "test",
    subsets: Sequence[str] | None = None,
    user: str = "anyone",
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load RewardBench 2 from the hub, a ``save_to_disk`` folder or a JSONL/JSON/Parquet export.

    ``subsets``: keep only these (the others are counted as ``subset_not_selected``)."""
    if subsets is not None:
        unknown = sorted(s for s in subsets if str(s).strip().lower() not in _CANONICAL)
        if unknown:
            raise ValueError(f"unknown RewardBench 2 subset(s) {unknown}; use {list(RB2_SUBSETS)}")
        subsets = [_CANONICAL[str(s).strip().lower()] for s in subsets]
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    pairs: list[PreferencePair] = []
    first_at: dict[str, str] = {}
    rows_read = 0
    for row in rows_of(source, fmt=fmt, split=split):
        rows_read += 1
        try:
            row_id = row.ident("id")
            if row_id in first_at:
                raise row.error("id", f"duplicate id {row_id!r} (first at {first_at[row_id]})")
            prompt = row.text("prompt")
            raw_subset = row.text("subset").strip()
            if raw_subset.lower() not in _CANONICAL:
                raise row.error("subset", f"{raw_subset!r} is none of RewardBench 2's subsets {list(RB2_SUBSETS)}")
            subset = _CANONICAL[raw_subset.lower()]
            chosen = text_list(row, "chosen")
            rejected = text_list(row, "rejected")
            num_correct = int_field(row, "num_correct", minimum=1)
            if num_correct != len(chosen):
                raise row.error("num_correct", f"{num_correct}, but 'chosen' holds {len(chosen)} response(s)")
            ties = _TIES_ID.match(row_id) if subset.lower() == "ties" else None
            if subset.lower() == "ties" and ties is None:
                raise row.error("id", f"a Ties row's id must be 'ref:N' or 'tied:N', got {row_id!r}")
            if ties is None and len(chosen) != 1:
                raise row.error("chosen", f"outside Ties a row holds one chosen response, got {len(chosen)}")
            if ties is not None and ties.group(1) == "ref" and len(chosen) != 1:
                raise row.error("chosen", f"a Ties 'ref' row holds one correct answer, got {len(chosen)}")
            if ties is not None and ties.group(1) == "tied" and len(chosen) < 2:
                raise row.error("chosen", f"a Ties 'tied' row holds several correct answers, got {len(chosen)}")
        except DataError as e:
            sink(e)
            continue
        first_at[row_id] = row.where
        if subsets is not None and subset not in subsets:
            skipped.add("subset_not_selected", row.where, n=len(chosen) * len(rejected))
            continue
        base: dict[str, Any] = {"source": row.where, "subset": subset, "list_id": row_id}
        if ties is not None:
            base.update(ties_kind=ties.group(1), ties_prompt=int(ties.group(2)))
        for i, c in enumerate(chosen):
            for j, r in enumerate(rejected):
                pid = f"rb2:{row_id}:{i}:{j}" if ties is not None else f"rb2:{row_id}:{j}"
                pairs.append(PreferencePair(pid, user, prompt, c, r, "test", dict(base)))
    users = {user: User(user, seen=False, meta={"general": True})}
    kinds: dict[int, set[str]] = {}
    for p in pairs:
        if p.meta.get("ties_kind"):
            kinds.setdefault(int(p.meta["ties_prompt"]), set()).add(str(p.meta["ties_kind"]))
    incomplete = sorted(pid for pid, got in kinds.items() if got != {"ref", "tied"})
    meta = {
        "source": str(source),
        "split": split,
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "subsets": list(subsets) if subsets is not None else list(RB2_SUBSETS),
        "users": f"one general user ({user!r}): every pair is a general-quality preference",
        "seen_policy": "evaluation-only: the one user is unseen, no few-shot pairs",
        "evaluation_only": True,
        "split_policy": "every pair test",
        "listwise": "one list per row (meta list_id); Ties rows scored by RewardBench 2's composite",
        "ties_incomplete": {
            "prompts": len(incomplete),
            "ids": incomplete[:20],
            "note": "Ties prompt ids without both a ref and a tied row: left out of the composite",
        },
        "user_context": describe_user_context("pairs_only", {user: User(user)}, included=[], note="no user context"),
    }
    return finish(name or "rewardbench2", pairs, users, skipped, meta, dedup=False)
