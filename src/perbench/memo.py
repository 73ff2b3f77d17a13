"""Derived results memoized by content: what a run derives from its stored units alone (the analysis, the Best-of-n
curves and the pool diagnosis, upstream RM accuracy, the Parquet copies of cells and samples, the report's figures,
the large rubric pool) is kept in the shared cache's ``derived.sqlite`` (a :class:`~perbench.cache.Store`, every
value sealed) under the digest of its inputs and of the code (:func:`code_digest`), so a rerun whose units are all
found finished reads them instead of recomputing them, and an edited module or a new release never reads a value
another code wrote."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from perbench.cache import Store, encode_json
from perbench.errors import StoreError
from perbench.io import _default

T = TypeVar("T")


#: the store, in the shared cache, of what a run derives from its stored units alone (the analysis, the report's
#: figures): a rerun whose units are all found finished reads them instead of recomputing them
DERIVED_STORE = "derived.sqlite"
_code_digest: str | None = None
#: False in a cluster worker's process: a node keeps no store of a run's results (its cache holds converted models
#: only), so what a unit derives there is computed, and the driver memoizes what it assembles
STORE_DERIVED = True


def code_digest() -> str:
    """sha256 over perbench's own source files and the versions of numpy, scipy and matplotlib: a memo of a
    derived result keyed by it is never read by other code (an edited analysis or plot module, a new release)."""
    global _code_digest
    if _code_digest is None:
        import hashlib
        from importlib import metadata

        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        for name in ("numpy", "scipy", "matplotlib"):
            with contextlib.suppress(metadata.PackageNotFoundError):
                h.update(f"{name}=={metadata.version(name)}".encode())
        _code_digest = h.hexdigest()
    return _code_digest


def memo_key(kind: str, *parts: Any) -> str:
    """The key of a derived result: its kind, the code digest and the digest of ``parts`` (plain data, canonical
    JSON: key order does not matter)."""
    import hashlib

    payload = json.dumps([kind, code_digest(), *parts], sort_keys=True, default=_default, allow_nan=True)
    return f"{kind}:{hashlib.sha256(payload.encode()).hexdigest()}"


def derived_store() -> Store | None:
    """The shared cache's store of derived results, None when it cannot be opened (a read-only cache: the caller
    computes instead)."""
    from perbench.io import cache_path

    if not STORE_DERIVED:
        return None
    try:
        folder = cache_path()
        folder.mkdir(parents=True, exist_ok=True)
        return Store(folder / DERIVED_STORE)
    except (OSError, StoreError):
        return None


def array_digest(*arrays: Any) -> str:
    """sha256 over arrays' dtypes, shapes and bytes (a part of a memo key for numeric inputs)."""
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        arr = np.ascontiguousarray(np.asarray(a))
        h.update(f"{arr.dtype.str}{arr.shape}".encode() + arr.tobytes())
    return h.hexdigest()


def memo_bytes(kind: str, digest: str, compute: Callable[[], bytes]) -> bytes:
    """``compute()`` (bytes derived from content whose sha256 is ``digest``, e.g. a Parquet copy of a JSONL text)
    under :func:`memo_key` ``(kind, digest)`` in :func:`derived_store`: read back when stored, else computed and
    stored (a rerun writing the same rows needs neither pyarrow nor the conversion)."""
    store = derived_store()
    if store is None:
        return compute()
    try:
        key = memo_key(kind, digest)
        got = store.get_bytes(key)
        if got is not None:
            return got
        value = compute()
        store.put_bytes(key, value)
        return value
    finally:
        store.close()


def memo_json(kind: str, parts: Any, compute: Callable[[], T]) -> T:
    """:meth:`Memo.json` for one value (the store opened and closed around it)."""
    memo = Memo()
    try:
        return memo.json(kind, parts, compute)
    finally:
        memo.close()


class Memo:
    """Derived results of one pass, read from and added to :func:`derived_store` (opened on first use, closed by
    :meth:`close`); without a store every value is computed."""

    def __init__(self) -> None:
        self._store: Store | None = None
        self._opened = False
        self.read = 0
        self.computed = 0

    def json(self, kind: str, parts: Any, compute: Callable[[], T]) -> T:
        """The value of ``compute()`` (plain JSON data) under :func:`memo_key` ``(kind, parts)``: read back when
        stored, else computed and stored; a value read back went through JSON (NaN kept)."""
        if not self._opened:
            self._store, self._opened = derived_store(), True
        key = memo_key(kind, parts)
        if self._store is not None:
            got = self._store.get_json(key)
            if got is not None:
                self.read += 1
                return got  # type: ignore[no-any-return]
        value = compute()
        self.computed += 1
        if self._store is not None:
            self._store.put_json(key, value)
            return json.loads(encode_json(value))  # type: ignore[no-any-return]
        return value

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store, self._opened = None, False
