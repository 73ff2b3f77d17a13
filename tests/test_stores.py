"""Damaged and unwritable stores: a corrupt file or value is recomputed (once, counted), the rest is a StoreError
that names the file, the cause and the fix; atomic writes respect the umask; the run lock serialises runs."""

from __future__ import annotations

import errno
import multiprocessing
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench.cache import Store, pack_arrays
from perbench.errors import StoreError
from perbench.io import atomic_write_json, atomic_write_text, run_lock
from perbench.runner.lease import Leases
from perbench.runner.units import Units
from perbench.sqlite_file import retry_busy


class Calls:
    """A compute function that counts how often it runs."""

    def __init__(self) -> None:
        self.n = 0

    def arrays(self) -> dict[str, np.ndarray]:
        self.n += 1
        return {"w": np.arange(4.0)}

    def json(self) -> dict[str, int]:
        self.n += 1
        return {"answer": 42}


def _filled(path: Path, n: int = 300) -> list[str]:
    """A store of ``n`` 2 kB values (many pages), closed (so its write-ahead log is checkpointed away)."""
    units = Units(path)
    keys = [f"key{i:04d}" for i in range(n)]
    for k in keys:
        units.put_arrays("scores", k, {"s": np.full(256, float(len(k)))})
    units.store.close()
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return keys


def _recomputes_once(units: Units, keys: list[str]) -> None:
    calls = Calls()
    for k in keys:
        units.arrays("scores", k, calls.arrays)
    for k in keys:  # a second pass reuses every one
        units.arrays("scores", k, calls.arrays)
    assert calls.n == len(keys)
    assert units.summary()["computed"] == {"scores": len(keys)}
    assert units.summary()["reused"] == {"scores": len(keys)}


def test_garbage_file_is_moved_aside_and_recomputed(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "units.sqlite"
    path.write_bytes(b"this is not a database\n" * 40)
    units = Units(path)
    err = capfd.readouterr().err
    aside = list(tmp_path.glob("units.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"this is not a database\n" * 40
    assert str(path) in err and aside[0].name in err and "not a SQLite database" in err
    assert err.count("\n") == 1  # one line
    _recomputes_once(units, ["a", "b"])
    assert units.summary()["computed_total"] == {"scores": 2}


def test_truncated_file_is_moved_aside_and_recomputed(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "units.sqlite"
    keys = _filled(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    units = Units(path)
    err = capfd.readouterr().err
    assert "truncated" in err and str(path) in err and ".corrupt-" in err
    assert len(units.store) == 0
    _recomputes_once(units, keys[:5])


def test_corruption_found_while_reading(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # a valid header over garbage pages: opening succeeds, the first read finds the damage
    path = tmp_path / "units.sqlite"
    keys = _filled(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = np.random.default_rng(0).integers(0, 256, len(data) - page, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    units = Units(path)
    assert capfd.readouterr().err == ""
    assert units.missing(keys[:3], phase="scores") == keys[:3]
    err = capfd.readouterr().err
    assert str(path) in err and "malformed" in err and ".corrupt-" in err
    _recomputes_once(units, keys[:3])


@pytest.mark.parametrize("kind", ["arrays", "json"])
def test_corrupt_value_is_deleted_and_recomputed(tmp_path: Path, kind: str, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "units.sqlite"
    units = Units(path)
    calls = Calls()
    compute = calls.arrays if kind == "arrays" else calls.json
    get = units.arrays if kind == "arrays" else units.json
    get("fit", "unit-1", compute)  # type: ignore[operator]
    garbage = b"\x93NUMPY garbage \x00\xff" if kind == "arrays" else b"\xff\xfe{not json"
    units.store.put_bytes("unit-1", garbage)
    again = get("fit", "unit-1", compute)  # type: ignore[operator]
    err = capfd.readouterr().err
    assert f"{path}: the value under key unit-1 cannot be decoded" in err and "recomputed" in err
    assert calls.n == 2 and str(get("fit", "unit-1", compute)) == str(again) == str(compute())  # type: ignore[operator]
    s = units.summary()  # (the last compute() above was a direct call, outside the store)
    assert s["recovered"] == {"fit": 1} and s["computed"] == {"fit": 2} and s["reused"] == {"fit": 1}


def test_corrupt_value_is_missing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "units.sqlite"
    units = Units(path)
    units.put_json("generate", "ok", {"text": "hi"})
    units.put_arrays("scores", "npz", {"s": np.ones(3)})
    units.store.put_bytes("bad-json", b"{truncated")
    units.store.put_bytes("bad-npz", pack_arrays(s=np.ones(3))[:40])  # a cut zip: starts like an array bundle
    assert units.missing(["ok", "npz", "bad-json", "bad-npz", "absent"], phase="generate") == [
        "bad-json",
        "bad-npz",
        "absent",
    ]
    err = capfd.readouterr().err
    assert "key bad-json" in err and "key bad-npz" in err and err.count("\n") == 2
    assert "bad-json" not in units.store and units.summary()["recovered"] == {"generate": 2}
    # the bulk readers of the shared caches drop undecodable values the same way
    store = units.store
    store.put_bytes("bad-npz", b"PK\x03\x04 not a zip")
    assert set(store.get_many_arrays(["npz", "bad-npz"])) == {"npz"}
    store.put_bytes("bad-json", b"\x00")
    assert store.get_many_json(["ok", "bad-json"]) == {"ok": {"text": "hi"}}
    assert store.get_json("bad-json") is None and "bad-json" in store.discarded


def test_full_disk_names_the_store_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "units.sqlite"
    units = Units(path)
    units.put_json("fit", "small", {"x": 1})
    pages = units.store._db.execute("PRAGMA page_count").fetchone()[0]
    units.store._db.execute(f"PRAGMA max_page_count = {pages}")  # this connection's "disk" is now full
    calls = Calls()

    def big() -> dict[str, np.ndarray]:
        calls.n += 1
        return {"w": np.zeros(100_000)}

    with pytest.raises(StoreError) as info:
        units.arrays("fit", "big", big)
    msg = str(info.value)
    assert msg.startswith(f"{path}: cannot write (no space left on device)") and "free some space" in msg
    units.store.close()
    units = Units(path)  # space freed: the unit that was not stored is computed once, and counted once
    units.arrays("fit", "big", big)
    units.arrays("fit", "big", big)
    assert calls.n == 2 and units.summary()["computed_total"] == {"fit": 2}
    assert units.summary()["computed"] == {"fit": 1}


def test_full_disk_on_an_atomic_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.json"
    atomic_write_json(target, {"old": True})

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("perbench.io.os.fsync", no_space)
    with pytest.raises(StoreError, match=r"results\.json: cannot write \(no space left on device\); free some space"):
        atomic_write_json(target, {"new": True})
    assert target.read_text() == '{\n  "old": true\n}\n'  # the old file stands, no temp file is left
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_read_only_file_system_on_an_atomic_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*args: object, **kw: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("perbench.io.tempfile.mkstemp", read_only)
    with pytest.raises(StoreError, match=r"report\.html: cannot write \(read-only file system\); point out_dir"):
        atomic_write_text(tmp_path / "report.html", "<html/>")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    units = Units(run / "units.sqlite")
    units.put_json("fit", "a", {"x": 1})
    units.store.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for d in (run, fresh):
        d.chmod(0o555)
    try:
        with pytest.raises(StoreError, match=r"fresh/units\.sqlite: cannot open \(read-only folder: .*fresh is not"):
            Units(fresh / "units.sqlite")
        with pytest.raises(StoreError, match=r"run/units\.sqlite: cannot .*read-only folder.*writable"):
            Units(run / "units.sqlite").put_json("fit", "b", {"x": 2})
        with pytest.raises(StoreError, match=r"run/results\.json: cannot write \(permission denied\)"):
            atomic_write_json(run / "results.json", {})
    finally:
        for d in (run, fresh):
            d.chmod(0o755)
    units = Units(run / "units.sqlite")  # writable again: what was stored is reused, the rest computed once
    calls = Calls()
    assert units.json("fit", "a", calls.json) == {"x": 1} and calls.n == 0
    units.json("fit", "b", calls.json)
    assert calls.n == 1 and units.summary()["computed_total"] == {"fit": 2}


def test_a_store_locked_too_long_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "features.sqlite"
    Store(path).close()
    other = sqlite3.connect(path)
    other.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
    try:
        with pytest.raises(StoreError, match=r"features\.sqlite: cannot write \(another process has held it locked"):
            Store(path, timeout=0.1).put_bytes("k", b"v")
    finally:
        other.rollback()
        other.close()
    store = Store(path, timeout=0.1)
    store.put_bytes("k", b"v")
    assert store.get_bytes("k") == b"v"


def _open_together(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        Store(path, timeout=30).close()
        Leases(Path(path), timeout=30).close()
        results.put("ok")
    except Exception as e:  # reported to the parent
        results.put(repr(e))


def test_processes_opening_one_new_store_together_all_succeed(tmp_path: Path) -> None:
    # Switching a new file to write-ahead logging fails at once with "database is locked" in a process that races
    # another one doing the same (SQLite's busy handler does not cover it): ~1 trial in 25 of 4 processes without
    # the retry. 60 trials make a regression show with probability > 0.9.
    ctx = multiprocessing.get_context("fork")
    failures = []
    for trial in range(60):
        path = str(tmp_path / f"units-{trial}.sqlite")
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_together, args=(path, barrier, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        failures += [r for r in (results.get(timeout=5) for _ in procs) if r != "ok"]
    assert failures == []


def test_retry_busy_waits_out_a_lock_and_gives_up_on_other_errors() -> None:
    tries = []

    def locked_twice() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "opened"

    assert retry_busy(locked_twice, timeout=5) == "opened" and len(tries) == 3
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_busy(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("database is locked")), timeout=0.05)
    calls = []

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: kv")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_busy(broken, timeout=5)
    assert len(calls) == 1


def test_tally_is_kept_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "units.sqlite"
    first = Units(path)
    first.put_json("generate", "g1", {"text": "a"})
    first.computed["generate"] += 1  # the runner's own counting (after store.put_json) is kept as well
    first.computed["bon_samples"] += 4
    first.store.close()
    code = (
        "import sys; from perbench.runner.units import Units; u = Units(sys.argv[1]); "
        "u.json('judge', 'j1', lambda: {'score': 1}); print(u.summary())"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert "'computed': {'judge': 1}" in out
    again = Units(path).summary()
    assert again["computed"] == {} and again["computed_total"] == {"bon_samples": 4, "generate": 2, "judge": 1}


def test_atomic_writes_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.html", "<html/>")
        assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644
        os.umask(0o027)
        atomic_write_json(tmp_path / "results.json", {})
        assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_run_lock_names_the_holder(tmp_path: Path) -> None:
    code = (
        "import sys, time; from perbench.io import run_lock\n"
        "with run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(30)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(StoreError, match=rf"another perbench run \(pid {holder.pid}\) is using {tmp_path}"),
            run_lock(tmp_path, wait=False),
        ):
            pass
    finally:
        holder.kill()  # a killed holder leaves no stale lock
        holder.wait()
    with run_lock(tmp_path, wait=False):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"


def test_second_run_waits_for_the_first(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    order: list[str] = []
    holding = threading.Event()

    def second() -> None:
        holding.wait()
        with run_lock(tmp_path):
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with run_lock(tmp_path):
        holding.set()
        deadline = time.monotonic() + 10
        while "waiting" not in (err := capfd.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.01)
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]
    assert err == f"another perbench run (pid {os.getpid()}) is using {tmp_path}; waiting…\n"


def test_units_shared_across_runs_are_copied_into_each_run(tmp_path: Path) -> None:
    """A unit computed by one run is reused by another run folder over the same shared cache, and the second run's
    store keeps its own copy (its folder is a complete record); an undecodable shared value is recomputed."""
    shared = Store(tmp_path / "cache" / "units.sqlite")
    calls = Calls()
    first = Units(tmp_path / "a" / "units.sqlite", shared=shared)
    first.arrays("fit", "k", calls.arrays)
    second = Units(tmp_path / "b" / "units.sqlite", shared=shared)
    assert np.array_equal(second.arrays("fit", "k", calls.arrays)["w"], np.arange(4.0))
    assert calls.n == 1 and second.summary()["computed"] == {} and second.summary()["reused"] == {"fit": 1}
    assert "k" in second.store and second.missing(["k", "other"]) == ["other"]
    shared.put_bytes("bad", b"\x00garbage")
    third = Units(tmp_path / "c" / "units.sqlite", shared=shared)
    assert third.missing(["bad"]) == ["bad"] and "bad" not in shared  # discarded with a warning, not copied
    third.json("judge", "bad", calls.json)
    assert calls.n == 2 and shared.get_json("bad") == {"answer": 42}


def test_memory_store_and_journal() -> None:
    """A store in memory (a Ray worker's) works like a file's; its journal lists the keys read (found) or written."""
    from perbench.cache import MEMORY

    store = Store(MEMORY)
    store.put_bytes("a", b"1")
    store.journal = set()
    store.put_many_bytes({"b": b"2"})
    assert store.get_bytes("a") == b"1" and store.get_bytes("missing") is None
    assert store.get_many_bytes(["a", "b", "c"]) == {"a": b"1", "b": b"2"}
    assert store.journal == {"a", "b"} and store.present(["a", "c"]) == {"a"} and sorted(store.keys()) == ["a", "b"]
    assert not Path(MEMORY).exists()


def test_a_stateless_fit_is_read_back_without_a_warning(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A method without state stores an empty array bundle (a zip holding only its end record): a rerun reads it
    as a fit, not as a corrupt value to delete and recompute."""
    units = Units(tmp_path / "units.sqlite")
    calls = Calls()

    def stateless() -> dict[str, np.ndarray]:
        calls.n += 1
        return {}

    assert units.arrays("fit", "k", stateless) == {} and calls.n == 1
    assert units.arrays("fit", "k", stateless) == {} and calls.n == 1
    assert units.summary()["recovered"] == {} and "k" not in units.store.discarded
    assert "perbench: warning" not in capfd.readouterr().err


def test_an_altered_or_unsealed_value_is_set_aside(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A value whose bytes changed but still decode fails its checksum; one without a checksum (an older version's)
    cannot be checked: both are moved to ``set_aside`` with a warning, read as missing and recomputed once."""
    from perbench.sealed import HEAD

    path = tmp_path / "units.sqlite"
    units = Units(path)
    calls = Calls()
    units.json("fit", "altered", calls.json)
    units.json("fit", "old", calls.json)
    db = sqlite3.connect(path)
    (raw,) = db.execute("SELECT value FROM kv WHERE key = 'altered'").fetchone()
    with db:
        db.execute("UPDATE kv SET value = ? WHERE key = 'altered'", (bytes(raw)[:HEAD] + b'{"answer": 41}',))
        db.execute("UPDATE kv SET value = ? WHERE key = 'old'", (b'{"answer": 40}',))
    db.close()
    assert units.json("fit", "altered", calls.json) == {"answer": 42}
    assert units.json("fit", "old", calls.json) == {"answer": 42}
    assert calls.n == 4
    err = capfd.readouterr().err
    assert f"{path}: the value under key altered is not the one stored (its checksum does not match" in err
    assert "1 value(s) written by an older version carry no checksum of their key" in err and "key old" in err
    assert sorted(units.store.set_aside) == ["altered", "old"]
    kept = sqlite3.connect(path).execute("SELECT key, value FROM set_aside ORDER BY key").fetchall()
    assert [k for k, _ in kept] == ["altered", "old"] and kept[1][1] == b'{"answer": 40}'
    assert units.json("fit", "altered", calls.json) == {"answer": 42} and calls.n == 4  # the recomputed one reads back


def test_a_worker_reads_its_dependencies_results_in_place_and_fetches_only_those_it_reads() -> None:
    """A Ray worker's stores read through to the results handed to it: a key is found in the dependency that holds
    it (fetched once, on the first read of one of its keys), never copied into a store; a dependency none of whose
    keys is read is never fetched; what the unit writes stays in memory, apart from what it was handed."""
    from perbench.cache import encode_json
    from perbench.runner.stores import Handed, Stores, UnitResult

    results = {
        "fit": UnitResult("fit", {"units": {"u1": encode_json({"w": 1})}}, attempt=1),
        "train": UnitResult("train", {"features": {"f1": b"phi-1", "f2": b"phi-2"}}),
        "test": UnitResult("test", {"features": {"t1": b"tok-1"}}),
    }
    fetched: list[str] = []

    def fetch(key: str) -> UnitResult:
        fetched.append(key)
        return results[key]

    index = {k: {name: sorted(v) for name, v in r.entries.items()} for k, r in results.items()}
    index["fit"]["features"] = ["f1"]  # the fit read f1 (its marker lists it) but its result does not hold it
    handed = Handed(index, fetch)
    stores = Stores.over(handed)
    with stores.journal() as touched:
        assert stores.features.get_many_bytes(["f1", "nope"]) == {"f1": b"phi-1"}
        assert stores.features.get_bytes("f2") == b"phi-2"
        assert stores.units.json("fit", "u1", lambda: {"w": 2}) == {"w": 1}  # found, not recomputed
        stores.features.put_bytes("new", b"mine")
    assert fetched == ["fit", "train"]  # "test" was never read: never fetched
    assert stores.units.reused["fit"] == 1 and not stores.units.computed
    assert touched["features"] == {"f1", "f2", "new"} and touched["units"] == {"u1"}
    assert stores.features.present(["t1", "f2", "x"]) == {"t1", "f2"} and fetched == ["fit", "train"]
    assert sorted(stores.features.keys()) == ["f1", "f2", "new", "t1"] and "t1" in stores.features
    # nothing handed was copied into the worker's own store: it holds only what the unit wrote
    assert super(type(stores.features), stores.features).keys() == ["new"]
    assert handed.read() == {"fit": 1, "train": 0}
    assert handed.read_bytes() == len(encode_json({"w": 1})) + len(b"phi-1") + len(b"phi-2")
    stores.features.delete("f2")  # a handed value found undecodable reads as missing from then on
    assert stores.features.get_bytes("f2") is None and "f2" not in stores.features
