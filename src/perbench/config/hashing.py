"""The config hash: it names the run directory, so the same config resumes the same run. Every value that shapes a
result goes in; where and how the results are computed (the output folder, batch sizes, the executor and its
resources) stays out, and the optional extras are left out while unset, so a config keeps the hash it had before
they existed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: keys that say where or how results are computed, not what they are
NOT_HASHED = (
    "out_dir",
    "run_name",
    "batch_size",
    "feature_batch_size",
    "executor",
    "resources",
    "hub_kernels",
    "allow_slow",
)
#: optional extras: absent (None) = the hash configs had before they existed
HASHED_WHEN_SET = (
    "judge",
    "pa_rgd_k",
    "policies",
    "seeds",
    "verdict_metric",
    "equivalence_margin",
    "equivalence_fraction",
    "verdict_predictor",
    "rl",
    "upstream_benchmarks",
    "systems",
    "adaptive",
    "max_pool_prompts",
    "unit_device",
    "unit_dtype",
)


def _served(value: Any) -> Any:
    """A model served by an endpoint as hashed: its URL and model, not how requests are made (concurrency,
    retries, key); any other model spec as it is."""
    return {f: value[f] for f in ("endpoint", "model")} if isinstance(value, Mapping) else value


def result_hash(config: Mapping[str, Any]) -> str:
    """The 12-hex-digit hash of a config's plain data (``RunConfig.to_dict()``) over what shapes its results."""
    d = dict(config)
    for k in NOT_HASHED:
        d.pop(k, None)
    for k in HASHED_WHEN_SET:
        if d.get(k) is None:
            d.pop(k, None)
    for k in ("policy", "judge"):
        if k in d:
            d[k] = _served(d[k])
    if isinstance(d.get("policies"), list):
        d["policies"] = [_served(v) for v in d["policies"]]
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]
