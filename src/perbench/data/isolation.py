"""The method-facing benchmark: what a run hands reward models, judges and decoders, re-keyed behind a secret.

A loaded benchmark names its users and pairs as its source does (``u01``, ``u01-p03``, a style name's hash, a
row's ``source`` path and line in ``pair.meta``), and those names lead back to the answer key: the built-in
rubric users are importable by id (:data:`perbench.data.rubrics.users.RUBRIC_USERS`), the rubric pairs' meta
names pool candidates whose checker verdicts state each pole, a file row can be reopened, and an unsalted hash
of a short label can be reversed by guessing. :func:`seal` closes these routes before any method runs:

- every user id becomes ``user-<hmac>`` and every pair id ``pair-<hmac>``: an HMAC-SHA256 of the benchmark's
  name and the original id under a key derived from the grader's side of the benchmark, answer keys included
  (:func:`grader_key`), so no id can be computed from a guess or looked up in a benchmark module;
- pair metadata is cut to :data:`METHOD_META` (the structure listwise metrics need, ids re-keyed) and profile
  items keep only their text
  (their ids become ``item-<n>``, their metadata is dropped);
- the answer key, the checkable rubric and ``User.meta`` stay on the grader's side: in ``Benchmark.users``,
  which no method is handed (methods get :class:`~perbench.data.user_context.UserView`).

:class:`Sealed` keeps the map back to the source's ids, for results and reports (written once methods are done).

What this does not promise (see docs/architecture.md, "Isolation"): the run is one Python process, so code that
walks the interpreter's objects (``gc``, stack frames) reaches the grader's records. Process isolation
(``perbench.rewards.isolated``) closes that for a method that runs in a child process, but no isolation stops a
method that rebuilds a public benchmark from its source (it could then compute the key, or match texts).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from perbench.data.records import Benchmark, PreferencePair, ProfileItem, Reference, User

#: the pair metadata a sealed pair keeps: the structure listwise metrics group pairs by (a list, RewardBench 2's
#: Ties prompts and domain, the original of a paraphrased pair, RMGAP's order of a list's responses -- its
#: tie-break), never a source path, a candidate id or a label; ids among them are re-keyed like pair ids
METHOD_META: frozenset[str] = frozenset(
    {"list_id", "ties_kind", "ties_prompt", "subset", "paraphrase_of", "paraphrase", "response_order"}
)
USER_PREFIX = "user-"
PAIR_PREFIX = "pair-"


def grader_key(bench: Benchmark) -> bytes:
    """The default key: a hash of everything the benchmark holds, its answer keys and rubrics included
    (:meth:`~perbench.data.records.Benchmark.fingerprint`). Reproducible — the same benchmark gets the same ids
    on every machine and in every run, so fitted units are reused and a run on Ray workers matches a local one —
    yet no method can compute it from what it is handed: that takes the answer keys."""
    return hashlib.sha256(b"perbench-opaque-ids\x00" + bench.fingerprint().encode()).digest()


def opaque(key: bytes, bench: str, kind: str, original: str, prefix: str) -> str:
    digest = hmac.new(key, f"{bench}\x00{kind}\x00{original}".encode(), hashlib.sha256).hexdigest()
    return prefix + digest[:12]


def method_meta(meta: Mapping[str, Any], rekey: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``meta`` cut to :data:`METHOD_META`, each value of a key in ``rekey`` replaced by ``rekey[key](value)``."""
    out = {k: v for k, v in meta.items() if k in METHOD_META}
    for k, fn in (rekey or {}).items():
        if k in out and out[k] is not None:
            out[k] = fn(out[k])
    return out


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
        raise ValueError(f"two {what} ids map to one opaque id (report this benchmark: its ids need another key)")
    return mapping


def seal(bench: Benchmark, key: bytes | None = None) -> Sealed:
    """``bench`` as methods may see it (see the module docstring), under ``key`` (default :func:`grader_key`);
    the answer keys stay in ``users``."""
    if bench.meta.get("sealed"):
        raise ValueError(f"benchmark {bench.name!r} is sealed already")
    key = grader_key(bench) if key is None else key
    uid = _unique({u: opaque(key, bench.name, "user", u, USER_PREFIX) for u in bench.users}, "user")
    every = [*bench.pairs, *(p for ps in bench.pair_sets.values() for p in ps)]
    pid = _unique({p.pair_id: opaque(key, bench.name, "pair", p.pair_id, PAIR_PREFIX) for p in every}, "pair")

    rekey = {
        "paraphrase_of": lambda v: pid.get(str(v)) or opaque(key, bench.name, "pair", str(v), PAIR_PREFIX),
        "list_id": lambda v: opaque(key, bench.name, "list", str(v), "list-"),
    }

    def pair(p: PreferencePair) -> PreferencePair:
        return replace(p, pair_id=pid[p.pair_id], user_id=uid[p.user_id], meta=method_meta(p.meta, rekey))

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
