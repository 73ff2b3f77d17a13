"""The method-facing benchmark: what a run hands reward models, judges and decoders, re-keyed behind a secret.

A loaded benchmark names its users and pairs as its source does (``u01``, ``u01-p03``, a style name's hash, a
row's ``source`` path and line in ``pair.meta``), and those names lead back to the answer key: the built-in
rubric users are importable by id (:data:`perbench.data.rubrics.users.RUBRIC_USERS`), the rubric pairs' meta
names pool candidates whose checker verdicts state each pole, a file row can be reopened, and an unsalted hash
of a short label can be reversed by guessing. :func:`seal` closes these routes before any method runs:

- every user id becomes ``user-<hmac>`` and every pair id ``pair-<hmac>``: an HMAC-SHA256 of the benchmark's
  name and the original id under a secret key (:func:`secret_key`), so no id can be computed from a guess or
  looked up in a benchmark module;
- pair metadata is cut to :data:`METHOD_META` (nothing by default) and profile items keep only their text
  (their ids become ``item-<n>``, their metadata is dropped);
- the answer key, the checkable rubric and ``User.meta`` stay on the grader's side: in ``Benchmark.users``,
  which no method is handed (methods get :class:`~perbench.data.user_context.UserView`).

:class:`Sealed` keeps the map back to the source's ids, for results and reports (written once methods are done).

What this does not promise (see docs/architecture.md, "Isolation"): the run is one Python process, so code that
walks the interpreter's objects (``gc``, stack frames) reaches the grader's records, and code that reads the
cache folder reads the key. Process isolation (``perbench.rewards.isolated``) closes those two for a method that
runs in a child process, but no isolation stops a method that rebuilds a public benchmark from its source.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perbench.data.records import Benchmark, PreferencePair, ProfileItem, Reference, User

#: the pair metadata keys a method may read (none: no loader's pair metadata is needed to fit or score)
METHOD_META: frozenset[str] = frozenset()
#: the file under the cache folder that holds the key (created once, readable by its owner only)
KEY_FILE = "id_key"
USER_PREFIX = "user-"
PAIR_PREFIX = "pair-"


def secret_key(folder: Path) -> bytes:
    """The key of the opaque ids: 32 random bytes in ``folder/id_key``, created on first use (mode 0600). One key
    per cache folder, so runs that share a cache share ids and reuse each other's fitted units."""
    path = folder / KEY_FILE
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{KEY_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # the first writer wins; a concurrent run reads its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = bytes.fromhex(path.read_text(encoding="ascii").strip())
    if len(key) < 16:
        raise ValueError(f"{path}: the id key is shorter than 16 bytes; delete the file to make a new one")
    return key


def opaque(key: bytes, bench: str, kind: str, original: str, prefix: str) -> str:
    digest = hmac.new(key, f"{bench}\x00{kind}\x00{original}".encode(), hashlib.sha256).hexdigest()
    return prefix + digest[:12]


def method_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` cut to :data:`METHOD_META`."""
    return {k: v for k, v in meta.items() if k in METHOD_META}


@dataclass(frozen=True)
class Sealed:
    """A sealed benchmark and the map back to its source's ids (grader side)."""

    bench: Benchmark
    users: dict[str, str]  # opaque id -> the source's user id
    pairs: dict[str, str]  # opaque id -> the source's pair id

    def original_user(self, opaque_id: str) -> str:
        return self.users.get(opaque_id, opaque_id)


def _unique(mapping: dict[str, str], what: str) -> dict[str, str]:
    if len(set(mapping.values())) != len(mapping):  # 48 bits: never in practice, but never silently
        raise ValueError(f"two {what} ids map to one opaque id; delete the id key file to draw a new key")
    return mapping


def seal(bench: Benchmark, key: bytes) -> Sealed:
    """``bench`` as methods may see it (see the module docstring); the answer keys stay in ``users``."""
    if bench.meta.get("sealed"):
        raise ValueError(f"benchmark {bench.name!r} is sealed already")
    uid = _unique({u: opaque(key, bench.name, "user", u, USER_PREFIX) for u in bench.users}, "user")
    every = [*bench.pairs, *(p for ps in bench.pair_sets.values() for p in ps)]
    pid = _unique({p.pair_id: opaque(key, bench.name, "pair", p.pair_id, PAIR_PREFIX) for p in every}, "pair")

    def pair(p: PreferencePair) -> PreferencePair:
        return replace(p, pair_id=pid[p.pair_id], user_id=uid[p.user_id], meta=method_meta(p.meta))

    def user(u: User) -> User:
        items = tuple(ProfileItem(f"item-{i}", it.text) for i, it in enumerate(u.profile))
        return replace(u, user_id=uid[u.user_id], profile=items)

    sealed = Benchmark(
        name=bench.name,
        pairs=[pair(p) for p in bench.pairs],
        users={uid[u]: user(rec) for u, rec in bench.users.items()},
        references=[Reference(uid[r.user_id], r.prompt, r.text, r.split) for r in bench.references],
        skipped=bench.skipped,
        meta={**bench.meta, "sealed": True},
        weighting=bench.weighting,
        subsets={n: frozenset(pid[i] for i in ids) for n, ids in bench.subsets.items()},
        pair_sets={n: [pair(p) for p in ps] for n, ps in bench.pair_sets.items()},
    )
    return Sealed(sealed, {v: k for k, v in uid.items()}, {v: k for k, v in pid.items()})
