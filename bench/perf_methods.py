"""Fitting every frozen-feature reward model vs one (global BT) on the same, shared features.

Features are extracted **once** (into a fresh feature store) and shared by all methods, as in a real run;
each method reads them back from the store. Data: the rubric benchmark's first train prompts; a fixed
quarter of its users are unseen (their train pairs are their few-shot set). Feature extraction is timed
once (a second pass would read the store); the fits and adaptations run in interleaved rounds (medians).
Both totals include the extraction.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common import Goal, Section, Settings, interleaved, load_policy, table

SHOTS = (1, 2, 5, 10)


def feature_methods() -> list[str]:
    """Every registered reward model that is fitted on frozen backbone features (global BT first). The token
    ranker reads the policy's own states while decoding: it is timed with the decoders."""
    from perbench.registry import reward_models
    from perbench.rewards.base import FeatureRM

    names = [e.name for e in reward_models if e.name != "token_ranker"]
    names = [n for n in names if isinstance(cls := reward_models.get(n), type) and issubclass(cls, FeatureRM)]
    return sorted(names, key=lambda n: n != "global_bt")


def run(settings: Settings) -> Section:
    from perbench.cache import Store
    from perbench.data.loaders import assign_unseen
    from perbench.data.rubrics.benchmark import load_rubrics
    from perbench.registry import reward_models
    from perbench.rewards.base import RMContext, pair_feature_arrays
    from perbench.rewards.features import FeatureExtractor

    sec = Section("methods", "Training many methods on shared features")
    methods = feature_methods()
    lm = load_policy(settings)
    n_prompts = settings.size(12, 2)
    bench = load_rubrics(max_train_prompts=n_prompts, max_test_prompts=settings.size(4, 1))
    unseen = assign_unseen(list(bench.users), 0.25, seed=0)
    train = [p for p in bench.pairs if p.split == "train" and p.user_id not in unseen]
    shots: dict[str, list[Any]] = {}
    for p in bench.pairs:
        if p.split == "train" and p.user_id in unseen:
            shots.setdefault(p.user_id, []).append(p)
    test = [p for p in bench.pairs if p.split == "test"]
    ext = FeatureExtractor(lm, Store(tempfile.mkdtemp(prefix="perbench-bench-") + "/features.sqlite"))
    ctx = RMContext(features=ext, seed=0)

    t0 = time.perf_counter()
    pair_feature_arrays(ext, train, desc="train features")
    t_extract = time.perf_counter() - t0
    n_texts = ext.stats.computed
    t0 = time.perf_counter()
    ext.prompt_features([p.prompt for p in train])  # PAL's prompt side (only PAL needs it)
    t_prompt = time.perf_counter() - t0
    # evaluation features are not part of the training cost
    evals = test + [p for s in shots.values() for p in s]
    pair_feature_arrays(ext, evals, desc="eval features")
    ext.prompt_features([p.prompt for p in evals])

    fitted: dict[str, Any] = {}

    def fit(name: str) -> Callable[[], float]:
        def go() -> float:
            rm = reward_models.get(name)()
            rm.fit(train, ctx)
            fitted[name] = rm
            return 0.0

        return go

    med, _ = interleaved({m: fit(m) for m in methods}, settings.size(settings.rounds, 1), settings.device, warmup=False)
    rows = []
    for name in methods:
        rm = fitted[name]
        t = time.perf_counter()
        for n in SHOTS:
            for u, s in shots.items():
                rm.adapt(u, s[:n])
        adapt = time.perf_counter() - t
        c, r = rm.score_pairs(test)
        acc = float(np.mean(np.asarray(c) > np.asarray(r))) if len(test) else float("nan")
        rows.append([name, f"{med[name]:.2f}", f"{adapt:.2f}", f"{acc:.3f}"])
    one = t_extract + med["global_bt"]
    every = t_extract + t_prompt + sum(med.values())
    ratio = every / one
    sec.body += [
        f"{lm.name} (d = {lm.hidden_size}), the rubric benchmark's first {n_prompts} train prompts: {len(train)} train "
        f"pairs of {len(bench.users) - len(unseen)} seen users ({n_texts} distinct texts), {len(unseen)} unseen users, "
        f"{len(test)} test pairs. Feature extraction {t_extract:.1f} s; prompt features (PAL only) {t_prompt:.1f} s. "
        f"Fit times: median of {settings.size(settings.rounds, 1)} interleaved rounds. Adaptation: every unseen "
        f"user at n ∈ {{{', '.join(map(str, SHOTS))}}} shots (one pass). Test accuracy is a sanity check, "
        "not a result.",
        "",
        *table(["method", "fit (s)", "adapt (s)", "test accuracy (all users)"], rows),
        "",
        f"One method (global_bt) with extraction: {one:.1f} s; all {len(methods)} methods with extraction: "
        f"{every:.1f} s; ratio **{ratio:.2f}×**.",
    ]
    sec.goals.append(
        Goal(
            f"all {len(methods)} frozen-feature methods vs one, extraction included",
            "≤ 1.5×",
            f"{ratio:.2f}×",
            ratio <= 1.5,
        )
    )
    sec.figures = {"extract_s": t_extract, "prompt_s": t_prompt, "fit_s": med, "ratio": ratio}
    return sec
