"""An SQLite file's state and errors: result codes, a header check, busy retries, and what an error means.

Shared by the content stores (:mod:`perbench.cache`) and the unit leases, which open the same files.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from perbench.errors import StoreError
from perbench.io import FIX_SPACE, FIX_WRITABLE, os_error_message

T = TypeVar("T")

# SQLite primary result codes (https://sqlite.org/rescode.html)
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_CORRUPT = 3, 5, 6, 8, 10, 11
_SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 13, 14, 26
_MAGIC = b"SQLite format 3\x00"


def code(e: sqlite3.Error) -> int:
    return int(getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF


def busy(e: sqlite3.Error) -> bool:
    """Whether ``e`` says another connection holds the file locked."""
    return code(e) in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(e)


def retry_busy(fn: Callable[[], T], timeout: float) -> T:
    """``fn()``, retried while SQLite reports the file busy, for up to ``timeout`` seconds.

    SQLite's busy handler does not cover every step: while another process creates the file or switches it to
    write-ahead logging, ``PRAGMA journal_mode`` and the first ``CREATE TABLE`` can fail at once with
    "database is locked", whatever the connection's timeout. Two runs starting together on one new cache hit
    exactly that window, so the setup is retried here.
    """
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not busy(e) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def is_corrupt(e: sqlite3.Error) -> bool:
    if code(e) in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    msg = str(e)
    return "file is not a database" in msg or "database disk image is malformed" in msg


def header_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a whole SQLite database, from its 100-byte header alone (cheap); None if it may be.

    An empty or absent file is fine (SQLite starts it). The size check is skipped while a write-ahead log exists:
    the log then holds pages the main file does not have yet.
    """
    try:
        size = path.stat().st_size
        if size == 0:
            return None
        with open(path, "rb") as fh:
            head = fh.read(100)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(os_error_message(path, "read", e)) from e
    if len(head) < 100 or not head.startswith(_MAGIC):
        return "not a SQLite database"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    n_pages = int.from_bytes(head[28:32], "big")
    header_valid = n_pages > 0 and head[24:28] == head[92:96]
    wal = Path(f"{path}-wal")
    if header_valid and not (wal.exists() and wal.stat().st_size > 0) and size < n_pages * page_size:
        return f"truncated: {size} of {n_pages * page_size} bytes"
    return None


def store_error(path: Path, e: sqlite3.Error, action: str, timeout: float) -> StoreError:
    """What a failed ``action`` on the store at ``path`` means, with the fix (one line)."""
    err = code(e)
    folder = path.parent
    if err == _SQLITE_FULL or "disk is full" in str(e) or (err == _SQLITE_IOERR and nearly_full(folder)):
        return StoreError(f"{path}: cannot {action} (no space left on device); {FIX_SPACE}")
    if busy(e):
        return StoreError(
            f"{path}: cannot {action} (another process has held it locked for over {timeout:g} s); "
            "wait for that process (another perbench run on this store?) to finish, or stop it, and rerun"
        )
    if err in (_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_PERM, _SQLITE_IOERR):
        if read_only_fs(folder):
            cause = "read-only file system"
        elif not os.access(folder, os.W_OK):
            cause = f"read-only folder: {folder} is not writable"
        elif path.exists() and not os.access(path, os.W_OK):
            cause = "read-only file"
        else:
            cause = str(e)
        return StoreError(f"{path}: cannot {action} ({cause}); {FIX_WRITABLE}")
    return StoreError(f"{path}: cannot {action} ({e}); check the file and the disk, and rerun")


def nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


def read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
