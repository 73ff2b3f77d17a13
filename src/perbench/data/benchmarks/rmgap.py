"""RMGAP (2026): instances with four stylistically distinct responses, in prompt groups of paraphrases.

The release describes 1,097 instances, each with four responses in distinct styles, and prompt groups of three
paraphrases of one request; its metrics are Pair (pairwise accuracy), BoN (the preferred response above all three
others) and Consistency across paraphrases. Row fields read (our reading of that description; a file that names
them otherwise loads with ``mapping=``, e.g. ``{"group_id": "group"}``): ``id``, ``group_id`` (the paraphrase
group), ``prompt``, ``responses`` (a list of strings or of ``{style, text}`` objects, at least two), ``chosen``
(the preferred response: its index or its style name) and optionally ``user`` (whose preference it is; default
one user ``anyone``) and ``split``.

Pairs: the chosen response against each other one, sharing ``meta["list_id"]`` (the row id: best-of-k) and
``meta["paraphrase_of"]`` (the group: paraphrase consistency). The styles are the answer key of nothing: they are
kept in ``pair.meta`` (``chosen_style``, ``rejected_style``) for reports only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perbench.data.benchmarks.common import finish, rows_of
from perbench.data.records import Benchmark, PreferencePair, SkipReport, Split, User
from perbench.data.rows import DataError, ErrorSink, OnError, Row, check_text, parse_split, type_name
from perbench.data.user_context import describe_user_context

RMGAP_FIELDS = ("id", "group_id", "prompt", "responses", "chosen", "user", "split")


def _responses(row: Row, path: str) -> list[tuple[str, str]]:
    """-> [(style, text)]; a plain string's style is its position."""
    values = row.seq(path)
    if len(values) < 2:
        raise row.error(path, f"expected at least two responses, got {len(values)}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            out.append((str(i), check_text(row, f"{path}.{i}", v, allow_empty=True)))
        elif isinstance(v, Mapping):
            if v.get("text") is None:
                raise row.error(f"{path}.{i}.text", "missing")
            style = v.get("style", i)
            out.append((str(style), check_text(row, f"{path}.{i}.text", v["text"], allow_empty=True)))
        else:
            raise row.error(f"{path}.{i}", f"expected a string or a {{style, text}} object, got {type_name(v)}")
    styles = [s for s, _ in out]
    if len(set(styles)) != len(styles):
        raise row.error(path, f"two responses share a style: {styles}")
    return out


def _chosen_index(row: Row, field: str, responses: list[tuple[str, str]]) -> int:
    value = row.require(field)
    if isinstance(value, bool):
        raise row.error(field, f"expected an index or a style name, got {type_name(value)}")
    if isinstance(value, int):
        if not 0 <= value < len(responses):
            raise row.error(field, f"index {value} out of range for {len(responses)} responses")
        return value
    if isinstance(value, str):
        styles = [s for s, _ in responses]
        if value in styles:
            return styles.index(value)
        raise row.error(field, f"no response has style {value!r} (styles: {styles})")
    raise row.error(field, f"expected an index or a style name, got {type_name(value)}")


def load_rmgap(
    source: str | Path,
    *,
    mapping: Mapping[str, str] | None = None,
    split: str | None = None,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load RMGAP rows from a JSONL/JSON/Parquet file, a ``save_to_disk`` folder or the hub. ``mapping``: our field
    name -> the file's (see the module docstring)."""
    names = {f: f for f in RMGAP_FIELDS}
    for ours, theirs in (mapping or {}).items():
        if ours not in names:
            raise ValueError(f"mapping: unknown RMGAP field {ours!r}; known: {list(RMGAP_FIELDS)}")
        names[ours] = theirs
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    pairs: list[PreferencePair] = []
    first_at: dict[str, str] = {}
    rows_read = 0
    for row in rows_of(source, fmt=fmt, split=split):
        rows_read += 1
        try:
            row_id = row.ident(names["id"])
            if row_id in first_at:
                raise row.error(names["id"], f"duplicate id {row_id!r} (first at {first_at[row_id]})")
            group = row.ident(names["group_id"])
            prompt = row.text(names["prompt"])
            responses = _responses(row, names["responses"])
            best = _chosen_index(row, names["chosen"], responses)
            user = row.ident(names["user"]) if row.has(names["user"]) else "anyone"
            pair_split: Split = (
                parse_split(row, names["split"], row.get(names["split"])) if row.has(names["split"]) else "test"
            )
        except DataError as e:
            sink(e)
            continue
        first_at[row_id] = row.where
        style_w, chosen = responses[best]
        for j, (style_l, rejected) in enumerate(responses):
            if j == best:
                continue
            meta: dict[str, Any] = {
                "source": row.where,
                "list_id": row_id,
                "paraphrase_of": f"group:{group}",
                "chosen_style": style_w,
                "rejected_style": style_l,
            }
            pairs.append(PreferencePair(f"rmgap:{row_id}:{j}", user, prompt, chosen, rejected, pair_split, meta))
    ids = sorted({p.user_id for p in pairs})
    has_train = any(p.split == "train" for p in pairs)
    users = {u: User(u, seen=has_train) for u in ids}
    meta = {
        "source": str(source),
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "fields": names,
        "split_policy": "the row's split field, else test",
        "seen_policy": "seen when the file has train rows, else evaluation-only (unseen, no shots)",
        "evaluation_only": not has_train,
        "listwise": "one list per row (meta list_id), paraphrase groups (meta paraphrase_of)",
        "user_context": describe_user_context("pairs_only", users, included=["the user's own train pairs"]),
    }
    return finish(name or "rmgap", pairs, users, skipped, meta)
