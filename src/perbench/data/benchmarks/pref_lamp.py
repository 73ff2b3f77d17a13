"""Pref-LaMP (Rezk et al., arXiv 2512.23067), built from LaMP-5 scholarly title generation.

Each LaMP-5 question becomes one pair: prompt = the paper's abstract (the instruction prefix stripped),
chosen = the user's real title (also kept as a :class:`Reference`), rejected = a *hard negative*: the title
most similar to the real one under the bundled sentence encoder, among titles that are not the real one.

Layouts: user-based ``LaMP_5/{train,dev}_{questions,outputs}.json`` (every question is a different user;
the question id is the user id) and time-based ``time/LaMP_5/`` (rows carry ``user_id``; a user has several
questions). ``train`` questions give train pairs, ``dev`` questions test pairs.

Choices the paper leaves open (see ``docs/benchmarks-data.md``):

* Candidate pool: every profile title plus the *train* gold titles. Dev gold titles never serve as a
  negative, so no test answer appears as a rejected response anywhere. Titles equal to the gold (after
  lower-casing and collapsing spaces) are excluded.
* ``negative_pool``: ``other_users`` (titles owned by other users), ``same_profile`` (the user's own
  titles), or ``both``; ``pair.meta["negative_source"]`` records where the negative came from.
* Similarity = cosine between title embeddings (all-MiniLM-L6-v2, mean pooled); ties -> first candidate.
* Seen/unseen users: a seeded ``unseen_fraction`` of users.
* ``profile_pairs=n`` optionally turns each user's first n profile items (with an abstract) into extra
  train pairs mined the same way, giving user-based users their own training signal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from perbench.data.policies import assign_unseen
from perbench.data.reading import parse_json, read_rows, read_text
from perbench.data.records import (
    Benchmark,
    PreferencePair,
    ProfileItem,
    Reference,
    SkipReport,
    Split,
    User,
    dedup_pairs,
)
from perbench.data.rows import DataError, ErrorSink, OnError, Row, type_name
from perbench.data.user_context import describe_user_context

LAMP5_PREFIX = "Generate a title for the following abstract of a paper: "
NegativePool = Literal["other_users", "same_profile", "both"]
NEGATIVE_POOLS: tuple[str, ...] = ("other_users", "same_profile", "both")
_SPLIT_OF: dict[str, Split] = {"train": "train", "dev": "test"}


class TextEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


def _has_questions(folder: Path) -> bool:
    return any(folder.glob("*_questions.json")) or any(folder.glob("*/*_questions.json"))


def lamp5_dir(path: str | Path, layout: Literal["auto", "user", "time"] = "auto") -> tuple[Path, str]:
    """The folder holding the LaMP-5 files and which layout it is.

    ``path`` may be that folder itself, or the LaMP root holding ``LaMP_5/`` and/or ``time/LaMP_5/``. The
    files may sit directly in the folder or in ``train/`` and ``dev/`` subfolders (the download layout).
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such folder")
    options = {"user": root / "LaMP_5", "time": root / "time" / "LaMP_5"}
    order = ["user", "time"] if layout == "auto" else [layout]
    for key in order:
        if options[key].is_dir() and _has_questions(options[key]):
            return options[key], key
    if _has_questions(root):
        return root, layout
    raise FileNotFoundError(
        f"{root}: no LaMP-5 files; expected *_questions.json in {', '.join(str(options[k]) for k in order)}"
    )


def lamp5_file(folder: Path, split: str, kind: str) -> Path:
    """``{split}_{kind}.json`` directly in ``folder`` or in ``folder/{split}/``."""
    name = f"{split}_{kind}.json"
    for candidate in (folder / name, folder / split / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{folder / name}: missing (also looked in {folder / split / name})")


def strip_prefix(text: str) -> tuple[str, bool]:
    """The abstract without LaMP-5's instruction prefix; the flag says whether the prefix was there."""
    if text.startswith(LAMP5_PREFIX):
        return text[len(LAMP5_PREFIX) :], True
    return text, False


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def read_golds(path: Path) -> dict[str, tuple[str, int]]:
    """``{id: (title, position)}`` from a ``*_outputs.json`` file (``{"task", "golds": [{id, output}]}``)."""
    label = str(path)
    obj = parse_json(label, None, read_text(path, "JSON text"))
    if not isinstance(obj, Mapping):
        raise DataError(label, None, None, f'expected {{"task", "golds": [...]}}, got {type_name(obj)}')
    if "golds" not in obj:
        raise DataError(label, None, "golds", "missing")
    if not isinstance(obj["golds"], list):
        raise DataError(label, None, "golds", f"expected a list, got {type_name(obj['golds'])}")
    golds: dict[str, tuple[str, int]] = {}
    for i, gold in enumerate(obj["golds"], 1):
        if not isinstance(gold, Mapping):
            raise DataError(label, i, None, f"expected an {{id, output}} object, got {type_name(gold)}")
        row = Row(label, i, gold)
        gid = row.ident("id")
        if gid in golds:
            raise row.error("id", f"duplicate gold id {gid!r} (first at {label}:{golds[gid][1]})")
        golds[gid] = (row.text("output"), i)
    return golds


@dataclass
class _Question:
    qid: str
    user: str
    abstract: str
    title: str
    split: Split
    profile: list[ProfileItem]
    where: str
    lamp_split: str


def _profile(row: Row) -> list[ProfileItem]:
    items = []
    for i, item in enumerate(row.seq("profile")):
        if not isinstance(item, Mapping):
            raise row.error(f"profile.{i}", f"expected an {{id, title, abstract}} object, got {type_name(item)}")
        sub = Row(row.label, row.line, item)
        try:
            title = sub.text("title")
            abstract = sub.text("abstract", allow_empty=True) if "abstract" in item else ""
            item_id = sub.ident("id") if "id" in item else str(i)
        except DataError as e:
            raise row.error(f"profile.{i}.{e.field}", e.message) from None
        text = f'"{title}" is a title for "{abstract}"'
        items.append(ProfileItem(item_id, text, {"title": title, "abstract": abstract}))
    return items


class _Pool:
    """Candidate titles with owners; answers 'most similar admissible title' queries."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.index: dict[str, int] = {}
        self.owners: list[set[str]] = []

    def add(self, text: str, owner: str) -> None:
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.texts)
            self.texts.append(text)
            self.owners.append(set())
        self.owners[i].add(owner)

    def owned_by(self, user: str) -> list[int]:
        return [i for i, owners in enumerate(self.owners) if user in owners]


def _source_of(owners: set[str], user: str, pool: str) -> str | None:
    mine = user in owners
    others = bool(owners - {user})
    if pool == "same_profile":
        return "same_profile" if mine else None
    if pool == "other_users":
        return "other_users" if others else None
    return "same_profile" if mine else "other_users"


def mine_negatives(
    queries: Sequence[tuple[str, str]],
    pool: _Pool,
    emb_pool: np.ndarray,
    emb_queries: np.ndarray,
    negative_pool: str,
    *,
    top_m: int = 64,
    block: int = 64,
) -> list[tuple[int, str, float] | None]:
    """For each (user, gold title): (pool index, source, cosine) of the most similar admissible title."""
    out: list[tuple[int, str, float] | None] = [None] * len(queries)
    own_cache: dict[str, list[int]] = {}
    for start in range(0, len(queries), block):
        q = emb_queries[start : start + block]
        scores = q @ emb_pool.T if negative_pool != "same_profile" else None
        for j in range(len(q)):
            qi = start + j
            user, gold = queries[qi]
            gold_n = _norm(gold)
            if negative_pool == "same_profile":
                own = own_cache.get(user)
                if own is None:
                    own = own_cache[user] = pool.owned_by(user)
                cands = np.asarray(own, dtype=np.int64)
                if not len(cands):
                    continue
                cand_scores = emb_pool[cands] @ emb_queries[qi]
                order = cands[np.lexsort((cands, -cand_scores))]
                ranked: Any = order
                row_scores = None
            else:
                assert scores is not None
                row_scores = scores[j]
                m = min(top_m, len(row_scores))
                top = np.argpartition(-row_scores, m - 1)[:m]
                ranked = top[np.lexsort((top, -row_scores[top]))]
            found = _first_admissible(ranked, pool, user, gold_n, negative_pool)
            if found is None and row_scores is not None and len(ranked) < len(row_scores):
                full = np.lexsort((np.arange(len(row_scores)), -row_scores))
                found = _first_admissible(full, pool, user, gold_n, negative_pool)
            if found is not None:
                idx, source = found
                sim = float(emb_pool[idx] @ emb_queries[qi])
                out[qi] = (idx, source, sim)
    return out


def _first_admissible(
    ranked: Any,
    pool: _Pool,
    user: str,
    gold_n: str,
    negative_pool: str,
) -> tuple[int, str] | None:
    for idx in ranked:
        i = int(idx)
        if _norm(pool.texts[i]) == gold_n:
            continue
        source = _source_of(pool.owners[i], user, negative_pool)
        if source is not None:
            return i, source
    return None


def _encoder(encoder: str | TextEncoder) -> TextEncoder:
    if isinstance(encoder, str):
        from perbench.models.encoder import load_encoder

        return load_encoder(encoder)
    return encoder


def encode_cached(enc: TextEncoder, texts: list[str], cache_key: str | None) -> np.ndarray:
    """Embeddings of ``texts``; with a ``cache_key`` (the encoder identity) they are cached on disk.

    A full LaMP-5 pool is over a million titles: hours on a CPU, so one run's embeddings are reused.
    """
    if cache_key is None:
        return np.asarray(enc.encode(texts), dtype=np.float32)
    import io

    from perbench.data.records import content_hash
    from perbench.io import atomic_write_bytes, cache_dir

    path = cache_dir() / "pref_lamp" / f"emb-{content_hash(cache_key, *texts)}.npy"
    if path.exists():
        cached = np.load(path)
        if cached.shape[0] == len(texts):
            return np.asarray(cached, dtype=np.float32)
    emb = np.asarray(enc.encode(texts), dtype=np.float32)
    buf = io.BytesIO()
    np.save(buf, emb)
    atomic_write_bytes(path, buf.getvalue())
    return emb


def load_pref_lamp(
    path: str | Path,
    *,
    layout: Literal["auto", "user", "time"] = "auto",
    splits: Sequence[str] = ("train", "dev"),
    negative_pool: NegativePool = "other_users",
    unseen_fraction: float = 0.2,
    seed: int = 0,
    encoder: str | TextEncoder = "minilm",
    profile_pairs: int = 0,
    max_profile: int | None = None,
    with_table1: bool = True,
    table1_bertscore: bool = True,
    cache_embeddings: bool = True,
    on_error: OnError = "raise",
    name: str | None = None,
) -> Benchmark:
    """Build Pref-LaMP from local LaMP-5 files (see the module docstring for the recipe).

    ``with_table1`` computes the mined-vs-random similarity table into ``Benchmark.meta["table1"]``.
    ``encoder`` is a spec for :func:`perbench.models.encoder.load_encoder` (embeddings are then cached
    under the perbench cache dir unless ``cache_embeddings=False``) or any object with ``encode``.
    """
    if negative_pool not in NEGATIVE_POOLS:
        raise ValueError(f"negative_pool must be one of {NEGATIVE_POOLS}, got {negative_pool!r}")
    unknown = sorted(set(splits) - set(_SPLIT_OF))
    if unknown:
        raise ValueError(f"unknown LaMP-5 split(s) {unknown}; use 'train' and/or 'dev'")
    folder, kind = lamp5_dir(path, layout)
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    questions: list[_Question] = []
    no_prefix = 0
    rows_read = 0
    for split_name in splits:
        qpath, opath = lamp5_file(folder, split_name, "questions"), lamp5_file(folder, split_name, "outputs")
        golds = read_golds(opath)
        used: set[str] = set()
        for label, line, data in read_rows(qpath, fmt="json"):
            rows_read += 1
            row = Row(label, line, data)
            try:
                qid = row.ident("id")
                abstract, had_prefix = strip_prefix(row.text("input"))
                if not abstract.strip():
                    raise row.error("input", "empty abstract after the instruction prefix")
                profile = _profile(row)
                has_user = kind == "time" or (kind == "auto" and "user_id" in data)
                user = row.ident("user_id") if has_user else qid
                if qid not in golds:
                    raise row.error("id", f"no gold title with this id in {opath.name}")
            except DataError as e:
                sink(e)
                continue
            no_prefix += not had_prefix
            used.add(qid)
            if max_profile is not None:
                profile = profile[:max_profile]
            questions.append(
                _Question(qid, user, abstract, golds[qid][0], _SPLIT_OF[split_name], profile, row.where, split_name)
            )
        for gid in sorted(set(golds) - used):
            skipped.add("gold_without_question", f"{opath}:{golds[gid][1]}")

    # users and their profiles (union over their questions, first occurrence wins)
    profiles: dict[str, list[ProfileItem]] = {}
    for q in questions:
        have = profiles.setdefault(q.user, [])
        ids = {p.item_id for p in have}
        have.extend(p for p in q.profile if p.item_id not in ids)

    # what to mine for: every question, plus optional profile-derived train pairs
    todo: list[tuple[str, str, str, Split, dict[str, Any]]] = []  # user, prompt, gold, split, meta
    for q in questions:
        todo.append(
            (
                q.user,
                q.abstract,
                q.title,
                q.split,
                {"source": q.where, "question_id": q.qid, "lamp_split": q.lamp_split},
            )
        )
    if profile_pairs > 0:
        for user, items in profiles.items():
            usable = [p for p in items if str(p.meta.get("abstract", "")).strip()]
            for p in usable[:profile_pairs]:
                todo.append(
                    (
                        user,
                        str(p.meta["abstract"]),
                        str(p.meta["title"]),
                        "train",
                        {"source": "profile", "profile_item": p.item_id},
                    )
                )

    pool = _Pool()
    for user, items in profiles.items():
        for p in items:
            pool.add(str(p.meta["title"]), user)
    for q in questions:
        if q.split == "train":
            pool.add(q.title, q.user)

    enc = _encoder(encoder)
    queries = [(t[0], t[2]) for t in todo]
    mined: list[tuple[int, str, float] | None] = [None] * len(todo)
    if pool.texts and queries:
        key = None
        if cache_embeddings and isinstance(encoder, str):
            from perbench.models.encoder import encoder_path

            key = f"encoder={encoder_path(encoder)}"
        extra = sorted({g for _, g in queries if g not in pool.index})
        emb_all = encode_cached(enc, pool.texts + extra, key)  # one pass: most golds are pool titles too
        emb_pool = emb_all[: len(pool.texts)]
        row_of = {t: len(pool.texts) + i for i, t in enumerate(extra)}
        emb_q = emb_all[[pool.index[g] if g in pool.index else row_of[g] for _, g in queries]]
        mined = mine_negatives(queries, pool, emb_pool, emb_q, negative_pool)

    pairs: list[PreferencePair] = []
    references: list[Reference] = []
    for n, ((user, prompt, gold, split, info), hit) in enumerate(zip(todo, mined, strict=True)):
        if info["source"] == "profile":
            pid = f"lamp5:{user}:profile:{info['profile_item']}"
        else:
            pid = f"lamp5:{info['lamp_split']}:{info['question_id']}"
            references.append(Reference(user, prompt, gold, split))
        if hit is None:
            skipped.add("no_negative", pid)
            continue
        idx, source, sim = hit
        pairs.append(
            PreferencePair(
                pid,
                user,
                prompt,
                gold,
                pool.texts[idx],
                split,
                {**info, "negative_source": source, "negative_similarity": sim, "order": n},
            )
        )
    pairs = dedup_pairs(pairs, skipped)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(profiles) - kept):
        skipped.add("user_without_pairs", uid)
    user_ids = sorted(kept)
    unseen = assign_unseen(user_ids, unseen_fraction, seed)
    users = {u: User(u, seen=u not in unseen, profile=tuple(profiles[u])) for u in user_ids}
    references = [r for r in references if r.user_id in kept]
    meta: dict[str, Any] = {
        "source": str(folder),
        "layout": kind,
        "splits": list(splits),
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "negative_pool": negative_pool,
        "candidate_pool": "profile titles of all users + train gold titles (dev golds never negatives)",
        "candidates": len(pool.texts),
        "encoder": getattr(enc, "name", type(enc).__name__),
        "profile_pairs": profile_pairs,
        "missing_instruction_prefix": no_prefix,
        "split_policy": "LaMP train questions -> train, dev questions -> test",
        "seen_policy": f"seeded fraction {unseen_fraction} unseen (seed {seed})",
        "negative_sources": {
            s: sum(p.meta["negative_source"] == s for p in pairs) for s in ("same_profile", "other_users")
        },
        "user_context": describe_user_context(
            "profile",
            users,
            included=["profile (the user's earlier papers: title and abstract)", "own train pairs"],
            note="real labels: there is no answer key; test gold titles are test references only",
        ),
    }
    bench = Benchmark(name or "pref_lamp", pairs, users, references, skipped=skipped, meta=meta)
    if with_table1 and len(bench.pairs) >= 2:
        bench.meta["table1"] = table1(bench, seed=seed, with_bertscore=table1_bertscore)
    return bench


def random_negatives(chosen: Sequence[str], seed: int = 0) -> list[str]:
    """A seeded permutation of the chosen titles with no title paired with itself."""
    n = len(chosen)
    if n < 2:
        raise ValueError("a random-permutation baseline needs at least 2 pairs")
    perm = np.random.default_rng(seed).permutation(n)
    out = []
    for i in range(n):
        j = int(perm[i]) if perm[i] != i else int(perm[(i + 1) % n])
        out.append(chosen[j])
    return out


def table1(
    bench: Benchmark,
    *,
    seed: int = 0,
    with_bertscore: bool = True,
    bertscore_model: str = "minilm",
) -> dict[str, Any]:
    """Similarity of rejected to chosen titles (x100): mined negatives vs a seeded random permutation.

    The paper's Table 1 reports ROUGE-1 24.6 vs 4.7, ROUGE-L 22.2 vs 4.4, BERTScore 60.0 vs 43.7; our
    BERTScore uses the bundled MiniLM without baseline rescaling, so only the gap is comparable.
    """
    from perbench.metrics.text import bertscore, bertscore_settings, rouge

    chosen = [p.chosen for p in bench.pairs]
    mined = [p.rejected for p in bench.pairs]
    rand = random_negatives(chosen, seed)
    result: dict[str, Any] = {"n": len(chosen), "seed": seed, "scale": "x100", "mined": {}, "random": {}}
    for key, negs in (("mined", mined), ("random", rand)):
        r = rouge(negs, chosen)
        result[key]["rouge1"] = 100.0 * float(r["rouge1"].mean())
        result[key]["rougeL"] = 100.0 * float(r["rougeL"].mean())
    if with_bertscore:  # one call: bert-score loads its model on every call
        f1 = bertscore(mined + rand, chosen + chosen, model=bertscore_model)
        result["mined"]["bertscore"] = 100.0 * float(f1[: len(chosen)].mean())
        result["random"]["bertscore"] = 100.0 * float(f1[len(chosen) :].mean())
        result["bertscore_settings"] = bertscore_settings(bertscore_model)
    result["paper"] = {
        "mined": {"rouge1": 24.6, "rougeL": 22.2, "bertscore": 60.0},
        "random": {"rouge1": 4.7, "rougeL": 4.4, "bertscore": 43.7},
    }
    return result


def format_table1(t: Mapping[str, Any]) -> str:
    """A small text table: metric x (mined, random), with the paper's numbers alongside."""
    names = {"rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "bertscore": "BERTScore"}
    paper = t.get("paper", {})
    lines = [
        f"Pref-LaMP Table 1 - similarity of rejected to chosen titles (x100), n = {t['n']}",
        f"{'metric':<10} {'mined':>7} {'random':>7}   {'paper mined':>11} {'paper random':>12}",
    ]
    for key, label in names.items():
        if key not in t["mined"]:
            continue
        pm = paper.get("mined", {}).get(key)
        pr = paper.get("random", {}).get(key)
        lines.append(
            f"{label:<10} {t['mined'][key]:>7.1f} {t['random'][key]:>7.1f}   "
            f"{'' if pm is None else f'{pm:.1f}':>11} {'' if pr is None else f'{pr:.1f}':>12}"
        )
    return "\n".join(lines)
