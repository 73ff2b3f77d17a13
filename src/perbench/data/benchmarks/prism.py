"""PRISM (Kirk et al. 2024, ``HannahRoseKirk/prism-alignment``) with LoRe's pair recipe and split.

Files: ``survey.jsonl`` (one row per participant: ``user_id``, ``self_description``, ``system_string``,
stated preferences, demographics...) and ``conversations.jsonl`` (``conversation_id``, ``user_id``,
``conversation_history``: utterances with ``turn``, ``role`` ("user" or "model"), ``content`` and, for model
responses, ``if_chosen`` and ``score``).

Pairs: at every turn, the chosen response vs each non-chosen sibling; the prompt is the dialogue so far as
chat messages (earlier user turns, each followed by that turn's chosen response, then the current user turn).

Split (LoRe, seed 123): users with more than 5 dialogues; 80/20 seen/unseen users; each user's dialogues
50/50 train/test (an odd count puts the extra dialogue in test). An unseen user's few-shot set is their train
dialogues' pairs, in dialogue then turn order. We use LoRe's seed but our own shuffles, so the user sample is
not the identical one.

Survey fields: ``self_description`` and ``system_string`` (the participant's own instructions to a model)
become profile items: both are texts the user wrote, so they are user context that methods may read. Labels
are the participant's real choices, so there is no answer key. Every other survey field goes to
``User.meta["survey"]``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perbench.data.benchmarks.common import chat_role
from perbench.data.policies import assign_unseen
from perbench.data.reading import read_rows
from perbench.data.records import (
    Benchmark,
    Message,
    PreferencePair,
    ProfileItem,
    SkipReport,
    Split,
    User,
    dedup_pairs,
)
from perbench.data.rows import DataError, ErrorSink, OnError, Row, check_text, type_name
from perbench.data.user_context import describe_user_context

PROFILE_FIELDS: tuple[str, ...] = ("self_description", "system_string")


@dataclass
class _Response:
    content: str
    chosen: bool
    score: Any
    model: Any
    within_turn_id: Any


@dataclass
class _Turn:
    number: int
    user: str
    responses: list[_Response] = field(default_factory=list)


@dataclass
class _Conversation:
    conversation_id: str
    user_id: str
    turns: list[_Turn]
    where: str


def parse_history(row: Row, path: str = "conversation_history") -> list[_Turn]:
    """Group utterances into turns (by ``turn`` when present, else a user utterance opens a turn)."""
    turns: list[_Turn] = []
    by_number: dict[int, _Turn] = {}
    for i, utt in enumerate(row.seq(path)):
        where = f"{path}.{i}"
        if not isinstance(utt, Mapping):
            raise row.error(where, f"expected an utterance object, got {type_name(utt)}")
        if utt.get("role") is None:
            raise row.error(f"{where}.role", "missing")
        role = chat_role(row, f"{where}.role", utt["role"])
        if utt.get("content") is None:
            raise row.error(f"{where}.content", "missing")
        content = check_text(row, f"{where}.content", utt["content"])
        number_value = utt.get("turn")
        if number_value is not None and (isinstance(number_value, bool) or not isinstance(number_value, int)):
            raise row.error(f"{where}.turn", f"expected an integer, got {type_name(number_value)}")
        if role == "user":
            number = number_value if number_value is not None else len(turns)
            if number in by_number:
                raise row.error(f"{where}.turn", f"a second user utterance in turn {number}")
            turn = by_number[number] = _Turn(number, content)
            turns.append(turn)
        elif role == "assistant":
            if number_value is not None:
                if number_value not in by_number:
                    raise row.error(
                        f"{where}.turn",
                        f"a model response for turn {number_value}, which has no user utterance before it",
                    )
                turn = by_number[number_value]
            elif turns:
                turn = turns[-1]
            else:
                raise row.error(where, "a model response before any user utterance")
            chosen = utt.get("if_chosen")
            if not isinstance(chosen, bool):
                why = "missing" if chosen is None else f"expected a boolean, got {type_name(chosen)}"
                raise row.error(f"{where}.if_chosen", why)
            turn.responses.append(
                _Response(content, chosen, utt.get("score"), utt.get("model_name"), utt.get("within_turn_id"))
            )
        else:
            raise row.error(f"{where}.role", f"expected a user or a model turn, got {utt['role']!r}")
    return sorted(turns, key=lambda t: t.number)


def _survey(path: Path, sink: ErrorSink) -> tuple[dict[str, User], int]:
    users: dict[str, User] = {}
    first_at: dict[str, str] = {}
    n = 0
    for label, line, data in read_rows(path, fmt="jsonl"):
        n += 1
        row = Row(label, line, data)
        try:
            uid = row.ident("user_id")
            if uid in first_at:
                raise row.error("user_id", f"duplicate user (first at {first_at[uid]})")
            texts = {k: row.opt_text(k) for k in PROFILE_FIELDS}
        except DataError as e:
            sink(e)
            continue
        first_at[uid] = row.where
        profile = tuple(ProfileItem(k, v) for k, v in texts.items() if v)
        survey = {k: v for k, v in data.items() if k not in ("user_id", *PROFILE_FIELDS)}
        users[uid] = User(uid, profile=profile, meta={"survey": survey, "source": row.where})
    return users, n


def _pairs_of(conv: _Conversation, split: Split, skipped: SkipReport) -> list[PreferencePair]:
    out: list[PreferencePair] = []
    history: list[Message] = []
    for turn in conv.turns:
        prompt = (*history, Message("user", turn.user))
        chosen = [r for r in turn.responses if r.chosen]
        where = f"{conv.where} turn {turn.number}"
        if len(chosen) != 1:
            # Later turns followed an unknown response: stop this dialogue here (counted).
            skipped.add("turn_without_chosen" if not chosen else "turn_with_several_chosen", where)
            break
        best = chosen[0]
        rejected = [r for r in turn.responses if not r.chosen]
        if not rejected:
            skipped.add("turn_with_single_response", where)
        for k, r in enumerate(rejected):
            sibling = r.within_turn_id if r.within_turn_id is not None else k
            out.append(
                PreferencePair(
                    f"prism:{conv.conversation_id}:t{turn.number}:{sibling}",
                    conv.user_id,
                    prompt,
                    best.content,
                    r.content,
                    split,
                    {
                        "source": conv.where,
                        "conversation_id": conv.conversation_id,
                        "turn": turn.number,
                        "chosen_score": best.score,
                        "rejected_score": r.score,
                        "chosen_model": best.model,
                        "rejected_model": r.model,
                    },
                )
            )
        history = [*prompt, Message("assistant", best.content)]
    return out


def load_prism(
    path: str | Path,
    *,
    survey: str = "survey.jsonl",
    conversations: str = "conversations.jsonl",
    min_dialogues: int = 6,
    unseen_fraction: float = 0.2,
    train_fraction: float = 0.5,
    seed: int = 123,
    on_error: OnError = "raise",
    name: str | None = None,
) -> Benchmark:
    """Load PRISM from a folder holding ``survey.jsonl`` and ``conversations.jsonl`` (LoRe's recipe).

    ``min_dialogues=6`` keeps users with more than 5 dialogues, as LoRe; ``min_dialogues=1`` keeps everyone.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    folder = Path(path)
    survey_path, conv_path = folder / survey, folder / conversations
    for p in (survey_path, conv_path):
        if not p.exists():
            raise FileNotFoundError(f"{p}: missing (PRISM needs {survey} and {conversations})")
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped, unit="row")  # a survey row or a whole conversation
    users, survey_rows = _survey(survey_path, sink)

    convs: list[_Conversation] = []
    first_at: dict[str, str] = {}
    conv_rows = 0
    for label, line, data in read_rows(conv_path, fmt="jsonl"):
        conv_rows += 1
        row = Row(label, line, data)
        try:
            cid = row.ident("conversation_id")
            if cid in first_at:
                raise row.error("conversation_id", f"duplicate conversation (first at {first_at[cid]})")
            uid = row.ident("user_id")
            if uid not in users:
                raise row.error("user_id", f"unknown user {uid!r} (not in {survey})")
            turns = parse_history(row)
        except DataError as e:
            sink(e)
            continue
        first_at[cid] = row.where
        convs.append(_Conversation(cid, uid, turns, row.where))

    by_user: dict[str, list[_Conversation]] = {}
    for c in convs:
        by_user.setdefault(c.user_id, []).append(c)
    eligible = sorted(u for u, cs in by_user.items() if len(cs) >= min_dialogues)
    for uid in sorted(set(by_user) - set(eligible)):
        skipped.add("user_below_min_dialogues", f"{uid} ({len(by_user[uid])} dialogues)")
    unseen = assign_unseen(eligible, unseen_fraction, seed)

    pairs: list[PreferencePair] = []
    for uid in eligible:
        dialogues = list(by_user[uid])
        order = list(range(len(dialogues)))
        random.Random(f"{seed}/{uid}").shuffle(order)
        n_train = int(len(dialogues) * train_fraction)
        train_set = set(order[:n_train])
        for i, conv in enumerate(dialogues):  # file order, so few-shot sets follow dialogue order
            pairs.extend(_pairs_of(conv, "train" if i in train_set else "test", skipped))
    pairs = dedup_pairs(pairs, skipped)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(eligible) - kept):
        skipped.add("user_without_pairs", uid)
    out_users = {
        u: User(
            u,
            seen=u not in unseen,
            profile=users[u].profile,
            meta={**users[u].meta, "dialogues": len(by_user[u])},
        )
        for u in sorted(kept)
    }
    meta = {
        "source": str(folder),
        "survey_rows": survey_rows,
        "conversation_rows": conv_rows,
        "rows_with_errors": sink.count,
        "users_with_conversations": len(by_user),
        "users_eligible": len(eligible),
        "min_dialogues": min_dialogues,
        "seed": seed,
        "split_policy": f"per user, dialogues shuffled (seed {seed}); first floor({train_fraction}*n) train",
        "seen_policy": f"seeded fraction {unseen_fraction} of eligible users unseen (seed {seed})",
        "pairs_recipe": "per turn: chosen vs each non-chosen sibling; prompt = dialogue so far",
        "user_context": describe_user_context(
            "profile",
            out_users,
            included=["profile (survey self_description and system_string, written by the user)", "own train pairs"],
            note="real labels: there is no answer key to withhold",
        ),
    }
    return Benchmark(name or "prism", pairs, out_users, skipped=skipped, meta=meta, weighting="pair")
