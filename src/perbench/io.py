"""Atomic writes, JSON(L) helpers, the cache directory, the run lock, and OS errors told as perbench errors.

Inside a run directory (the block of :func:`writing_inside`) nothing is written through a symbolic link: a
link planted in a received run directory (``.lock``, ``plots/``, ``units.sqlite``, …) is refused, named, and its
target left alone.
"""

from __future__ import annotations

import contextvars
import errno
import json
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perbench.errors import ConfigError, StoreError

#: the fixes a StoreError suggests
FIX_SPACE = "free some space (or point out_dir / PERBENCH_CACHE at another disk) and rerun; finished units are kept"
FIX_WRITABLE = "make it writable for this user (chmod u+w) or point out_dir / PERBENCH_CACHE elsewhere, and rerun"
#: what an OSError met while writing means, by errno: (the cause, the fix)
_OS_CAUSES: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on device", FIX_SPACE),
    errno.EDQUOT: ("disk quota exceeded", FIX_SPACE),
    errno.EROFS: ("read-only file system", "point out_dir / PERBENCH_CACHE at a writable folder and rerun"),
    errno.EACCES: ("permission denied", FIX_WRITABLE),
    errno.EPERM: ("operation not permitted", FIX_WRITABLE),
}


def os_error_message(path: str | Path, action: str, e: OSError) -> str:
    """``<path>: cannot <action> (<cause>); <fix>`` for an OSError met while writing a run's files."""
    cause, fix = _OS_CAUSES.get(e.errno or 0, (e.strerror or str(e), "check the folder and the disk, and rerun"))
    return f"{path}: cannot {action} ({cause}); {fix}"


def warn(message: str) -> None:
    """One line on stderr, whatever ``PERBENCH_QUIET`` says: something was repaired and the user should know."""
    print(f"perbench: warning: {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """``PERBENCH_CACHE`` or ``$XDG_CACHE_HOME/perbench`` (default ``~/.cache/perbench``), created if absent."""
    path = cache_path()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(os_error_message(path, "create the cache folder", e)) from e
    return path


def cache_path() -> Path:
    """Where the cache is (see :func:`cache_dir`); a set but empty ``PERBENCH_CACHE`` is an error, not the
    default."""
    env = os.environ.get("PERBENCH_CACHE")
    if env is not None and not env.strip():
        raise ConfigError(
            "PERBENCH_CACHE is set but empty: set it to a folder for the shared cache, or unset it for the "
            "default (~/.cache/perbench)"
        )
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "perbench"
    return path


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the OS says it (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def special_file(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (reading a named pipe would wait
    forever, ``/dev/zero`` never ends): "a named pipe", "a character device", …; None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((what for test, what in kinds if test(mode)), "a socket" if stat.S_ISSOCK(mode) else "not a file")


_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("perbench_write_root", default=None)


@contextmanager
def writing_inside(root: str | Path) -> Iterator[None]:
    """While the block runs, every write below ``root`` (a run or report directory) refuses symbolic links."""
    token = _ROOT.set(Path(root))
    try:
        yield
    finally:
        _ROOT.reset(token)


def refuse_links(path: str | Path, root: str | Path | None = None) -> None:
    """StoreError naming the first symbolic link among ``path`` and its folders below ``root`` (default: the root
    of :func:`writing_inside`; nothing is checked outside it). ``root`` itself may be a link: the user named it."""
    root = Path(root) if root is not None else _ROOT.get()
    if root is None:
        return
    path = Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            try:
                target = f" (to {os.readlink(current)})"
            except OSError:
                target = ""
            raise StoreError(
                f"{current} is a symbolic link{target}; perbench never writes through a link inside a run "
                "directory, so nothing outside it is touched: remove the link (or copy the directory without "
                "links) and rerun"
            )


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then ``os.replace``: readers never see half a file.

    The file gets the permissions of any newly created file (``0o666`` less the umask), not the temp file's
    ``0o600``. An OS error (disk full, read-only folder) becomes a StoreError naming the file; the temp file
    is removed and an existing file at ``path`` is left as it was. Inside :func:`writing_inside`, a symbolic link
    at ``path`` or among its folders is refused (:func:`refuse_links`).
    """
    path = Path(path)
    refuse_links(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise StoreError(os_error_message(path, "write", e)) from e
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            _chmod_like_new_file(fh.fileno())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise StoreError(os_error_message(path, "write", e)) from e
        raise


def _chmod_like_new_file(fd: int) -> None:
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except OSError as e:  # a filesystem without POSIX modes (some network mounts): its own defaults stand
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def run_lock(run_dir: str | Path, *, wait: bool = True) -> Iterator[None]:
    """Hold ``run_dir/.lock`` (an exclusive lock through ``filelock``: ``flock`` on POSIX, ``LockFileEx`` on Windows;
    the file holds this process's pid) for the block.

    When another process holds it, print one line naming its pid and wait for it (``wait=True``), or raise a
    StoreError naming the folder and the pid (``wait=False``). The lock goes with its process: a run that is
    killed never leaves a stale lock. Not re-entrant: a process that holds the lock and asks again waits for
    itself.
    """
    from filelock import lock_descriptor

    run_dir = Path(run_dir)
    path = run_dir / ".lock"
    refuse_links(path, run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # never follows a link (one planted after the check above fails here with ELOOP)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_links(path, run_dir)
        raise StoreError(os_error_message(path, "create the run lock", e)) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            what = "a hard link to another file" if stat.S_ISREG(st.st_mode) else "not a plain file"
            raise StoreError(f"{path} is {what}; perbench would write into it: remove it and rerun")
        # the descriptor is ours (opened above without following a link): filelock locks it, as FileLock would
        if not lock_descriptor(fd, blocking=False):
            holder = _lock_holder(fd)
            if not wait:
                raise StoreError(
                    f"another perbench run (pid {holder}) is using {run_dir}; wait for it to finish, or give this "
                    "run another out_dir or run_name"
                ) from None
            print(f"another perbench run (pid {holder}) is using {run_dir}; waiting…", file=sys.stderr, flush=True)
            lock_descriptor(fd, blocking=True, poll_interval=0.2)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)  # (not os.pwrite: POSIX only)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _lock_holder(fd: int) -> str:
    """The pid the holder wrote into the lock file ("unknown" in the instant before it writes it)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:  # Windows: the holder's lock covers the bytes
        return "unknown"
    return text if text.isdigit() else "unknown"


def dumps(obj: Any) -> str:
    """Strict JSON: NaN and ±inf (not JSON; ``JSON.parse`` and jq reject them) are written as null."""
    return _strict(obj, indent=2)


def _strict(obj: Any, **kw: Any) -> str:
    """``json.dumps(finite(obj), ensure_ascii=False, allow_nan=False, **kw)``: tried on ``obj`` as it is first (the
    same text when it holds only plain finite values), :func:`finite` only when that is refused."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, **kw)
    except (TypeError, ValueError):
        return json.dumps(finite(obj), ensure_ascii=False, allow_nan=False, **kw)


def finite(obj: Any) -> Any:
    """``obj`` with numpy values made plain and every non-finite float replaced by None."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if isinstance(obj, str | int | bool) or obj is None:
        return obj
    return finite(_default(obj))


def _default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, dumps(obj) + "\n")


def jsonl_text(rows: Iterable[Any]) -> str:
    """The text :func:`atomic_write_jsonl` writes: one JSON object per line (NaN refused)."""
    return "".join(_strict(r) + "\n" for r in rows)


def atomic_write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, jsonl_text(rows))


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, object); a malformed line raises with file and line."""
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: invalid JSON ({e.msg})") from None
