"""Sampling a Best-of-N pool, and the user bootstrap, against the plain ways of doing them, side by side.

Sampling: 4 prompts × 16 samples (the default's pool rows: several samples per prompt), SmolLM2-135M, fp32,
EOS disabled so every variant decodes the same number of tokens, nucleus top-p 0.9 as the pool samples. The
variants differ in one thing each, cumulatively: a prefill per row, every row's vocabulary sorted whenever any
row's nucleus lies outside its top 256 tokens, and one ``torch.multinomial`` per row (before); then one prefill
per distinct prompt; then the current sampler (``sample_top_p``: inverse-CDF draws, only the rows that need it
sorted).
Bootstrap: ``bootstrap_by_group`` of the macro mean on 600 pair outcomes of 32 users, 1,000 replicates, on
the same draws: the vectorised path against the per-replicate loop (a wrapper function takes the loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from common import PROMPTS, Goal, Section, Settings, fmt_s, interleaved, load_policy, no_eos, table


def multinomial_top_p(logprobs: Any, top_p: float, gens: list[Any]) -> Any:
    """The former sampler: nucleus of the top 256 (the whole vocabulary of every row sorted when any row's top
    256 hold less than ``top_p``), then one ``torch.multinomial`` per row."""
    import torch

    lp = logprobs.float()
    sorted_lp, order = lp.topk(256, dim=-1)
    if bool((sorted_lp.exp().sum(-1) < top_p).any()):
        sorted_lp, order = lp.sort(dim=-1, descending=True)
    probs = sorted_lp.exp()
    keep = (probs.cumsum(-1) - probs) < top_p
    out = []
    for b in range(len(gens)):
        n = max(int(keep[b].sum()), 1)
        out.append(order[b, torch.multinomial(probs[b, :n], 1, generator=gens[b])[0]])
    return torch.stack(out)


def decode(lm: Any, prompt_ids: list[list[int]], steps: int, *, share: bool, sampler: Callable[..., Any]) -> Any:
    import torch

    from perbench.models.stepper import CachedLM

    state = CachedLM(lm, prompt_ids)
    if not share:
        state.copy_of = torch.arange(len(prompt_ids))
    gens = [torch.Generator().manual_seed(i) for i in range(len(prompt_ids))]
    h = state.prefill()
    out = []
    for _ in range(steps):
        lp = torch.log_softmax(state.logprobs(h), -1)
        t = sampler(lp, 0.9, gens)
        out.append(t)
        h = state.step(t)
    return torch.stack(out, 1)


def run(settings: Settings) -> Section:
    from perbench.models.chat import encode_prompt
    from perbench.models.generate import sample_top_p
    from perbench.stats.intervals import bootstrap_by_group, macro

    sec = Section("sampling", "Sampling a Best-of-N pool, and the user bootstrap")
    lm = no_eos(load_policy(settings))
    n_prompts, per_prompt, steps = settings.size(4, 1), settings.size(16, 4), settings.size(56, 8)
    ids = [encode_prompt(lm.tokenizer, p) for p in PROMPTS[:n_prompts] for _ in range(per_prompt)]
    variants = {
        "prefill per row, multinomial (before)": dict(share=False, sampler=multinomial_top_p),
        "+ one prefill per prompt": dict(share=True, sampler=multinomial_top_p),
        "+ inverse-CDF draws, sort only wide rows (now)": dict(share=True, sampler=sample_top_p),
    }
    fns = {name: (lambda kw=kw: decode(lm, ids, steps, **kw)) for name, kw in variants.items()}
    med, outs = interleaved(fns, settings.rounds)
    base = med[next(iter(med))]
    rows = [[name, fmt_s(t), f"{len(ids) * steps / t:.0f}", f"{base / t:.2f}×"] for name, t in med.items()]
    sec.body += [
        f"{n_prompts} prompts × {per_prompt} samples = {len(ids)} rows, {steps} new tokens each, one batch; "
        f"median of {settings.rounds} interleaved rounds after a warm-up.",
        "",
        *table(["variant", "time", "tokens/s", "speed-up"], rows),
        "",
    ]
    # the first two variants draw with one sampler: a row's tokens differ only where float rounding (a prefill
    # of another batch shape) flips a draw, after which the rest of the row differs too
    a, b = (outs[n] for n in list(variants)[:2])
    same_rows = int((a == b).all(1).sum())
    sec.body.append(
        f"Rows with the same tokens under both prefills (one sampler): {same_rows} of {len(ids)} (a draw is "
        "sensitive to float rounding, and one different draw changes the rest of its row)."
    )
    sec.body.append("")
    first, last = next(iter(med)), list(med)[-1]
    sec.goals.append(
        Goal("pool sampling, now vs before", "faster", f"{med[first] / med[last]:.2f}×", med[last] < med[first])
    )
    sec.figures["sampling_speedup"] = med[first] / med[last]

    rng = np.random.default_rng(0)
    values = rng.integers(0, 3, 600) / 2.0
    users = [f"u{i % 32}" for i in range(600)]
    bmed, bouts = interleaved(
        {
            "per-replicate loop": lambda: bootstrap_by_group(values, users, lambda v, g: macro(v, g)),
            "vectorised": lambda: bootstrap_by_group(values, users, macro),
        },
        settings.rounds,
    )
    equal = np.allclose(bouts["per-replicate loop"], bouts["vectorised"], atol=1e-12)
    sec.body += [
        "User bootstrap (macro mean, 600 outcomes, 32 users, 1,000 replicates):",
        "",
        *table(
            ["variant", "time", "speed-up"],
            [[n, f"{t * 1e3:.1f} ms", f"{bmed['per-replicate loop'] / t:.0f}×"] for n, t in bmed.items()],
        ),
        "",
        f"Same interval from both: {'yes' if equal else 'NO'} ({bouts['vectorised'][0]:.4f}, "
        f"{bouts['vectorised'][1]:.4f}).",
    ]
    sec.goals.append(Goal("user bootstrap, same CI", "identical", "yes" if equal else "no", equal))
    return sec
