"""How often the default policy's Best-of-N pool lands on each rubric pole (docs/rubrics.md, "Reachability").

    python bench/rubric_reachability.py [--config default] [--max-new-tokens N] [--pool N]
                                        [--samples run/samples.jsonl] [--write-default]

Draws (or reuses, from the cache) the exact pool a run of the config samples for its test prompts: the same
policy, seed per prompt, temperature, top-p, pool size and ``max_new_tokens``, through the same
``BestOfN.pool``; with ``--samples`` it reads the pool texts of a finished run's samples.jsonl instead. Then every
checker annotates every sample, and it prints, as markdown:

- each pole's share of pool samples (with the users who want it), the dead zone's share per aspect;
- per user: the rarest of its wants, the share of samples meeting all of them, and the share of test prompts
  on which at least one of the pool's samples meets all of them (a Best-of-pool oracle could satisfy them).

``--write-default`` stores the default config's pool as ``perbench/data/rubrics/default_pool.jsonl``, which the
tests read (tests/test_rubric_reachability.py): run it after changing the default policy, seed, sampling
parameters, ``max_new_tokens`` or test prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Settings, load_policy, table


def pool_texts(
    config: str, max_new_tokens: int | None, pool: int | None
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """prompt -> the pool's texts, as the config's run samples them (cached samples are reused); ``pool``: only
    the first samples of each prompt's pool (the same texts: sample j's seed does not depend on the size)."""
    from importlib import resources

    from perbench.config import RunConfig
    from perbench.data.records import prompt_key
    from perbench.data.rubrics.prompts import RUBRIC_PROMPTS
    from perbench.decoding.best_of_n import BestOfN
    from perbench.models.generate import GenRequest
    from perbench.runner.state import load_benchmark, seed_for

    path = Path(config)
    if not path.exists():
        path = Path(str(resources.files("perbench") / "configs" / f"{config.removesuffix('.yaml')}.yaml"))
    cfg = RunConfig.from_yaml(path)
    bench = load_benchmark(cfg)
    specs = [d for d in cfg.decoders if d.name == "best_of_n"]
    if not specs:
        raise SystemExit(f"{config}: no best_of_n decoder to take the pool from")
    params = dict(specs[0].params)
    if pool is not None:
        params.update(pool=pool, n=min(pool, int(params.get("n", pool))))
    decoder = BestOfN(**params)
    prompts: dict[str, Any] = {}
    for p in bench.test_pairs():
        prompts.setdefault(prompt_key(p.prompt), p.prompt)
    keys = sorted(prompts)
    if cfg.max_pool_prompts is not None and len(keys) > cfg.max_pool_prompts:
        raise SystemExit("max_pool_prompts is set: this script measures the whole test split only")
    mnt = max_new_tokens or cfg.max_new_tokens
    policy = load_policy(Settings(), cfg.policy)
    reqs = [GenRequest(prompts[k], "*", seed=seed_for(cfg.seed, k)) for k in keys]
    t = time.perf_counter()
    gens = decoder.pool(policy, reqs, max_new_tokens=mnt)
    info = {
        "policy": cfg.policy,
        "fingerprint": policy.fingerprint,
        "seed": cfg.seed,
        "max_new_tokens": mnt,
        "temperature": decoder.temperature,
        "top_p": decoder.top_p,
        "pool": decoder.pool_size,
        "finished": sum(g.finished for row in gens for g in row),
        "sampled": decoder.sampled,
        "reused": decoder.reused,
        "seconds": round(time.perf_counter() - t, 1),
    }
    ids = {p.text: p.prompt_id for p in RUBRIC_PROMPTS}
    return {ids.get(str(prompts[k]), k): [g.text for g in row] for k, row in zip(keys, gens, strict=True)}, info


def write_default(pools: dict[str, list[str]], info: dict[str, Any]) -> None:
    from perbench.data.rubrics.reachability import DEFAULT_POOL_PATH, write_snapshot

    spec = {k: info[k] for k in ("policy", "fingerprint", "seed", "max_new_tokens", "temperature", "top_p", "pool")}
    write_snapshot(DEFAULT_POOL_PATH, spec, dict(sorted(pools.items())))
    print(f"wrote {DEFAULT_POOL_PATH}")


def read_samples(path: Path) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """prompt -> the pool texts of a run's samples.jsonl (its ``bon_sample`` rows, in sample order)."""
    from perbench.data.rubrics.prompts import RUBRIC_PROMPTS

    ids = {p.text: p.prompt_id for p in RUBRIC_PROMPTS}
    by_prompt: dict[str, dict[int, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("kind") == "bon_sample":
            text = json.loads(row["prompt_id"])[-1]["content"]  # a prompt key: the chat messages
            by_prompt.setdefault(ids.get(text, text), {})[int(row["sample"])] = str(row["text"])
    return {k: [v[j] for j in sorted(v)] for k, v in by_prompt.items()}, {"samples": str(path)}


def report(pools: dict[str, list[str]]) -> list[str]:
    from perbench.data.rubrics.aspects import ASPECTS, annotate
    from perbench.data.rubrics.reachability import FLOOR, pole_shares, prompts_satisfiable, unreachable_wants, wanted_by
    from perbench.data.rubrics.users import RUBRIC_USERS

    texts = [t for row in pools.values() for t in row]
    n = len(texts)
    shares = pole_shares(texts)
    wanted = wanted_by()
    rows = []
    for name, asp in ASPECTS.items():
        for pole in asp.poles:
            users = wanted.get((name, pole), [])
            flag = " (below 5 %)" if users and shares[(name, pole)] < FLOOR else ""
            rows.append([name, pole, f"{100 * shares[(name, pole)]:.1f} %{flag}", ", ".join(users) or "none"])
        rows.append([name, "(dead zone)", f"{100 * shares[(name, None)]:.1f} %", ""])
    out = [f"{n} pool samples over {len(pools)} prompts.", ""]
    out += table(["aspect", "pole", "share of samples", "wanted by"], rows, "llrl")
    notes = [annotate(t) for t in texts]
    urows = []
    for u in RUBRIC_USERS:
        share, want = min((shares[(ap.aspect, ap.pole)], f"{ap.aspect}={ap.pole}") for ap in u.rubric)
        meets = sum(all(a[ap.aspect] == ap.pole for ap in u.rubric) for a in notes)
        urows.append(
            [
                u.user_id,
                " ".join(f"{ap.aspect}={ap.pole}" for ap in u.rubric),
                f"{want} {100 * share:.1f} %",
                f"{100 * meets / n:.1f} %",
                f"{prompts_satisfiable(pools, u.rubric)} / {len(pools)}",
            ]
        )
    out += ["", *table(["user", "wants", "rarest want", "samples meeting all", "prompts with one"], urows, "lllrr")]
    below = {uid for uid, _, _ in unreachable_wants(texts)}
    out += ["", f"users with a want below {100 * FLOOR:.0f} % of samples: {len(below)} of {len(RUBRIC_USERS)}"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--pool", type=int, default=None, help="only the first samples of each prompt's pool")
    ap.add_argument("--samples", type=Path, default=None, help="a run's samples.jsonl instead of sampling")
    ap.add_argument("--dump", type=Path, default=None, help="write the pool texts here (JSON)")
    ap.add_argument(
        "--write-default",
        action="store_true",
        help="write the sampled pool to the package's default_pool.jsonl (the default config, no overrides)",
    )
    args = ap.parse_args()
    if args.samples:
        pools, info = read_samples(args.samples)
    else:
        pools, info = pool_texts(args.config, args.max_new_tokens, args.pool)
    if args.write_default:
        if args.samples or args.max_new_tokens or args.pool or args.config != "default":
            raise SystemExit("--write-default takes the default config's own pool: no --samples/--pool/overrides")
        write_default(pools, info)
    if args.dump:
        args.dump.write_text(json.dumps(pools, indent=1))
    print(json.dumps(info))
    print("\n".join(report(pools)))


if __name__ == "__main__":
    main()
