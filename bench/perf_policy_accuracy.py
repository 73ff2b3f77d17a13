"""Policy accuracy (every variant, as the runner computes it) vs one plain forward per response.

Policy accuracy of a frozen-feature RM on the policy's own backbone needs, per response: the policy's
top-k at every position, the reward of every top-k candidate at every position (T·k candidate states
from a tree batch on the response's KV cache), the per-token rewards of the response itself and its
log π. The floor is one forward per response. Each call gets a fresh feature store, as in a run where
the test responses' token features are not cached yet.
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

    def response_logprobs() -> None:
        pa._response_logprobs(policy, items, 1024)

    variants: dict[str, Callable[[], None]] = {
        "one forward per response (the floor)": one_forward,
        "policy_accuracy_scores, every variant": full,
        "of which: top-k + candidate rewards (rgd_policy_inputs)": rgd_inputs,
        "of which: per-token rewards (token_rewards, fresh store)": token_rewards,
        "of which: log π of the response (one more forward)": response_logprobs,
    }
    med, _ = interleaved(variants, settings.rounds, settings.device, warmup=False)
    base = med["one forward per response (the floor)"]
    rows = [[name, f"{s:.2f}", f"{s / base:.1f}"] for name, s in med.items()]
    ratio = med["policy_accuracy_scores, every variant"] / base
    sec.body += [
        f"{len(items)} responses of the rubric benchmark's test pairs ({n_tok} tokens with their prompts, {n_resp} "
        f"response tokens), RM: LoRe on the policy's backbone, k = {k}, w = {w:g}; median of {settings.rounds} "
        "interleaved rounds (no warm-up pass: each call starts from an empty feature store anyway).",
        "",
        *table(["what", "seconds", "× one forward per response"], rows),
        "",
        f"All variants of policy accuracy cost **{ratio:.1f}×** one forward per response. The candidate rewards "
        f"are most of it: {n_resp} × {k} candidate states, i.e. {k}× the response tokens, go through the backbone "
        "in tree batches (each candidate attends to its prefix in the cache and to itself). The rest is three "
        "forwards per response where one would do: `rgd_policy_inputs` runs the policy over x ⊕ y, the "
        "per-token rewards run the RM backbone over it again (the feature extractor stores log π(y_t) from that "
        "same forward), and the response's log π runs it a third time.",
    ]
    sec.goals.append(
        Goal(
            "policy accuracy (every variant) vs one forward per response",
            "reported (no target set)",
            f"{ratio:.1f}×",
            None,
            "the candidate tree is k× the response tokens",
        )
    )
    sec.figures = {"seconds": med, "ratio": ratio}
    return sec
