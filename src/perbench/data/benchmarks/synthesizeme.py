"""SynthesizeMe's PersonalRewardBench (Ryan et al., ACL 2025): user-stratified PRISM and Chatbot Arena pairs.

Not the "Personalized RewardBench" of Ma et al. (registry ``prb``): a different dataset with a near-identical name.
Hub datasets ``MichaelR207/prism_personalized_0125`` and ``MichaelR207/chatbot_arena_personalized_0125``; their
splits are read together. Row fields used: ``user_id``, ``context`` (the conversation so far, a list of
``{role, content}``), ``chosen`` and ``rejected`` (a ``{role, content}`` message, a string or a conversation ending
with the response) and ``split`` (``train`` / ``val`` / ``test``, per row). The other columns (judge predictions
``prediction_*``, ``reasoning_*``, ``agreement``, ``chosen_score`` ...) are read by nothing: some of them are other
models' verdicts on the same pair.

Roles: PersonalRewardBench writes the assistant's turns as ``role: "model"``; every role is mapped to the chat role
it means (:func:`~perbench.data.benchmarks.common.chat_role`: ``model`` -> ``assistant``), an unknown one is a
located error, so a chat template never drops or invents a turn. A ``chosen`` / ``rejected`` written as a
conversation must continue the row's ``context`` (else it answers another question: a located error), and a response
is the assistant's turn.

Split mapping: a user's ``train`` rows are their train pairs (fit for a seen user, few-shot shots for an unseen
one), ``test`` rows evaluate, and ``val`` rows (SynthesizeMe's selection set) are not used unless ``val="train"``
(otherwise counted ``val_row_not_used``). Every user is seen unless ``unseen_fraction`` holds out a seeded share.
The published tables report accuracy on every user's test rows; ``unseen_fraction=0`` with every method fit on the
train rows is the comparable setting (docs/benchmarks-data.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from perbench.data.benchmarks.common import chat_messages, finish, response_text, row_ref, rows_of
from perbench.data.policies import assign_unseen
from perbench.data.records import Benchmark, Message, PreferencePair, SkipReport, Split, User
from perbench.data.rows import DataError, ErrorSink, OnError, Row
from perbench.data.user_context import describe_user_context

SYNTHESIZEME_HUB_IDS = {
    "prism": "MichaelR207/prism_personalized_0125",
    "chatbot_arena": "MichaelR207/chatbot_arena_personalized_0125",
}
_SPLITS: dict[str, Split | None] = {"train": "train", "val": None, "validation": None, "test": "test"}


def _response(row: Row, field: str, context: tuple[Message, ...]) -> str:
    """The response of ``field``; written as a conversation, it must continue ``context``."""
    value = row.require(field)
    if isinstance(value, list | tuple) and len(value) > 1:
        before = chat_messages(row, field, value, allow_empty_last=True)[:-1]
        if before != context[: len(before)] or len(before) != len(context):
            raise row.error(field, "the conversation before this response is not the row's context")
    return response_text(row, field, value)


def load_synthesizeme(
    source: str | Path | None = None,
    *,
    config: str = "prism",
    val: Literal["drop", "train"] = "drop",
    unseen_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load PersonalRewardBench from the hub (``config``: ``prism`` or ``chatbot_arena``), a ``save_to_disk`` folder
    or a JSONL/JSON/Parquet export of it."""
    if config not in SYNTHESIZEME_HUB_IDS:
        raise ValueError(f"unknown PersonalRewardBench config {config!r}; use {sorted(SYNTHESIZEME_HUB_IDS)}")
    if val not in ("drop", "train"):
        raise ValueError(f"val must be 'drop' or 'train', got {val!r}")
    src = source if source is not None else SYNTHESIZEME_HUB_IDS[config]
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    pairs: list[PreferencePair] = []
    rows_read = 0
    for row in rows_of(src, fmt=fmt, split=None):
        rows_read += 1
        try:
            user = row.ident("user_id")
            context = chat_messages(row, "context", row.require("context"))
            if context[-1].role != "user":
                raise row.error(
                    f"context.{len(context) - 1}.role", f"the last turn must be 'user', got {context[-1].role!r}"
                )
            chosen = _response(row, "chosen", context)
            rejected = _response(row, "rejected", context)
            raw_split = row.text("split").strip().lower()
            if raw_split not in _SPLITS:
                raise row.error("split", f"unknown split {raw_split!r}; expected train, val or test")
        except DataError as e:
            sink(e)
            continue
        split = _SPLITS[raw_split] or ("train" if val == "train" else None)
        if split is None:
            skipped.add("val_row_not_used", row.where)
            continue
        prompt = context if len(context) > 1 else context[0].content
        row_meta = {"source": row.where, "upstream_split": raw_split}
        pairs.append(PreferencePair(f"synthesizeme:{row_ref(row)}", user, prompt, chosen, rejected, split, row_meta))
    ids = sorted({p.user_id for p in pairs})
    unseen = assign_unseen(ids, unseen_fraction, seed)
    users = {u: User(u, seen=u not in unseen) for u in ids}
    meta: dict[str, Any] = {
        "source": str(src),
        "config": config,
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "split_policy": "the row's split: train -> train, test -> test, val -> "
        + ("train" if val == "train" else "not used"),
        "seen_policy": f"seeded unseen_fraction={unseen_fraction} (seed {seed}) of the sorted user ids; the rest seen",
        "not_to_confuse_with": "Personalized RewardBench (Ma et al., registry prb)",
        "user_context": describe_user_context("pairs_only", users, included=["the user's own train pairs"]),
    }
    return finish(name or f"synthesizeme_{config}", pairs, users, skipped, meta)
