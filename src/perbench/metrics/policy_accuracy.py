"""Policy accuracy (Rezk et al.): does the reward-guided policy prefer the user's chosen response?

Teacher-forced RGD score S_u(y) = Σ_t [log π(y_t | x, y_<t) + w · r_u(x, y_≤t)]; PA = mean 1[S(y_w) > S(y_l)]
(``sum``); ``mean`` divides each S by its length T. The exact formula is not public: this is our
documented reading. r_u(x, y_≤t) for every t comes from one forward over the full response.

RGD-induced-policy variant (:func:`rgd_policy_accuracy`): the policy that ARGS actually samples from,
log π_RGD(y_t) = log softmax over the policy's top-k candidates of (log π + w·r_u(x, y_<t ⊕ v)); a token
outside the top-k is a miss, the response's score is −inf and the miss is counted (see
:func:`rgd_policy_inputs` for how the candidates' rewards are computed in one pass per response).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from perbench.models.loader import LoadedLM
    from perbench.rewards.base import FeatureRM, RewardModel, ScoreItem


def rgd_scores(
    logprobs: Sequence[np.ndarray], rewards: Sequence[np.ndarray], w: float
) -> tuple[np.ndarray, np.ndarray]:
    """-> (sum variant, length-normalised variant) of S_u(y) per response."""
    s = np.array([float(np.sum(lp) + w * np.sum(r)) for lp, r in zip(logprobs, rewards, strict=True)])
    T = np.array([max(len(lp), 1) for lp in logprobs], dtype=np.float64)
    return s, s / T


def policy_accuracy(
    s_chosen: np.ndarray,
    s_rejected: np.ndarray,
    users: Sequence[str],
    *,
    tie: str = "strict",
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy of teacher-forced RGD scores (any variant): mean 1[S(y_w) > S(y_l)] with the tie rule."""
    from perbench.metrics.rm_accuracy import rm_accuracy

    return rm_accuracy(s_chosen, s_rejected, users, tie=tie, n_boot=n_boot, seed=seed)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------------
# RGD-induced-policy variant: log π_RGD(y_t) = log-softmax over the policy's top-k of (log π + w·r); a token
# outside the top-k is a miss (the response's log-probability is −inf).


@dataclass
class RGDInputs:
    """What the RGD-induced policy needs for one response of T tokens."""

    top_lp: np.ndarray  # (T, k) log π of the policy's top-k candidates at each position
    rewards: np.ndarray  # (T, k) r_u(x, y_<t ⊕ v) of each candidate v
    hit: np.ndarray  # (T,) index of y_t among the candidates, −1 when y_t is outside the top-k (a miss)


def rgd_policy_logprob(inp: RGDInputs, w: float) -> tuple[float, int]:
    """-> (Σ_t log π_RGD(y_t), number of missed tokens); −inf when any token is missed."""
    T = len(inp.hit)
    if T == 0:
        return 0.0, 0
    s = np.asarray(inp.top_lp, np.float64) + w * np.asarray(inp.rewards, np.float64)
    m = s.max(1, keepdims=True)
    lsm = s - (m + np.log(np.exp(s - m).sum(1, keepdims=True)))
    miss = int((inp.hit < 0).sum())
    if miss:
        return float("-inf"), miss
    return float(lsm[np.arange(T), inp.hit].sum()), 0


def rgd_policy_scores(inputs: Sequence[RGDInputs], w: float) -> dict[str, np.ndarray]:
    """Per response: ``sum`` (Σ_t log π_RGD, −inf on a miss), ``mean`` (divided by T), ``misses``, ``T``."""
    res = [rgd_policy_logprob(i, w) for i in inputs]
    s = np.array([r[0] for r in res], np.float64)
    T = np.array([len(i.hit) for i in inputs], np.float64)
    misses = np.array([r[1] for r in res], np.float64)
    return {"sum": s, "mean": s / np.maximum(T, 1), "misses": misses, "T": T}


def rgd_policy_accuracy(
    chosen: Sequence[RGDInputs],
    rejected: Sequence[RGDInputs],
    users: Sequence[str],
    w: float,
    *,
    tie: str = "strict",
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """PA under the RGD-induced policy, with the miss accounting: a pair where both responses miss is a tie
    (−inf = −inf, wrong under ``strict``); ``miss_rate`` = share of responses with ≥ 1 missed token."""
    return rgd_accuracy_from_scores(
        rgd_policy_scores(chosen, w),
        rgd_policy_scores(rejected, w),
        users,
        w,
        tie=tie,
        n_boot=n_boot,
        seed=seed,
    )


def rgd_accuracy_from_scores(
    sw: dict[str, np.ndarray],
    sl: dict[str, np.ndarray],
    users: Sequence[str],
    w: float,
    *,
    tie: str = "strict",
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`rgd_policy_accuracy` from :func:`rgd_policy_scores` of the chosen and rejected sides."""
    out: dict[str, Any] = {"w": w}
    for variant in ("sum", "mean"):
        a = policy_accuracy(sw[variant], sl[variant], users, tie=tie, n_boot=n_boot, seed=seed)
        a.pop("per_user", None)
        out[variant] = a
    miss_w, miss_l = sw["misses"] > 0, sl["misses"] > 0
    n_resp = 2 * len(miss_w)
    out["miss_rate"] = float((miss_w.sum() + miss_l.sum()) / n_resp) if n_resp else float("nan")
    n_tok = float(sw["T"].sum() + sl["T"].sum())
    n_miss = float(sw["misses"].sum() + sl["misses"].sum())
    out["token_miss_rate"] = n_miss / n_tok if n_tok else float("nan")
    out["pairs_any_miss"] = int((miss_w | miss_l).sum())
    out["pairs_both_miss"] = int((miss_w & miss_l).sum())
    out["chosen_miss_rate"] = float(miss_w.mean()) if len(miss_w) else float("nan")
    out["rejected_miss_rate"] = float(miss_l.mean()) if len(miss_l) else float("nan")
    return out


def rgd_policy_inputs(
    policy: LoadedLM,
    rm: RewardModel,
    items: Sequence[ScoreItem],
    *,
    k: int = 10,
    max_length: int = 1024,
    chunk_tokens: int = 512,
) -> list[RGDInputs]:
    """Top-k candidates and their rewards at every response position, teacher-forced.

    One policy forward per response gives the top-k at every position. Candidate rewards:

    * a token-level scorer (``candidate_rewards(user_ids, hidden, cands)``, e.g. the token ranker) reads
      them off the policy's hidden states directly;
    * a :class:`FeatureRM` needs the RM backbone's state at x ⊕ y_<t ⊕ v for all T·k candidates: one forward
      of the RM over x ⊕ y fills a KV cache (the policy's own, when the backbone is the policy), then the
      candidates go in as a tree batch — candidate (t, v) sits at position |x| + t and attends to x ⊕ y_<t
      and itself only — in chunks of ``chunk_tokens`` candidates (the cache is cropped back after each).
    """
    import torch
    from transformers import DynamicCache

    from perbench.decoding.args import is_token_scorer
    from perbench.models.chat import encode_pair
    from perbench.rewards.base import FeatureRM

    token_level = is_token_scorer(rm)
    if not token_level and not (isinstance(rm, FeatureRM) and rm.extractor is not None):
        raise TypeError(
            "RGD policy accuracy needs per-prefix rewards (a FeatureRM or a token-level "
            f"scorer), got {type(rm).__name__}"
        )
    rm_lm = policy if token_level else rm.extractor.lm  # type: ignore[attr-defined]
    if rm_lm.tokenizer.get_vocab() != policy.tokenizer.get_vocab():
        raise ValueError(f"RGD policy accuracy needs the RM backbone ({rm_lm.name}) to share the policy's tokenizer")
    if token_level and rm.backbone_fingerprint != policy.fingerprint:  # type: ignore[attr-defined]
        raise ValueError("a token-level scorer must be built on the policy's own hidden states")
    shared = rm_lm.model is policy.model
    dev = policy.policy.device
    dec, head = policy.model.get_decoder(), policy.model.get_output_embeddings()
    per = max(1, chunk_tokens // max(k, 1))  # positions per candidate chunk
    out: list[RGDInputs] = []

    with torch.inference_mode():
        for it in items:
            ids, T, _ = encode_pair(policy.tokenizer, it.prompt, it.response, max_length)
            if T == 0:
                out.append(RGDInputs(np.zeros((0, k)), np.zeros((0, k)), np.zeros(0, np.int64)))
                continue
            L, P = len(ids), len(ids) - T
            x = torch.tensor([ids], dtype=torch.long, device=dev)
            cache = DynamicCache(config=policy.model.config) if shared and not token_level else None
            hid = dec(input_ids=x, cache=cache, use_cache=cache is not None).last_hidden_state[0]
            hp = hid[P - 1 : L - 1]  # (T, d): the state that predicts y_t
            lp = torch.log_softmax(head(hp).float(), dim=-1)
            kk = min(k, lp.shape[-1])
            top_lp, cands = lp.topk(kk, dim=-1)  # (T, k)
            y = x[0, P:]
            eq = cands == y[:, None]
            hit = torch.where(eq.any(1), eq.int().argmax(1), torch.full_like(y, -1))
            if token_level:
                r = rm.candidate_rewards([it.user_id] * T, hp, cands)  # type: ignore[attr-defined]
            else:
                r = _tree_rewards(rm, rm_lm, x, P, cands, it.user_id, cache, per)  # type: ignore[arg-type]
            out.append(
                RGDInputs(
                    top_lp.double().cpu().numpy(),
                    r.double().cpu().numpy().reshape(T, kk),
                    hit.cpu().numpy().astype(np.int64),
                )
            )
    return out


def _tree_rewards(
    rm: FeatureRM,
    rm_lm: LoadedLM,
    x: torch.Tensor,
    P: int,
    cands: torch.Tensor,
    user: str,
    cache: Any,
    per: int,
) -> torch.Tensor:
    """(T, k) rewards of every candidate, from the RM backbone's KV cache of x ⊕ y and tree batches."""
    import torch
    from transformers import DynamicCache

    model = rm_lm.model
    dec = model.get_decoder()
    dev = rm_lm.policy.device
    dtype = rm_lm.policy.torch_dtype()
    L = x.shape[1]
    T, k = cands.shape
    if cache is None:
        cache = DynamicCache(config=model.config)
        dec(input_ids=x[:, : L - 1].to(dev), cache=cache, use_cache=True)  # y_T is never a prefix token
    Lc = cache.get_seq_length()
    neg = torch.finfo(dtype).min
    rewards = []
    for t0 in range(0, T, per):
        t1 = min(T, t0 + per)
        n = (t1 - t0) * k
        t_of = torch.arange(t0, t1, device=dev).repeat_interleave(k)  # response position of each candidate
        pos = P + t_of
        cached = torch.where(torch.arange(Lc, device=dev)[None, :] < pos[:, None], 0.0, neg)
        tree = torch.full((n, n), neg, device=dev).fill_diagonal_(0.0)
        mask = torch.cat([cached, tree], 1).to(dtype)[None, None]
        h = dec(
            input_ids=cands[t0:t1].reshape(1, n).to(dev),
            attention_mask=mask,
            position_ids=pos[None],
            cache=cache,
            use_cache=True,
        ).last_hidden_state[0]
        cache.crop(-n)  # drop this chunk's candidates again
        rewards.append(rm.reward_from_features([user] * n, h.float()).view(t1 - t0, k))
    return torch.cat(rewards)
