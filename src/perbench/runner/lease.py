"""Leases on units in the shared unit cache: runs that share a ``PERBENCH_CACHE`` compute each shared unit once.

Before a process computes a unit (or submits it to Ray) it claims the unit's lease, a row of the ``lease`` table
in ``$PERBENCH_CACHE/units.sqlite``, in one SQLite transaction. A second run that finds the lease held by
another live owner does not compute the unit: it waits until the owner's finished marker appears in the shared
cache and reuses the unit, or takes the lease over when the owner is gone (a process of this machine that no
longer exists, or an owner whose heartbeat is older than :data:`TTL_S`: a thread refreshes every lease its
process holds every :data:`BEAT_S` seconds). A lease is released once its unit is stored, or when the run stops.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from perbench.sqlite_file import retry_busy

#: seconds between two heartbeats of a process's leases
BEAT_S = 10.0
#: seconds without a heartbeat after which a lease's owner counts as gone
TTL_S = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TABLE = (
    "CREATE TABLE IF NOT EXISTS lease (key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, "
    "pid INTEGER NOT NULL, beat REAL NOT NULL)"
)


class Leases:
    """This process's leases in the shared unit cache at ``path`` (None: no shared cache, every claim succeeds)."""

    def __init__(self, path: Path | None, timeout: float = 300.0) -> None:
        self.path = path
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._db: sqlite3.Connection | None = None
        if path is not None:
            db = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False, isolation_level=None)
            retry_busy(lambda: db.execute(_TABLE), timeout)
            self._db = db

    def _gone(self, host: str, pid: int, beat: float, now: float) -> bool:
        if now - beat > TTL_S:
            return True
        return host == self.host and pid != self.pid and not _alive(pid)

    def claim(self, key: str) -> bool:
        """Take the lease of ``key``: True when this process holds it now (free, its own, or its owner gone)."""
        if self._db is None or key in self.held:
            return True
        with self._lock:
            db = self._db
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT owner, host, pid, beat FROM lease WHERE key = ?", (key,)).fetchone()
                if row is not None and row[0] != self.owner and not self._gone(row[1], int(row[2]), float(row[3]), now):
                    db.execute("COMMIT")
                    return False
                db.execute(
                    "INSERT OR REPLACE INTO lease (key, owner, host, pid, beat) VALUES (?, ?, ?, ?, ?)",
                    (key, self.owner, self.host, self.pid, now),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self.held.add(key)
        self._beat_in_background()
        return True

    def holder(self, key: str) -> str | None:
        """Who holds ``key``'s lease (None: nobody alive)."""
        if self._db is None:
            return None
        with self._lock:
            row = self._db.execute("SELECT owner, host, pid, beat FROM lease WHERE key = ?", (key,)).fetchone()
        if row is None or self._gone(row[1], int(row[2]), float(row[3]), time.time()):
            return None
        return str(row[0])

    def release(self, key: str) -> None:
        if self._db is None or key not in self.held:
            return
        with self._lock:
            self._db.execute("DELETE FROM lease WHERE key = ? AND owner = ?", (key, self.owner))
            self.held.discard(key)

    def release_all(self) -> None:
        for key in list(self.held):
            self.release(key)

    def close(self) -> None:
        self.release_all()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._db is not None:
            with self._lock:
                self._db.close()
                self._db = None

    def _beat_in_background(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="perbench-leases", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            with self._lock:
                if self._db is None:
                    return
                if self.held:
                    self._db.execute("UPDATE lease SET beat = ? WHERE owner = ?", (time.time(), self.owner))
