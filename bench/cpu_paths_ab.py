"""The CPU paths a GPU change must leave alone, timed in one process (CPU time, wall time and the outputs as JSON):
greedy and sampled ``generate_plain`` (SmolLM2-135M fp32, 8 prompts at batch 8 × 24 new tokens, 1 torch thread) and
``FeatureExtractor.last`` on 32 texts. Run it alternately under two source trees and compare (docs/benchmarks.md):

    for r in 1 2; do for root in /tmp/before .; do PYTHONPATH=$root/src python bench/cpu_paths_ab.py; done; done

``PERBENCH_THREADS=N`` times it on N threads; ``MKL_CBWR=AUTO`` against the default ``AUTO,STRICT`` times MKL's
strict reproducibility mode (docs/cluster.md, "Threads").
"""

import json
import os
import tempfile
import time

import torch

from perbench.cache import Store
from perbench.data.records import Message
from perbench.models.generate import GenRequest, generate_plain
from perbench.models.loader import load_lm
from perbench.rewards.features import FeatureExtractor


def main() -> None:
    torch.set_num_threads(int(os.environ.get("PERBENCH_THREADS", "1")))
    lm = load_lm("smollm2", device="cpu")
    qs = [
        "Write a haiku about rain.",
        "Name three colours.",
        "What is the capital of France?",
        "Give me a tip for sleeping well.",
        "Explain photosynthesis briefly.",
        "How do I boil an egg?",
        "Suggest a name for a cat.",
        "What is 12 times 13?",
    ]
    reqs = [GenRequest((Message("user", q),), "u", seed=i) for i, q in enumerate(qs)]
    items = [((Message("user", q),), f"Answer {j}: " + "word " * (5 + 3 * j)) for q in qs for j in range(4)]

    def timed(f):  # type: ignore[no-untyped-def]
        t, w = time.process_time(), time.perf_counter()
        out = f()
        return {"cpu_s": round(time.process_time() - t, 2), "wall_s": round(time.perf_counter() - w, 2), "out": out}

    generate_plain(lm, reqs[:2], 4)  # warm-up
    res = {
        "greedy": timed(lambda: [g.token_ids for g in generate_plain(lm, reqs, 24)]),
        "sampled": timed(
            lambda: [g.token_ids for g in generate_plain(lm, reqs, 24, sample=True, temperature=1.0, top_p=0.9)]
        ),
        "features": timed(
            lambda: float(abs(FeatureExtractor(lm, Store(tempfile.mkdtemp() + "/f.sqlite")).last(items)).sum())
        ),
    }
    print(json.dumps(res))


if __name__ == "__main__":
    main()
