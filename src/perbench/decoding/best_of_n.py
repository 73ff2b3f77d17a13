"""Best-of-N: sample N responses from the policy, return the one the reward model scores highest.

The sample pool is the expensive part and does not depend on the reward model, so it is generated
**once** per (policy, prompt, seed, temperature, top-p, max_new_tokens) and cached on disk, one entry per
sample index j. Every RM then only re-ranks the same pool: N-curves for all methods cost one sampling
pass. Sample j draws with its own generator, seeded ``sample_seed(request.seed, j)``; sample 0 uses the
request's seed itself, so Best-of-1 is exactly a plain sample (``ZeroShot(sample=True)``) with that seed,
and the first n samples of a pool of N are the pool of n. The pool does not depend on the user either (the
policy does not see them), so every user of a prompt shares it.

``n`` is the headline Best-of-n; ``pool`` (default n) is how many samples are drawn per prompt. The runner
estimates Best-of-n from a larger pool **exactly**: :func:`bon_weights` gives the probability that each pool
item is the reward-argmax of a uniformly random n-subset (item of rank i among N, 1-based from the top, wins
with probability C(N − i, n − 1) / C(N, n); tied rewards share their group's mean probability, i.e. ties are
broken uniformly at random), so the expected quality of Best-of-n is a weighted mean over the pool, with no
subsampling noise. :func:`bon_curve` gives that expectation for n = 1, 2, 4, …, N. ``generate`` (a single
decode, e.g. for a user of the decoder outside a run) returns the argmax of the first n samples.

Defaults follow Personalized RewardBench's downstream setup: temperature 1.0, top_p 0.9, N up to 128.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from perbench.cache import Store
from perbench.data.records import prompt_key
from perbench.decoding.base import Decoder
from perbench.decoding.greedy import ZeroShot
from perbench.models.chat import prompt_identities
from perbench.models.generation import Generation, GenRequest
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


#: samples per batch of ``sample_batch="auto"`` on a CPU (the measured fastest; elsewhere the memory estimate)
CPU_SAMPLE_BATCH = 128


def pool_batcher(policy: LoadedLM, size: int | str) -> Any:
    """The batcher of a pool's samples: ``size``, or ``auto``: :data:`CPU_SAMPLE_BATCH` on a CPU, on a GPU the rows
    its free memory holds (:mod:`perbench.models.memory`); halves on out-of-memory."""
    from perbench.models.batching import AdaptiveBatcher
    from perbench.models.endpoint import is_served, request_batcher
    from perbench.models.memory import estimate_rows

    if is_served(policy):
        return request_batcher(policy, size)
    device = str(policy.policy.device)
    if device.startswith("cpu"):
        return AdaptiveBatcher(size, device, start=CPU_SAMPLE_BATCH)
    return AdaptiveBatcher(size, device, lambda seq: estimate_rows(policy, seq, "generate"))


class BestOfN(Decoder):
    name: ClassVar[str] = "best_of_n"
    uses_rm: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = False  # the pool is plain samples; the RM re-ranks texts
    #: the runner seeds requests per prompt (not per method or user), so every RM re-ranks one pool
    shared_seed: ClassVar[bool] = True

    def __init__(
        self,
        n: int = 16,
        pool: int | None = None,
        temperature: float = 1.0,
        top_p: float = 0.9,
        sample_batch: int | str = "auto",
        **params: Any,
    ) -> None:
        extra = {} if pool is None else {"pool": pool}
        super().__init__(n=n, temperature=temperature, top_p=top_p, **extra, **params)
        if n < 1:
            raise ValueError(f"best_of_n: n must be ≥ 1, got {n}")
        if pool is not None and pool < n:
            raise ValueError(f"best_of_n: pool ({pool}) must hold at least n = {n} samples")
        self.n, self.temperature, self.top_p, self.sample_batch = n, temperature, top_p, sample_batch
        #: the batcher of the last pool sampled (its sizes go to results.json ``batching``)
        self.batcher: Any = None
        #: samples drawn per prompt; Best-of-n is estimated exactly from them (see the module docstring)
        self.pool_size = n if pool is None else pool
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

    def sample_key(
        self, policy: LoadedLM, request: GenRequest, j: int, max_new_tokens: int, ids: list[int] | str
    ) -> str:
        """The store key of the ``j``-th sample for ``request``; ``ids``: its prompt's identity
        (:func:`~perbench.models.chat.prompt_identities`)."""
        spec = [policy.fingerprint, ids, request.seed, j, self.temperature, self.top_p, max_new_tokens]
        return "bon:" + hashlib.sha256(json.dumps(spec).encode()).hexdigest()

    def pool(
        self, policy: LoadedLM, requests: Sequence[GenRequest], *, max_new_tokens: int, n: int | None = None
    ) -> list[list[Generation]]:
        """The first ``n`` (default: the pool size) samples of each request, sampled once and cached. Requests
        that differ only in the user share one pool."""
        n = self.pool_size if n is None else n
        ident = prompt_identities(policy, [r.prompt for r in requests])
        ids = [ident[prompt_key(r.prompt)] for r in requests]
        keys = [
            [self.sample_key(policy, r, j, max_new_tokens, i) for j in range(n)]
            for r, i in zip(requests, ids, strict=True)
        ]
        store = self._store()
        flat = sorted({k for row in keys for k in row})
        found: dict[str, Any] = {k: json.loads(v) for k, v in store.get_many_bytes(flat).items()}
        todo: dict[str, GenRequest] = {}
        lengths: dict[str, int] = {}  # prompt tokens + new tokens: what a sample's row holds
        for r, row, i in zip(requests, keys, ids, strict=True):
            size = len(i) + max_new_tokens
            for j, k in enumerate(row):
                if k not in found and k not in todo:
                    todo[k] = GenRequest(r.prompt, r.user_id, sample_seed(r.seed, j))
                    lengths[k] = size
        self.reused += len(flat) - len(todo)
        from perbench.progress import progress

        sampler = ZeroShot(sample=True, temperature=self.temperature, top_p=self.top_p)
        items = list(todo.items())
        bar = progress(total=len(items), desc="Best-of-N pool", unit="sample")

        def sample(chunk: Sequence[tuple[str, GenRequest]]) -> list[None]:
            gens = sampler.generate(policy, [req for _, req in chunk], None, max_new_tokens=max_new_tokens)
            new = {
                k: {"text": g.text, "token_ids": g.token_ids, "finished": g.finished}
                for (k, _), g in zip(chunk, gens, strict=True)
            }
            store.put_many_bytes({k: json.dumps(v).encode() for k, v in new.items()})
            found.update(new)
            self.sampled += len(chunk)
            bar.update(len(chunk))
            return [None] * len(chunk)

        self.batcher = pool_batcher(policy, self.sample_batch)
        # a prompt's samples stay together (one shared prefill; a stable sort), longest prompts first off a CPU
        self.batcher.run(items, sample, length=lambda kv: lengths[kv[0]])
        bar.close()
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
        pool = self.pool(policy, requests, max_new_tokens=max_new_tokens, n=self.n)
        scores = self.score_pool(rm, requests, pool)
        return [row[pick_best(s)] for row, s in zip(pool, scores, strict=True)]


def bon_weights(rewards: np.ndarray, n: int) -> np.ndarray:
    """P(item j is the reward-argmax of a uniformly random n-subset of its row), for rewards of shape (..., N).

    The item of rank i (1-based, highest reward first) wins when it is drawn and the n − 1 others come from the
    N − i items below it: C(N − i, n − 1) / C(N, n). Tied rewards are ordered at random, so each member of a tie
    group gets the group's mean weight. A NaN reward ranks below every number (it wins only a subset with
    nothing else in it, i.e. among NaNs). Each row's weights sum to 1; n = 1 gives 1/N for every item, n = N
    all the weight to the argmax (shared by a tied top group)."""
    r = np.asarray(rewards, np.float64)
    N = r.shape[-1]
    if not 1 <= n <= N:
        raise ValueError(f"bon_weights: n must be in [1, {N}], got {n}")
    by_rank = np.array([math.comb(N - i, n - 1) for i in range(1, N + 1)], np.float64) / math.comb(N, n)
    cum = np.concatenate([[0.0], np.cumsum(by_rank)])
    r = np.where(np.isnan(r), -np.inf, r)
    above = (r[..., None, :] > r[..., :, None]).sum(-1)  # items ranked strictly above each item
    tied = (r[..., None, :] == r[..., :, None]).sum(-1)  # its tie group, itself included
    weights: np.ndarray = (cum[above + tied] - cum[above]) / tied
    return weights


def bon_expected(rewards: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """E[value of the reward-argmax of a random n-subset] per row: ``(bon_weights(rewards, n) * values).sum(-1)``."""
    out: np.ndarray = (bon_weights(rewards, n) * np.asarray(values, np.float64)).sum(-1)
    return out


def bon_curve(
    rewards: Sequence[np.ndarray] | np.ndarray,
    quality: Sequence[np.ndarray] | np.ndarray,
    ns: Sequence[int] | None = None,
    *,
    users: Sequence[str] | None = None,
    prompts: Sequence[str] | None = None,
    n_boot: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """Ground-truth quality of Best-of-n vs n from one pool of N samples per target, exact over random n-subsets.

    ``rewards[i][j]`` / ``quality[i][j]``: the RM's score and the ground-truth quality of sample j of target i
    (every row the same N). Per n (default 1, 2, 4, …, N): ``quality`` = mean over targets of the expected
    quality of the RM's pick, ``reward`` = the same for the RM's own score of its pick, ``oracle`` = the expected
    best quality of a random n-subset (what a perfect RM would get), ``sample_mean`` = the quality of a random
    pick (the pool mean, the same for every n). With ``users`` and ``n_boot`` > 0, ``ci`` holds bootstrap CIs of
    ``quality``: two-way (users × prompts) when ``prompts`` is given, else resampled by user.
    """
    R = np.asarray(rewards, np.float64)
    Q = np.asarray(quality, np.float64)
    if R.shape[:1] != Q.shape[:1]:
        raise ValueError(f"bon_curve: {len(R)} reward rows vs {len(Q)} quality rows")
    if not len(R):
        return {"n": [], "quality": [], "reward": [], "oracle": [], "sample_mean": [], "targets": 0}
    if R.shape != Q.shape or R.ndim != 2:
        raise ValueError(f"bon_curve: rewards {R.shape} and quality {Q.shape} must be (targets, N) alike")
    n_max = R.shape[1]
    ns = sorted({n for n in (ns or bon_ns(n_max)) if 1 <= n <= n_max})
    per_n = np.stack([bon_expected(R, Q, n) for n in ns], axis=1)  # (targets, len(ns))
    finite_r = np.where(np.isnan(R), 0.0, R)
    out: dict[str, Any] = {
        "n": list(ns),
        "quality": [float(v) for v in np.nanmean(per_n, axis=0)],
        "reward": [float(np.nanmean(bon_expected(R, finite_r, n))) for n in ns],
        "oracle": [float(np.nanmean(bon_expected(Q, Q, n))) for n in ns],
        "sample_mean": [float(np.nanmean(Q))] * len(ns),
        "targets": len(R),
        "estimator": "exact expectation over random n-subsets of the pool",
    }
    if users is not None and n_boot > 0:
        out["ci"] = [list(ci) for ci in _curve_cis(per_n, list(users), prompts, n_boot, seed)]
    return out


def _curve_cis(
    per_n: np.ndarray, users: list[str], prompts: Sequence[str] | None, n_boot: int, seed: int
) -> list[tuple[float, float]]:
    """Bootstrap CIs of each column's mean (one per n), every column on the same draws."""
    if prompts is None:
        from perbench.stats.intervals import bootstrap_by_group, pair_weighted

        return [
            bootstrap_by_group(per_n[:, k], users, pair_weighted, n_boot=n_boot, seed=seed)
            for k in range(per_n.shape[1])
        ]
    from perbench.stats.bootstrap import TwoWayBootstrap, percentile_ci

    T, K = per_n.shape
    boot = TwoWayBootstrap(users * K, list(prompts) * K, n_boot=n_boot, seed=seed)
    if boot.resampling(np.arange(T)).unit is None or n_boot < 2:
        return [(float("nan"), float("nan"))] * K
    _, reps = boot.means(per_n.T.ravel(), [np.arange(k * T, (k + 1) * T) for k in range(K)])
    out = []
    for k in range(K):
        ci = percentile_ci(reps[:, k])
        out.append((float("nan"), float("nan")) if ci is None else (float(ci[0]), float(ci[1])))
    return out
