"""Training noise in the intervals: which systems are stochastic fits, how many fits each pools, and which are one
fit (one draw) only.

A system whose method's fit is stochastic (``stochastic_fit``: PAL, VPL, LoRe, LoRA methods, …) and that pools
several fits (``systems: {fit_seeds: N}``) has cells tagged with their fit seed: its value is the mean over fits and
its CI resamples them on top of users and prompts (:mod:`.data`). One fit of such a method is one draw: its CI
leaves out the variance between fits, and wherever it is ranked it is marked as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.estimates import Estimates


def fit_seeds(est: Estimates, systems: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """``analysis["fit_seeds"]``: ``stochastic`` (the systems whose fit is stochastic), ``fits`` (how many fits each
    pools, counted on its cells' fit seeds), ``single_seed`` (stochastic systems of one fit) and ``rule``."""
    tagged: dict[str, set[int]] = {}
    for i, label in enumerate(est.seed_label):
        if label is None or "\x00fit" not in label:
            continue
        seed = int(label.partition("\x00fit")[2].partition("|")[0])
        tagged.setdefault(str(est.method_of[i]), set()).add(seed)
    members = systems or {}
    stochastic = sorted(m for m in est.methods if (members.get(m) or {}).get("stochastic_fit") or m in tagged)
    fits = {m: len(tagged.get(m, ())) or 1 for m in stochastic}
    return {
        "stochastic": stochastic,
        "fits": fits,
        "single_seed": [m for m in stochastic if fits[m] < 2],
        "rule": (
            "a stochastic method's system pools its fits (systems: {fit_seeds: N}): its value is the mean over fits "
            "and its CI resamples the fits on top of users and prompts; a system of one fit is one draw, its CI "
            "leaves out the variance between fits"
        ),
    }


def single_seed_note(fits: Mapping[str, Any], shown: Sequence[str]) -> str:
    """The verdict's sentence about the systems it names that are one fit of a stochastic method ("" when none)."""
    one = [m for m in shown if m in set(fits.get("single_seed") or [])]
    if not one:
        return ""
    who = ", ".join(dict.fromkeys(one))
    verb = "is one fit" if len(set(one)) == 1 else "are one fit each"
    return (
        f"{who} {verb} of a stochastic method (one training draw): the CI leaves out the variance between fits "
        "(systems: {fit_seeds: 3} pools three)."
    )
