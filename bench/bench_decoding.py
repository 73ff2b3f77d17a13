"""Guided-decoding cost vs plain greedy decoding of the same policy, measured side by side in one run.

Batch 8 prompts, 64 new tokens (EOS disabled so every row decodes all 64), k = 10. Variants are interleaved
over several rounds and the median time per variant is reported, so machine noise hits all alike.

    python bench/bench_decoding.py [--policy smollm2] [--rounds 3] [--reference]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reference", action="store_true", help="also time the one-prompt-at-a-time reference loop")
    args = ap.parse_args()

    import torch

    from perbench.cache import Store
    from perbench.decoding.args import ARGS
    from perbench.decoding.base import GenRequest
    from perbench.decoding.greedy import ZeroShot
    from perbench.device import set_threads
    from perbench.models.loader import LoadedLM, load_lm
    from perbench.rewards.features import FeatureExtractor
    from perbench.rewards.global_bt import GlobalBT

    class NoEOS(LoadedLM):
        @property
        def eos_ids(self) -> list[int]:
            return []

    set_threads()
    loaded = load_lm(args.policy, device="cpu")
    # No EOS: every row decodes exactly `tokens` tokens, so all variants do the same work.
    policy = NoEOS(loaded.model, loaded.tokenizer, loaded.fingerprint, loaded.name, loaded.policy)
    # A second, separate copy of the same weights plays the "separate RM backbone".
    from transformers import AutoModelForCausalLM

    sep_model = AutoModelForCausalLM.from_pretrained(loaded.model.name_or_path, dtype=torch.float32).eval()
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
    reqs = [GenRequest(p, "u", seed=i) for i, p in enumerate(PROMPTS)]
    variants: dict[str, Callable[[], object]] = {
        "greedy (ours)": lambda: ZeroShot().generate(policy, reqs, None, max_new_tokens=args.tokens),
        f"ARGS k={args.k}, shared backbone": lambda: ARGS(k=args.k, w=1.0).generate(
            policy, reqs, shared_rm, max_new_tokens=args.tokens
        ),
        f"ARGS k={args.k}, separate RM": lambda: ARGS(k=args.k, w=1.0).generate(
            policy, reqs, separate_rm, max_new_tokens=args.tokens
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    ntok: dict[str, int] = {}
    variants["greedy (ours)"]()  # warm-up
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t)
            ntok[name] = sum(len(g.token_ids) for g in out)  # type: ignore[attr-defined]
    base = statistics.median(times["greedy (ours)"])
    print(
        f"\npolicy {policy.name}, batch {len(reqs)}, {args.tokens} new tokens, k={args.k}, "
        f"{torch.get_num_threads()} threads, median of {args.rounds} interleaved rounds\n"
    )
    print("| variant | tokens | seconds | tokens/s | × greedy time |")
    print("|---|---:|---:|---:|---:|")
    for name in variants:
        med = statistics.median(times[name])
        print(f"| {name} | {ntok[name]} | {med:.2f} | {ntok[name] / med:.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
