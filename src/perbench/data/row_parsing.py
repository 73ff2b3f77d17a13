"""One row of a preference file as a parsed pair (:func:`parse_row`), with the row's user, profile, answer key
and reference, and the fixes for files without a user or split field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perbench.data.fields import FieldMap
from perbench.data.records import (
    Message,
    PreferencePair,
    ProfileItem,
    Prompt,
    Split,
    is_blank,
    normalize_text,
    prompt_identity,
    prompt_text,
)
from perbench.data.rows import (
    MISSING,
    DataError,
    Row,
    check_ident,
    check_text,
    parse_bool,
    parse_profile,
    parse_prompt,
    parse_response,
    parse_split,
    resolve,
)
from perbench.data.user_context import opaque_user_id


@dataclass
class ParsedRow:
    pair: PreferencePair
    seen: bool | None
    profile: list[ProfileItem]
    answer_key: str | None
    reference: str | None
    where: str
    split_given: bool
    user_raw: Any


def ids_are_answer_keys(fmap: FieldMap) -> bool:
    """The user id field is also the answer-key field (a persona sentence that names the user and decides the
    labels): such ids are replaced by :func:`~perbench.data.user_context.opaque_user_id`."""
    return not fmap.disabled("answer_key") and fmap.source("answer_key") == fmap.source("user_id")


#: the fix for a file without a user field (every row of it would fail, so skipping rows is no fix)
NO_USER_FIX = (
    "a file without a user field: set default_user to put every pair under one user (`perbench validate "
    "--default-user NAME`; in a run config `benchmark: {name: file, default_user: NAME}`; `default_user=` in "
    "Python), or map the user column (`--map user_id=<column>`, `mapping: user_id=<column>`)"
)
#: the fix for a file without a split field (every pair is test: nothing to fit on)
SPLIT_FIX = (
    "map a split field (`--map split=<column>`, `mapping: split=<column>`, with train/test values), or set "
    "test_fraction for a seeded per-user split (`perbench validate --test-fraction 0.2`; in a run config "
    "`benchmark: {name: file, test_fraction: 0.2}`; `test_fraction=0.2` in Python)"
)


def parse_row(row: Row, fmap: FieldMap, stem: str, default_user: str | None = None) -> ParsedRow:
    def optional(canonical: str) -> Any:
        """Explicitly mapped -> required; otherwise used when present; empty string = absent."""
        if fmap.disabled(canonical):
            return None
        path = fmap.source(canonical)
        value = row.require(path) if fmap.explicit(canonical) else row.get(path)
        if isinstance(value, str) and is_blank(value):
            if fmap.explicit(canonical) and canonical in ("split", "seen", "pair_id"):
                raise row.error(path, "empty value")
            return None
        return value

    user_path = fmap.source("user_id")
    id_is_key = ids_are_answer_keys(fmap)
    if default_user is not None:
        if resolve(row.data, user_path) is not MISSING:
            raise row.error(
                user_path,
                f"present, but default_user={default_user!r} is set (it is for files without a user field); "
                "drop default_user to use the file's user ids",
            )
        user, user_raw = default_user, default_user
    else:
        if resolve(row.data, user_path) is MISSING and not fmap.explicit("user_id"):
            err = row.error(user_path, "missing")
            err.fix = NO_USER_FIX  # the fix for a whole file, not a row: skipping would drop every such row
            raise err
        user_raw = row.require(user_path)
        user = check_ident(row, user_path, user_raw)
        if id_is_key:  # the id is the answer key (e.g. a persona sentence): methods get an opaque id
            user = opaque_user_id(user)
    chosen_path, rejected_path = fmap.source("chosen"), fmap.source("rejected")
    chosen, chosen_ctx = parse_response(row, chosen_path, row.require(chosen_path))
    rejected, rejected_ctx = parse_response(row, rejected_path, row.require(rejected_path))
    if chosen_ctx and rejected_ctx and prompt_identity(chosen_ctx) != prompt_identity(rejected_ctx):
        raise row.error(
            rejected_path,
            f"its conversation before the response differs from {chosen_path!r}'s "
            f"({_first_difference(chosen_ctx, rejected_ctx)}): the two responses answer different questions",
        )
    prompt_path = fmap.source("prompt")
    raw_prompt = resolve(row.data, prompt_path)
    prompt: Prompt
    if (raw_prompt is MISSING or raw_prompt is None) and chosen_ctx and not fmap.explicit("prompt"):
        prompt = chosen_ctx  # implicit prompt: the conversation before the chosen response
    else:
        prompt = parse_prompt(row, prompt_path, row.require(prompt_path))
        context = chosen_ctx or rejected_ctx
        if context and normalize_text(prompt_text(prompt)) != normalize_text(prompt_text(context)):
            side = chosen_path if chosen_ctx else rejected_path
            raise row.error(
                prompt_path,
                f"its question differs from the user turn in {side!r}'s conversation "
                f"({prompt_text(prompt)[:40]!r} vs {prompt_text(context)[:40]!r}); the row must ask one question",
            )
    split_value = optional("split")
    split: Split = "test" if split_value is None else parse_split(row, fmap.source("split"), split_value)
    seen_value = optional("seen")
    seen = None if seen_value is None else parse_bool(row, fmap.source("seen"), seen_value)
    profile_value = optional("profile")
    profile = [] if profile_value is None else parse_profile(row, fmap.source("profile"), profile_value)
    key_value = optional("answer_key")
    answer_key = None if key_value is None else check_text(row, fmap.source("answer_key"), key_value)
    ref_value = optional("reference")
    reference = None if ref_value is None else check_text(row, fmap.source("reference"), ref_value)
    pid_value = optional("pair_id")
    pair_id = f"{stem}:{row.line}" if pid_value is None else row.ident(fmap.source("pair_id"))
    meta = {"source": row.where, "line": row.line}
    pair = PreferencePair(pair_id, user, prompt, chosen, rejected, split, meta)
    return ParsedRow(pair, seen, profile, answer_key, reference, row.where, split_value is not None, user_raw)


def note_user(users: dict[str, str], row: Row, fmap: FieldMap, default_user: str | None) -> None:
    """Record the user a skipped row names, when it names one readably (``users``: id -> where)."""
    if default_user is not None:
        users.setdefault(default_user, row.where)
        return
    path = fmap.source("user_id")
    value = resolve(row.data, path)
    if value is MISSING or value is None:
        return
    try:
        user = check_ident(row, path, value)
    except DataError:
        return
    # the id pairs carry: an answer-key id (a persona sentence) becomes its opaque id, as in parse_row
    users.setdefault(opaque_user_id(user) if ids_are_answer_keys(fmap) else user, row.where)


def _first_difference(a: tuple[Message, ...], b: tuple[Message, ...]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x.role != y.role or normalize_text(x.content) != normalize_text(y.content):
            return f"first at message {i}: {x.content[:30]!r} vs {y.content[:30]!r}"
    return f"{len(a)} vs {len(b)} messages"
