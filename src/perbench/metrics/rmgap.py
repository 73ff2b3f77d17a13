"""RMGAP's three published metrics, computed as its authors compute them, from pairs loaded by
:func:`perbench.data.benchmarks.rmgap.load_rmgap` (``meta``: ``subset`` = the domain, ``list_id`` = one prompt,
``paraphrase_of`` = its prompt group, ``response_order`` = the chosen and rejected responses' places in key order:
what a sealed pair keeps) and the reward model's per-pair scores.

Per prompt the four responses have one score each. Per domain:

- **Pair**: the winner's score strictly above a loser's, counted over every (prompt, loser), divided by their number;
- **BoN**: the share of prompts whose winner scores strictly above all three others;
- **Consistency**: the share of prompt groups whose full ranking of the four responses (by score, descending, ties
  broken by response key) is identical under all three paraphrases -- a scorer that ignores the prompt gets 1.

Each is reported per domain and as ``Avg``, the unweighted mean over the domains present (RMGAP's macro mean).
A prompt with an unscored (NaN) response is left out of Pair and BoN and makes its group inconsistent, as upstream.
perbench's own listwise variants (``best_of_k``, ``paraphrase_consistency``: a preference kept under every
phrasing) keep their own names.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from perbench.data.records import PreferencePair

PROMPTS_PER_GROUP = 3


ORDER = "response_order"


def _prompt_scores(
    pairs: Sequence[PreferencePair], s_chosen: Any, s_rejected: Any
) -> dict[str, tuple[PreferencePair, dict[int, float]]]:
    """Per prompt (``user``, ``list_id``): its first pair and every response's score by its place in key order."""
    out: dict[str, tuple[PreferencePair, dict[int, float]]] = {}
    for p, sw, sl in zip(pairs, s_chosen, s_rejected, strict=True):
        if p.meta.get(ORDER) is None:
            continue
        winner, loser = (int(i) for i in p.meta[ORDER])
        _, scores = out.setdefault(f"{p.user_id}\x00{p.meta['list_id']}", (p, {}))
        scores.setdefault(winner, float(sw))
        scores[loser] = float(sl)
    return out


def rmgap_metrics(pairs: Sequence[PreferencePair], s_chosen: Any, s_rejected: Any) -> dict[str, Any]:
    """``{"Pair": {domain: value, ..., "Avg": macro mean}, "BoN": ..., "Consistency": ..., counts}``; ``{}`` when
    no pair comes from RMGAP's release."""
    prompts = _prompt_scores(pairs, s_chosen, s_rejected)
    if not prompts:
        return {}
    wins: dict[str, float] = defaultdict(float)
    total: dict[str, int] = defaultdict(int)
    bon: dict[str, list[float]] = defaultdict(list)
    rankings: dict[str, dict[tuple[str, str], list[list[int] | None]]] = defaultdict(lambda: defaultdict(list))
    unscored = 0
    for first, scores in prompts.values():
        domain = str(first.meta.get("subset"))
        group = (first.user_id, str(first.meta.get("paraphrase_of")))
        if any(math.isnan(v) for v in scores.values()):
            unscored += 1
            rankings[domain][group].append(None)
            continue
        winner = int(first.meta[ORDER][0])
        losers = np.array([v for k, v in scores.items() if k != winner])
        beaten = losers < scores[winner]
        wins[domain] += float(beaten.sum())
        total[domain] += len(losers)
        bon[domain].append(float(len(losers) > 0 and beaten.all()))
        rankings[domain][group].append([k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))])
    consistency: dict[str, list[float]] = {}
    for domain, groups in rankings.items():
        flags = []
        for got in groups.values():
            whole = len(got) == PROMPTS_PER_GROUP and all(r is not None for r in got)
            flags.append(float(whole and all(r == got[0] for r in got)))
        consistency[domain] = flags
    domains = sorted(set(total) | set(consistency))

    def table(values: dict[str, float]) -> dict[str, float]:
        out = {d: values.get(d, 0.0) for d in domains}
        out["Avg"] = float(np.mean([out[d] for d in domains])) if domains else 0.0
        return out

    return {
        "Pair": table({d: wins[d] / max(1, total[d]) for d in total}),
        "BoN": table({d: float(np.mean(v)) for d, v in bon.items() if v}),
        "Consistency": table({d: float(np.mean(v)) for d, v in consistency.items() if v}),
        "prompts": len(prompts),
        "prompts_unscored": unscored,
        "rule": "RMGAP's: strict >, per domain, Avg = unweighted mean over domains; Consistency = the full ranking "
        "of the four responses identical under the three paraphrases",
    }
