"""A run's results as pandas data frames: ``perbench.read_cells(RUN_DIRS)``, ``perbench.read_samples(RUN_DIRS)``
(one run directory or a list of them; each read from its Parquet copy when there is one, checked against the
digest results.json records, else from its JSONL) and ``perbench.read_systems(RUN_DIR)`` (the leaderboard).

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
- ``family``: the system's method family (``mpu`` for ``mpu(train_fraction=0.25)``);
- ``run``: the run directory's name (which of several runs the row comes from).

``read_samples`` has one row per samples.jsonl line (``kind``: ``pair_score``, ``generation``, ``bon_sample``,
``bon_cell``, ``bon_pool_cell``, …) with that kind's fields as columns (nested ones, e.g. ``rubric_aspects``, stay
lists); ``kind=`` keeps one kind (and only the columns that kind has), and a ``run`` column names the run.
``as_dataset=True`` returns a ``datasets.Dataset`` instead.

``read_systems`` has one row per system, in the leaderboard's order: ``rank`` (the leaderboard's ``#``: 1 for a
system the verdict metric ranks first, else None), ``system``, ``family``, ``role``, ``status`` (``deploy``,
``best``, ``tied``, ``equivalent``, ``no better than random``, ``reference line``, or None), ``verdict_metric``,
``value`` / ``ci_low`` / ``ci_high`` (the verdict metric), ``gain_over_random`` (with ``gain_ci_low`` /
``gain_ci_high``), ``share_of_headroom`` (with its CI), ``beats_random``, and one column per RM accuracy the run
measured (``rm_acc_seen``, ``rm_acc_unseen``, …).

A Best-of-N pick's text: the ``bon_cell`` samples name each system's pick per (user, prompt) cell by its pool
``sample`` index, and the ``bon_sample`` rows hold each pool sample's text once::

    picks = perbench.read_samples(run, kind="bon_cell")
    pool = perbench.read_samples(run, kind="bon_sample")
    texts = perbench.bon_pick_texts(run)   # the same join, done: one row per (system, user, prompt) with its text
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
    "run",
)


def _run_dirs(run_dirs: Any) -> list[Path]:
    many = [run_dirs] if isinstance(run_dirs, str | Path) else list(run_dirs)
    if not many:
        raise ConfigError("no run directory given")
    return [Path(d) for d in many]


def _run_file(run_dir: str | Path, name: str) -> Path:
    d = Path(run_dir)
    path = d / name if d.is_dir() else d
    if not path.is_file():
        raise ConfigError(f"{path} does not exist (is {run_dir} a run directory?)")
    return path


def _parquet_beside(path: Path, name: str, recorded: Any) -> Path | None:
    """``name`` beside ``path`` when it exists and (``recorded``: the digest results.json keeps) matches."""
    import hashlib

    pq = path.with_name(name)
    if path.name == name or not pq.is_file():
        return None
    if recorded is not None:
        got = hashlib.sha256(pq.read_bytes()).hexdigest()
        if got != recorded:
            raise ConfigError(
                f"{pq}: sha256 {got[:12]}… does not match the {str(recorded)[:12]}… results.json records "
                f"(cells.parquet.sha256): the file changed after the run; delete it to read {path.name}"
            )
    return pq


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


def read_cells(run_dirs: Any, *, as_dataset: bool = False) -> Any:
    """The cells of one run directory, or of several (a list), as one data frame (columns in the module
    docstring)."""
    import pandas as pd

    frames = [_cells_frame(d) for d in _run_dirs(run_dirs)]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return _dataset(frame) if as_dataset else frame


def _cells_frame(run_dir: Path) -> Any:
    import pandas as pd

    from perbench.runner.cells import read_cells as read_rows
    from perbench.runner.tables import CELLS_PARQUET, read_parquet_frame

    path = _run_file(run_dir, "cells.jsonl") if not (run_dir / CELLS_PARQUET).is_file() else run_dir / "cells.jsonl"
    results = _results(path)
    record = _dict(_dict(results.get("cells")).get("parquet"))
    pq = _parquet_beside(path, CELLS_PARQUET, record.get("sha256")) if record or not path.is_file() else None
    if pq is not None:
        raw = read_parquet_frame(pq)
    else:
        try:
            rows = read_rows(path)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        raw = pd.DataFrame(
            rows, columns=["group", "method", "metric", "user", "prompt", "value", "rl_seed", "fit_seed"]
        )
    for col in ("rl_seed", "fit_seed"):
        if col not in raw:  # a Parquet file written before the column existed
            raw[col] = None
        raw[col] = raw[col].astype(object).where(raw[col].notna(), None)
    analysis = _dict(results.get("analysis"))
    roles = _dict(analysis.get("roles"))
    members = _dict(_dict(results.get("systems")).get("members"))
    cat = {k: raw[k].astype(str).astype("category") for k in ("group", "method", "metric", "prompt")}

    def part(col: str, fn: Any) -> Any:
        return cat[col].map({v: fn(v) for v in cat[col].cat.categories}).astype(object)

    out = pd.DataFrame(
        {
            **{k: raw[k].astype(str) for k in ("group", "method", "metric", "user", "prompt")},
            "value": raw["value"].astype(float),
            "benchmark": part("group", lambda g: _group_parts(g)[0]),
            "policy": part("group", lambda g: _group_parts(g)[1]),
            "seed": part("group", lambda g: _group_parts(g)[2]),
            "rl_seed": raw["rl_seed"],
            "fit_seed": raw["fit_seed"],
            "side": part("metric", lambda m: "downstream" if ":" in m else "upstream"),
            "decoder": part("metric", lambda m: m.partition(":")[0] if ":" in m else None),
            "quality": part("metric", lambda m: m.partition(":")[2] if ":" in m else None),
            "prompt_text": part("prompt", _prompt_text),
            "role": part("method", lambda m: roles.get(m)),
            "family": part("method", lambda m: _dict(members.get(m)).get("family") or m.partition("(")[0]),
            "run": run_dir.name if run_dir.is_dir() else run_dir.parent.name,
        },
        columns=list(CELL_COLUMNS),
    )
    out["seed"] = out["seed"].where(out["seed"].notna(), None)
    return out


def _group_parts(group: str) -> tuple[str, str | None, int | None]:
    bench, _, rest = str(group).partition("|")
    policy, _, seed = rest.rpartition("|")
    return bench, policy or None, int(seed[4:]) if seed.startswith("seed") and seed[4:].isdigit() else None


def read_samples(run_dirs: Any, kind: str | None = None, *, as_dataset: bool = False) -> Any:
    """The samples of one run directory or several as one data frame (``kind``: one kind of row only)."""
    import pandas as pd

    frames = [_samples_frame(d, kind) for d in _run_dirs(run_dirs)]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return _dataset(frame) if as_dataset else frame


def _samples_frame(run_dir: Path, kind: str | None) -> Any:
    import pandas as pd

    from perbench.runner.rundir import read_jsonl
    from perbench.runner.tables import SAMPLES_PARQUET, read_parquet_frame

    pq = run_dir / SAMPLES_PARQUET if run_dir.is_dir() else None
    if pq is not None and pq.is_file():
        path, frame = pq, read_parquet_frame(pq)
        kinds = sorted({str(k) for k in frame["kind"].unique()}) if "kind" in frame else []
        if kind is not None:
            frame = frame[frame["kind"] == kind].dropna(axis=1, how="all").reset_index(drop=True)
    else:
        path = _run_file(run_dir, "samples.jsonl")
        rows = read_jsonl(path) or []
        kinds = sorted({str(r.get("kind")) for r in rows})
        if kind is not None:
            rows = [r for r in rows if r.get("kind") == kind]
        frame = pd.DataFrame(rows)
    if kind is not None and frame.empty and kind not in kinds:
        raise ConfigError(f"{path} has no rows of kind {kind!r}; its kinds: {', '.join(kinds) or 'none'}")
    frame["run"] = run_dir.name if run_dir.is_dir() else run_dir.parent.name
    return frame


def bon_pick_texts(run_dirs: Any) -> Any:
    """Each system's Best-of-N pick per (user, prompt) cell with its text: the ``bon_cell`` rows (``top``: the pool
    sample the system's reward ranks first) joined with the pool's ``bon_sample`` texts. Columns: ``run``,
    ``decoder`` (e.g. ``best_of_n(n=8,pool=32)``), ``system``, ``policy``, ``user_id``, ``prompt_id``, ``sample``,
    ``text``."""
    cells = read_samples(run_dirs, kind="bon_cell")
    pool = read_samples(run_dirs, kind="bon_sample")
    cells = cells[cells["top"].notna()].copy()
    parts = cells["decoder"].str.extract(r"^(?P<base>[^\[]+)\[(?P<system>.*)\]$")
    cells["system"], cells["decoder"] = parts["system"], parts["base"]
    cells["sample"] = cells["top"].astype(int)
    pool = pool[["run", "decoder", "policy", "prompt_id", "sample", "text"]].copy()
    pool["sample"] = pool["sample"].astype(int)
    cols = ["run", "decoder", "system", "policy", "user_id", "prompt_id", "sample"]
    return cells[cols].merge(pool, on=["run", "decoder", "policy", "prompt_id", "sample"], how="left")


SYSTEM_COLUMNS = (
    "run",
    "rank",
    "system",
    "family",
    "role",
    "status",
    "verdict_metric",
    "value",
    "ci_low",
    "ci_high",
    "gain_over_random",
    "gain_ci_low",
    "gain_ci_high",
    "share_of_headroom",
    "share_ci_low",
    "share_ci_high",
    "beats_random",
)


def read_systems(run_dir: str | Path) -> Any:
    """One row per system of the run, in the leaderboard's order (columns in the module docstring)."""
    import pandas as pd

    from perbench.report.extract import main_downstream, main_upstream

    path = _run_file(run_dir, "results.json")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not JSON ({err})") from None
    results = _dict(results)
    a = _dict(results.get("analysis"))
    tab, ranking, verdict = _dict(a.get("table")), _dict(a.get("ranking")), _dict(a.get("verdict"))
    if not tab:
        raise ConfigError(f"{path}: analysis.table: missing (the run has no analysis)")
    roles, members = _dict(a.get("roles")), _dict(_dict(results.get("systems")).get("members"))
    metric = str(verdict.get("metric") or next(iter(main_downstream(a, 1) + main_upstream(a, 1)), ""))
    order = [str(m) for m in ranking.get(metric, {}).get("order") or []]
    methods = [m for m in order if m in tab] + [m for m in (a.get("methods") or list(tab)) if m not in order]
    room = _dict(_dict(_dict(a.get("headroom")).get(metric)).get("systems"))
    acc = sorted({k for row in tab.values() for k in _dict(row) if str(k).startswith("rm_acc_")}, key=_acc_order)
    rows = []
    for i, m in enumerate(methods, 1):
        e, h = _dict(_dict(tab.get(m)).get(metric)), _dict(room.get(m))
        gain, share = _dict(h.get("gain")), _dict(h.get("share"))
        rows.append(
            {
                "run": path.parent.name,
                "rank": i if m in order else None,
                "system": m,
                "family": _dict(members.get(m)).get("family") or m.partition("(")[0],
                "role": roles.get(m),
                "status": _status(verdict, _dict(ranking.get(metric)), m),
                "verdict_metric": metric,
                "value": e.get("value"),
                **_ci("ci", e),
                "gain_over_random": gain.get("value"),
                **_ci("gain_ci", gain),
                "share_of_headroom": share.get("value"),
                **_ci("share_ci", share),
                "beats_random": h.get("beats_random"),
                **{k: _dict(_dict(tab.get(m)).get(k)).get("value") for k in acc},
            }
        )
    frame = pd.DataFrame(rows, columns=[*SYSTEM_COLUMNS, *acc])
    frame["rank"] = frame["rank"].astype("Int64")
    return frame


def _acc_order(metric: str) -> tuple[int, str]:
    first = ("rm_acc_seen", "rm_acc_unseen", "rm_acc_all")
    return (first.index(metric) if metric in first else len(first), metric)


def _ci(prefix: str, entry: dict[str, Any]) -> dict[str, Any]:
    ci = entry.get("ci")
    lo, hi = (ci[0], ci[1]) if isinstance(ci, list | tuple) and len(ci) == 2 else (None, None)
    return {f"{prefix}_low": lo, f"{prefix}_high": hi}


def _status(verdict: dict[str, Any], rank: dict[str, Any], m: str) -> str | None:
    from perbench.report.verdict import mark

    if verdict.get("deploy") == m:
        return "deploy"
    if m in (verdict.get("reference_lines") or []) or m in (rank.get("reference_lines") or []):
        return "reference line"
    if m in (verdict.get("no_better_than_random") or []):
        return "no better than random"
    got = mark(rank, m)
    return None if got is None else got[0]


def _dataset(frame: Any) -> Any:
    from datasets import Dataset

    return Dataset.from_pandas(frame, preserve_index=False)
