"""The predictors of benchmark validity in words: what each pair set is, the papers' published values beside
ours, and the sentences of :mod:`.validity` (one per difference, one verdict per downstream metric)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.base import EXTERNAL
from perbench.metrics.correlation import MIN_REPORTED_SYSTEMS

#: the canonical predictors, in this order when present (then every ``rm_acc_on_NAME``)
PREDICTORS = (
    "rm_acc_consensus",
    "rm_acc_pers_only",
    "rm_acc_all",
    "rm_acc_unseen",
    "rm_bok_acc",
    "rm_ties",
    "rm_consistency",
    "pa",
)
DESCRIPTIONS = {
    "rm_acc_consensus": "consensus pairs: every user prefers the same response (a general-quality benchmark)",
    "rm_acc_pers_only": "personalization-only pairs: each pair's preference is reversed by another user",
    "rm_acc_all": "all test pairs, seen and unseen users",
    "rm_acc_unseen": "few-shot accuracy: unseen users after adapting from their shots",
    "pa": "policy accuracy of the reward-guided policy (Rezk et al.)",
    "rm_bok_acc": "best-of-k: the chosen response above all k − 1 rejected responses of its list",
    "rm_ties": "RewardBench 2's Ties score: several correct answers, all above every incorrect one, by a margin",
    "rm_consistency": "paraphrase consistency: a preference scored right under every phrasing of its prompt",
    "rm_acc_paraphrased": "the test pairs asked again under paraphrased prompts",
    "onpolicy_acc": "on-policy pairs: two of the policy's own pool samples for a user whose exact quality differs",
}
#: on-policy predictors (``onpolicy_acc``, ``onpolicy_bok_acc@K``): read from the Best-of-N pool, labelled by the
#: exact quality inside evaluation only
ONPOLICY = "onpolicy_"
#: the curated-pair accuracy every on-policy predictor is compared with
CURATED = "rm_acc_all"
#: the comparison named first when both are present: does personalization-only accuracy beat consensus accuracy?
HEADLINE = ("rm_acc_pers_only", "rm_acc_consensus")
#: published values for context (other RMs, data and downstream judges than any run's: not a test of ours)
PUBLISHED: tuple[dict[str, Any], ...] = (
    {
        "source": "Ma et al., Personalized RewardBench",
        "upstream": "Personalized RewardBench accuracy",
        "downstream": "Best-of-N (LLM judge of rubric aspects)",
        "decoder": "best_of_n",
        "ndcg": 0.918,
        "spearman": 0.257,
    },
    {
        "source": "Ma et al., Personalized RewardBench",
        "upstream": "Personalized RewardBench accuracy",
        "downstream": "PPO (LLM judge of rubric aspects); ours is GRPO",
        "decoder": "rl",
        "ndcg": 0.927,
        "spearman": 0.371,
    },
    {
        "source": "Rezk et al.",
        "upstream": "RM accuracy",
        "downstream": "policy accuracy",
        "pair": ["rm_acc_all", "pa"],
        "kendall_tau": [0.08, 0.31],
    },
)


def describe(metric: str) -> str:
    if metric.startswith(EXTERNAL):
        name, _, kind = metric[len(EXTERNAL) :].partition("@")
        what = {"bok": "best-of-k on the lists", "ties": "the Ties score", "consistency": "paraphrase consistency"}
        head = f"{what[kind]} of the test pairs" if kind in what else "the test pairs"
        return f"{head} of {name}, its users strangers to every method"
    if metric.startswith(f"{ONPOLICY}bok_acc@"):
        k = metric.rpartition("@")[2]
        return f"on-policy best-of-{k}: the best of {k} pool samples (by exact quality) above the other {int(k) - 1}"
    return DESCRIPTIONS.get(metric, metric)


def published_for(downstream: str | None = None, pair: Sequence[str] | None = None) -> list[str]:
    """The published values that sit beside a downstream metric (by decoder) or a pair of predictors."""
    out = []
    for p in PUBLISHED:
        if downstream is not None and p.get("decoder") == downstream.partition(":")[0]:
            out.append(
                f"{p['source']}: {p['upstream']} → {p['downstream']}: NDCG {p['ndcg']:.3f}, ρ {p['spearman']:.3f}"
            )
        if pair is not None and sorted(p.get("pair", [])) == sorted(pair):
            lo, hi = p["kendall_tau"]
            out.append(f"{p['source']}: Kendall τ({p['upstream']}, {p['downstream']}) = {lo:.2f}–{hi:.2f}")
    return out


def signed(x: float) -> str:
    return f"{x:+.2f}"


def _interval(ci: Sequence[float] | None) -> str:
    return f" [{signed(ci[0])}, {signed(ci[1])}]" if ci else ", no CI"


def difference_text(entry: Mapping[str, Any]) -> str:
    """One sentence for the τ-b difference of a difference entry (a is the predictor with the higher τ-b)."""
    a, b, d = entry["a"], entry["b"], entry["downstream"]
    t = entry.get("kendall_tau_b") or {}
    if entry.get("na") or t.get("delta") is None:
        return f"{a} vs {b} as predictors of {d}: {entry.get('na') or t.get('na')}."
    n = entry["n_systems"]
    on = f" on the {n} systems both cover" if entry.get("partial") else f" over {n} systems"
    delta = f"Δτ = {signed(t['delta'])}" + (_interval(t["ci"]) if t.get("ci") else "")
    decision = t.get("decision")
    if decision == "identical":
        return f"{a} and {b} rank the systems the same way as predictors of {d}{on}: Δτ = 0 on every resample."
    if decision == "a":
        return f"{a} predicts {d} better than {b}: {delta}{on}."
    if decision == "cannot tell":
        return f"The data cannot tell whether {a} or {b} predicts {d} better: {delta}{on}; the CI includes 0."
    return f"{a} vs {b} as predictors of {d}: {delta}{on}; {t.get('na') or 'no CI'}."


def verdict_text(d: str, lead: str, tau: float, ci: Sequence[float] | None, v: Mapping[str, Any], level: float) -> str:
    pct = f"{100 * level:g}%"
    head = f"{lead} predicts {d} best (τ-b {signed(tau)}" + (f", {pct} CI{_interval(ci)})" if ci else ", no CI)")
    if ci and ci[0] <= 0:
        head += ", though its own CI includes 0"
    by = {c["b"]: c for c in v["comparisons"]}

    def show(m: str) -> str:
        c = by[m]
        if c.get("delta") is None:
            return f"{m} (fewer than {MIN_REPORTED_SYSTEMS} systems have both, or a constant ranking)"
        return f"{m} (Δτ {signed(c['delta'])}" + (_interval(c["ci"]) + ")" if c.get("ci") else ", no CI)")

    bits = []
    if v["better_than"]:
        bits.append("it predicts better than " + ", ".join(show(m) for m in v["better_than"]))
    if v["tied_with"]:
        bits.append("the data cannot tell it from " + ", ".join(show(m) for m in v["tied_with"]))
    if v["identical"]:
        bits.append("it ranks the systems exactly as " + ", ".join(v["identical"]))
    tail = f" ({pct} simultaneous intervals over the comparisons with {lead})" if len(v["comparisons"]) > 1 else ""
    return head + ("; " + "; ".join(bits) if bits else "") + "." + tail
