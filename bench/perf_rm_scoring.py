"""Reward-model pair scoring throughput (pairs/s) vs the reference schemes, side by side on the same pairs.

Data: pairs of the rubric benchmark chosen so that no text appears in two pairs (feature reuse cannot help).
References, on the same token ids: a one-logit ``AutoModelForSequenceClassification`` built from the same
SmolLM2-135M weights, scoring chosen then rejected texts in dataset order at batch 1 and at batch 8 (the
reward-bench scheme), and a plain length-sorted loop at batch 16. perbench's scorer: a frozen-feature head
on the same backbone; chosen and rejected texts in one length-sorted pass whose rows share each pair's
prompt (``FeatureExtractor``), at batch 1 / 8 / 16 texts per forward, each call on an empty feature store;
also ``rm.score_pairs`` as the runner calls it today (chosen and rejected in two passes), and the one-pass
scorer on a bf16 copy of the backbone (the ``--dtype bfloat16`` option).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from common import Goal, Section, Settings, interleaved, load_policy, table

#: reference figures for a SmolLM2-135M classifier on the project's 2-core machines (pairs/s)
REFERENCE = {
    "reward-bench, batch 1": 0.88,
    "reward-bench, batch 8 (its default)": 0.49,
    "length-sorted loop, batch 16": 0.76,
}


def disjoint_pairs(pairs: Sequence[Any], n: int) -> list[Any]:
    seen: set[str] = set()
    out = []
    for p in pairs:
        if p.chosen in seen or p.rejected in seen or p.chosen == p.rejected:
            continue
        seen.update((p.chosen, p.rejected))
        out.append(p)
    return out[:n]


def classifier(lm: Any) -> Any:
    from transformers import AutoModelForSequenceClassification

    from perbench.models.loader import BUNDLED_GGUF, bundled_smollm2_dir, gguf_to_safetensors

    folder = gguf_to_safetensors(bundled_smollm2_dir() / BUNDLED_GGUF)
    clf = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=lm.policy.torch_dtype())
    clf.config.pad_token_id = int(lm.tokenizer.pad_token_id)
    return clf.to(lm.policy.device).eval()


def classifier_scores(clf: Any, pad: int, texts: Sequence[list[int]], batch: int, sort: bool) -> np.ndarray:
    """Scores of token-id sequences, right-padded batches, in the given order or longest first."""
    import torch

    order = sorted(range(len(texts)), key=lambda i: -len(texts[i])) if sort else list(range(len(texts)))
    out = np.zeros(len(texts))
    dev = next(clf.parameters()).device
    with torch.no_grad():
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            L = max(len(texts[i]) for i in idx)
            x = torch.full((len(idx), L), pad, dtype=torch.long)
            m = torch.zeros((len(idx), L), dtype=torch.long)
            for j, i in enumerate(idx):
                x[j, : len(texts[i])] = torch.tensor(texts[i])
                m[j, : len(texts[i])] = 1
            logits = clf(input_ids=x.to(dev), attention_mask=m.to(dev)).logits[:, 0]
            out[idx] = logits.float().cpu().numpy()
    return out


def head(lm: Any) -> Any:
    """A global BT head with a fixed random direction (the head's cost is nothing next to the backbone's)."""
    from perbench.rewards.global_bt import GlobalBT

    rm = GlobalBT()
    rng = np.random.default_rng(0)
    d = lm.hidden_size
    rm.load_state(
        {
            "w": (rng.standard_normal(d) * 0.05).astype(np.float32),
            "mu": np.zeros(d, np.float32),
            "sd": np.ones(d, np.float32),
        }
    )
    return rm


def run(settings: Settings) -> Section:
    import torch

    from perbench.cache import Store
    from perbench.data.rubrics.benchmark import load_rubrics
    from perbench.models.chat import encode_pair, encode_prompt
    from perbench.models.loader import load_lm
    from perbench.rewards.base import pair_feature_arrays
    from perbench.rewards.features import FeatureExtractor

    sec = Section("rm_scoring", "RM pair scoring")
    lm = load_policy(settings)
    lm16 = load_lm("smollm2", device=settings.device, dtype="bfloat16") if lm.policy.dtype != "bfloat16" else None
    clf = classifier(lm)
    pad = int(lm.tokenizer.pad_token_id)
    pairs = disjoint_pairs(load_rubrics().pairs, settings.size(10, 3))
    texts = [encode_pair(lm.tokenizer, p.prompt, y, 1024)[0] for p in pairs for y in (p.chosen, p.rejected)]
    n_tok = sum(len(t) for t in texts)
    prompt_share = sum(2 * len(encode_prompt(lm.tokenizer, p.prompt)) for p in pairs) / n_tok
    rm = head(lm)

    def ref(batch: int, sort: bool) -> Callable[[], np.ndarray]:
        def go() -> np.ndarray:
            s = classifier_scores(clf, pad, texts, batch, sort)
            return s[0::2] - s[1::2]

        return go

    def extractor(model: Any, batch: int) -> FeatureExtractor:
        return FeatureExtractor(
            model, Store(tempfile.mkdtemp(prefix="perbench-bench-") + "/f.sqlite"), batch_size=batch
        )

    def one_pass(model: Any, batch: int) -> Callable[[], np.ndarray]:
        def go() -> np.ndarray:
            ext = extractor(model, batch)
            rm.bind(ext)
            fw, fl = pair_feature_arrays(ext, pairs)
            users = [p.user_id for p in pairs]
            prompts = [p.prompt for p in pairs]
            with torch.no_grad():
                rw = rm.rewards(users, prompts, torch.from_numpy(fw))
                rl = rm.rewards(users, prompts, torch.from_numpy(fl))
            return (rw - rl).double().numpy()

        return go

    def two_passes(batch: int) -> Callable[[], np.ndarray]:
        def go() -> np.ndarray:
            rm.bind(extractor(lm, batch))
            c, r = rm.score_pairs(pairs)
            return np.asarray(c) - np.asarray(r)

        return go

    variants: dict[str, Callable[[], np.ndarray]] = {
        "reference: classifier, batch 1, dataset order": ref(1, False),
        "reference: classifier, batch 8, dataset order": ref(8, False),
        "reference: classifier, batch 16, length-sorted": ref(16, True),
        "perbench: one pass, shared prompts, batch 1": one_pass(lm, 1),
        "perbench: one pass, shared prompts, batch 8": one_pass(lm, 8),
        "perbench: one pass, shared prompts, batch 16": one_pass(lm, 16),
        "perbench: rm.score_pairs (two passes), batch 16": two_passes(16),
    }
    bf16 = "perbench: one pass, shared prompts, batch 8, bf16 backbone"
    if lm16 is not None:
        variants[bf16] = one_pass(lm16, 8)
    # one short untimed call per model warms it up; the timed calls then start from empty stores
    classifier_scores(clf, pad, texts[:2], 1, False)
    for model in (lm, lm16):
        if model is not None:
            extractor(model, 2).last([(pairs[0].prompt, pairs[0].chosen)])
    med, outs = interleaved(variants, settings.size(3, 1), settings.device, warmup=False)
    rate = {name: len(pairs) / s for name, s in med.items()}
    shared = "perbench: one pass, shared prompts, batch 8"
    unshared = "perbench: rm.score_pairs (two passes), batch 16"
    refs = [n for n in rate if n.startswith("reference")]
    exact = [n for n in rate if n.startswith("perbench") and n != bf16]
    best_ref = max(refs, key=rate.__getitem__)
    best_exact = max(exact, key=rate.__getitem__)
    rows = [[n, f"{rate[n]:.2f}", f"{n_tok / med[n]:.0f}", f"{rate[n] / rate[best_ref]:.2f}"] for n in variants]
    agree = float(np.mean(np.sign(outs[bf16]) == np.sign(outs[best_exact]))) if bf16 in outs else float("nan")
    target = 2 * max(REFERENCE.values())
    sec.body += [
        f"{len(pairs)} pairs ({2 * len(pairs)} texts, {n_tok} tokens, {n_tok / (2 * len(pairs)):.0f} per text with its "
        f"prompt), {lm.name} {lm.policy.dtype} unless marked, {torch.get_num_threads()} torch thread(s), median of "
        f"{settings.size(3, 1)} interleaved rounds, each call from an empty feature store.",
        "",
        *table(["scorer", "pairs/s", "tokens/s", "× best reference (same run)"], rows),
        "",
        "Reference figures for these machines (a SmolLM2-135M classifier): "
        + ", ".join(f"{k} {v:.2f} pairs/s" for k, v in REFERENCE.items())
        + f"; the goal is 2 × the best = {target:.2f} pairs/s. The classifier at batch 1 scores "
        f"{rate[refs[0]]:.2f} pairs/s on these pairs in this run.",
        "",
        "On a CPU, padding and the masks it brings cost more than batching saves: the reference is fastest at "
        "batch 1, and perbench's extractor runs one row per forward there (a row: the texts that share a prompt, "
        "up to the batch size). Sharing the pair's prompt (one pass, batch 8) against rows that share nothing "
        "(`rm.score_pairs` extracts chosen and rejected texts in two calls) measured "
        f"{rate[shared] / rate[unshared]:.2f}× here, though prompts are {100 * prompt_share:.0f} % of the tokens: "
        "the packed row's 4-D mask costs about what the prompt's second pass saved. The exact (fp32) scorer is "
        "bound by the backbone's FLOPs. The bf16 backbone nearly doubles the matrix throughput "
        "on CPUs with AVX-512 BF16 (this one) at the price of bf16 features: "
        + (f"its preferences agree with fp32's on {100 * agree:.0f} % of these pairs." if bf16 in outs else "not run."),
    ]
    best_x = rate[best_exact] / rate[best_ref]
    dt = lm.policy.dtype
    sec.goals.append(
        Goal(
            f"RM pair scoring, {dt} (exact features) vs the best reference scheme, same run",
            "≥ 2×",
            f"{best_x:.2f}× ({rate[best_exact]:.2f} vs {rate[best_ref]:.2f} pairs/s)",
            best_x >= 2,
        )
    )
    sec.goals.append(
        Goal(
            f"RM pair scoring, {dt} vs the reference figures",
            f"≥ {target:.2f} pairs/s",
            f"{rate[best_exact]:.2f} pairs/s ({best_exact.split(': ', 1)[1]})",
            rate[best_exact] >= target,
        )
    )
    if bf16 in rate:
        x16 = rate[bf16] / rate[best_ref]
        sec.goals.append(
            Goal(
                "RM pair scoring, bf16 backbone option vs the best reference scheme (fp32), same run",
                "≥ 2×",
                f"{x16:.2f}× ({rate[bf16]:.2f} pairs/s; same preference on {100 * agree:.0f} % of pairs)",
                x16 >= 2,
            )
        )
    sec.figures = {"pairs_per_s": rate, "tokens": n_tok}
    return sec
