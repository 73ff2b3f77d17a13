"""Persona-style rows (P-SOUPS-like) and domain-style rows.

Persona-style: ``prompt``, ``chosen``, ``rejected``, a ``persona`` sentence (it names the user and is the answer
key: it defines the label; methods see an opaque id, :func:`~perbench.data.user_context.opaque_user_id`), a
``profile`` string (user context) and ``history`` pairs (``[{prompt, chosen, rejected}, ...]``). Real files
repeat the same pair many times with different profile/history text, so pairs are deduplicated on
(user, prompt, chosen, rejected) with counts (pair weighting); ``dedup=False`` keeps them (row weighting).
Row pairs keep the file's split (``test`` when there is none); history pairs become the user's ``train``
pairs, except a history pair identical to one of the user's row pairs, which is dropped and counted.

Domain-style: one query with responses keyed by style (``{"query": ..., "responses": {style: text}}``, or a
list of ``{style, response}``). Each style is a user: chosen = its own style's response, rejected = each other
style's. Every ordered pair of responses appears once per direction across two users, and the two directions
are kept or dropped together (degenerate pairs, duplicates -- also when two styles share a response), so any
scorer that ignores the user scores exactly 0.5 on the pairs of each split with ties counted ½ -- a check of
the accounting. The style name decides the label: it is the answer key (``User.answer_key``); a user's id is an
opaque hash of it (``style-…``, nor do pair ids or pair metadata name a style), and methods see the style's
pairs only. Skips count pairs; a row whose styles cannot be read counts as one row.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perbench.data.fields import FieldMap
from perbench.data.loading import LoadOptions, load_with_stats
from perbench.data.policies import DEFAULT_MAX_CHARS, Truncations, assign_unseen, demote_untrained, demotion_note
from perbench.data.reading import Source, iter_records, source_label
from perbench.data.records import Benchmark, PreferencePair, Prompt, SkipReport, Split, User, dedup_units
from perbench.data.rows import (
    MISSING,
    DataError,
    ErrorSink,
    OnError,
    Row,
    check_text,
    check_unicode,
    is_number,
    parse_prompt,
    parse_response,
    type_name,
)
from perbench.data.user_context import describe_user_context, opaque_user_id
from perbench.errors import ConfigError

PERSONA_DEFAULTS: dict[str, str] = {"user_id": "persona", "answer_key": "persona"}


def _history_hook(history_field: str) -> Any:
    def hook(row: Row, pair: PreferencePair) -> list[PreferencePair]:
        value = row.get(history_field)
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise row.error(history_field, f"expected a list of {{prompt, chosen, rejected}}, got {type_name(value)}")
        out = []
        for i, item in enumerate(value):
            path = f"{history_field}.{i}"
            if not isinstance(item, Mapping):
                raise row.error(path, f"expected a {{prompt, chosen, rejected}} object, got {type_name(item)}")
            for key in ("prompt", "chosen", "rejected"):
                if item.get(key) is None:
                    raise row.error(f"{path}.{key}", "missing")
            prompt = parse_prompt(row, f"{path}.prompt", item["prompt"])
            chosen, _ = parse_response(row, f"{path}.chosen", item["chosen"])
            rejected, _ = parse_response(row, f"{path}.rejected", item["rejected"])
            out.append(
                PreferencePair(
                    f"{pair.pair_id}/h{i}",
                    pair.user_id,
                    prompt,
                    chosen,
                    rejected,
                    "train",
                    {"source": row.where, "history": i},
                )
            )
        return out

    return hook


def _history_size(history_field: str) -> Any:
    def size(row: Row) -> int:
        value = row.get(history_field)
        return 1 + (len(value) if isinstance(value, list | tuple) else 0)

    return size


def load_persona(
    source: Source,
    *,
    mapping: str | Mapping[str, str] | FieldMap | None = None,
    history_field: str = "history",
    name: str | None = None,
    unseen_users: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    on_error: OnError = "raise",
    dedup: bool = True,
    test_fraction: float | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
) -> Benchmark:
    """Persona-style rows: ``persona`` is the user id and the answer key unless ``mapping`` overrides; profile
    items that quote the persona sentence are dropped (counted: ``profile_item_contains_answer_key``).

    The other options are :func:`~perbench.data.loaders.load_benchmark_file`'s; ``test_fraction`` splits the row
    pairs only (history pairs are always train). A skipped row counts its own pair and its history pairs."""
    merged = dict(FieldMap.parse(mapping).paths)
    merged.setdefault("user_id", PERSONA_DEFAULTS["user_id"])
    merged.setdefault("answer_key", merged["user_id"])  # the persona sentence defines the label
    opts = LoadOptions.build(
        mapping=merged,
        name=name,
        unseen_users=unseen_users,
        unseen_fraction=unseen_fraction,
        seed=seed,
        fmt=fmt,
        split=split,
        config=config,
        on_error=on_error,
        dedup=dedup,
        test_fraction=test_fraction,
        max_chars=max_chars,
    )
    bench, _ = load_with_stats(
        source, opts, row_hook=_history_hook(history_field), row_size=_history_size(history_field)
    )
    bench.meta["history_policy"] = (
        f"'{history_field}' pairs -> the user's train split; copies of the user's row pairs dropped (counted)"
    )
    bench.meta["user_context"] = describe_user_context(
        "profile",
        bench.users,
        included=[f"profile (from '{merged.get('profile', 'profile')}')", f"own train pairs ('{history_field}')"],
        withheld=[f"the persona sentence (from '{merged['answer_key']}')"],
        note=(
            "the persona sentence names the user and is the answer key: user ids are opaque hashes of it"
            if merged["answer_key"] == merged["user_id"]
            else "user ids are labels for reports and never reach a prompt"
        ),
    )
    return bench


def _responses(row: Row, path: str) -> dict[str, str | DataError]:
    """Each style's response, or the located error that makes that one response unusable (wrong type, missing,
    invalid Unicode); an empty response is kept (its pairs are degenerate, dropped and counted later).

    Problems that make the styles themselves unknowable (not an object or a list, an entry that is not an
    object, a missing or empty style name, a style twice) raise: the row cannot be read.
    """
    value = row.require(path)
    items: list[tuple[str, Any, str]] = []
    if isinstance(value, Mapping):  # a null value = the style is absent (Parquet/HF structs fill gaps)
        for key, text in value.items():
            if text is not None:
                items.append((check_unicode(row, f"{path}.{key}", str(key)), text, f"{path}.{key}"))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise row.error(f"{path}.{i}", f"expected a {{style, response}} object, got {type_name(item)}")
            sub = Row(row.label, row.line, item)
            try:
                style = sub.ident("style")
            except DataError as e:
                raise row.error(f"{path}.{i}.{e.field}", e.message) from None
            key = "response" if "response" in item else "text"
            items.append((style, item.get(key, MISSING), f"{path}.{i}.{key}"))
    else:
        raise row.error(path, f"expected an object keyed by style (or a list), got {type_name(value)}")
    out: dict[str, str | DataError] = {}
    for raw_style, text, where in items:
        style = raw_style.strip()
        if not style:
            raise row.error(where, "empty style name")
        if style in out:
            raise row.error(where, f"style {style!r} given twice")
        if text is MISSING or text is None:
            out[style] = row.error(where, "missing")
            continue
        try:
            out[style] = check_text(row, where, text, allow_empty=True)
        except DataError as e:
            out[style] = e
    return out


def style_user(style: str) -> str:
    """The opaque user id of a style (the style name is the answer key)."""
    return opaque_user_id(style, "style")


def _style_pair(
    row: Row, query: Prompt, texts: Mapping[str, str], style: str, other: str, split: Split
) -> PreferencePair:
    uid, oid = style_user(style), style_user(other)
    meta = {"source": row.where, "rejected_user": oid}
    pid = f"{Path(row.label).name}:{row.line}:{uid}>{oid}"
    return PreferencePair(pid, uid, query, texts[style], texts[other], split, meta)


def load_domain_styles(
    source: Source,
    *,
    query_field: str = "query",
    responses_field: str = "responses",
    name: str | None = None,
    unseen_styles: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    train_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    on_error: OnError = "raise",
    max_chars: int | None = DEFAULT_MAX_CHARS,
) -> Benchmark:
    """Domain-style rows: each style is a user preferring its own style over every other style.

    ``train_fraction`` sends a seeded share of the queries (with all their pairs) to train; default all test.
    Pairs are built, cut to ``max_chars``, checked and deduplicated as mirrored units (style A's "a over b" with
    style B's "b over a"), kept or dropped whole, so every split stays balanced: any user-agnostic scorer gets
    exactly 0.5 on it with ties counted ½. Skips count pairs: an empty, invalid or duplicate response drops only
    the pairs it is in; a row whose styles cannot be read counts as one row (``unreadable:<field>``).
    """
    if not is_number(train_fraction) or not 0.0 <= train_fraction < 1.0:
        raise ConfigError(f"train_fraction must be a number in [0, 1), got {train_fraction!r}")
    LoadOptions(unseen_fraction=unseen_fraction, seed=seed, fmt=fmt, on_error=on_error, max_chars=max_chars)
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    rows: list[tuple[Row, Prompt, dict[str, str]]] = []
    rows_read = rows_with_errors = 0
    for label, line, data in iter_records(source, fmt=fmt, split=split, config=config):
        rows_read += 1
        if isinstance(data, DataError):
            rows_with_errors += 1
            sink(data, unit="row", prefix="unreadable")
            continue
        row = Row(label, line, data)
        try:
            responses = _responses(row, responses_field)
        except DataError as e:
            rows_with_errors += 1
            sink(e, unit="row", prefix="unreadable")
            continue
        k = len(responses)
        if k < 2:
            skipped.add("fewer_than_two_styles", row.where)
            continue
        try:
            query = parse_prompt(row, query_field, row.require(query_field))
        except DataError as e:
            rows_with_errors += 1
            sink(e, n=k * (k - 1))
            continue
        bad = [e for e in responses.values() if isinstance(e, DataError)]
        rows_with_errors += bool(bad)
        for j, err in enumerate(bad):
            sink(err, n=2 * (k - 1 - j))  # its pairs, less those with an earlier bad style (counted there)
        rows.append((row, query, {s: t for s, t in responses.items() if isinstance(t, str)}))

    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_train = int(train_fraction * len(rows))
    train_rows = set(order[:n_train])
    truncations = Truncations(max_chars)
    units: list[list[PreferencePair]] = []
    position: dict[str, int] = {}
    for n, (row, query, texts) in enumerate(rows):
        row_split: Split = "train" if n in train_rows else "test"
        styles = list(texts)
        made = {
            (style, other): _style_pair(row, query, texts, style, other, row_split)
            for style in styles  # style-major ids and order, as the row lists them
            for other in styles
            if other != style
        }
        position.update((p.pair_id, len(position) + i) for i, p in enumerate(made.values()))
        for i, style in enumerate(styles):
            for other in styles[i + 1 :]:
                units.append(truncations.apply([made[style, other], made[other, style]]))
    pairs = sorted(dedup_units(units, skipped), key=lambda p: position[p.pair_id])
    style_of = {style_user(s): s for _, _, texts in rows for s in texts}
    kept = sorted({p.user_id for p in pairs})
    if unseen_styles is not None:
        wanted = {str(s).strip() for s in unseen_styles}
        unknown = sorted(wanted - {style_of[u] for u in kept})
        if unknown:
            raise DataError(source_label(source), None, "unseen_styles", f"unknown style(s) {unknown[:5]}")
        unseen = {style_user(s) for s in wanted}
        seen_policy = "unseen_styles list"
    else:
        unseen = assign_unseen(kept, unseen_fraction, seed)
        seen_policy = f"seeded fraction {unseen_fraction} (seed {seed})" if unseen_fraction else "all styles seen"
    users = {
        u: User(
            u,
            seen=u not in unseen,
            answer_key={"style": style_of[u], "rubric_text": f"Prefers responses in the style '{style_of[u]}'."},
        )
        for u in kept
    }
    users, demoted = demote_untrained(users, pairs)
    if demoted:
        seen_policy += f"; {len(demoted)} seen user(s) without train pairs re-marked unseen"
    notes = [demotion_note(demoted)] if demoted else []
    if truncations.note():
        notes.append(str(truncations.note()))
    meta = {
        "source": source_label(source),
        "rows_read": rows_read,
        "rows_with_errors": rows_with_errors,
        "query_field": query_field,
        "responses_field": responses_field,
        "split_policy": (f"seeded {train_fraction} of queries train (seed {seed})" if train_fraction else "all test"),
        "split_fix": "set train_fraction (e.g. 0.5) to send a seeded share of the queries to train",
        "seen_policy": seen_policy,
        "sanity_check": "mirrored pairs are kept or dropped together, so any user-agnostic scorer scores exactly "
        "0.5 on the pairs of each split, ties counted ½",
        "truncated": truncations.to_dict(),
        "seen_users_without_train": {"count": len(demoted), "users": demoted[:50]},
        "notes": notes,
        "user_context": describe_user_context(
            "pairs_only",
            users,
            included=["own train pairs"],
            withheld=["style name"],
            note="the style name is the answer key: user ids are opaque hashes of it (style-…)",
        ),
    }
    # every pair is kept with its mirror (dedup_units), so all of them are personalization-only
    subsets = {"personalization_only": frozenset(p.pair_id for p in pairs)} if pairs else {}
    return Benchmark(
        name or "domain_styles", pairs, users, skipped=skipped, meta=meta, weighting="pair", subsets=subsets
    )
