"""Pref-LaMP's Table 1 check: how similar the mined negatives are to the chosen titles (ROUGE and BERTScore, from
:mod:`perbench.metrics.text`), against a seeded random permutation of the chosen titles, beside the paper's numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perbench.data.records import Benchmark
from perbench.metrics.text import bertscore, bertscore_settings, rouge


def random_negatives(chosen: Sequence[str], seed: int = 0) -> list[str]:
    """A seeded permutation of the chosen titles with no title paired with itself."""
    n = len(chosen)
    if n < 2:
        raise ValueError("a random-permutation baseline needs at least 2 pairs")
    perm = np.random.default_rng(seed).permutation(n)
    out = []
    for i in range(n):
        j = int(perm[i]) if perm[i] != i else int(perm[(i + 1) % n])
        out.append(chosen[j])
    return out


def table1(
    bench: Benchmark,
    *,
    seed: int = 0,
    with_bertscore: bool = True,
    bertscore_model: str = "minilm",
) -> dict[str, Any]:
    """Similarity of rejected to chosen titles (x100): mined negatives vs a seeded random permutation.

    The paper's Table 1 reports ROUGE-1 24.6 vs 4.7, ROUGE-L 22.2 vs 4.4, BERTScore 60.0 vs 43.7; our
    BERTScore uses the bundled MiniLM without baseline rescaling, so only the gap is comparable.
    """
    chosen = [p.chosen for p in bench.pairs]
    mined = [p.rejected for p in bench.pairs]
    rand = random_negatives(chosen, seed)
    result: dict[str, Any] = {"n": len(chosen), "seed": seed, "scale": "x100", "mined": {}, "random": {}}
    for key, negs in (("mined", mined), ("random", rand)):
        r = rouge(negs, chosen)
        result[key]["rouge1"] = 100.0 * float(r["rouge1"].mean())
        result[key]["rougeL"] = 100.0 * float(r["rougeL"].mean())
    if with_bertscore:  # one call: bert-score loads its model on every call
        f1 = bertscore(mined + rand, chosen + chosen, model=bertscore_model)
        result["mined"]["bertscore"] = 100.0 * float(f1[: len(chosen)].mean())
        result["random"]["bertscore"] = 100.0 * float(f1[len(chosen) :].mean())
        result["bertscore_settings"] = bertscore_settings(bertscore_model)
    result["paper"] = {
        "mined": {"rouge1": 24.6, "rougeL": 22.2, "bertscore": 60.0},
        "random": {"rouge1": 4.7, "rougeL": 4.4, "bertscore": 43.7},
    }
    return result


def format_table1(t: Mapping[str, Any]) -> str:
    """A small text table: metric x (mined, random), with the paper's numbers alongside."""
    names = {"rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "bertscore": "BERTScore"}
    paper = t.get("paper", {})
    lines = [
        f"Pref-LaMP Table 1 - similarity of rejected to chosen titles (x100), n = {t['n']}",
        f"{'metric':<10} {'mined':>7} {'random':>7}   {'paper mined':>11} {'paper random':>12}",
    ]
    for key, label in names.items():
        if key not in t["mined"]:
            continue
        pm = paper.get("mined", {}).get(key)
        pr = paper.get("random", {}).get(key)
        lines.append(
            f"{label:<10} {t['mined'][key]:>7.1f} {t['random'][key]:>7.1f}   "
            f"{'' if pm is None else f'{pm:.1f}':>11} {'' if pr is None else f'{pr:.1f}':>12}"
        )
    return "\n".join(lines)
