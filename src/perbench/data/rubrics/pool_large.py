"""The candidate pool of the large edition of the rubric benchmark (``load_rubrics(size="large")``).

Its base responses are the policy's: those of the default prompts from the shipped ``pool.jsonl``, those of the 48
extra test prompts from ``pool_more.jsonl`` (base rows only, written by ``perbench build rubrics --size large`` with
the seeds a build of all 112 prompts gives them). Its edits are derived from those bases as ``perbench build
rubrics`` derives the default pool's (:func:`~perbench.data.rubrics.build.assemble_pool`), covering all 96 users'
rubrics with :data:`LARGE_EDITS` edits per prompt (the default pool: 8 edits for 32 users). The derivation is
deterministic; it is kept in the shared cache (``derived.sqlite``) under the digest of both files and the code, so
only the first load of an installation spends its seconds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from perbench.data.rubrics.build import (
    POOL_PATH,
    STYLES,
    WriteResponses,
    assemble_pool,
    base_requests,
    base_responses,
)
from perbench.data.rubrics.prompts import MORE_PROMPTS, RUBRIC_PROMPTS
from perbench.data.rubrics.users_large import edition_users
from perbench.io import atomic_write_jsonl, read_jsonl

MORE_POOL_PATH = Path(__file__).with_name("pool_more.jsonl")
#: edits per prompt of the large pool: enough for a candidate meeting each of the 96 rubrics on ≥ 99 % of the
#: (user, prompt) pairs (16 edits: 98 %)
LARGE_EDITS = 24
#: the seed of the shipped pools' edits
POOL_SEED = 0


def _rows(path: Path) -> list[dict[str, Any]]:
    out = []
    for line_no, row in read_jsonl(path):
        if not isinstance(row, dict) or not all(isinstance(row.get(f), str) and row[f] for f in ("prompt_id", "text")):
            raise ValueError(f"{path}:{line_no}: expected an object with non-empty 'prompt_id' and 'text' strings")
        out.append(row)
    return out


def large_pool(pool: Path | None = None, more: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """prompt_id -> its candidates (``{prompt_id, cand_id, source, text, annotations}``), for the large edition
    (default files: the shipped ``pool.jsonl`` and ``pool_more.jsonl``)."""
    from perbench.memo import Memo

    pool, more = pool or POOL_PATH, more or MORE_POOL_PATH
    for path in (pool, more):
        if not path.exists():
            raise FileNotFoundError(
                f"rubric pool not found: {path} (build it with `perbench build rubrics`"
                + (" --size large)" if path == more else ")")
            )
    digest = hashlib.sha256(pool.read_bytes() + b"\0" + more.read_bytes()).hexdigest()

    def derive() -> list[dict[str, Any]]:
        bases = {**base_responses(_rows(pool)), **base_responses(_rows(more))}
        known = [p.prompt_id for p in RUBRIC_PROMPTS + MORE_PROMPTS]
        missing = [pid for pid in known if pid not in bases]
        if missing:
            raise ValueError(f"{more}: no base responses for prompts {', '.join(missing[:5])}")
        ordered = {pid: bases[pid] for pid in known}
        return assemble_pool(ordered, seed=POOL_SEED, n_edits=LARGE_EDITS, users=edition_users("large"))

    memo = Memo()
    try:
        rows = memo.json("rubric_pool_large", [digest, POOL_SEED, LARGE_EDITS], derive)
    finally:
        memo.close()
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_prompt.setdefault(row["prompt_id"], []).append(row)
    return by_prompt


def write_more_bases(write: WriteResponses, out: Path | None = None, *, seed: int = 0) -> Path:
    """``pool_more.jsonl``: ``write``'s base responses to the extra prompts, each request with the seed a build of
    every prompt (default and extra, in order) gives it, as ``base-<style>`` rows (``perbench build rubrics --size
    large`` passes the policy's writer)."""
    more = {p.prompt_id for p in MORE_PROMPTS}
    reqs = [r for r in base_requests(RUBRIC_PROMPTS + MORE_PROMPTS, seed=seed) if r.key.split(":")[0] in more]
    texts = list(write(reqs))
    if len(texts) != len(reqs):
        raise ValueError(f"the pool's writer returned {len(texts)} responses for {len(reqs)} requests")
    style_index = {s: i for i, s in enumerate(STYLES)}
    rows = []
    for r, text in zip(reqs, texts, strict=True):
        pid, style = r.key.split(":")
        rows.append(
            {
                "prompt_id": pid,
                "cand_id": f"{pid}-c{style_index[style]:02d}",
                "source": f"base-{style}",
                "text": text or "I am not sure.",
            }
        )
    path = out or MORE_POOL_PATH
    atomic_write_jsonl(path, rows)
    return path
