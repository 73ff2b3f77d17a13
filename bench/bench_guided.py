"""Guided-decoding cost vs plain greedy decoding of the same policy, measured side by side in one run.

Batch 8 prompts, 64 new tokens (EOS disabled so every row decodes all 64), k = 10. Variants are interleaved
over several rounds and the median time per variant is reported, so machine noise hits all alike:

* greedy — the policy alone (the baseline);
* ARGS, separate RM — a linear head on a *second copy* of the weights (another backbone);
* ARGS, shared backbone — the same head on the policy's own backbone: the candidates' tree forward also
  advances the policy (one k-token forward per step);
* ARGS, token-level ranker — candidate rewards from the policy's current hidden state and the candidates'
  embeddings (:class:`~perbench.decoding.token_ranker.TokenRanker`): no extra forward;
* GenARM — the second copy as π_r: one extra one-token forward per step over the full vocabulary;
* reference ARGS loop — one prompt at a time, KV-cached policy and RM, the RM's cache replicated to k rows
  and the k candidates scored as a k-row batch (the reference implementation's scheme). It is timed on
  ``--ref-prompts`` prompts and scaled to the batch (every prompt does the same work: no EOS).

    python bench/bench_guided.py [--policy smollm2] [--rounds 3] [--threads N] [--ref-prompts 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PROMPTS = [
    "How can I keep basil alive on a windowsill?",
    "What is a good way to start running as a beginner?",
    "How do I make my emails sound more professional?",
    "What should I pack for a weekend camping trip?",
    "How do I remove a coffee stain from a white shirt?",
    "Any tips for learning to touch type?",
    "How do I split a restaurant bill fairly with friends?",
    "What is the easiest way to back up my phone photos?",
]


def reference_args(policy: Any, rm: Any, prompt: str, k: int, w: float, tokens: int) -> list[int]:
    """One prompt, KV caches for both models, the RM's cache replicated to k rows (the reference scheme)."""
    import torch
    from transformers import DynamicCache

    from perbench.models.chat import encode_prompt

    rm_lm = rm.extractor.lm
    ids = torch.tensor([encode_prompt(policy.tokenizer, prompt)])
    pdec, head = policy.model.get_decoder(), policy.model.get_output_embeddings()
    rdec = rm_lm.model.get_decoder()
    out: list[int] = []
    with torch.inference_mode():
        pcache, rcache = DynamicCache(config=policy.model.config), DynamicCache(config=rm_lm.model.config)
        h = pdec(input_ids=ids, cache=pcache, use_cache=True).last_hidden_state[:, -1]
        rdec(input_ids=ids, cache=rcache, use_cache=True)
        rcache.batch_repeat_interleave(k)
        for _ in range(tokens):
            top, cands = torch.log_softmax(head(h).float(), -1).topk(k, dim=-1)  # (1, k)
            rh = rdec(input_ids=cands.view(k, 1), cache=rcache, use_cache=True).last_hidden_state[:, -1]
            j = int((top[0] + w * rm.reward_from_features(["u"] * k, rh.float())).argmax())
            rcache.batch_select_indices(torch.full((k,), j, dtype=torch.long))  # every row: the chosen token
            out.append(int(cands[0, j]))
            h = pdec(input_ids=cands[:, j : j + 1], cache=pcache, use_cache=True).last_hidden_state[:, -1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--w", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: every core granted)")
    ap.add_argument("--ref-prompts", type=int, default=2, help="prompts the reference loop is timed on")
    args = ap.parse_args()

    import torch

    from perbench.cache import Store
    from perbench.decoding.args import ARGS
    from perbench.decoding.genarm import GenARMDecoder
    from perbench.decoding.greedy import ZeroShot
    from perbench.decoding.token_ranker import TokenRanker
    from perbench.device import set_threads
    from perbench.models.generate import GenRequest
    from perbench.models.loader import LoadedLM, load_lm
    from perbench.rewards.features import FeatureExtractor
    from perbench.rewards.global_bt import GlobalBT

    class NoEOS(LoadedLM):
        @property
        def eos_ids(self) -> list[int]:
            return []

    if args.threads:
        torch.set_num_threads(args.threads)
    else:
        set_threads()
    loaded = load_lm(args.policy, device="cpu")
    policy = NoEOS(loaded.model, loaded.tokenizer, loaded.fingerprint, loaded.name, loaded.policy)
    import copy

    sep_model = copy.deepcopy(loaded.model).eval()  # a second copy of the weights = "another backbone"
    separate = NoEOS(sep_model, loaded.tokenizer, loaded.fingerprint + ":copy", loaded.name + "-copy", loaded.policy)
    store = Store(tempfile.mkdtemp() + "/features.sqlite")

    def head(lm: LoadedLM) -> GlobalBT:
        rm = GlobalBT()
        d = lm.hidden_size
        rng = np.random.default_rng(0)
        rm.load_state(
            {
                "w": rng.standard_normal(d).astype(np.float32) * 0.05,
                "mu": np.zeros(d, np.float32),
                "sd": np.ones(d, np.float32),
            }
        )
        rm.bind(FeatureExtractor(lm, store))
        return rm

    shared_rm, separate_rm = head(policy), head(separate)
    ranker = TokenRanker().init_random(FeatureExtractor(policy, store), users=["u"], seed=0)
    reqs = [GenRequest(p, "u", seed=i) for i, p in enumerate(PROMPTS)]
    k, w, T = args.k, args.w, args.tokens
    n_ref = max(1, min(args.ref_prompts, len(PROMPTS)))
    variants: dict[str, Callable[[], list[list[int]]]] = {
        "greedy": lambda: [g.token_ids for g in ZeroShot().generate(policy, reqs, None, max_new_tokens=T)],
        f"ARGS k={k}, token-level ranker": lambda: [
            g.token_ids for g in ARGS(k=k, w=w).generate(policy, reqs, ranker, max_new_tokens=T)
        ],
        f"ARGS k={k}, shared backbone": lambda: [
            g.token_ids for g in ARGS(k=k, w=w).generate(policy, reqs, shared_rm, max_new_tokens=T)
        ],
        f"ARGS k={k}, separate RM": lambda: [
            g.token_ids for g in ARGS(k=k, w=w).generate(policy, reqs, separate_rm, max_new_tokens=T)
        ],
        "GenARM (separate π_r)": lambda: [
            g.token_ids for g in GenARMDecoder(beta=1.0).generate(policy, reqs, separate, max_new_tokens=T)
        ],
        f"reference ARGS loop k={k}, separate RM": lambda: [
            reference_args(policy, separate_rm, p, k, w, T) for p in PROMPTS[:n_ref]
        ],
    }
    ref_name = f"reference ARGS loop k={k}, separate RM"
    sep_name = f"ARGS k={k}, separate RM"
    times: dict[str, list[float]] = {name: [] for name in variants}
    outs: dict[str, list[list[int]]] = {}
    variants["greedy"]()  # warm-up
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t)
    scale = {name: 1.0 for name in variants}
    scale[ref_name] = len(PROMPTS) / n_ref
    med = {name: statistics.median(ts) * scale[name] for name, ts in times.items()}
    base = med["greedy"]
    print(
        f"\npolicy {policy.name}, batch {len(reqs)}, {T} new tokens, k={k}, "
        f"{torch.get_num_threads()} threads, median of {args.rounds} interleaved rounds\n"
    )
    print("| variant | tokens | seconds | tokens/s | × greedy time |")
    print("|---|---:|---:|---:|---:|")
    for name in variants:
        ntok = int(sum(len(o) for o in outs[name]) * scale[name])
        note = f" (timed on {n_ref} prompt(s), scaled ×{scale[name]:g})" if scale[name] != 1.0 else ""
        print(f"| {name}{note} | {ntok} | {med[name]:.2f} | {ntok / med[name]:.1f} | {med[name] / base:.2f} |")
    same = outs[ref_name] == outs[sep_name][:n_ref]
    print(
        f"\nbatched ARGS (separate RM) is {med[ref_name] / med[sep_name]:.1f}× faster than the reference "
        f"loop; same tokens on the timed prompts: {'yes' if same else 'no'}"
    )


if __name__ == "__main__":
    main()
