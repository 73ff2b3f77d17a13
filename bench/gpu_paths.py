"""The GPU paths of a run, checked and timed on one device (``python bench/gpu_paths.py [--device cuda]``):

1. the batch sizes the memory estimate gives here (``models/memory.py``) for generation, scoring and tree chunks;
2. greedy generation through transformers' static-cache ``generate`` (compiled on CUDA) against perbench's token
   loop: tokens/s of each at the estimated batch, and how many rows give the same tokens (bf16 kernels may differ
   in the last bit; on a CPU in fp32 every row agrees);
3. a LoRA fit's ``model.train()`` offline: no hub kernel is fetched (``HF_HUB_OFFLINE=1``; it raises if one is).

Prints one JSON object (``--out FILE`` also writes it). The bundled SmolLM2-135M unless ``--policy``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--policy", default="smollm2")
    ap.add_argument("--rows", type=int, default=256, help="requests to generate (prompts repeat)")
    ap.add_argument("--new", type=int, default=56, help="new tokens per request")
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch

    from perbench.data.records import Message
    from perbench.models import library_generate
    from perbench.models.chat import encode_prompt
    from perbench.models.generate import GenRequest, generate_plain, until_stop
    from perbench.models.loader import load_lm
    from perbench.models.memory import estimate_rows, free_bytes, shape_of, tree_chunk_tokens
    from perbench.rewards.lm_utils import add_lora

    lm = load_lm(args.policy, device=None if args.device == "auto" else args.device)
    dev = str(lm.policy.device)
    questions = [
        "Write a haiku about rain.",
        "Name three colours and say which one you like best.",
        "What is the capital of France?",
        "Give me one tip for sleeping well.",
        "Explain photosynthesis to a child.",
        "How do I boil an egg?",
        "Suggest a name for a grey cat.",
        "What is 12 times 13?",
    ]
    reqs = [GenRequest((Message("user", questions[i % 8]),), "u", seed=i) for i in range(args.rows)]
    ids = [encode_prompt(lm.tokenizer, r.prompt) for r in reqs]
    seq = max(len(i) for i in ids) + args.new
    report: dict[str, Any] = {"device": dev, "dtype": lm.policy.dtype, "model": lm.name, "requests": args.rows}
    gen = estimate_rows(lm, seq, "generate")
    score = estimate_rows(lm, 1024, "score")
    free = free_bytes(dev)
    shape, dtype_bytes = shape_of(lm)
    report["estimate"] = {
        "free_bytes": free,
        "generate": gen.record() if gen else None,
        "score": score.record() if score else None,
        "tree_chunk": tree_chunk_tokens(free, shape, 1024, dtype_bytes, 256, 10_240) if free else None,
    }
    batch = gen.rows if gen else 8

    def sync() -> None:
        if dev.startswith("cuda"):
            torch.cuda.synchronize()

    def timed(fn: Any) -> tuple[float, Any]:
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        return time.perf_counter() - t, out

    def loop_rows() -> list[list[int]]:
        out: list[list[int]] = []
        saved = os.environ.get("PERBENCH_LIBRARY_GENERATE")
        os.environ["PERBENCH_LIBRARY_GENERATE"] = "0"  # generate_plain's own token loop
        try:
            for s in range(0, len(reqs), batch):
                out += [g.token_ids for g in generate_plain(lm, reqs[s : s + batch], args.new)]
        finally:
            if saved is None:
                del os.environ["PERBENCH_LIBRARY_GENERATE"]
            else:
                os.environ["PERBENCH_LIBRARY_GENERATE"] = saved
        return out

    def library_rows() -> list[list[int]]:
        out: list[list[int]] = []
        for s in range(0, len(ids), batch):
            rows = until_stop(library_generate.greedy_ids(lm, ids[s : s + batch], args.new), lm.eos_ids)
            out += [r[:-1] if r and r[-1] in lm.eos_ids else r for r in rows]
        return out

    library_rows()  # warm-up: compiles the decode step once on a GPU
    t_lib, lib = timed(library_rows)
    t_loop, loop = timed(loop_rows)
    tokens = sum(len(r) for r in loop)
    report["greedy"] = {
        "batch": batch,
        "token_loop_tok_s": round(tokens / t_loop, 1),
        "library_tok_s": round(sum(len(r) for r in lib) / t_lib, 1),
        "rows_same_tokens": sum(a == b for a, b in zip(lib, loop, strict=True)),
        "library_used_by_run": library_generate.supported(lm),
    }
    peft = add_lora(lm, 4, 8, ["q_proj", "v_proj"])
    peft.train()
    report["lora_train_offline"] = {"ok": True, "kernelized": bool(getattr(peft.get_base_model(), "use_kernels", 0))}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
