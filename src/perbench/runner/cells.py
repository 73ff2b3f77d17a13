"""Cells: every per-unit outcome of a run as one long-format row, the input of the selection analysis.

A row is ``{"group", "method", "metric", "user", "prompt", "value"}``:

- ``group`` names the setting (``benchmark|policy|seedN``); ``perbench compare`` pools groups of several runs;
- ``method`` is a reward model's label, or a decoder's label for decoders that use no reward model;
- ``metric`` is an upstream metric (``rm_acc_seen``, ``rm_acc_unseen``, ``rm_acc_all``, ``rm_acc_pers_only``,
  ``rm_acc_consensus`` (the benchmark's consensus pairs, for every user), ``rm_acc_on_NAME`` (an
  ``upstream_benchmarks`` entry's test pairs, users ``NAME/…``), ``fewshot_acc@N``, ``fewshot_active_acc@N``,
  ``pa`` (policy accuracy, the sequence tilt), ``pa_prefix_mean``, ``pa_prefix_sum``, ``pa_rgd`` (with
  ``pa_rgd``); one row per pair), the diagnostic ``rm_acc_train`` (the reference method's outcome on each user's
  train or few-shot pairs, which select minority users), or a downstream one, ``DECODER:QUALITY`` (one row per
  (user, prompt) target);
- ``rl_seed`` (only on the rows of RL-trained policies, ``rl:QUALITY`` and ``rl_sampled:QUALITY``): the training
  seed, one row per (seed, user, prompt), so the analysis resamples the seeds as the RL table does;
- ``fit_seed`` (only on the rows of a system that pools several fits of a stochastic method, ``systems:
  {fit_seeds: N}``): the fit's seed, the row under the pooled system's label, so the analysis takes the mean over
  fits and resamples them as it does RL training seeds;
- a user for whom a method is not applicable has no row; the reason is reported in results.json.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.isolation import IdRecorder
from perbench.data.records import PreferencePair, prompt_key
from perbench.io import atomic_write_text


class Cells:
    def __init__(self, group: str, pooled: dict[str, tuple[str, int]] | None = None) -> None:
        self.group = group
        self.rows: list[dict[str, Any]] = []
        #: a fit's label -> (the label of the system it is one fit of, its fit seed): its rows go under that label
        self.pooled = dict(pooled or {})

    def add_pairs(self, method: str, metric: str, pairs: Sequence[PreferencePair], values: Iterable[float]) -> None:
        """One row per pair (value 1 / 0 / ½); NaN values are never written (they mean "not applicable")."""
        for p, v in zip(pairs, values, strict=True):
            if not np.isnan(v):
                self.rows.append(self._row(method, metric, p.user_id, prompt_key(p.prompt), float(v)))

    def add(self, method: str, metric: str, user: str, prompt: str, value: float, rl_seed: int | None = None) -> None:
        if not np.isnan(value):
            row = self._row(method, metric, user, prompt, float(value))
            if rl_seed is not None:
                row["rl_seed"] = int(rl_seed)
            self.rows.append(row)

    def _row(self, method: str, metric: str, user: str, prompt: str, value: float) -> dict[str, Any]:
        fit = self.pooled.get(method)
        row = {"group": self.group, "method": method if fit is None else fit[0], "metric": metric, "user": user,
               "prompt": prompt, "value": value}  # fmt: skip
        if fit is not None:
            row["fit_seed"] = int(fit[1])
        return row

    def text(self, ids: IdRecorder | None = None) -> str:
        """The rows as ``cells.jsonl`` holds them, one sorted-key JSON object per line (:func:`jsonl_flat`); with
        ``ids``, as they will read once their ids are recorded (the rows themselves unchanged)."""
        return jsonl_flat(self.rows, ids)

    def record(self, text: str | None = None) -> dict[str, Any]:
        """What results.json keeps of the cells files, so a reader notices a file that lost or changed rows: the
        JSONL's count and digest, and the Parquet copy's digest (``parquet``). ``text``: :meth:`text`, when the
        caller has it."""
        from perbench.runner.tables import parquet_record

        text = self.text() if text is None else text
        return {**cells_record(text.encode("utf-8"), len(self.rows)), "parquet": parquet_record(self.parquet(text))}

    def parquet(self, text: str | None = None) -> bytes:
        """The rows as zstd Parquet (:mod:`perbench.runner.tables`), made once per set of rows (rows may be
        rewritten in place: the set is told by the JSONL text's digest)."""
        from perbench.memo import memo_bytes
        from perbench.runner.tables import cells_table, parquet_bytes

        key = hashlib.sha256((self.text() if text is None else text).encode("utf-8")).hexdigest()
        if getattr(self, "_parquet", (None, ""))[1] != key:  # a rerun with the same rows reads it back
            rows = self.rows
            self._parquet = (memo_bytes("cells_parquet", key, lambda: parquet_bytes(cells_table(rows))), key)
        return self._parquet[0]

    def write(self, path: Path, text: str | None = None) -> None:
        """``path`` (cells.jsonl) and, beside it, cells.parquet."""
        from perbench.io import atomic_write_bytes
        from perbench.runner.tables import CELLS_PARQUET

        text = self.text() if text is None else text
        atomic_write_text(path, text)
        atomic_write_bytes(path.with_name(CELLS_PARQUET), self.parquet(text))


def jsonl_flat(rows: Iterable[dict[str, Any]], ids: IdRecorder | None = None) -> str:
    """``"".join(json.dumps(r, sort_keys=True) + "\\n" for r in rows)``, character for character, made faster for rows
    of strings, ints and finite floats (cells: a run has hundreds of thousands): each distinct string is encoded once
    and each row shape's line template made once. Any other row goes through ``json.dumps`` itself. ``ids``: the
    rows' text as :func:`~perbench.data.isolation.record_ids` would make them (each string mapped once)."""
    strings: dict[str, str] = {}
    shapes: dict[tuple[Any, ...], tuple[tuple[str, ...], str]] = {}  # () : through json.dumps
    out: list[str] = []
    for r in rows:
        keys = tuple(r)
        shape = shapes.get(keys)
        if shape is None:
            ok = bool(keys) and all(type(k) is str and (ids is None or ids.text(k) == k) for k in keys)
            order = tuple(sorted(keys)) if ok else ()
            line = "{" + ", ".join(json.dumps(k).replace("%", "%%") + ": %s" for k in order) + "}\n"
            shape = shapes[keys] = (order, line)
        if shape[0] and type(r) is dict:
            vals: list[str] = []
            for k in shape[0]:
                v = r[k]
                t = type(v)
                if t is str:
                    e = strings.get(v)
                    if e is None:
                        e = strings[v] = json.dumps(v if ids is None else ids.text(v))
                    vals.append(e)
                elif t is int or (t is float and math.isfinite(v)):
                    vals.append(repr(v))
                else:
                    break
            else:
                out.append(shape[1] % tuple(vals))
                continue
        out.append(json.dumps(r if ids is None else ids.walk(r), sort_keys=True) + "\n")
    return "".join(out)


def cells_record(raw: bytes, count: int) -> dict[str, Any]:
    return {"file": "cells.jsonl", "count": count, "sha256": hashlib.sha256(raw).hexdigest()}


def read_cells(path: str | Path) -> list[dict[str, Any]]:
    """The cells of a run directory's ``cells.jsonl``, read and checked by the one run-directory reader
    (:func:`perbench.runner.rundir.read_cells_file`): located errors, finite values, and, with the run's
    results.json beside it, the count and digest it recorded."""
    from perbench.runner.rundir import read_cells_file

    return read_cells_file(Path(path))
