"""Cost of fitting every frozen-feature reward model vs one (global BT) on the same features, in one run.

Features are extracted **once** (into a fresh feature store) and shared by all methods, as in a real run;
each method then reads them back from the store. The goal: all methods together cost ≤ 1.5× one method,
both totals including feature extraction.

Synthetic text pairs: ``--users`` seen users (+ ``--unseen``), two groups with opposite tastes (formal vs
casual answers to the same questions), ``--pairs`` train pairs in all. Accuracy columns are a sanity
check, not a result.

    python bench/bench_train_methods.py [--model tiny-random:0 | smollm2] [--pairs 300] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import numpy as np

METHODS = [
    "mpu",
    "mpu_avg",
    "lore",
    "lore_reg",
    "lore_alt",
    "pal_a",
    "pal_b",
    "vpl",
    "pref",
    "factorized_ranker",
]
TOPICS = [
    "basil",
    "running",
    "emails",
    "camping",
    "coffee stains",
    "touch typing",
    "restaurant bills",
    "phone backups",
    "bread baking",
    "bike repair",
    "tax forms",
    "house plants",
    "job interviews",
    "jet lag",
    "sourdough",
    "public speaking",
    "budgeting",
    "composting",
    "chess openings",
    "guitar",
]
ASPECTS = ["getting started", "common mistakes", "saving time", "doing it cheaply", "doing it safely"]


def make_pairs(n_train: int, n_users: int, n_unseen: int, seed: int = 0) -> tuple[list[Any], list[Any], dict[str, Any]]:
    from perbench.data.records import PreferencePair

    rng = np.random.default_rng(seed)
    users = [f"seen{i:02d}" for i in range(n_users)] + [f"new{i:02d}" for i in range(n_unseen)]

    def one(u: str, j: int, split: str) -> PreferencePair:
        t, a = TOPICS[rng.integers(len(TOPICS))], ASPECTS[rng.integers(len(ASPECTS))]
        q = f"What should I know about {t}, especially {a}? (#{j})"
        formal = f"Certainly. Regarding {t} and {a}, it is advisable to proceed methodically."
        casual = f"oh {t}? honestly just wing it lol, {a} is no big deal, you'll figure it out"
        likes_formal = int(u[-2:]) % 2 == 0
        c, r = (formal, casual) if likes_formal else (casual, formal)
        return PreferencePair(f"{u}-{split}-{j}", u, q, c, r, split)  # type: ignore[arg-type]

    per_user = max(2, n_train // n_users)
    train = [one(u, j, "train") for u in users[:n_users] for j in range(per_user)]
    shots = {u: [one(u, j, "train") for j in range(20)] for u in users[n_users:]}
    test = [one(u, 1000 + j, "test") for u in users for j in range(5)]
    return train, test, shots


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-random:0")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--users", type=int, default=24)
    ap.add_argument("--unseen", type=int, default=6)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all the process may use)")
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()

    import torch

    from perbench.cache import Store
    from perbench.device import set_threads
    from perbench.models.loader import load_lm
    from perbench.registry import reward_models
    from perbench.rewards.base import RMContext, pair_feature_arrays
    from perbench.rewards.features import FeatureExtractor

    if args.threads:
        torch.set_num_threads(args.threads)
    else:
        set_threads()
    t0 = time.perf_counter()
    lm = load_lm(args.model, device="cpu")
    t_load = time.perf_counter() - t0
    train, test, shots = make_pairs(args.pairs, args.users, args.unseen)
    tmp = tempfile.mkdtemp(prefix="perbench-bench-")
    ext = FeatureExtractor(lm, Store(f"{tmp}/features.sqlite"))
    ctx = RMContext(features=ext, seed=0)

    t0 = time.perf_counter()
    pair_feature_arrays(ext, train, desc="train features")
    t_extract = time.perf_counter() - t0
    t0 = time.perf_counter()
    ext.prompt_features([p.prompt for p in train])  # PAL's prompt side (only PAL needs it)
    t_prompt = time.perf_counter() - t0
    # evaluation features are not part of training cost
    pair_feature_arrays(ext, test + [p for s in shots.values() for p in s], desc="eval features")
    ext.prompt_features([p.prompt for p in test + [p for s in shots.values() for p in s]])

    def run(name: str) -> dict[str, Any]:
        rm = reward_models.get(name)()
        t = time.perf_counter()
        rm.fit(train, ctx)
        fit = time.perf_counter() - t
        t = time.perf_counter()
        for n in (1, 2, 5, 10, 20):
            for u, s in shots.items():
                rm.adapt(u, s[:n])
        adapt = time.perf_counter() - t
        c, r = rm.score_pairs(test)
        seen = [bool(a > b) for p, a, b in zip(test, c, r, strict=True) if p.user_id.startswith("seen")]
        new = [bool(a > b) for p, a, b in zip(test, c, r, strict=True) if p.user_id.startswith("new")]
        return {"fit": fit, "adapt": adapt, "seen": float(np.mean(seen)), "new": float(np.mean(new))}

    base = run("global_bt")
    rows = {m: run(m) for m in args.methods.split(",")}
    one_total = t_extract + base["fit"]
    all_total = t_extract + t_prompt + sum(r["fit"] for r in rows.values())

    print(
        f"\n## Fitting frozen-feature RMs on shared features — {lm.name} (d = {lm.hidden_size}), "
        f"{len(train)} train pairs, {args.users} seen + {args.unseen} unseen users, "
        f"{torch.get_num_threads()} torch threads\n"
    )
    print(
        f"model load {t_load:.1f} s (not counted); feature extraction (train pairs, {2 * len(train)} "
        f"texts) {t_extract:.2f} s; prompt features (PAL only) {t_prompt:.2f} s\n"
    )
    print("| method | fit (s) | adapt: every unseen user × n ∈ {1,2,5,10,20} (s) | seen acc | unseen acc, n=20 |")
    print("|---|---:|---:|---:|---:|")
    for name, r in {"global_bt": base, **rows}.items():
        print(f"| {name} | {r['fit']:.2f} | {r['adapt']:.2f} | {r['seen']:.3f} | {r['new']:.3f} |")
    print(
        f"\none method (global_bt) incl. extraction: {one_total:.2f} s; all {len(rows)} methods incl. "
        f"extraction: {all_total:.2f} s; ratio {all_total / one_total:.2f}× (goal ≤ 1.5×)"
    )


if __name__ == "__main__":
    main()
