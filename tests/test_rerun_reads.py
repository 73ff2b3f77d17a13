"""A rerun costs what it reads: with every unit found finished, the CLI loads no tokenizer (transformers is never
imported) and writes the files the first run wrote; the faster writers it uses give the text the plain ones give."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perbench.data.isolation import IdRecorder, record_ids, record_rows
from perbench.models.identity import tokenizer_identity
from perbench.runner.cells import jsonl_flat
from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401  (tiny_pool is a fixture)

#: the CLI in a child process that says, once the run is done, whether transformers was imported
CHILD = """import runpy, sys
sys.argv = ["perbench", "run", sys.argv[1], "--run-name", "again"]
try:
    runpy.run_module("perbench", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("transformers imported:", "transformers" in sys.modules)
"""


def _volatile(results: dict[str, Any]) -> dict[str, Any]:
    """results.json without what a rerun changes by design: times, dates, work counters, provenance, and the batch
    sizes this run's forwards used (a rerun runs none)."""
    return {k: v for k, v in results.items() if k not in ("created", "timing_s", "work", "provenance", "batching")}


def test_a_cached_rerun_loads_no_tokenizer_and_writes_the_same_files(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
) -> None:
    import yaml

    cfg = tiny_config(tiny_pool, tmp_path).to_dict()
    cfg.update(methods=["global_bt"], decoders=["zero_shot", {"name": "best_of_n", "n": 2, "pool": 4}])
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def once() -> str:
        got = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=dict(os.environ), timeout=900
        )
        assert got.returncode == 0, got.stderr[-3000:]
        return got.stdout

    assert "transformers imported: True" in once()  # the first run loads its models
    run_dir = tmp_path / "again"
    first = {f: (run_dir / f).read_bytes() for f in ("cells.jsonl", "samples.jsonl", "cells.parquet")}
    results = json.loads((run_dir / "results.json").read_text())
    out = once()
    assert "transformers imported: False" in out, out[-2000:]
    again = json.loads((run_dir / "results.json").read_text())
    assert again["work"]["units"]["computed"] == 0 and again["work"]["derived"]["analysis"] == "read from the cache"
    assert {f: (run_dir / f).read_bytes() for f in first} == first
    assert _volatile(again) == _volatile(results)


def _rows(n: int, ids: list[str]) -> list[dict[str, Any]]:
    rng = random.Random(3)
    strings = ["a", "ü", '"q"', "\\", "\n\t", "😀", "", "%s", "%", "\x00\x1f", "\u2028", *ids, f"x {ids[0]}.", "p-1"]
    numbers = [0.1, 1e-300, 1e300, -0.0, 3.0, 7, -(10**20), True, None, float("nan"), float("inf"), [1, ids[1]]]
    keys = ["group", "method", "metric", "user", "prompt", "value", "rl_seed", "fit_seed", "ü", "%s", ids[2]]
    rows = []
    for _ in range(n):
        row: dict[str, Any] = {}
        for k in rng.sample(keys, rng.randint(0, 7)):
            row[k] = rng.choice(strings) if rng.random() < 0.5 else rng.choice(numbers)
        rows.append(row)
    return rows


def test_the_fast_jsonl_writer_gives_json_dumps_text_with_and_without_recorded_ids() -> None:
    ids = [f"user-{i:012x}" for i in range(3)]
    recorded = {i: f"user-{9 - n:012x}" for n, i in enumerate(ids)}
    rows = _rows(5000, ids)
    plain = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    assert jsonl_flat(rows) == plain
    mapped = record_ids(rows, recorded)
    assert jsonl_flat(rows, IdRecorder(recorded)) == "".join(json.dumps(r, sort_keys=True) + "\n" for r in mapped)
    assert mapped != rows  # the ids were there to map
    in_place = copy.deepcopy(rows)
    record_rows(in_place, recorded)
    assert json.dumps(in_place, sort_keys=True) == json.dumps(mapped, sort_keys=True)


def test_the_tokenizer_identity_follows_the_tokenizer_files(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    first = tokenizer_identity(str(folder))
    assert first is not None and tokenizer_identity(str(folder)) == first
    (folder / "model.safetensors").write_bytes(b"other weights")  # weights are not the tokenizer's
    assert tokenizer_identity(str(folder)) == first
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ other }}"}))
    assert tokenizer_identity(str(folder)) != first
    # what cannot be told without loading: a hub branch, a GGUF file; a pinned commit can
    assert tokenizer_identity("org/model") is None and tokenizer_identity("org/model@main") is None
    assert tokenizer_identity(str(tmp_path / "m.gguf")) is None
    assert tokenizer_identity("org/model@" + "a" * 40) is not None


@pytest.mark.parametrize("spec", ["tiny-random", "smollm2"])
def test_the_bundled_tokenizer_is_told_by_the_wheel(spec: str) -> None:
    ident = tokenizer_identity(spec)
    assert ident is not None and ident.startswith("bundled-tokenizer:") and "transformers==" in ident
