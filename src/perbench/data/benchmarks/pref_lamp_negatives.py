"""Pref-LaMP's hard negatives: for each (user, gold title), the most similar admissible title of the candidate pool
under a sentence encoder (cosine of the embeddings; ties -> the first candidate), never the gold itself (after
lower-casing and collapsing spaces), drawn from other users' titles, the user's own, or both. The embeddings of a
pool can be cached on disk by the encoder's identity. The encoder is given (a named one is loaded by
:mod:`perbench.builders.pref_lamp`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class TextEncoder(Protocol):
    """What mining needs of a sentence encoder: unit-norm embeddings of texts, one row each. An encoder that also
    has a ``cache_key`` (its identity, a string) gets its embeddings cached on disk
    (:class:`perbench.builders.pref_lamp.NamedEncoder` has one)."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


def norm_title(text: str) -> str:
    return " ".join(text.lower().split())


class CandidatePool:
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
    pool: CandidatePool,
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
            gold_n = norm_title(gold)
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
    pool: CandidatePool,
    user: str,
    gold_n: str,
    negative_pool: str,
) -> tuple[int, str] | None:
    for idx in ranked:
        i = int(idx)
        if norm_title(pool.texts[i]) == gold_n:
            continue
        source = _source_of(pool.owners[i], user, negative_pool)
        if source is not None:
            return i, source
    return None


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
