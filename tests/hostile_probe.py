"""A hostile method, run in-process and in an isolated child by tests/test_hostile_method.py.

It tries every route a method author has to a label or an answer key besides learning: the order of the items it
scores, its own ``score_pairs``, a class attribute ``oracle = True``, earlier runs' files in its working folder and
its parent's (``/proc/<ppid>/cwd``), and rebuilding the built-in benchmark from the package's code to compute the
ids it is handed. What it found goes to the file its ``report`` parameter names (a child can write files too).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair
from perbench.rewards.base import PairwiseJudge, RewardModel, RMContext, ScoreItem

#: the files an earlier run leaves that name ids
OUTPUTS = ("results.json", "cells.jsonl", "samples.jsonl", "pair_sources.jsonl")


def _files_in_reach() -> list[Path]:
    roots = {Path.cwd()}
    parent = Path(f"/proc/{os.getppid()}/cwd")
    try:
        if parent.exists():  # a parent of another user's (a detached run's, under init) is not ours to read
            roots.add(parent)
    except OSError:
        pass
    found: list[Path] = []
    for root in roots:
        for name in OUTPUTS:
            try:
                found += list(root.glob(f"**/{name}"))
            except OSError:
                continue
    return found


def earlier_runs(user_ids: set[str], pair_ids: set[str]) -> dict[str, int]:
    """Of the ids handed over, how many an earlier run's files name, and how many users its results map back to a
    source id; with the number of files read (the route had material)."""
    named_users: set[str] = set()
    named_pairs: set[str] = set()
    mapped: set[str] = set()
    files = _files_in_reach()
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        named_users |= {u for u in user_ids if u in text}
        named_pairs |= {p for p in pair_ids if p in text}
        if path.name == "results.json":
            source = json.loads(text).get("benchmark", {}).get("meta", {}).get("source_user_ids") or {}
            mapped |= user_ids & set(source)
    return {"files": len(files), "users_named": len(named_users), "pairs_named": len(named_pairs),
            "users_mapped": len(mapped)}  # fmt: skip


def rebuilt_ids(params: dict[str, Any], seeds: Sequence[int] = (0, 1, 2)) -> set[str]:
    """The user ids of the built-in benchmark rebuilt from the package's code (a grid of public seeds), sealed as
    a run seals it; in a child, after taking the import blocker out of ``sys.meta_path`` first."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_Blocker"]
    from perbench.data.isolation import seal
    from perbench.data.rubrics.benchmark import load_rubrics

    out: set[str] = set()
    for seed in seeds:
        out |= set(seal(load_rubrics(seed=seed, **params)).bench.users)
    return out


class Hostile(RewardModel):
    """Scores ``-arange(len(items))`` (a chosen response first would always win), overrides ``score_pairs`` to
    claim every chosen side, declares itself an oracle, and looks for labels and keys everywhere it can."""

    name: ClassVar[str] = "hostile"
    oracle: ClassVar[bool] = True

    def __init__(self, report: str, rebuild: dict[str, Any] | None = None) -> None:
        super().__init__(report=report, rebuild=rebuild)
        self.found: dict[str, int] = {}

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        users = {p.user_id for p in pairs} | set(ctx.extra.get("users", {}))
        self.found = {"answer_keys": int(bool(ctx.extra.get("answer_keys"))), "users": len(users)}
        self.found.update(earlier_runs(users, {p.pair_id for p in pairs}))
        if self.params["rebuild"] is not None:
            self.found["rebuilt"] = len(users & rebuilt_ids(self.params["rebuild"]))
        Path(self.params["report"]).write_text(json.dumps(self.found), encoding="utf-8")

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return -np.arange(len(items), dtype=np.float64)

    def score_pairs(self, pairs: Sequence[PreferencePair]) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(len(pairs)), np.zeros(len(pairs))

    def state(self) -> dict[str, np.ndarray]:
        return {k: np.array([v]) for k, v in self.found.items()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.found = {k: int(v[0]) for k, v in state.items()}


class FirstJudge(PairwiseJudge):
    """A pairwise judge that always prefers the response it is shown first (``chosen``)."""

    name: ClassVar[str] = "first_judge"
    needs_train_pairs: ClassVar[bool] = False

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        pass

    def prefer(self, pairs: Sequence[PreferencePair]) -> np.ndarray:
        return np.ones(len(pairs))
