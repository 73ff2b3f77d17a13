"""Personalized generation beyond LaMP-5: LaMP-4 (news headlines) and LongLaMP (long-form writing) as pairs.

The 2026 test-time personalization work reports Best-of-N with personalized reward models on LaMP-4/5 and
LongLaMP; perbench builds Pref-LaMP pairs from LaMP-5 only (``pref_lamp``). This loader gives the other tasks:

* **LaMP-4** (``task="LaMP_4"``): a folder with ``{train,dev}_questions.json`` (``{"id", "input": "Generate a
  headline for the following article: <article>", "profile": [{"id", "text", "title"}]}``) and
  ``{train,dev}_outputs.json`` (``{"task", "golds": [{"id", "output"}]}``), directly or in ``train/`` and ``dev/``.
  Each question is its own user (user-based LaMP, as in Pref-LaMP).
* **LongLaMP** (``task="LongLaMP"``; hub ``LongLaMP/LongLaMP``, e.g. config ``abstract_generation_user``): rows with
  ``input``, ``output``, ``profile`` and a user field (``user_id``, ``name``, ``reviewerId`` or ``author``, the first
  present). Hub / saved splits ``train`` give train pairs, ``val``/``test`` test pairs.

Pairs (our choice; the papers score generations, not pairs): prompt = the input, chosen = the user's gold output (also
a :class:`Reference` for ROUGE), rejected = the train gold output most similar to it by BM25 (``bm25s``) that is not
the gold itself (text-normalised), so no test answer is ever a rejected response. Profile items are the user's
context.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from perbench.data.benchmarks.common import finish, row_ref, rows_of
from perbench.data.benchmarks.lamp5 import lamp5_file, read_golds
from perbench.data.reading import parse_json, read_text
from perbench.data.records import (
    Benchmark,
    PreferencePair,
    ProfileItem,
    Reference,
    SkipReport,
    Split,
    User,
    normalize_text,
)
from perbench.data.rows import DataError, ErrorSink, OnError, Row, type_name
from perbench.data.user_context import describe_user_context

LAMP4_PREFIX = "Generate a headline for the following article: "
LONGLAMP_HUB_ID = "LongLaMP/LongLaMP"
USER_FIELDS = ("user_id", "name", "reviewerId", "author")
_LONG_SPLITS: dict[str, Split] = {"train": "train", "val": "test", "validation": "test", "test": "test"}


def _profile(row: Row) -> list[ProfileItem]:
    items = []
    for i, item in enumerate(row.seq("profile") if row.has("profile") else []):
        if not isinstance(item, Mapping):
            raise row.error(f"profile.{i}", f"expected an object, got {type_name(item)}")
        parts = [str(item[k]) for k in ("title", "text", "abstract", "reviewText", "summary") if item.get(k)]
        if not parts:
            raise row.error(f"profile.{i}", "no text (title, text, abstract, reviewText or summary)")
        items.append(ProfileItem(str(item.get("id", i)), "\n".join(parts), {k: v for k, v in item.items()}))
    return items


def _lamp4(folder: Path, sink: ErrorSink) -> list[tuple[str, str, str, str, Split, list[ProfileItem], str]]:
    out: list[tuple[str, str, str, str, Split, list[ProfileItem], str]] = []
    splits: tuple[tuple[str, Split], ...] = (("train", "train"), ("dev", "test"))
    for lamp_split, split in splits:
        golds = read_golds(lamp5_file(folder, lamp_split, "outputs"))
        path = lamp5_file(folder, lamp_split, "questions")
        obj = parse_json(str(path), None, read_text(path, "JSON text"))
        if not isinstance(obj, list):
            raise DataError(str(path), None, None, f"expected a list of questions, got {type_name(obj)}")
        for i, data in enumerate(obj, 1):
            if not isinstance(data, Mapping):
                sink(DataError(str(path), i, None, f"expected an object, got {type_name(data)}"))
                continue
            row = Row(str(path), i, data)
            try:
                qid = row.ident("id")
                text = row.text("input")
                text = text[len(LAMP4_PREFIX) :] if text.startswith(LAMP4_PREFIX) else text
                if qid not in golds:
                    raise row.error("id", f"no gold output with id {qid!r} in {lamp_split}_outputs.json")
                out.append((qid, qid, text, golds[qid][0], split, _profile(row), row.where))
            except DataError as e:
                sink(e)
    return out


def _longlamp(
    source: str | Path, fmt: str | None, config: str | None, sink: ErrorSink
) -> list[tuple[str, str, str, str, Split, list[ProfileItem], str]]:
    out: list[tuple[str, str, str, str, Split, list[ProfileItem], str]] = []
    for row in rows_of(source, fmt=fmt, split=None, config=config):
        try:
            field = next((f for f in USER_FIELDS if row.has(f)), None)
            if field is None:
                raise row.error("user_id", f"missing (looked for {', '.join(USER_FIELDS)})")
            user = row.ident(field)
            name = row.label.rpartition("[")[2].rstrip("]") if row.label.endswith("]") else None
            raw = (row.opt_text("split") or name or "test").strip().lower()
            if raw not in _LONG_SPLITS:
                raise row.error("split", f"unknown split {raw!r}; expected train, val or test")
            out.append(
                (row_ref(row), user, row.text("input"), row.text("output"), _LONG_SPLITS[raw], _profile(row), row.where)
            )
        except DataError as e:
            sink(e)
    return out


def _negatives(golds: list[str], pool: list[str]) -> list[str | None]:
    """Per gold, the most BM25-similar pool text that is not the gold (None when the pool has none)."""
    from perbench.data.benchmarks.prb import bm25_rank

    out: list[str | None] = []
    for gold in golds:
        key = normalize_text(gold).lower()
        order = bm25_rank(gold, pool)
        out.append(next((pool[i] for i in order if normalize_text(pool[i]).lower() != key), None))
    return out


def load_lamp_gen(
    source: str | Path,
    *,
    task: Literal["LaMP_4", "LongLaMP"] = "LaMP_4",
    config: str | None = None,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load LaMP-4 (a folder) or LongLaMP (hub id, saved dataset or file) as pairs (see the module docstring)."""
    if task not in ("LaMP_4", "LongLaMP"):
        raise ValueError(f"task must be 'LaMP_4' or 'LongLaMP', got {task!r}")
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    rows = _lamp4(Path(source), sink) if task == "LaMP_4" else _longlamp(source, fmt, config, sink)
    pool = sorted({gold for _, _, _, gold, split, _, _ in rows if split == "train"})
    negatives = _negatives([r[3] for r in rows], pool)
    pairs: list[PreferencePair] = []
    refs: list[Reference] = []
    profiles: dict[str, list[ProfileItem]] = {}
    for (qid, user, prompt, gold, split, profile, where), neg in zip(rows, negatives, strict=True):
        if neg is None:
            skipped.add("no_negative", where)
            continue
        meta: dict[str, Any] = {"source": where, "negative": "most BM25-similar train gold output"}
        pairs.append(PreferencePair(f"{task}:{qid}", user, prompt, gold, neg, split, meta))
        refs.append(Reference(user, prompt, gold, split))
        profiles.setdefault(user, []).extend(p for p in profile if p not in profiles.get(user, []))
    has_train = {p.user_id for p in pairs if p.split == "train"}
    users = {u: User(u, seen=u in has_train, profile=tuple(items)) for u, items in profiles.items()}
    meta = {
        "source": str(source),
        "task": task,
        "config": config,
        "rows_read": len(rows) + sink.count,
        "rows_with_errors": sink.count,
        "negatives": "the most BM25-similar train gold output that is not the gold (bm25s, English stopwords)",
        "split_policy": "train -> train; dev / val / test -> test",
        "seen_policy": "a user with train pairs is seen; the others are evaluated unseen",
        "user_context": describe_user_context("profile", users, included=["profile items"]),
    }
    return finish(name or task.lower(), pairs, users, skipped, meta, references=refs)
