"""The object-store size a run's units need, estimated from the plan before any unit runs.

A Ray run keeps each unit's result in the object store until every unit that reads it has finished (and the
benchmark for the whole run). A result is the store entries the unit added, so its size follows from what the unit
computes: per text, a φ is ``hidden × 4`` bytes, a per-token feature entry ``(tokens + 1) × hidden × 4 +
tokens × 4`` (the hidden states, φ and the log-probs), a generation a short JSON record; per array bundle
:data:`ARRAY_BYTES` of zip headers. :func:`estimate` counts them per unit from the run's texts (tokenized as the
feature extractor tokenizes them), cells, pools and backbones' widths; :func:`describe` is the line the run prints.
The RL units' LoRA states are not counted (their size depends on the trainer's adapter), only their generations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perbench.data.records import prompt_key

if TYPE_CHECKING:
    from perbench.runner.plan import Plan
    from perbench.runner.work import Work

#: numpy's zip headers per array of a bundle (``pack_arrays``), and a bundle's own end record
ARRAY_BYTES = 256
#: a generation's record (text, token count, finished) besides the text's bytes, and bytes per generated token
GENERATION_BYTES, TOKEN_BYTES = 96, 6
#: a text's quality record (its metrics on one cell), a win-rate or score record of one cell
QUALITY_BYTES, CELL_BYTES = 128, 96
#: what any unit's result holds at least (its scores, its fit, its summary): a floor, not a measurement
SMALL_BYTES = 64 << 10


def estimate(work: Work, plan: Plan) -> dict[str, int | None]:
    """Each unit's result in bytes (an estimate; docs/cluster.md states how close it comes), by label; None for a
    features unit when this process has no feature extractor to measure the texts with."""
    s, cfg = work.s, work.s.cfg
    rm = s.extractor
    d_rm = int(rm.dim) if rm is not None else 0
    phi = d_rm * 4 + ARRAY_BYTES if rm is not None else 0
    gen = GENERATION_BYTES + TOKEN_BYTES * cfg.max_new_tokens
    out: dict[str, int | None] = {}
    cells: dict[str, int] = {}
    plain: set[str] = set()
    pooled: dict[str, int] = {}  # a pooled system's label → its pool's size per prompt
    if s.policy is not None:
        systems, _ = work.down.systems(work.handles)
        evals, pools = len(work.down.eval_targets()), work.down.pool_targets()
        cells = {"eval": evals, "pool": len(pools), "plain": len(work.down.plain_targets(systems))}
        cells["prompts"] = len({prompt_key(p) for p, _ in pools})
        cells["plain_prompts"] = len({prompt_key(p) for p, _ in work.down.plain_targets(systems)})
        plain = {sys.label for sys in systems if sys.plain}
        pooled = {sys.label: _pool_size(sys.spec) for sys in systems if sys.pooled}
        pooled |= {sys.spec.label(): pooled[sys.label] for sys in systems if sys.pooled}
    for unit in plan.units:
        if unit.kind == "features" and rm is None:
            out[unit.label] = None
            continue
        if unit.kind == "features":
            size = _train_features(work, phi) if unit.name == "train" else _test_features(work, phi)
        elif unit.kind == "pool":
            n = pooled[unit.name]
            size = cells["prompts"] * n * (gen + phi) + cells["pool"] * n * QUALITY_BYTES
        elif unit.kind == "generate" and unit.name in plain:  # one text per prompt, its quality per cell
            size = cells["plain_prompts"] * (gen + phi) + cells["plain"] * QUALITY_BYTES
        elif unit.kind == "generate" and unit.name in pooled:  # its scores of the pool
            size = cells["pool"] * pooled[unit.name] * CELL_BYTES
        elif unit.kind in ("generate", "adaptive"):
            size = cells["eval"] * (gen + phi + QUALITY_BYTES + CELL_BYTES)
        elif unit.kind in ("rl", "rl_eval"):
            size = 2 * cells["eval"] * (gen + QUALITY_BYTES + CELL_BYTES)
        elif unit.kind == "fit" and rm is not None:  # a feature RM's heads: a few vectors per user at most
            size = (len(s.bench.users) + 32) * d_rm * 4 + ARRAY_BYTES
        else:
            size = 0
        out[unit.label] = max(size, SMALL_BYTES)
    return out


def _train_features(work: Work, phi: int) -> int:
    """φ of every distinct train text."""
    pairs = work.up.train_feature_pairs(work.handles)
    return len({(prompt_key(p.prompt), y) for p in pairs for y in (p.chosen, p.rejected)}) * phi


def _test_features(work: Work, phi: int) -> int:
    """Per-token features of every test text (and the policy's, when it is another model), and their φ."""
    from perbench.models.chat import encode_pair

    s = work.s
    texts = {(prompt_key(p.prompt), y): (p.prompt, y) for p in s.bench.test_pairs() for y in (p.chosen, p.rejected)}
    total = 0
    extractors = [s.extractor] if s.policy_extractor is s.extractor else [s.extractor, s.policy_extractor]
    for ex in extractors:
        if ex is None:
            continue
        d = int(ex.dim)
        for prompt, y in texts.values():
            _, t, _ = encode_pair(ex.lm.tokenizer, prompt, y, ex.max_length)
            total += (t + 1) * d * 4 + t * 4 + 3 * ARRAY_BYTES + d * 4 + ARRAY_BYTES
    return total + phi * len(texts)


def _pool_size(spec: Any) -> int:
    """The samples per prompt of a Best-of-N decoder ``spec``."""
    from perbench import registry

    return int(getattr(registry.decoders.get(spec.name)(**spec.params), "n", 1))


def benchmark_bytes(work: Work) -> int:
    """The benchmark as Ray holds it (pickled once for the run)."""
    import pickle

    return len(pickle.dumps(work.s.bench, protocol=5))


def describe(estimated: dict[str, int | None], bench: int) -> dict[str, Any]:
    """The estimate as results.json records it and the line the run prints: the largest result, all results, the
    benchmark, and what each node's object store should hold (twice the largest result plus the benchmark)."""
    sizes = {k: v for k, v in estimated.items() if v is not None}
    unknown = [k for k, v in estimated.items() if v is None]
    big = max(sizes, key=sizes.__getitem__) if sizes else ""
    mb = 2**20
    record = {
        "largest": big,
        "largest_mb": round(sizes.get(big, 0) / mb, 3),
        "total_mb": round(sum(sizes.values()) / mb, 3),
        "benchmark_mb": round(bench / mb, 3),
        "per_node_mb": round((2 * sizes.get(big, 0) + bench) / mb, 3),
        "units_mb": {k: round(v / mb, 3) for k, v in sizes.items()},
        "not_estimated": unknown,
    }
    record["text"] = (
        f"object store (estimated): the largest unit result {record['largest_mb']:g} MB ({big}), "
        f"{record['total_mb']:g} MB in all, the benchmark {record['benchmark_mb']:g} MB; give each node's object "
        f"store at least {record['per_node_mb']:g} MB (docs/cluster.md)"
        + (f"; not estimated: {', '.join(unknown)} (no feature extractor on the driver)" if unknown else "")
    )
    return record
