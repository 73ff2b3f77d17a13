"""Policy accuracy (the headline, and every variant, as the runner computes them) vs one forward per response.

The headline (the sequence tilt log π(y|x) + w·r(x, y)) needs log π of the response and the RM's reward of it:
on the policy's own backbone both come from one forward per response (the run's test-feature pass stores φ and
log π(y_t) together). Every variant together adds the policy's top-k at every position and the reward of every
top-k candidate (tree batches on the response's KV cache; a candidate that is y_t itself reuses its state); the
response's own log π and per-token rewards come from the same forward. Three floors, side by side: the backbone
alone (last hidden states, no logits), the backbone plus the LM head over the response tokens (log π(y_t): the
least a forward that yields log π(y | x) does; the goals are read against it), and the causal LM's own forward
(logits at every position). Each call gets a fresh feature store, as in a run where the test responses' features
are not cached yet.
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

    head_proj = policy.model.get_output_embeddings()

    def one_forward() -> None:
        with torch.inference_mode():
            for x, _, _ in ids:
                dec(input_ids=torch.tensor([x], device=dev))

    def forward_logprobs() -> None:  # what a forward that yields log π(y | x) needs: the head at y's positions only
        with torch.inference_mode():
            for x, T, _ in ids:
                h = dec(input_ids=torch.tensor([x], device=dev)).last_hidden_state[0, len(x) - T - 1 : len(x) - 1]
                logits = head_proj(h).float()
                tgt = torch.tensor(x[len(x) - T :], device=dev)
                float((logits.gather(-1, tgt[:, None])[:, 0] - torch.logsumexp(logits, -1)).sum())

    def causal_lm() -> None:
        with torch.inference_mode():
            for x, _, _ in ids:
                policy.model(input_ids=torch.tensor([x], device=dev))

    def fresh() -> Any:
        return rebind(rm, policy)

    def full() -> None:
        pa.policy_accuracy_scores(policy, fresh(), items, w=w, k=k)

    def rgd_inputs() -> Any:
        return pa.rgd_policy_inputs(policy, rm, items, k=k)

    def token_rewards() -> None:
        fresh().token_rewards(items)

    def headline() -> None:  # as the run: the test-feature pass, then the RM's scores and log π sums from it
        r = fresh()
        toks = r.extractor.tokens([(it.prompt, it.response) for it in items])
        lp = [float(t.logprobs.sum()) for t in toks]
        pa.sequence_tilt(lp, r.score(items), w)

    floor_a = "floor A: one forward per response, backbone only (hidden states, no logits)"
    floor_b = "floor B: one forward per response + LM head over the response tokens (log π(y_t))"
    floor_c = "floor C: the causal LM's forward per response (logits at every position)"
    variants: dict[str, Callable[[], Any]] = {
        floor_a: one_forward,
        floor_b: forward_logprobs,
        floor_c: causal_lm,
        "headline: sequence tilt (log π and r from one forward)": headline,
        "policy_accuracy_scores, every variant": full,
        "of which: top-k + candidate rewards (rgd_policy_inputs)": rgd_inputs,
        "for comparison: per-token rewards alone (token_rewards, fresh store)": token_rewards,
    }
    cpu: dict[str, float] = {}
    med, outs = interleaved(variants, settings.rounds, settings.device, warmup=False, cpu=cpu)
    hits = sum(int((i.hit >= 0).sum()) for i in outs["of which: top-k + candidate rewards (rgd_policy_inputs)"])
    # one torch thread on a CPU: the process's CPU time is the work itself, while wall time also counts the
    # waits for a core of a shared machine (they swing the wall medians by up to 2× here); else wall time
    on_cpu = settings.device == "cpu" and torch.get_num_threads() == 1
    clock = cpu if on_cpu else med
    clock_name = "CPU time" if on_cpu else "wall time"
    rows = [
        [
            name,
            f"{med[name]:.2f}",
            f"{med[name] / med[floor_a]:.2f}",
            f"{cpu[name]:.2f}",
            f"{cpu[name] / cpu[floor_a]:.2f}",
            f"{cpu[name] / cpu[floor_b]:.2f}",
        ]
        for name in med
    ]
    full_n, head_n = "policy_accuracy_scores, every variant", "headline: sequence tilt (log π and r from one forward)"
    ratio, head = clock[full_n] / clock[floor_b], clock[head_n] / clock[floor_b]
    ratio_a, head_a = clock[full_n] / clock[floor_a], clock[head_n] / clock[floor_a]
    n_tree = n_resp * k - hits
    sec.body += [
        f"{len(items)} responses of the rubric benchmark's test pairs ({n_tok} tokens with their prompts, {n_resp} "
        f"response tokens), RM: LoRe on the policy's backbone, k = {k}, w = {w:g}; median of {settings.rounds} "
        "interleaved rounds (no warm-up pass: each call starts from an empty feature store anyway), wall time and "
        f"the process's CPU time side by side; the goals read the {clock_name}.",
        "",
        *table(["what", "wall s", "wall × A", "CPU s", "CPU × A", "CPU × B"], rows),
        "",
        f"In {clock_name}, against floor B the headline costs **{head:.2f}×** and every variant together "
        f"**{ratio:.1f}×** (k = {k}); against the backbone alone (floor A), {head_a:.2f}× and {ratio_a:.1f}×. The "
        "goals are read against floor B: the headline needs log π(y | x), and no forward yields it without the LM "
        "head at the response's positions (SmolLM2's head, vocabulary 49,152 × hidden 576, is about a fifth of the "
        "135M backbone's per-token work); a causal LM's own forward (floor C) projects every position, the "
        "prompt's too. The headline's forward gives φ(x, y) and log π(y_t) together (a pair's two responses share "
        "their prompt's pass) and the RM's score reads φ from it. Every variant adds the candidate tree: at each of "
        f"the {n_resp} response positions the top-{k} candidates other than y_t itself (y_t was among them at "
        f"{hits} of the {n_resp} positions, so {n_tree} tree states, {n_tree / n_tok:.1f}× the tokens of floor A), "
        "each attending to its prefix in the KV cache and to itself, in chunks; the response's own log π and "
        "per-token rewards come from the policy forward that gives the top-k.",
    ]
    sec.goals.append(
        Goal(
            "policy accuracy headline vs one forward per response",
            "≤ 1.2×",
            f"{head:.2f}× floor B (backbone + LM head on y); {head_a:.2f}× the backbone alone ({clock_name})",
            head <= 1.2,
            "the RM shares the policy's backbone",
        )
    )
    sec.goals.append(
        Goal(
            "policy accuracy, every variant, vs one forward per response",
            f"≤ {k}× (k = {k})",
            f"{ratio:.1f}× floor B; {ratio_a:.1f}× the backbone alone ({clock_name})",
            ratio <= k,
            "the candidate tree: T·(k − 1) states when y_t is in the top-k",
        )
    )
    sec.figures = {
        "seconds": med,
        "cpu_seconds": cpu,
        "clock": clock_name,
        "ratio": ratio,
        "headline_ratio": head,
        "ratio_backbone": ratio_a,
        "headline_ratio_backbone": head_a,
        "tree_states": n_tree,
    }
    return sec
