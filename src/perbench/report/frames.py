"""A run's results as pandas data frames: ``perbench.read_cells(run_dir)`` and ``perbench.read_samples(run_dir)``.

``read_cells`` columns (one row per per-unit outcome, the input of every analysis):

- ``group``, ``method``, ``metric``, ``user``, ``prompt`` (the prompt's canonical JSON key), ``value``: as
  cells.jsonl holds them;
- ``benchmark``, ``policy``, ``seed``: the parts of ``group`` (``benchmark|policy|seedN``);
- ``rl_seed``: an RL-trained policy's training seed (one row per seed; None on every other row);
- ``fit_seed``: the fit seed of a system that pools several fits of a stochastic method (None on every other row);
- ``side``: ``upstream`` (a per-pair metric: ``rm_acc_*``, ``fewshot_acc@N``, ``pa*``) or ``downstream`` (a
  ``DECODER:QUALITY`` metric, one row per (user, prompt) target);
- ``decoder``, ``quality``: the parts of a downstream metric (None upstream);
- ``prompt_text``: the prompt's last user turn;
- ``role``: ``deployable``, ``baseline``, ``oracle``, ``decoder`` (the analysis's roles; None when unrecorded);
- ``family``: the system's method family (``mpu`` for ``mpu(train_fraction=0.25)``).

``read_samples`` has one row per samples.jsonl line (``kind``: ``pair_score``, ``generation``, ``bon_sample``,
``bon_cell``, ``bon_pool_cell``, …) with that kind's fields as columns (nested ones, e.g. ``rubric_aspects``, stay
lists); ``kind=`` keeps one kind. ``as_dataset=True`` returns a ``datasets.Dataset`` instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perbench.errors import ConfigError

CELL_COLUMNS = (
    "group",
    "method",
    "metric",
    "user",
    "prompt",
    "value",
    "benchmark",
    "policy",
    "seed",
    "rl_seed",
    "fit_seed",
    "side",
    "decoder",
    "quality",
    "prompt_text",
    "role",
    "family",
)


def _run_file(run_dir: str | Path, name: str) -> Path:
    d = Path(run_dir)
    path = d / name if d.is_dir() else d
    if not path.is_file():
        raise ConfigError(f"{path} does not exist (is {run_dir} a run directory?)")
    return path


def _results(path: Path) -> dict[str, Any]:
    f = path.parent / "results.json"
    if not f.is_file():
        return {}
    try:
        got = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    return got if isinstance(got, dict) else {}


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _prompt_text(key: str) -> str:
    try:
        msgs = json.loads(key)
    except json.JSONDecodeError:
        return key
    if isinstance(msgs, list):
        users = [m.get("content", "") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1])
    return key


def read_cells(run_dir: str | Path, *, as_dataset: bool = False) -> Any:
    """The run's cells.jsonl as a data frame (columns in the module docstring)."""
    import pandas as pd

    from perbench.runner.cells import read_cells as read_rows

    path = _run_file(run_dir, "cells.jsonl")
    try:
        rows = read_rows(path)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    results = _results(path)
    analysis = _dict(results.get("analysis"))
    roles = _dict(analysis.get("roles"))
    members = _dict(_dict(results.get("systems")).get("members"))
    texts: dict[str, str] = {}
    out = []
    for r in rows:
        bench, _, rest = str(r["group"]).partition("|")
        policy, _, seed = rest.rpartition("|")
        metric = str(r["metric"])
        decoder, colon, quality = metric.partition(":")
        method = str(r["method"])
        member = _dict(members.get(method))
        key = str(r["prompt"])
        if key not in texts:
            texts[key] = _prompt_text(key)
        out.append(
            {
                **{k: r[k] for k in ("group", "method", "metric", "user", "prompt")},
                "value": float(r["value"]),
                "benchmark": bench,
                "policy": policy or None,
                "seed": int(seed[4:]) if seed.startswith("seed") and seed[4:].isdigit() else None,
                "rl_seed": r.get("rl_seed"),
                "fit_seed": r.get("fit_seed"),
                "side": "downstream" if colon else "upstream",
                "decoder": decoder if colon else None,
                "quality": quality if colon else None,
                "prompt_text": texts[key],
                "role": roles.get(method),
                "family": member.get("family") or method.partition("(")[0],
            }
        )
    frame = pd.DataFrame(out, columns=list(CELL_COLUMNS))
    return _dataset(frame) if as_dataset else frame


def read_samples(run_dir: str | Path, kind: str | None = None, *, as_dataset: bool = False) -> Any:
    """The run's samples.jsonl as a data frame (``kind``: one kind of row only)."""
    import pandas as pd

    from perbench.runner.rundir import read_jsonl

    path = _run_file(run_dir, "samples.jsonl")
    rows = read_jsonl(path) or []
    if kind is not None:
        kinds = sorted({str(r.get("kind")) for r in rows})
        rows = [r for r in rows if r.get("kind") == kind]
        if not rows and kind not in kinds:
            raise ConfigError(f"{path} has no rows of kind {kind!r}; its kinds: {', '.join(kinds) or 'none'}")
    frame = pd.DataFrame(rows)
    return _dataset(frame) if as_dataset else frame


def _dataset(frame: Any) -> Any:
    from datasets import Dataset

    return Dataset.from_pandas(frame, preserve_index=False)
