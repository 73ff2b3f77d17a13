"""Personalized generation beyond LaMP-5: LaMP-4 (news headlines) and LongLaMP (long-form writing) as pairs.

The 2026 test-time personalization work reports Best-of-N with personalized reward models on LaMP-4/5 and
LongLaMP; perbench builds Pref-LaMP pairs from LaMP-5 only (``pref_lamp``). This loader gives the other tasks:

* **LaMP-4** (``task="LaMP_4"``): a folder with ``{train,dev}_questions.json`` (``{"id", "input": "Generate a
  headline for the following article: <article>", "profile": [{"id", "text", "title"}]}``) and
  ``{train,dev}_outputs.json`` (``{"task", "golds": [{"id", "output"}]}``), directly or in ``train/`` and ``dev/``.
  Each question is its own user (user-based LaMP, as in Pref-LaMP). LaMP's protocol gives every user their
  profile (past articles with their headlines): the first ``profile_shots`` profile items become the user's train
  pairs (article -> its headline vs the most similar train gold), so a dev user is an unseen user whose few-shot
  set is their own profile, and a train user is seen. LaMP-4's public labelled evaluation set is ``dev`` (the test
  labels are hidden): it is perbench's test split. A question id twice, or in both train and dev, is a located
  error; an input without LaMP-4's instruction prefix is counted (``meta["inputs_without_prefix"]``).
* **LongLaMP** (``task="LongLaMP"``; hub ``LongLaMP/LongLaMP``, e.g. config ``abstract_generation_user``): rows with
  ``input``, ``output``, ``profile`` and a user field (``user_id``, ``name``, ``reviewerId`` or ``author``, the first
  present). ``train`` gives train pairs; ``split`` (``test``, the default, or ``val``) names the one published
  evaluation split that becomes perbench's test split -- the other is counted (``split_not_evaluated``), never
  merged, so numbers are on one published split.

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
_LONG_SPLITS: dict[str, str] = {"train": "train", "val": "val", "validation": "val", "dev": "val", "test": "test"}
Item = tuple[str, str, str, str, Split, list[ProfileItem], str]


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


def _lamp4(folder: Path, sink: ErrorSink, unprefixed: list[str]) -> list[Item]:
    out: list[Item] = []
    first_at: dict[str, str] = {}
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
                if qid in first_at:
                    raise row.error("id", f"question id {qid!r} again (first at {first_at[qid]})")
                text = row.text("input")
                if text.startswith(LAMP4_PREFIX):
                    text = text[len(LAMP4_PREFIX) :]
                else:
                    unprefixed.append(row.where)
                if qid not in golds:
                    raise row.error("id", f"no gold output with id {qid!r} in {lamp_split}_outputs.json")
                first_at[qid] = row.where
                out.append((qid, qid, text, golds[qid][0], split, _profile(row), row.where))
            except DataError as e:
                sink(e)
    return out


def _longlamp(
    source: str | Path, fmt: str | None, config: str | None, evaluate: str, sink: ErrorSink, skipped: SkipReport
) -> list[Item]:
    out: list[Item] = []
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
            published = _LONG_SPLITS[raw]
            if published not in ("train", evaluate):
                skipped.add("split_not_evaluated", row.where)
                continue
            split: Split = "train" if published == "train" else "test"
            out.append((row_ref(row), user, row.text("input"), row.text("output"), split, _profile(row), row.where))
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


def _profile_shots(rows: list[Item], n: int) -> list[Item]:
    """LaMP-4's profile items (article ``text`` -> its ``title``) as each user's train pairs, the first ``n``."""
    out: list[Item] = []
    for qid, user, _, _, _, profile, where in rows:
        used = 0
        for item in profile:
            title, text = item.meta.get("title"), item.meta.get("text")
            if used >= n or not isinstance(title, str) or not isinstance(text, str) or not title or not text:
                continue
            out.append((f"{qid}:profile:{item.item_id}", user, text, title, "train", [], f"{where} profile"))
            used += 1
    return out


def load_lamp_gen(
    source: str | Path,
    *,
    task: Literal["LaMP_4", "LongLaMP"] = "LaMP_4",
    config: str | None = None,
    split: Literal["test", "val"] = "test",
    profile_shots: int = 16,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load LaMP-4 (a folder) or LongLaMP (hub id, saved dataset or file) as pairs (see the module docstring).
    ``split``: LongLaMP's evaluated split; ``profile_shots``: LaMP-4 profile items per user as train pairs."""
    if task not in ("LaMP_4", "LongLaMP"):
        raise ValueError(f"task must be 'LaMP_4' or 'LongLaMP', got {task!r}")
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val' (the published evaluation splits), got {split!r}")
    if task == "LaMP_4" and split != "test":
        raise ValueError("LaMP-4's labelled evaluation split is dev (perbench's test); split applies to LongLaMP")
    if isinstance(profile_shots, bool) or not isinstance(profile_shots, int) or profile_shots < 0:
        raise ValueError(f"profile_shots must be an integer >= 0, got {profile_shots!r}")
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    unprefixed: list[str] = []
    if task == "LaMP_4":
        rows = _lamp4(Path(source), sink, unprefixed)
        rows += _profile_shots(rows, profile_shots)
    else:
        rows = _longlamp(source, fmt, config, split, sink, skipped)
    pool = sorted({gold for _, _, _, gold, s, _, where in rows if s == "train" and not where.endswith("profile")})
    negatives = _negatives([r[3] for r in rows], pool)
    pairs: list[PreferencePair] = []
    refs: list[Reference] = []
    profiles: dict[str, list[ProfileItem]] = {}
    asked: dict[str, Split] = {}
    for (qid, user, prompt, gold, pair_split, profile, where), neg in zip(rows, negatives, strict=True):
        profiles.setdefault(user, [])
        if neg is None:
            skipped.add("no_negative", where)
            continue
        meta: dict[str, Any] = {"source": where, "negative": "most BM25-similar train gold output"}
        pairs.append(PreferencePair(f"{task}:{qid}", user, prompt, gold, neg, pair_split, meta))
        if not where.endswith("profile"):
            refs.append(Reference(user, prompt, gold, pair_split))
            asked[user] = "train" if pair_split == "train" or asked.get(user) == "train" else "test"
        profiles[user].extend(p for p in profile if p not in profiles[user])
    if task == "LaMP_4":  # a user asked a train question is seen; a dev user adapts from their profile pairs
        seen = {u for u, s in asked.items() if s == "train"}
    else:
        seen = {p.user_id for p in pairs if p.split == "train"}
    users = {u: User(u, seen=u in seen, profile=tuple(items)) for u, items in profiles.items()}
    meta = {
        "source": str(source),
        "task": task,
        "config": config,
        "rows_read": len(rows) + sink.count,
        "rows_with_errors": sink.count,
        "negatives": "the most BM25-similar train gold output that is not the gold (bm25s, English stopwords)",
        "split_policy": "LaMP-4: train -> train, dev -> test (profile items -> the user's train pairs)"
        if task == "LaMP_4"
        else f"LongLaMP: train -> train, {split} -> test, the other published split not used",
        "seen_policy": "LaMP-4: train-question users seen, dev users unseen with their profile as shots"
        if task == "LaMP_4"
        else "a user with train pairs is seen; the others are evaluated unseen",
        "profile_shots": profile_shots if task == "LaMP_4" else None,
        "inputs_without_prefix": {"count": len(unprefixed), "first": unprefixed[:5]},
        "user_context": describe_user_context("profile", users, included=["profile items"]),
    }
    return finish(name or task.lower(), pairs, users, skipped, meta, references=refs)
