"""Policy accuracy (the headline, and every variant, as the runner computes them) vs one plain forward per response.

The headline (the sequence tilt log π(y|x) + w·r(x, y)) needs log π of the response and the RM's reward of it:
on the policy's own backbone both come from one forward per response (the run's test-feature pass stores φ and
log π(y_t) together). Every variant together adds the policy's top-k at every position and the reward of every
top-k candidate (T·k candidate states from a tree batch on the response's KV cache); the response's own log π and
per-token rewards come from the same forward. The floor is one forward per response. Each call gets a fresh
feature store, as in a run where the test responses' features are not cached yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common import Goal, Section, Settings, interleaved, load_policy, table
from perf_guided import fit_rm, rebind


def run(settings: Settings) -> Section:
    import torch

    from perbench.data.rubrics.benchmark import load_rubrics
    from perbench.metrics import policy_accuracy as pa
    from perbench.models.chat import encode_pair
    from perbench.rewards.base import ScoreItem

    sec = Section("policy_accuracy", "Policy accuracy vs one forward per response")
    policy = load_policy(settings)
    rm, _ = fit_rm(policy, train_prompts=2)  # the head's quality does not change the cost
    bench = load_rubrics(max_train_prompts=0, max_test_prompts=settings.size(4, 1))
    pairs = bench.pairs[: settings.size(2, 1)]
    items = [ScoreItem(p.user_id, p.prompt, y) for p in pairs for y in (p.chosen, p.rejected)]
    k, w = 10, 1.0
    ids = [encode_pair(policy.tokenizer, it.prompt, it.response, 1024) for it in items]
    n_tok = sum(len(x) for x, _, _ in ids)
    n_resp = sum(t for _, t, _ in ids)
    dev = policy.policy.device
    dec = policy.model.get_decoder()

    def one_forward() -> None:
        with torch.inference_mode():
            for x, _, _ in ids:
                dec(input_ids=torch.tensor([x], device=dev))

    def fresh() -> Any:
        return rebind(rm, policy)

    def full() -> None:
        pa.policy_accuracy_scores(policy, fresh(), items, w=w, k=k)

    def rgd_inputs() -> None:
        pa.rgd_policy_inputs(policy, rm, items, k=k)

    def token_rewards() -> None:
        fresh().token_rewards(items)

    def headline() -> None:  # as the run: the test-feature pass, then the RM's scores and log π sums from it
        r = fresh()
        toks = r.extractor.tokens([(it.prompt, it.response) for it in items])
        lp = [float(t.logprobs.sum()) for t in toks]
        pa.sequence_tilt(lp, r.score(items), w)

    variants: dict[str, Callable[[], None]] = {
        "one forward per response (the floor)": one_forward,
        "headline: sequence tilt (log π and r from one forward)": headline,
        "policy_accuracy_scores, every variant": full,
        "of which: top-k + candidate rewards (rgd_policy_inputs)": rgd_inputs,
        "for comparison: per-token rewards alone (token_rewards, fresh store)": token_rewards,
    }
    med, _ = interleaved(variants, settings.rounds, settings.device, warmup=False)
    base = med["one forward per response (the floor)"]
    rows = [[name, f"{s:.2f}", f"{s / base:.1f}"] for name, s in med.items()]
    ratio = med["policy_accuracy_scores, every variant"] / base
    head = med["headline: sequence tilt (log π and r from one forward)"] / base
    sec.body += [
        f"{len(items)} responses of the rubric benchmark's test pairs ({n_tok} tokens with their prompts, {n_resp} "
        f"response tokens), RM: LoRe on the policy's backbone, k = {k}, w = {w:g}; median of {settings.rounds} "
        "interleaved rounds (no warm-up pass: each call starts from an empty feature store anyway).",
        "",
        *table(["what", "seconds", "× one forward per response"], rows),
        "",
        f"The headline costs **{head:.2f}×** one forward per response: the forward that gives φ(x, y) also gives "
        "log π(y_t) (the head's projection over the response tokens is the extra), and the RM's score reads φ from "
        f"it. Every variant together costs **{ratio:.1f}×** (k = {k}): the candidate rewards are nearly all of it, "
        f"{n_resp} × {k} candidate states, i.e. {k}× the response tokens, in tree batches (each candidate attends to "
        "its prefix in the cache and to itself); the response's own log π and per-token rewards come from the same "
        "policy forward that gives the top-k, so no second or third pass over x ⊕ y.",
    ]
    sec.goals.append(
        Goal(
            "policy accuracy headline vs one forward per response",
            "≤ 1.2×",
            f"{head:.2f}×",
            head <= 1.2,
            "the RM shares the policy's backbone",
        )
    )
    sec.goals.append(
        Goal(
            "policy accuracy, every variant, vs one forward per response",
            f"≤ {k}× (k = {k})",
            f"{ratio:.1f}×",
            ratio <= k,
            "the candidate tree is k× the response tokens",
        )
    )
    sec.figures = {"seconds": med, "ratio": ratio, "headline_ratio": head}
    return sec
