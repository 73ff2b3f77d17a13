"""Content-keyed stores on SQLite: one file, atomic transactions, safe to reopen and resume.

Keys are content hashes that include the model fingerprint and the full request; values are bytes
(numpy arrays) or JSON. A store never needs invalidation: a different model or request is a different key.
"""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        self._db.commit()

    def get_bytes(self, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def get_many_bytes(self, keys: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(chunk))})"
                out.update({k: bytes(v) for k, v in self._db.execute(q, chunk)})
        return out

    def put_many_bytes(self, items: dict[str, bytes]) -> None:
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", list(items.items()))

    def put_bytes(self, key: str, value: bytes) -> None:
        self.put_many_bytes({key: value})

    def get_json(self, key: str) -> Any | None:
        raw = self.get_bytes(key)
        return None if raw is None else json.loads(raw)

    def put_json(self, key: str, value: Any) -> None:
        from perbench.io import _default

        self.put_bytes(key, json.dumps(value, default=_default).encode())

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM kv").fetchone()[0])

    def close(self) -> None:
        self._db.close()


def pack_arrays(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack_arrays(raw: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
