"""Best-of-N: sample N responses from the policy, return the one the reward model scores highest.

The sample pool is the expensive part and does not depend on the reward model, so it is generated
**once** per (policy, prompt, seed, temperature, top-p, max_new_tokens) and cached on disk, one entry per
sample index j. Every RM then only re-ranks the same pool: N-curves for all methods cost one sampling
pass. Sample j draws with its own generator, seeded ``sample_seed(request.seed, j)``; sample 0 uses the
request's seed itself, so Best-of-1 is exactly a plain sample (``ZeroShot(sample=True)``) with that seed,
and the first n samples of a pool of N are the pool of n.

Defaults follow Personalized RewardBench's downstream setup: temperature 1.0, top_p 0.9, N up to 128.
:func:`bon_curve` turns per-sample rewards and ground-truth qualities into the quality-vs-N curve
(N = 1, 2, 4, …, N; each N uses the first N samples).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from perbench.cache import Store
from perbench.decoding.base import Decoder
from perbench.decoding.greedy import ZeroShot
from perbench.models.chat import encode_prompt
from perbench.models.generate import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel, ScoreItem


def sample_seed(seed: int, j: int) -> int:
    """Seed of sample j of a request seeded ``seed`` (sample 0: the seed itself)."""
    if j == 0:
        return seed
    return int(hashlib.sha256(f"bon|{seed}|{j}".encode()).hexdigest()[:8], 16) % (2**31)


def bon_ns(n_max: int) -> list[int]:
    """1, 2, 4, … up to ``n_max`` (``n_max`` itself always included)."""
    out, n = [], 1
    while n < n_max:
        out.append(n)
        n *= 2
    return [*out, n_max]


def pick_best(rewards: np.ndarray, n: int | None = None) -> int:
    """Index of the highest reward among the first ``n`` (NaN never wins; ties: the earliest sample)."""
    r = np.asarray(rewards, np.float64)[: n if n is not None else len(rewards)]
    if not len(r):
        raise ValueError("pick_best: no samples")
    return int(np.argmax(np.where(np.isnan(r), -np.inf, r)))


class BestOfN(Decoder):
    name: ClassVar[str] = "best_of_n"
    uses_rm: ClassVar[bool] = True
    #: the runner seeds requests per prompt (not per method or user), so every RM re-ranks one pool
    shared_seed: ClassVar[bool] = True

    def __init__(
        self, n: int = 16, temperature: float = 1.0, top_p: float = 0.9, sample_batch: int = 32, **params: Any
    ) -> None:
        super().__init__(n=n, temperature=temperature, top_p=top_p, **params)
        if n < 1:
            raise ValueError(f"best_of_n: n must be ≥ 1, got {n}")
        self.n, self.temperature, self.top_p, self.sample_batch = n, temperature, top_p, sample_batch
        #: where sample pools are kept; default ``<cache>/samples.sqlite``
        self.store: Store | None = None
        self.sampled = 0  # samples generated (not reused) by this object
        self.reused = 0

    @classmethod
    def rm_problem(cls, rm_cls: type) -> str | None:
        """Why this RM class cannot rank Best-of-N samples (None: it can)."""
        from perbench.rewards.base import PairwiseJudge

        if issubclass(rm_cls, PairwiseJudge):
            return "a pairwise judge does not score single responses"
        return None

    def _store(self) -> Store:
        if self.store is None:
            from perbench.io import cache_dir

            self.store = Store(cache_dir() / "samples.sqlite")
        return self.store

    def sample_key(self, policy: LoadedLM, request: GenRequest, j: int, max_new_tokens: int) -> str:
        ids = encode_prompt(policy.tokenizer, request.prompt)
        spec = [policy.fingerprint, ids, request.seed, j, self.temperature, self.top_p, max_new_tokens]
        return "bon:" + hashlib.sha256(json.dumps(spec).encode()).hexdigest()

    def pool(
        self, policy: LoadedLM, requests: Sequence[GenRequest], *, max_new_tokens: int, n: int | None = None
    ) -> list[list[Generation]]:
        """The first ``n`` (default: N) samples of each request, sampled once and cached. Requests that
        differ only in the user share one pool."""
        n = self.n if n is None else n
        keys = [[self.sample_key(policy, r, j, max_new_tokens) for j in range(n)] for r in requests]
        store = self._store()
        flat = sorted({k for row in keys for k in row})
        found: dict[str, Any] = {k: json.loads(v) for k, v in store.get_many_bytes(flat).items()}
        todo: dict[str, GenRequest] = {}
        for r, row in zip(requests, keys, strict=True):
            for j, k in enumerate(row):
                if k not in found and k not in todo:
                    todo[k] = GenRequest(r.prompt, r.user_id, sample_seed(r.seed, j))
        self.reused += len(flat) - len(todo)
        sampler = ZeroShot(sample=True, temperature=self.temperature, top_p=self.top_p)
        items = list(todo.items())
        for s in range(0, len(items), self.sample_batch):
            chunk = items[s : s + self.sample_batch]
            gens = sampler.generate(policy, [req for _, req in chunk], None, max_new_tokens=max_new_tokens)
            new = {
                k: {"text": g.text, "token_ids": g.token_ids, "finished": g.finished}
                for (k, _), g in zip(chunk, gens, strict=True)
            }
            store.put_many_bytes({k: json.dumps(v).encode() for k, v in new.items()})
            found.update(new)
            self.sampled += len(chunk)
        return [
            [Generation(found[k]["text"], list(found[k]["token_ids"]), bool(found[k]["finished"])) for k in row]
            for row in keys
        ]

    @staticmethod
    def score_pool(
        rm: RewardModel, requests: Sequence[GenRequest], pool: Sequence[Sequence[Generation]]
    ) -> list[np.ndarray]:
        """r_u(x, y_j) for every sample of every request (one batched ``rm.score`` call)."""
        items = [ScoreItem(r.user_id, r.prompt, g.text) for r, row in zip(requests, pool, strict=True) for g in row]
        flat = np.asarray(rm.score(items), np.float64)
        out, i = [], 0
        for row in pool:
            out.append(flat[i : i + len(row)])
            i += len(row)
        return out

    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]:
        if rm is None:
            raise TypeError("best_of_n needs a reward model to rank its samples")
        pool = self.pool(policy, requests, max_new_tokens=max_new_tokens)
        scores = self.score_pool(rm, requests, pool)
        return [row[pick_best(s)] for row, s in zip(pool, scores, strict=True)]


def bon_curve(
    rewards: Sequence[np.ndarray],
    quality: Sequence[np.ndarray],
    ns: Sequence[int] | None = None,
    *,
    users: Sequence[str] | None = None,
    prompts: Sequence[str] | None = None,
    n_boot: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """Ground-truth quality of Best-of-n vs n, each n using the first n samples of every target.

    ``rewards[i][j]`` / ``quality[i][j]``: the RM's score and the ground-truth quality of sample j of
    target i. Per n: ``quality`` = mean quality of the RM's pick, ``reward`` = mean RM score of the pick,
    ``oracle`` = mean of the best quality among the first n (what a perfect RM would get), ``sample_mean``
    = mean quality of a random one of the first n. With ``users`` and ``n_boot`` > 0, ``ci`` holds
    bootstrap CIs of ``quality`` resampled by user (and by prompt too, two-way, when ``prompts`` is given).
    """
    if len(rewards) != len(quality):
        raise ValueError(f"bon_curve: {len(rewards)} reward rows vs {len(quality)} quality rows")
    if not len(rewards):
        return {"n": [], "quality": [], "reward": [], "oracle": [], "sample_mean": [], "targets": 0}
    n_max = min(min(len(r) for r in rewards), min(len(q) for q in quality))
    ns = [n for n in (ns or bon_ns(n_max)) if 1 <= n <= n_max]
    out: dict[str, Any] = {
        "n": list(ns),
        "quality": [],
        "reward": [],
        "oracle": [],
        "sample_mean": [],
        "targets": len(rewards),
    }
    if users is not None and n_boot > 0:
        out["ci"] = []
    R = [np.asarray(r, np.float64) for r in rewards]
    Q = [np.asarray(q, np.float64) for q in quality]
    for n in ns:
        picks = [pick_best(r, n) for r in R]
        q = np.array([qq[p] for qq, p in zip(Q, picks, strict=True)])
        out["quality"].append(float(np.nanmean(q)))
        out["reward"].append(float(np.nanmean([r[p] for r, p in zip(R, picks, strict=True)])))
        out["oracle"].append(float(np.nanmean([np.nanmax(qq[:n]) for qq in Q])))
        out["sample_mean"].append(float(np.nanmean([np.nanmean(qq[:n]) for qq in Q])))
        if "ci" in out:
            assert users is not None
            if prompts is not None:
                from perbench.metrics.bootstrap import two_way_ci

                got = two_way_ci(q, list(users), list(prompts), n_boot=n_boot, seed=seed)
                ci = (float("nan"), float("nan")) if got is None else got
            else:
                from perbench.metrics.stats import bootstrap_by_group, pair_weighted

                ci = bootstrap_by_group(q, list(users), pair_weighted, n_boot=n_boot, seed=seed)
            out["ci"].append(list(ci))
    return out
