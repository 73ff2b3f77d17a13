"""Policy accuracy (Rezk et al.): does the reward-guided policy prefer the user's chosen response?

The exact formula is not public; these are our documented readings. The RGD-adapted policy is the tilt
π_RGD(y | x) ∝ π(y | x)·exp(w·r_u(x, y)), with w the weight the paired decoder puts on the reward (ARGS's
w; GenARM's α on log π_r, i.e. α/β on r = β·log π_r). For a response y of T tokens (teacher-forced):

- **headline** ``tilt`` (the *sequence tilt*): S_u(y) = log π(y | x) + w·r_u(x, y), r_u taken once on the
  whole response (the reward ``score`` gives); comparing chosen with rejected, the normaliser cancels. A
  constant c added to r adds w·c to both sides (shift-invariant as it stands) and no length division is
  needed; at w = 0 it compares sequence probabilities, ``policy_sum`` (reported beside it). It needs no
  reward for a partial response: every RM that scores single responses has one.
- ``prefix_sum`` / ``prefix_mean`` (labelled variants, from an earlier reading): Σ_t [log π(y_t | x, y_<t) +
  w·r_u(x, y_≤t)], and that divided by T. ``prefix_sum`` is not shift-invariant (r + c adds c·w·T);
  ``prefix_mean`` can flip a pair of equal length against the tilt and is moved by per-step offsets that
  leave ARGS unchanged. ``policy_mean`` = mean_t log π(y_t) is its w = 0 value.
- ``rgd_mean`` (and ``rgd_sum``, with ``pa_rgd``): the log-probability of y under the top-k RGD-induced
  policy — the policy ARGS samples from, log π_RGD(y_t) = log-softmax over the policy's top-k candidates v
  of (log π(v | x, y_<t) + w·r_u(x, y_<t ⊕ v)); a token outside the top-k is a miss (the response's value is
  −inf and the miss is counted). A constant added to r cancels in every softmax. ``w0_sum`` / ``w0_mean``:
  the same at w = 0 (the policy alone, renormalised over its own top-k).

:func:`sequence_tilt` is the headline; :func:`policy_accuracy_scores` computes every variant per response
for any RM whose ``no_prefix_reward`` is None (frozen-feature heads, GenARM, the LoRA RMs) or that is a
token-level scorer; :func:`policy_accuracy_problem` says why the per-prefix variants cannot be computed
(reported as not applicable); :func:`policy_accuracy_from_scores` turns the chosen / rejected arrays into
accuracies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from perbench.models.loader import LoadedLM
    from perbench.rewards.base import RewardModel, ScoreItem


def sequence_tilt(logprob_sums: np.ndarray, rewards: np.ndarray, w: float) -> np.ndarray:
    """The headline per response: log π(y | x) + w·r_u(x, y) (``logprob_sums`` = Σ_t log π(y_t | x, y_<t),
    ``rewards`` = the reward of the whole response)."""
    return np.asarray(logprob_sums, np.float64) + w * np.asarray(rewards, np.float64)


def teacher_forced_scores(
    logprobs: Sequence[np.ndarray], rewards: Sequence[np.ndarray], w: float
) -> dict[str, np.ndarray]:
    """What one teacher-forced pass gives, per response: the headline ``tilt`` (the last per-prefix reward is
    the whole response's), the labelled ``prefix_sum`` / ``prefix_mean``, ``policy_sum`` / ``policy_mean``
    (w = 0) and ``T``."""
    lp_sum = np.array([float(np.sum(lp)) for lp in logprobs])
    final = np.array([float(r[-1]) if len(r) else 0.0 for r in rewards])
    prefix = np.array([float(np.sum(lp) + w * np.sum(r)) for lp, r in zip(logprobs, rewards, strict=True)])
    T = np.array([max(len(lp), 1) for lp in logprobs], dtype=np.float64)
    return {
        "tilt": sequence_tilt(lp_sum, final, w),
        "prefix_sum": prefix,
        "prefix_mean": prefix / T,
        "policy_sum": lp_sum,
        "policy_mean": lp_sum / T,
        "T": T,
    }


def policy_accuracy(
    s_chosen: np.ndarray,
    s_rejected: np.ndarray,
    users: Sequence[str],
    *,
    tie: str = "strict",
    n_boot: int = 1000,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Accuracy of teacher-forced RGD scores (any variant): mean 1[S(y_w) > S(y_l)] with the tie rule."""
    from perbench.metrics.rm_accuracy import rm_accuracy

    return rm_accuracy(s_chosen, s_rejected, users, tie=tie, n_boot=n_boot, seed=seed, prompts=prompts)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------------
# RGD-induced-policy variant: log π_RGD(y_t) = log-softmax over the policy's top-k of (log π + w·r); a token
# outside the top-k is a miss (the response's log-probability is −inf).


@dataclass
class RGDInputs:
    """What the RGD-induced policy needs for one response of T tokens."""

    top_lp: np.ndarray  # (T, k) log π of the policy's top-k candidates at each position
    rewards: np.ndarray  # (T, k) r_u(x, y_<t ⊕ v) of each candidate v
    hit: np.ndarray  # (T,) index of y_t among the candidates, −1 when y_t is outside the top-k (a miss)
    #: (T,) log π(y_t | x, y_<t), read off the same policy forward
    lp_y: np.ndarray | None = None
    #: (T,) r_u(x, y_≤t) of the response itself, when the RM reads the policy's own states (same forward)
    token_rewards: np.ndarray | None = None


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


def _tree_chunks(rm_lm: LoadedLM | None, chunk_tokens: int | None, max_length: int, k: int) -> int:
    """Candidates per tree forward: ``chunk_tokens``; else :data:`~perbench.models.stepper.TREE_CHUNK` on a CPU, on a
    GPU what its free memory holds of a response's T·k candidates (``models/memory.py``), at least that."""
    from perbench.models.stepper import TREE_CHUNK

    if chunk_tokens is not None:
        return chunk_tokens
    if rm_lm is None or str(rm_lm.policy.device).startswith("cpu"):
        return TREE_CHUNK
    from perbench.models.memory import free_bytes, shape_of, tree_chunk_tokens

    free = free_bytes(str(rm_lm.policy.device))
    if free is None:
        return TREE_CHUNK
    shape, dtype_bytes = shape_of(rm_lm)
    return tree_chunk_tokens(free, shape, max_length, dtype_bytes, TREE_CHUNK, max_length * k)


def rgd_policy_inputs(
    policy: LoadedLM,
    rm: RewardModel,
    items: Sequence[ScoreItem],
    *,
    k: int = 10,
    max_length: int = 1024,
    chunk_tokens: int | None = None,
) -> list[RGDInputs]:
    """Top-k candidates and their rewards at every response position, teacher-forced.

    One policy forward per response gives the top-k at every position. Candidate rewards:

    * a token-level scorer (``candidate_rewards(user_ids, hidden, cands)``, e.g. the token ranker) reads
      them off the policy's hidden states directly;
    * a :class:`FeatureRM` needs the RM backbone's state at x ⊕ y_<t ⊕ v for all T·k candidates: one forward
      of the RM over x ⊕ y fills a KV cache (the policy's own, when the backbone is the policy), then the
      candidates go in as a tree batch — candidate (t, v) sits at position |x| + t and attends to x ⊕ y_<t
      and itself only — in chunks of ``chunk_tokens`` candidates (default
      :data:`~perbench.models.stepper.TREE_CHUNK`; the cache is cropped back after each); a candidate that
      is y_t itself takes its state from that forward (so T·(k − 1) tree states when y_t is in the top-k);
      they are scored by the RM's one reward function ``rewards`` with the item's user
      and prompt;
    * any other RM with a per-prefix reward (``no_prefix_reward`` is None: GenARM, P-DPO, global_bt_v2)
      computes them itself (``teacher_forced_candidate_rewards``, one forward over the full response).
    """
    import torch
    from transformers import DynamicCache

    from perbench.models.chat import encode_pair
    from perbench.rewards.base import FeatureRM

    problem = policy_accuracy_problem(policy, rm)
    if problem is not None:
        raise TypeError(f"RGD policy accuracy for {type(rm).__name__}: {problem}")
    token_level = _is_token_scorer(rm)
    rm_lm = _rm_backbone(rm)
    shared = rm_lm is not None and rm_lm.model is policy.model and _is_feature_rm(rm)
    dev = policy.policy.device
    dec, head = policy.model.get_decoder(), policy.model.get_output_embeddings()
    out: list[RGDInputs] = []
    chunk_for = _tree_chunks(rm_lm, chunk_tokens, max_length, k)

    with torch.inference_mode():
        for it in items:
            ids, T, _ = encode_pair(policy.tokenizer, it.prompt, it.response, max_length)
            if T == 0:
                out.append(RGDInputs(np.zeros((0, k)), np.zeros((0, k)), np.zeros(0, np.int64), np.zeros(0)))
                continue
            L, P = len(ids), len(ids) - T
            x = torch.tensor([ids], dtype=torch.long, device=dev)
            cache = DynamicCache(config=policy.model.config) if shared else None
            hid = dec(input_ids=x, cache=cache, use_cache=cache is not None).last_hidden_state[0]
            hp = hid[P - 1 : L - 1]  # (T, d): the state that predicts y_t
            logits = head(hp).float()  # log π = logits − logsumexp: no second (T, V) array
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            kk = min(k, logits.shape[-1])
            top_logit, cands = logits.topk(kk, dim=-1)  # (T, k)
            top_lp = top_logit - lse
            y = x[0, P:]
            eq = cands == y[:, None]
            hit = torch.where(eq.any(1), eq.int().argmax(1), torch.full_like(y, -1))
            lp_y = (logits.gather(-1, y[:, None]) - lse)[:, 0].double().cpu().numpy()
            own: np.ndarray | None = None
            if shared:  # the response's own per-token rewards: the states at y_t of this same forward
                assert isinstance(rm, FeatureRM)
                own = rm.rewards([it.user_id] * T, [it.prompt] * T, hid[P:L].float()).double().cpu().numpy()
            if token_level:
                r = rm.candidate_rewards([it.user_id] * T, hp, cands)  # type: ignore[attr-defined]
            elif shared:  # the policy's forward over x ⊕ y already filled the RM backbone's cache
                from perbench.models.stepper import tree_candidate_hidden

                assert rm_lm is not None
                h = tree_candidate_hidden(rm_lm, ids, P, cands, chunk_tokens=chunk_for, cache=cache, own=hid[P:L])
                assert isinstance(rm, FeatureRM)
                r = rm.rewards([it.user_id] * (T * kk), [it.prompt] * (T * kk), h.reshape(T * kk, -1).float())
            else:
                r = rm.teacher_forced_candidate_rewards(it, ids[P:], cands)
            out.append(
                RGDInputs(
                    top_lp.double().cpu().numpy(),
                    r.double().cpu().numpy().reshape(T, kk),
                    hit.cpu().numpy().astype(np.int64),
                    lp_y,
                    own,
                )
            )
    return out


# ------------------------------------------------------------------------------------------------------------
# Every variant in one pass, for the runner.

#: The variant reported first: the sequence tilt log π(y | x) + w·r_u(x, y) (see the module docstring).
HEADLINE = "tilt"
#: each variant's value for the policy alone (w = 0)
W0 = {"tilt": "policy_sum", "prefix_mean": "policy_mean", "prefix_sum": "policy_sum", "rgd_mean": "w0_mean"}
#: Variants of :func:`policy_accuracy_scores` that are compared chosen vs rejected.
VARIANTS = (
    "tilt",
    "policy_sum",
    "prefix_mean",
    "prefix_sum",
    "policy_mean",
    "rgd_mean",
    "rgd_sum",
    "w0_mean",
    "w0_sum",
)
VARIANT_DOC = {
    "tilt": "headline, the sequence tilt: log π(y|x) + w·r(x, y), r on the whole response (shift-invariant)",
    "policy_sum": "log π(y|x): the policy alone (the headline at w = 0)",
    "prefix_mean": "variant: (Σ_t log π(y_t) + w·r(x, y_≤t)) / T, the prefix-sum / length reading",
    "prefix_sum": "variant: Σ_t [log π(y_t) + w·r(x, y_≤t)] — changes when a constant is added to r (c·w·T)",
    "policy_mean": "mean_t log π(y_t): the prefix-mean variant at w = 0",
    "rgd_mean": "variant: mean_t log π_RGD(y_t), the top-k RGD-induced policy (top-k softmax of log π + w·r)",
    "rgd_sum": "variant: Σ_t log π_RGD(y_t), the top-k RGD-induced policy",
    "w0_mean": "the top-k RGD-induced policy at w = 0: the policy alone over its top-k",
    "w0_sum": "Σ_t of the same at w = 0",
}


def _is_token_scorer(rm: object) -> bool:
    return callable(getattr(type(rm), "candidate_rewards", None))


def _is_feature_rm(rm: object) -> bool:
    from perbench.rewards.base import FeatureRM

    return isinstance(rm, FeatureRM) and not _is_token_scorer(rm)


def _rm_backbone(rm: object) -> LoadedLM | None:
    """The LM whose tokenizer the RM's per-prefix reward reads (None: the policy's own, or not known)."""
    from perbench.models.loader import LoadedLM

    ext = getattr(rm, "extractor", None)
    lm = getattr(ext, "lm", None) if ext is not None else getattr(rm, "lm", None)
    if lm is None:
        lm = getattr(rm, "base", None)
    return lm if isinstance(lm, LoadedLM) else None


def policy_accuracy_problem(policy: LoadedLM, rm: RewardModel) -> str | None:
    """Why policy accuracy cannot be computed for this (policy, RM) (None: it can). The runner reports the
    reason as "not applicable"."""
    if _is_token_scorer(rm):
        if getattr(rm, "backbone_fingerprint", None) != policy.fingerprint:
            return "a token-level scorer must be built on the policy's own hidden states"
        return None
    reason = getattr(rm, "no_prefix_reward", "this method defines no reward for a partial response")
    if reason is not None:
        return str(reason)
    lm = _rm_backbone(rm)
    if lm is None:
        return "the reward model is not fitted (no backbone)"
    if lm.tokenizer.get_vocab() != policy.tokenizer.get_vocab():
        return f"the RM backbone ({lm.name}) does not share the policy's tokenizer"
    return None


def policy_accuracy_scores(
    policy: LoadedLM,
    rm: RewardModel,
    items: Sequence[ScoreItem],
    *,
    w: float,
    k: int,
    max_length: int = 1024,
    chunk_tokens: int | None = None,
) -> dict[str, np.ndarray]:
    """Per response (one entry per item): every variant of :data:`VARIANTS`, plus ``misses`` (tokens
    outside the policy's top-k) and ``T`` (response tokens). ``w`` is the weight of the paired decoder,
    ``k`` the top-k of the RGD-induced policy. Raises TypeError when :func:`policy_accuracy_problem` gives a
    reason."""
    problem = policy_accuracy_problem(policy, rm)
    if problem is not None:
        raise TypeError(f"policy accuracy for {type(rm).__name__}: {problem}")
    if k < 1:
        raise ValueError(f"policy accuracy: k must be ≥ 1, got {k}")
    inputs = rgd_policy_inputs(policy, rm, items, k=k, max_length=max_length, chunk_tokens=chunk_tokens)
    # one policy forward per response gave log π(y_t) and, on a shared backbone, the per-token rewards too
    lp_y = [i.lp_y if i.lp_y is not None else np.zeros(0) for i in inputs]
    if all(i.token_rewards is not None and len(i.hit) for i in inputs):
        tok_r = [np.asarray(i.token_rewards) for i in inputs]
        wholes = np.array([float(r[-1]) for r in tok_r])  # r on the whole response: its last token's state
    else:
        tok_r, wholes = rm.token_rewards(items), rm.score(items)
    out: dict[str, list[float]] = {v: [] for v in (*VARIANTS, "misses", "T")}
    for inp, r, lp, whole in zip(inputs, tok_r, lp_y, wholes, strict=True):
        T = len(inp.hit)
        if len(r) != T or len(lp) != T:
            raise ValueError(f"policy accuracy: {T} policy tokens but {len(r)} reward / {len(lp)} log-prob values")
        n = max(T, 1)
        g, miss = rgd_policy_logprob(inp, w)
        g0, _ = rgd_policy_logprob(inp, 0.0)
        s = float(np.sum(lp) + w * np.sum(r))
        vals = {
            "tilt": float(np.sum(lp)) + w * float(whole),
            "rgd_sum": g,
            "rgd_mean": g / n,
            "w0_sum": g0,
            "w0_mean": g0 / n,
            "policy_sum": float(np.sum(lp)),
            "policy_mean": float(np.sum(lp)) / n,
            "prefix_sum": s,
            "prefix_mean": s / n,
            "misses": float(miss),
            "T": float(T),
        }
        for key, v in vals.items():
            out[key].append(v)
    return {key: np.asarray(v, np.float64) for key, v in out.items()}


def policy_accuracy_from_scores(
    chosen: dict[str, np.ndarray],
    rejected: dict[str, np.ndarray],
    users: Sequence[str],
    w: float,
    k: int,
    *,
    tie: str = "strict",
    n_boot: int = 1000,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Accuracy of every variant present (mean 1[S(y_w) > S(y_l)] under the tie rule) from
    :func:`policy_accuracy_scores` (or :func:`teacher_forced_scores`, or just ``tilt`` and ``policy_sum``) of
    the chosen and rejected sides, with the miss accounting when the top-k variants are there.
    ``headline`` names the sequence tilt; ``w0`` is its value for the policy alone."""
    docs = {v: VARIANT_DOC[v] for v in VARIANTS if v in chosen}
    out: dict[str, Any] = {"w": w, "k": k, "headline": HEADLINE, "variants": docs}
    for variant in (v for v in VARIANTS if v in chosen):
        a = policy_accuracy(
            chosen[variant], rejected[variant], users, tie=tie, n_boot=n_boot, seed=seed, prompts=prompts
        )
        a.pop("per_user", None)
        out[variant] = a
    out["w0"] = out[W0[HEADLINE]]
    if "misses" not in chosen:
        return out
    miss_w, miss_l = chosen["misses"] > 0, rejected["misses"] > 0
    n_resp = 2 * len(miss_w)
    out["miss_rate"] = float((miss_w.sum() + miss_l.sum()) / n_resp) if n_resp else None
    n_tok = float(chosen["T"].sum() + rejected["T"].sum())
    out["token_miss_rate"] = float(chosen["misses"].sum() + rejected["misses"].sum()) / n_tok if n_tok else None
    out["pairs_any_miss"] = int((miss_w | miss_l).sum())
    out["pairs_both_miss"] = int((miss_w & miss_l).sum())
    return out
