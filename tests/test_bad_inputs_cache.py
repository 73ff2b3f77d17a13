"""The shared stores bind each value to its key: two values swapped between keys (each with its checksum intact) are
set aside and recomputed, in the unit cache a later run reuses and in the feature cache methods refit on; a value of
an older version, whose checksum covers its bytes but not its key, is set aside and recomputed too (never migrated).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from perbench.cache import Store
from perbench.sealed import seal
from tests.test_bad_inputs_cli import Outcome, cli

__all__ = ["cli"]


def swap(path: Path, a: str, b: str) -> None:
    """Swap the stored values (checksums included) of keys ``a`` and ``b``."""
    db = sqlite3.connect(path)
    va = db.execute("SELECT value FROM kv WHERE key = ?", (a,)).fetchone()[0]
    vb = db.execute("SELECT value FROM kv WHERE key = ?", (b,)).fetchone()[0]
    with db:
        db.execute("UPDATE kv SET value = ? WHERE key = ?", (vb, a))
        db.execute("UPDATE kv SET value = ? WHERE key = ?", (va, b))
    db.close()


def test_two_values_swapped_between_keys_are_set_aside_and_read_as_missing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "units.sqlite")
    store.put_many_bytes({"a": b'{"acc": 0.75}', "b": b'{"acc": 0.0}', "c": b'{"acc": 0.5}'})
    swap(store.path, "a", "b")
    assert store.get_many_bytes(["a", "b", "c"]) == {"c": b'{"acc": 0.5}'}
    err = capfd.readouterr().err
    for k in ("a", "b"):
        assert f"the value under key {k} is not the one stored (its checksum does not match its key and bytes" in err
    assert sorted(store.set_aside) == ["a", "b"]
    store.put_many_bytes({"a": b'{"acc": 0.75}'})  # recomputed: reads back
    assert store.get_bytes("a") == b'{"acc": 0.75}'


def test_a_value_of_an_older_version_is_set_aside_once_not_migrated(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "units.sqlite")
    db = sqlite3.connect(store.path)
    with db:  # the previous format: a checksum over the bytes alone
        db.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", [(k, seal(b"1")) for k in ("x", "y")])
    db.close()
    assert store.get_many_bytes(["x", "y"]) == {}
    err = capfd.readouterr().err
    assert err.count("perbench: warning") == 1 and "2 value(s) written by an older version carry no checksum of " in err


def _run(tmp_path: Path, name: str) -> Path:
    rows = [
        {"user_id": u, "prompt": f"Q{k}?", "chosen": f"answer {k} of {u} " * 2, "rejected": f"no {k}", "split": s}
        for u in ("u1", "u2", "u3") for k, s in enumerate(("train", "train", "test", "test", "test"))
    ]  # fmt: skip
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {"benchmark": {"name": "file", "source": str(data)}, "methods": [], "baselines": ["length", "random"],
            "decoders": [], "bootstrap": 20, "out_dir": str(tmp_path / "runs"), "run_name": name}  # fmt: skip
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return cfg


def test_a_later_run_never_reuses_two_swapped_units_of_the_shared_cache(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two systems' stored scores swapped in the shared cache: the next run (another folder) recomputes both and
    reports what the first run reported, instead of each system's numbers under the other's name."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PERBENCH_CACHE", str(cache))
    first: Outcome = cli("run", str(_run(tmp_path, "one")))
    assert first.rc == 0, first.err
    one = json.loads((tmp_path / "runs" / "one" / "results.json").read_text())["upstream"]
    db = sqlite3.connect(cache / "units.sqlite")
    markers = {}
    for _, raw in db.execute("SELECT key, value FROM kv").fetchall():
        payload = bytes(raw)[20:]
        if payload.startswith(b'{"unit": "upstream:'):
            marker = json.loads(payload)
            markers[marker["unit"]] = marker["entries"]["units"][0]
    db.close()
    swap(cache / "units.sqlite", markers["upstream:length"], markers["upstream:random"])
    again: Outcome = cli("run", str(_run(tmp_path, "two")))
    assert again.rc == 0 and "is another key's); set it aside (recomputed)" in again.err, again.err
    two = json.loads((tmp_path / "runs" / "two" / "results.json").read_text())["upstream"]
    for m in ("length", "random"):
        assert two[m]["rm_accuracy"]["seen"]["accuracy"] == one[m]["rm_accuracy"]["seen"]["accuracy"], m
    assert one["length"]["rm_accuracy"]["seen"]["accuracy"] != one["random"]["rm_accuracy"]["seen"]["accuracy"]


def test_swapped_feature_vectors_are_recomputed_not_refit_on(tiny_lm: Any, tmp_path: Path) -> None:
    """The feature cache (keyed by the backbone's fingerprint and the token ids) binds each vector to its key: two
    vectors swapped are set aside and extracted again, so a method never fits on another text's features."""
    from perbench.rewards.features import FeatureExtractor

    items = [("Which pet?", "A cat."), ("Which pet?", "A very large dog that barks.")]
    fx = FeatureExtractor(tiny_lm, Store(tmp_path / "features.sqlite"))
    truth = fx.last(items)
    keys = fx.store.keys()
    assert len(keys) == 2
    swap(fx.store.path, keys[0], keys[1])
    fresh = FeatureExtractor(tiny_lm, Store(tmp_path / "features.sqlite"))
    np.testing.assert_array_equal(fresh.last(items), truth)
    assert sorted(fresh.store.set_aside) == sorted(keys)
