"""Content-keyed stores on SQLite: one file, atomic transactions, safe to reopen and resume.

Keys are content hashes that include the model fingerprint and the full request; values are bytes
(numpy arrays) or JSON. A store never needs invalidation: a different model or request is a different key.

Everything in a store can be recomputed, so damage is repaired rather than reported as a crash:

- a file that is not a SQLite database, or is truncated or corrupt, is moved aside to
  ``<name>.corrupt-<timestamp>`` (with a one-line warning naming it) and an empty store takes its place;
- a value that cannot be decoded is deleted (with a warning naming the file and the key) and reads as missing;
- every value carries a checksum over its key and its bytes (:func:`bind`; the digest of :mod:`perbench.sealed`),
  checked on read: one that fails it is moved to the ``set_aside`` table with a warning and reads as missing
  (recomputed). Binding the key catches two values swapped between keys (each intact) as well as altered bytes.
  Values of older versions (no checksum, or one over the bytes alone) cannot be told from another key's value, so
  they are set aside and recomputed too (one warning per store), never migrated.

Errors the user must fix (disk full, read-only or unwritable folder, a store locked for too long) are raised as
:class:`~perbench.errors.StoreError` naming the file, the cause and the fix.

A store also keeps a small persistent tally (``name → count``) that survives across processes, updated in the
same transaction as the values it counts (``put_many_bytes(..., counts=...)``).

``Store(MEMORY)`` is a store in this process's memory (no file): what a Ray worker computes into before it hands
its results back to the driver. A store's :attr:`~Store.journal`, when set, collects every key read (found) or
written, so a caller can tell which entries a piece of work touched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from perbench.errors import StoreError
from perbench.io import _default, os_error_message, refuse_links, warn
from perbench.sealed import DIGEST_SIZE, MAGIC, UNSEALED, Unsealed
from perbench.sqlite_file import header_problem, is_corrupt, retry_busy, store_error

T = TypeVar("T")

_CHUNK = 500  # keys per IN (...) query, under SQLite's default variable limit
#: the path of a store kept in memory (SQLite's own name for it)
MEMORY = ":memory:"


#: the first bytes of a value bound to its key: the format after :data:`perbench.sealed.MAGIC` (the checksum of
#: the bytes alone), whose values are read as :data:`UNBOUND`
BOUND = MAGIC[:-1] + b"\x02"
_HEAD = len(BOUND) + DIGEST_SIZE
#: the problem of a value whose checksum covers its bytes but not its key (written by an older version)
UNBOUND = "its checksum does not cover its key (written by an older version), so it cannot be checked"
#: values of older versions: set aside with one warning per store
_OLD = (UNSEALED, UNBOUND)


def _key_digest(key: str, payload: bytes) -> bytes:
    k = key.encode("utf-8", "surrogatepass")
    h = hashlib.blake2b(len(k).to_bytes(8, "big") + k, digest_size=DIGEST_SIZE)
    h.update(payload)
    return h.digest()


def bind(key: str, payload: bytes) -> bytes:
    """``payload`` as a store keeps it under ``key``: a checksum of the key and the bytes in front."""
    return BOUND + _key_digest(key, payload) + payload


def unbind(key: str, raw: bytes) -> Unsealed:
    """The payload of the value stored under ``key`` after checking that its checksum covers this key and these
    bytes; else why it cannot be trusted."""
    if raw.startswith(BOUND) and len(raw) >= _HEAD:
        payload = raw[_HEAD:]
        if _key_digest(key, payload) == raw[len(BOUND) : _HEAD]:
            return Unsealed(payload)
        return Unsealed(
            None,
            "its checksum does not match its key and bytes: the value was altered or damaged, or is another key's",
        )
    return Unsealed(None, UNBOUND if raw.startswith(MAGIC) else UNSEALED)


class CorruptValueError(ValueError):
    """A stored value that cannot be decoded (JSON or an array bundle)."""


class Store:
    """A key → bytes store in one SQLite file (see the module docstring for what happens to damage)."""

    def __init__(self, path: str | Path, *, timeout: float = 300.0) -> None:
        self.path = Path(path)
        self.timeout = timeout  # seconds to wait for another process's write lock before giving up
        self._lock = threading.RLock()
        #: keys whose values could not be decoded and were deleted by this process
        self.discarded: list[str] = []
        #: where this process moved corrupt store files
        self.moved_aside: list[Path] = []
        #: when a set: every key found by a read or written since (see the module docstring)
        self.journal: set[str] | None = None
        #: values this object has written (a run's assembly pass, which only reads, writes none)
        self.written = 0
        #: keys whose values failed their checksum and were set aside by this process
        self.set_aside: list[str] = []
        self.unsealed_seen = False  # a value without a checksum was set aside (warned about once)
        if self.in_memory:
            self._db = self._connect()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(os_error_message(self.path, "create the folder of", e)) from e
        for part in ("", "-wal", "-shm"):  # inside a run directory, SQLite must not write through a planted link
            refuse_links(f"{self.path}{part}")
        problem = header_problem(self.path)
        if problem is not None:
            self._move_aside(problem)
        self._db = self._open()

    @property
    def in_memory(self) -> bool:
        return str(self.path) == MEMORY

    # ------------------------------------------------------------ the file

    def _connect(self) -> sqlite3.Connection:
        return retry_busy(self._connect_once, self.timeout)

    def _connect_once(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=self.timeout, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS tally (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS set_aside (key TEXT, value BLOB, reason TEXT, at TEXT)")
            db.commit()
        except BaseException:
            db.close()
            raise
        return db

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as e:
            if not is_corrupt(e):
                raise self._error(e, "open") from e
            self._move_aside(str(e))
        try:
            return self._connect()
        except sqlite3.DatabaseError as e:
            raise self._error(e, "open") from e

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        try:
            if self.path.exists():
                os.replace(self.path, aside)
            wal = Path(f"{self.path}-wal")
            if wal.exists():
                os.replace(wal, Path(f"{aside}-wal"))
            Path(f"{self.path}-shm").unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(os_error_message(self.path, f"move aside this corrupt store ({reason})", e)) from e
        self.moved_aside.append(aside)
        warn(f"{self.path} is corrupt ({reason}); moved it to {aside.name} and started an empty store (recomputed)")

    def _reset(self, reason: str) -> None:
        """Replace a store found corrupt while in use by an empty one."""
        self._db.close()
        self._move_aside(reason)
        self._db = self._open()

    def _error(self, e: sqlite3.Error, action: str) -> StoreError:
        return store_error(self.path, e, action, self.timeout)

    def _do(self, action: str, fn: Callable[[sqlite3.Connection], T], on_corrupt: Callable[[], T]) -> T:
        """``fn(db)`` under the lock; a corrupt file is replaced by an empty store and ``on_corrupt()`` answers."""
        with self._lock:
            try:
                return fn(self._db)
            except sqlite3.DatabaseError as e:
                if not is_corrupt(e):
                    if isinstance(e, sqlite3.OperationalError):
                        raise self._error(e, action) from e
                    raise
                self._reset(str(e))
            return on_corrupt()

    def _write(self, fn: Callable[[sqlite3.Connection], None]) -> None:
        def txn(db: sqlite3.Connection) -> None:
            with db:
                fn(db)

        def retry() -> None:  # once, on the fresh store
            try:
                txn(self._db)
            except sqlite3.DatabaseError as e:
                raise self._error(e, "write") from e

        self._do("write", txn, retry)

    # ------------------------------------------------------------ bytes

    def get_bytes(self, key: str) -> bytes | None:
        """The value under ``key``, None when absent or when its checksum fails (then it is set aside)."""
        return self.get_many_bytes([key]).get(key)

    def _note(self, keys: Iterable[str]) -> None:
        if self.journal is not None:
            self.journal.update(keys)

    def get_many_bytes(self, keys: list[str]) -> dict[str, bytes]:
        def read(db: sqlite3.Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                q = f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(chunk))})"
                out.update({k: bytes(v) for k, v in db.execute(q, chunk)})
            return out

        found: dict[str, bytes] = {}
        bad: dict[str, tuple[bytes, str]] = {}
        stored: dict[str, bytes] = self._do("read", read, dict)
        for k, raw in stored.items():
            got = unbind(k, raw)
            if got.payload is None:
                bad[k] = (raw, str(got.problem))
            else:
                found[k] = got.payload
        if bad:
            self._set_aside(bad)
        self._note(found)
        return found

    def _set_aside(self, bad: Mapping[str, tuple[bytes, str]]) -> None:
        """Move values that failed their checksum out of ``kv`` into ``set_aside`` (kept for inspection), warn."""
        rows = [(k, raw, why, time.strftime("%Y-%m-%dT%H:%M:%S")) for k, (raw, why) in bad.items()]

        def write(db: sqlite3.Connection) -> None:
            db.executemany("INSERT INTO set_aside (key, value, reason, at) VALUES (?, ?, ?, ?)", rows)
            db.executemany("DELETE FROM kv WHERE key = ?", [(k,) for k in bad])

        self._write(write)
        self.set_aside += list(bad)
        for k, (_, why) in bad.items():
            if why not in _OLD:
                warn(f"{self.path}: the value under key {k} is not the one stored ({why}); set it aside (recomputed)")
        old = [k for k, (_, why) in bad.items() if why in _OLD]
        if old and not self.unsealed_seen:  # once per store: a whole cache of an older version is set aside
            warn(
                f"{self.path}: {len(old)} value(s) written by an older version carry no checksum of their key and "
                f"cannot be checked; set them aside (recomputed), e.g. key {old[0]}; later ones are set aside "
                "without a warning"
            )
        self.unsealed_seen = self.unsealed_seen or bool(old)

    def present(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` hold a value (not read, not journaled)."""
        wanted = list(dict.fromkeys(keys))

        def read(db: sqlite3.Connection) -> set[str]:
            out: set[str] = set()
            for i in range(0, len(wanted), _CHUNK):
                chunk = wanted[i : i + _CHUNK]
                q = f"SELECT key FROM kv WHERE key IN ({','.join('?' * len(chunk))})"
                out.update(str(k) for (k,) in db.execute(q, chunk))
            return out

        return self._do("read", read, set)

    def keys(self) -> list[str]:
        """Every key in the store (not journaled)."""
        return [str(k) for (k,) in self._do("read", lambda db: db.execute("SELECT key FROM kv").fetchall(), list)]

    def put_many_bytes(self, items: Mapping[str, bytes], *, counts: Mapping[str, int] | None = None) -> None:
        """Store ``items`` and add ``counts`` to the tally, in one transaction."""
        rows = [(k, bind(k, v)) for k, v in items.items()]

        def write(db: sqlite3.Connection) -> None:
            db.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", rows)
            _add_counts(db, counts or {})

        self._write(write)
        self.written += len(rows)
        self._note(items)

    def put_bytes(self, key: str, value: bytes, *, counts: Mapping[str, int] | None = None) -> None:
        self.put_many_bytes({key: value}, counts=counts)

    def delete(self, key: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM kv WHERE key = ?", (key,))

        self._write(write)

    # ------------------------------------------------------------ decoded values

    def discard(self, key: str, reason: str) -> None:
        """Delete a value that cannot be decoded, with a warning naming the file and the key."""
        self.delete(key)
        self.discarded.append(key)
        warn(f"{self.path}: the value under key {key} cannot be decoded ({reason}); deleted it (recomputed)")

    def decoded(self, key: str, raw: bytes, decode: Callable[[bytes], T]) -> T | None:
        """``decode(raw)``, or None after discarding the value when it cannot be decoded."""
        try:
            return decode(raw)
        except CorruptValueError as e:
            self.discard(key, str(e))
            return None

    def get_json(self, key: str) -> Any | None:
        raw = self.get_bytes(key)
        return None if raw is None else self.decoded(key, raw, decode_json)

    def get_many_json(self, keys: list[str]) -> dict[str, Any]:
        """The decodable JSON values among ``keys`` (the others are discarded: they read as missing)."""
        return self._decoded_many(keys, decode_json)

    def get_arrays(self, key: str) -> dict[str, np.ndarray] | None:
        raw = self.get_bytes(key)
        return None if raw is None else self.decoded(key, raw, unpack_arrays)

    def get_many_arrays(self, keys: list[str]) -> dict[str, dict[str, np.ndarray]]:
        """The decodable array bundles among ``keys`` (the others are discarded: they read as missing)."""
        return self._decoded_many(keys, unpack_arrays)

    def _decoded_many(self, keys: list[str], decode: Callable[[bytes], T]) -> dict[str, T]:
        out: dict[str, T] = {}
        for k, raw in self.get_many_bytes(keys).items():
            try:
                out[k] = decode(raw)
            except CorruptValueError as e:
                self.discard(k, str(e))
        return out

    def put_json(self, key: str, value: Any, *, counts: Mapping[str, int] | None = None) -> None:
        self.put_bytes(key, encode_json(value), counts=counts)

    # ------------------------------------------------------------ the tally

    def add_counts(self, counts: Mapping[str, int]) -> None:
        """Add to the persistent tally (kept in the store file, so across processes)."""
        self._write(lambda db: _add_counts(db, counts))

    def counts(self) -> dict[str, int]:
        """The persistent tally: every count added to this store file, by any process."""
        rows = self._do("read", lambda db: db.execute("SELECT name, n FROM tally ORDER BY name").fetchall(), list)
        return {str(k): int(n) for k, n in rows}

    # ------------------------------------------------------------ the rest

    def __contains__(self, key: str) -> bool:
        row = self._do("read", lambda db: db.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone(), lambda: None)
        return row is not None

    def __len__(self) -> int:
        return int(self._do("read", lambda db: db.execute("SELECT COUNT(*) FROM kv").fetchone()[0], lambda: 0))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _add_counts(db: sqlite3.Connection, counts: Mapping[str, int]) -> None:
    rows = [(k, int(n)) for k, n in counts.items() if n]
    if rows:
        db.executemany(
            "INSERT INTO tally (name, n) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET n = n + excluded.n", rows
        )


def encode_json(value: Any) -> bytes:
    return json.dumps(value, default=_default).encode()


def decode_json(raw: bytes) -> Any:
    """JSON from a store value; :class:`CorruptValueError` when it is not UTF-8 JSON."""
    try:
        return json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptValueError(f"not JSON: {e}") from None


def pack_arrays(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack_arrays(raw: bytes) -> dict[str, np.ndarray]:
    """Arrays from :func:`pack_arrays` bytes; :class:`CorruptValueError` when they are not a readable bundle."""
    try:
        z = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise CorruptValueError("not a numpy array bundle (a single array)")
        with z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
        if isinstance(e, CorruptValueError):
            raise
        raise CorruptValueError(f"not a numpy array bundle: {e}") from None
