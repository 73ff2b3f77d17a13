"""Persona-style rows (P-SOUPS-like) and domain-style rows.

Persona-style: ``prompt``, ``chosen``, ``rejected``, a ``persona`` sentence (the user id and the answer key:
it defines the label), a ``profile`` string (user context) and ``history`` pairs (``[{prompt, chosen,
rejected}, ...]``). Real files repeat the same
pair many times with different profile/history text, so pairs are deduplicated on
(user, prompt, chosen, rejected) with counts (pair weighting); ``dedup=False`` keeps them (row weighting).
Row pairs keep the file's split (``test`` when there is none); history pairs become the user's ``train``
pairs, except a history pair identical to one of the user's row pairs, which is dropped and counted.

Domain-style: one query with responses keyed by style (``{"query": ..., "responses": {style: text}}``, or a
list of ``{style, response}``). Each style is a user: chosen = its own style's response, rejected = each other
style's. Every ordered pair of responses appears once per direction across two users, so any scorer that
ignores the user scores exactly 0.5 (strict ties count as wrong) -- a check of the accounting. The style name
decides the label: it is the answer key (``User.answer_key``), and methods see the style's pairs only.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perbench.data.loaders import (
    DataError,
    ErrorSink,
    FieldMap,
    OnError,
    Row,
    Source,
    assign_unseen,
    check_text,
    load_with_stats,
    parse_prompt,
    parse_response,
    read_rows,
    source_label,
    type_name,
)
from perbench.data.records import Benchmark, PreferencePair, SkipReport, Split, User, dedup_pairs
from perbench.data.user_context import describe_user_context

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
) -> Benchmark:
    """Persona-style rows: ``persona`` is the user id and the answer key unless ``mapping`` overrides; profile
    items that quote the persona sentence are dropped (counted: ``profile_item_contains_answer_key``)."""
    merged = dict(FieldMap.parse(mapping).paths)
    merged.setdefault("user_id", PERSONA_DEFAULTS["user_id"])
    merged.setdefault("answer_key", merged["user_id"])  # the persona sentence defines the label
    bench, _ = load_with_stats(
        source,
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
        row_hook=_history_hook(history_field),
    )
    bench.meta["history_policy"] = (
        f"'{history_field}' pairs -> the user's train split; copies of the user's row pairs dropped (counted)"
    )
    bench.meta["user_context"] = describe_user_context(
        "profile",
        bench.users,
        included=[f"profile (from '{merged.get('profile', 'profile')}')", f"own train pairs ('{history_field}')"],
        withheld=[f"the persona sentence (from '{merged['answer_key']}')"],
        note="the user id is the persona sentence: ids are labels for reports and never reach a prompt",
    )
    return bench


def _responses(row: Row, path: str) -> dict[str, str]:
    value = row.require(path)
    out: dict[str, str] = {}
    if isinstance(value, Mapping):  # a null value = the style is absent (Parquet/HF structs fill gaps)
        items = [(str(k), v, f"{path}.{k}") for k, v in value.items() if v is not None]
    elif isinstance(value, list | tuple):
        items = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise row.error(f"{path}.{i}", f"expected a {{style, response}} object, got {type_name(item)}")
            sub = Row(row.label, row.line, item)
            try:
                style = sub.ident("style")
            except DataError as e:
                raise row.error(f"{path}.{i}.{e.field}", e.message) from None
            key = "response" if "response" in item else "text"
            if item.get(key) is None:
                raise row.error(f"{path}.{i}.response", "missing")
            items.append((style, item[key], f"{path}.{i}.{key}"))
    else:
        raise row.error(path, f"expected an object keyed by style (or a list), got {type_name(value)}")
    for style, text, where in items:
        if style in out:
            raise row.error(where, f"style {style!r} given twice")
        if not style.strip():
            raise row.error(where, "empty style name")
        out[style] = check_text(row, where, text)
    return out


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
) -> Benchmark:
    """Domain-style rows: each style is a user preferring its own style over every other style.

    ``train_fraction`` sends a seeded share of the queries (with all their pairs) to train; default all test.
    """
    if not 0.0 <= train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in [0, 1), got {train_fraction}")
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    rows: list[tuple[Row, Any, dict[str, str]]] = []
    rows_read = 0
    for label, line, data in read_rows(source, fmt=fmt, split=split, config=config):
        rows_read += 1
        row = Row(label, line, data)
        try:
            query = parse_prompt(row, query_field, row.require(query_field))
            responses = _responses(row, responses_field)
        except DataError as e:
            sink(e)
            continue
        if len(responses) < 2:
            skipped.add("fewer_than_two_styles", row.where)
            continue
        rows.append((row, query, responses))

    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_train = int(train_fraction * len(rows))
    train_rows = set(order[:n_train])
    pairs: list[PreferencePair] = []
    for n, (row, query, responses) in enumerate(rows):
        row_split: Split = "train" if n in train_rows else "test"
        for style, mine in responses.items():
            for other, theirs in responses.items():
                if other == style:
                    continue
                pairs.append(
                    PreferencePair(
                        f"{Path(row.label).name}:{row.line}:{style}>{other}",
                        style,
                        query,
                        mine,
                        theirs,
                        row_split,
                        {"source": row.where, "rejected_style": other},
                    )
                )
    pairs = dedup_pairs(pairs, skipped)
    styles = sorted({p.user_id for p in pairs})
    if unseen_styles is not None:
        unknown = sorted(set(unseen_styles) - set(styles))
        if unknown:
            raise DataError(source_label(source), None, "unseen_styles", f"unknown style(s) {unknown[:5]}")
        unseen = set(unseen_styles)
    else:
        unseen = assign_unseen(styles, unseen_fraction, seed)
    if unseen_styles is not None:
        seen_policy = "unseen_styles list"
    elif unseen_fraction:
        seen_policy = f"seeded fraction {unseen_fraction} (seed {seed})"
    else:
        seen_policy = "all styles seen"
    users = {
        s: User(
            s, seen=s not in unseen, answer_key={"style": s, "rubric_text": f"Prefers responses in the style '{s}'."}
        )
        for s in styles
    }
    meta = {
        "source": source_label(source),
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "query_field": query_field,
        "responses_field": responses_field,
        "split_policy": (f"seeded {train_fraction} of queries train (seed {seed})" if train_fraction else "all test"),
        "seen_policy": seen_policy,
        "sanity_check": "any user-agnostic scorer scores exactly 0.5 on these pairs (strict ties wrong)",
        "user_context": describe_user_context(
            "pairs_only",
            users,
            included=["own train pairs"],
            withheld=["style name"],
            note="the user id is the style name: ids are labels for reports and never reach a prompt",
        ),
    }
    return Benchmark(name or "domain_styles", pairs, users, skipped=skipped, meta=meta, weighting="pair")
