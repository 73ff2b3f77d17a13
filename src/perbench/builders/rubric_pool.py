"""The rubric benchmark's candidate pool with the policy's base responses (``perbench build rubrics``): the
policy samples each base request (:func:`perbench.data.rubrics.build.base_requests`), the data room derives the
edits, annotates and writes the pool (:func:`perbench.data.rubrics.build.write_pool`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perbench.data.rubrics.build import BaseRequest, WriteResponses, write_pool


def policy_writer(policy: str = "smollm2", *, max_new_tokens: int = 200, batch_size: int = 8) -> WriteResponses:
    """The policy (loaded now) sampling each request with its own seed (T = 0.7, top-p 0.9), in batches."""
    from perbench.models.generate import GenRequest, batched, generate_plain
    from perbench.models.loader import load_lm
    from perbench.progress import progress

    lm = load_lm(policy)

    def write(requests: Sequence[BaseRequest]) -> list[str]:
        reqs = [GenRequest(r.prompt, r.key, seed=r.seed) for r in requests]
        texts: list[str] = []
        bar = progress(total=len(reqs), desc="pool: base responses", unit="gen")
        for batch in batched(reqs, batch_size):
            gens = generate_plain(lm, batch, max_new_tokens, sample=True, temperature=0.7, top_p=0.9)
            texts += [g.text for g in gens]
            bar.update(len(batch))
        bar.close()
        return texts

    return write


def build_pool(
    out: Path | None = None,
    seed: int = 0,
    policy: str = "smollm2",
    limit: int | None = None,
    max_new_tokens: int = 200,
    n_edits: int = 8,
    batch_size: int = 8,
    size: str = "default",
) -> Path:
    """Write the pool (default: the shipped ``pool.jsonl``) from ``policy``'s base responses to the first ``limit``
    prompts (all: None), deterministically from ``seed``. ``size="large"``: the base responses of the large
    edition's extra prompts instead (``pool_more.jsonl``; the large pool's edits are derived when it loads)."""
    from perbench.device import set_threads

    set_threads()
    write = policy_writer(policy, max_new_tokens=max_new_tokens, batch_size=batch_size)
    if size == "large":
        from perbench.data.rubrics.pool_large import write_more_bases

        return write_more_bases(write, out, seed=seed)
    return write_pool(write, out, seed=seed, limit=limit, n_edits=n_edits)
