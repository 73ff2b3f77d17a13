"""The units of pooled Best-of-N, each content-keyed: one decoder's sample pool (sampled once, ``samples.sqlite``),
φ of its texts under the RM backbone (extracted once, ``features.sqlite``), its quality per (cell, sample) (each
text checked once; the user's satisfaction is a lookup; ROUGE and BERTScore once per distinct (text, reference)),
which rubric poles each sample lands on, and each system's scores of the pool (frozen-feature RMs: array operations
over the cached features, one call per user). :class:`perbench.runner.pooled.Pooled` assembles them into cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perbench.config import Component
from perbench.data.records import Prompt, prompt_key
from perbench.runner.methods import MethodHandle
from perbench.runner.scoring import Scoring
from perbench.runner.state import RunState, seed_for
from perbench.runner.units import unit_key

if TYPE_CHECKING:
    from perbench.decoding.best_of_n import BestOfN


@dataclass(frozen=True)
class Pool:
    """One decoder's sample pool: ``texts[i][j]`` is sample j of ``prompts[i]``; ``cells`` are (prompt index,
    user), the (user, prompt) cells evaluated on it."""

    prompts: list[Prompt]
    texts: list[list[str]]
    cells: list[tuple[int, str]]
    key: str

    @property
    def size(self) -> int:
        return len(self.texts[0]) if self.texts else 0

    def cell_texts(self, c: int) -> list[str]:
        return self.texts[self.cells[c][0]]

    def prompt_id(self, c: int) -> str:
        return prompt_key(self.prompts[self.cells[c][0]])


class PoolUnits:
    """The pool-level work of pooled Best-of-N, one method per unit; results are memoized per process."""

    def __init__(self, state: RunState, scoring: Scoring) -> None:
        self.s = state
        self.scoring = scoring
        self._pools: dict[str, Pool] = {}
        self._feats: dict[tuple[int, str, str], tuple[np.ndarray, dict[tuple[str, str], int]]] = {}

    # ------------------------------------------------------------------ the pool (one plan unit per decoder)
    def pool(self, decoder: BestOfN, targets: list[tuple[Prompt, str]]) -> Pool:
        """The decoder's pool for the prompts of ``targets`` (sampled once and cached, by prompt and seed)."""
        from perbench.models.generation import GenRequest

        cfg = self.s.cfg
        prompts: dict[str, Prompt] = {}
        for p, _ in targets:
            prompts.setdefault(prompt_key(p), p)
        index = {k: i for i, k in enumerate(prompts)}
        cells = [(index[prompt_key(p)], u) for p, u in targets]
        key = unit_key(
            "bon_pool",
            decoder.config_key(),
            self.s.policy.fingerprint,
            cfg.seed,
            cfg.max_new_tokens,
            list(prompts),
            [f"{i}|{u}" for i, u in cells],
        )
        if key not in self._pools:
            # the sampling policy never sees the user: one request per prompt, seeded by the prompt
            reqs = [GenRequest(p, "*", seed=seed_for(cfg.seed, k)) for k, p in prompts.items()]
            with self.s.timed("pool.sampling"):
                gens = decoder.pool(self.s.policy, reqs, max_new_tokens=cfg.max_new_tokens)
            if decoder.batcher is not None:  # what the pool's batches were (results.json batching)
                self.s.batchers["pool"] = decoder.batcher
            if decoder.sampled:
                self.s.units.computed["bon_samples"] += int(decoder.sampled)
            if decoder.reused:
                self.s.units.reused["bon_samples"] += int(decoder.reused)
            decoder.sampled = decoder.reused = 0
            texts = [[g.text for g in row] for row in gens]
            self._pools[key] = Pool(list(prompts.values()), texts, cells, key)
        return self._pools[key]

    def prepare(self, decoder: BestOfN, targets: list[tuple[Prompt, str]], handles: list[MethodHandle]) -> None:
        """The pool unit: sample the pool, extract φ of its texts for the frozen-feature systems, and compute
        its quality per (cell, sample)."""
        pool = self.pool(decoder, targets)
        if any(h.is_feature_rm for h in handles) and self.s.extractor is not None:
            with self.s.timed("pool.features"):
                self._features(self.s.extractor, pool, [])
        with self.s.timed("pool.quality"):
            self.quality(pool)
            self.wants(pool)

    def _features(
        self, extractor: Any, pool: Pool, extra: list[tuple[Prompt, str]]
    ) -> tuple[np.ndarray, dict[tuple[str, str], int]]:
        """φ of every distinct (prompt, text) of the pool (and ``extra``) under ``extractor``, read once per
        process; -> (features, row of each (prompt id, text))."""
        memo = (id(extractor), pool.key, unit_key([(prompt_key(p), t) for p, t in extra]))
        if memo in self._feats:
            return self._feats[memo]
        rows: dict[tuple[str, str], int] = {}
        items: list[tuple[Prompt, str]] = []
        for p, texts in zip(pool.prompts, pool.texts, strict=True):
            for t in texts:
                if (prompt_key(p), t) not in rows:
                    rows[(prompt_key(p), t)] = len(items)
                    items.append((p, t))
        for p, t in extra:
            if (prompt_key(p), t) not in rows:
                rows[(prompt_key(p), t)] = len(items)
                items.append((p, t))
        self._feats[memo] = (np.asarray(extractor.last(items, desc="pool features")), rows)
        return self._feats[memo]

    def quality(self, pool: Pool) -> dict[str, np.ndarray]:
        """Ground-truth quality of every (cell, sample): metric -> (cells, N), NaN where the cell has none."""
        cfg = self.s.cfg
        key = unit_key(
            "bon_quality2",
            pool.key,
            self.s.bench_fingerprint(),
            cfg.bertscore,
            self.s.judge_lm.fingerprint if self.s.judge is not None else None,
        )

        def compute() -> dict[str, np.ndarray]:
            N = pool.size
            flat = [t for c in range(len(pool.cells)) for t in pool.cell_texts(c)]
            targets = [(pool.prompts[i], u) for i, u in pool.cells for _ in range(N)]
            rows = self.scoring.quality(flat, targets)
            names = sorted({m for r in rows for m in r})
            out = {m: np.array([r.get(m, np.nan) for r in rows], np.float64).reshape(len(pool.cells), N) for m in names}
            out["words"] = np.array([len(t.split()) for t in flat], np.float64).reshape(len(pool.cells), N)
            return out

        return self.s.units.arrays("bon_quality", key, compute)

    def wants(self, pool: Pool) -> dict[str, np.ndarray]:
        """Per rubric pole ``aspect=pole`` that some cell's user wants: (cells, N) 1.0 where the sample lands on
        it, 0.0 where it does not, NaN for cells whose user does not want it (the per-aspect diagnosis). Empty
        when no user has a checkable rubric."""
        key = unit_key("bon_wants", pool.key, self.s.bench_fingerprint())

        def compute() -> dict[str, np.ndarray]:
            from perbench.data.rubrics.aspects import annotate

            users = self.s.bench.users
            poles = sorted({f"{ap.aspect}={ap.pole}" for _, u in pool.cells for ap in (users[u].rubric or ())})
            if not poles:
                return {}
            C, N = len(pool.cells), pool.size
            notes = {t: annotate(t) for row in pool.texts for t in row}
            out = {p: np.full((C, N), np.nan) for p in poles}
            for c, (i, u) in enumerate(pool.cells):
                for ap in users[u].rubric or ():
                    got = [notes[t][ap.aspect] == ap.pole for t in pool.texts[i]]
                    out[f"{ap.aspect}={ap.pole}"][c] = np.asarray(got, np.float64)
            return out

        return self.s.units.arrays("bon_wants", key, compute)

    # ------------------------------------------------------------------ one system's scores (its plan unit)
    def scores(self, h: MethodHandle, pool: Pool, zero: dict[tuple[str, str], str] | None) -> dict[str, np.ndarray]:
        """``pool``: (cells, N) the system's reward of every sample for the cell's user; ``zero``: (cells,) its
        reward of the zero-shot output of the cell (when a zero-shot decoder ran), for the win rate."""
        from perbench.rewards.base import FeatureRM, ScoreItem

        zero_items = None
        if zero is not None:
            zero_items = [zero.get((pool.prompt_id(c), u)) for c, (_, u) in enumerate(pool.cells)]
        key = h.key(
            h.shots,
            "bon_scores2",
            pool.key,
            None if zero_items is None else unit_key(zero_items),
        )

        def compute() -> dict[str, np.ndarray]:
            rm = h.adapted(h.shots)
            C, N = len(pool.cells), pool.size
            out = {"pool": np.full((C, N), np.nan), "zero": np.full(C, np.nan)}
            # the φ path only for RMs whose score reads φ(x, y) (a token-level ranker scores its own way)
            if isinstance(rm, FeatureRM) and rm.extractor is not None and type(rm).score is FeatureRM.score:
                import torch

                extra = [
                    (pool.prompts[i], z)
                    for (i, _), z in zip(pool.cells, zero_items or [], strict=False)
                    if z is not None
                ]
                feats, row = self._features(rm.extractor, pool, extra)
                by_user: dict[str, list[int]] = {}
                for c, (_, u) in enumerate(pool.cells):
                    by_user.setdefault(u, []).append(c)
                for u, cs in by_user.items():  # one reward call per user over all of their cells' texts
                    idx = [row[(pool.prompt_id(c), t)] for c in cs for t in pool.cell_texts(c)]
                    prompts = [pool.prompts[pool.cells[c][0]] for c in cs for _ in range(N)]
                    zc = [c for c in cs if zero_items and zero_items[c] is not None]
                    idx += [row[(pool.prompt_id(c), zero_items[c])] for c in zc]  # type: ignore[index]
                    prompts += [pool.prompts[pool.cells[c][0]] for c in zc]
                    with torch.no_grad():
                        r = rm.rewards([u] * len(idx), prompts, torch.from_numpy(feats[idx])).double().numpy()
                    out["pool"][cs] = r[: len(cs) * N].reshape(len(cs), N)
                    out["zero"][zc] = r[len(cs) * N :]
            else:
                items = [
                    ScoreItem(u, pool.prompts[i], t) for c, (i, u) in enumerate(pool.cells) for t in pool.cell_texts(c)
                ]
                zc = [c for c in range(C) if zero_items and zero_items[c] is not None]
                items += [ScoreItem(pool.cells[c][1], pool.prompts[pool.cells[c][0]], zero_items[c]) for c in zc]  # type: ignore[index,arg-type]
                r = np.asarray(rm.score_distinct(items), np.float64)
                out["pool"] = r[: C * N].reshape(C, N)
                out["zero"][zc] = r[C * N :]
            return out

        return self.s.units.arrays("bon_scores", key, compute)

    def decoder(self, spec: Component) -> BestOfN:
        from perbench import registry

        dec: BestOfN = registry.decoders.get(spec.name)(**spec.params)
        dec.store = self.s.stores.samples  # this process's sample store (a Ray worker's is in its memory)
        return dec
