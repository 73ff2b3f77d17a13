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

:class:`Sealed` keeps the map back to the source's ids, for results and reports, and the map from the ids methods see
to the ids results record (:func:`recorded_key`: a run's files never name an id a method is handed, so an earlier
run's map back to the source says nothing about them), both written once methods are done.

What this does not promise (see docs/methods.md, "Isolation, and what it promises"): the run is one Python process,
so code that walks the interpreter's objects (``gc``, stack frames) reaches the grader's records. Process isolation
(``perbench.rewards.isolated``) closes that for a method that runs in a child process, but no isolation stops a
method that rebuilds a public benchmark from its source (it could then compute the key, or match texts); the
built-in benchmark's key can be drawn by a private secret for that (:mod:`perbench.data.rubrics.secret`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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


def recorded_key(key: bytes) -> bytes:
    """The key of the ids results record (results.json, cells, samples, the map back to the source's ids), derived
    from the key of the ids methods see but not equal to it: a run's files name ids no method is ever handed, so an
    earlier run's map says nothing about the ids a method sees, and no method can turn one into the other without
    the key (which takes the answer keys)."""
    return hmac.new(key, b"perbench-recorded-ids", hashlib.sha256).digest()


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


#: a sealed id as it appears in any string (a cell's user, a stranger's ``NAME/user-…``, a message)
SEALED_ID = re.compile(r"\b(?:user|pair|list)-[0-9a-f]{12}\b")
#: the pair metadata that says where a pair was read (a file's path or row label, its line, a dataset's index)
TRACE_META = ("source", "line", "index", "row")


@dataclass(frozen=True)
class Sealed:
    """A sealed benchmark and the map back to its source's ids (grader side)."""

    bench: Benchmark
    users: dict[str, str]  # opaque id -> the source's user id
    pairs: dict[str, str]  # opaque id -> the source's pair id
    #: the id a method sees -> the id results record (users, pairs, lists)
    recorded: dict[str, str] = field(default_factory=dict)
    #: recorded pair id -> where the pair came from: the source's pair id and, where the loader kept them, the
    #: file (or row label), line and dataset index (``TRACE_META``)
    trace: dict[str, dict[str, Any]] = field(default_factory=dict)

    def original_user(self, opaque_id: str) -> str:
        return self.users.get(opaque_id, opaque_id)

    def record(self, obj: Any) -> Any:
        """``obj`` (results, cells, samples: dicts, lists, strings) with every id a method saw replaced by the id
        results record (:func:`record_ids`)."""
        return record_ids(obj, self.recorded)

    def recorder(self) -> IdRecorder:
        """The map :meth:`record` applies, for a writer that maps strings as it writes them."""
        return IdRecorder(self.recorded)

    def record_rows(self, rows: list[dict[str, Any]]) -> None:
        """:meth:`record` on a list of rows, in place (:func:`record_rows`)."""
        record_rows(rows, self.recorded)


def record_ids(obj: Any, recorded: Mapping[str, str]) -> Any:
    """``obj`` with each sealed id inside a string (a dict key, a value, a message) mapped through ``recorded``;
    ids it does not know stay as they are."""
    return IdRecorder(recorded).walk(obj) if recorded else obj


def record_rows(rows: list[dict[str, Any]], recorded: Mapping[str, str]) -> None:
    """:func:`record_ids` on a list of rows, in place (a run's cells: hundreds of thousands of flat rows, whose keys
    hold no ids): each row keeps its dict, its string values mapped; a row whose keys hold an id is replaced."""
    if not recorded:
        return
    rec = IdRecorder(recorded)
    seen = rec.seen  # the map of each string met so far (looked up inline: rows hold millions of strings)
    keys_plain: dict[tuple[Any, ...], bool] = {}
    for i, r in enumerate(rows):
        keys = tuple(r)
        plain = keys_plain.get(keys)
        if plain is None:
            plain = keys_plain[keys] = all(type(k) is str and rec.text(k) == k for k in keys)
        if not plain or type(r) is not dict:
            rows[i] = rec.walk(r)
            continue
        for k, v in r.items():
            if type(v) is str:
                m = seen.get(v)
                if m is None:
                    m = rec.text(v)
                if m is not v:
                    r[k] = m
            elif not (isinstance(v, int | float) or v is None):
                r[k] = rec.walk(v)


class IdRecorder:
    """The map of :func:`record_ids`: each distinct string mapped once (rows repeat users, prompts and systems)."""

    def __init__(self, recorded: Mapping[str, str]) -> None:
        self.recorded = recorded
        self.seen: dict[str, str] = {}

    def digest(self) -> str:
        """sha256 of the map (sorted): with the digest of a text it mapped, the digest of the text before."""
        h = hashlib.sha256()
        for k, v in sorted(self.recorded.items()):
            h.update(f"{k}\x00{v}\x00".encode())
        return h.hexdigest()

    def _sub(self, m: re.Match[str]) -> str:
        return self.recorded.get(m.group(0), m.group(0))

    def text(self, s: str) -> str:
        out = self.seen.get(s)
        if out is None:
            out = self.seen[s] = SEALED_ID.sub(self._sub, s) if "-" in s else s
        return out

    def walk(self, o: Any) -> Any:
        text = self.text
        if isinstance(o, str):
            return text(o)
        if isinstance(o, dict):
            return {
                (text(k) if isinstance(k, str) else k): (
                    text(v) if isinstance(v, str) else v if isinstance(v, int | float) or v is None else self.walk(v)
                )
                for k, v in o.items()
            }
        if isinstance(o, list | tuple):
            return [self.walk(v) for v in o]
        return o


def _unique(mapping: dict[str, str], what: str) -> dict[str, str]:
    if len(set(mapping.values())) != len(mapping):  # 48 bits: never in practice, but never silently
        raise ValueError(f"two {what} ids map to one opaque id (report this benchmark: its ids need another key)")
    return mapping


def seal(bench: Benchmark, key: bytes | None = None) -> Sealed:
    """``bench`` as methods may see it (see the module docstring), under ``key`` (default :func:`grader_key`); the
    ids results record are keyed apart (:func:`recorded_key`, ``Sealed.recorded``); the answer keys stay in
    ``users``."""
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
    return Sealed(sealed, {v: k for k, v in uid.items()}, {v: k for k, v in pid.items()}, *_recorded(bench, key, every))


def _recorded(
    bench: Benchmark, key: bytes, every: list[PreferencePair]
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """(the id a method sees -> the id results record, recorded pair id -> where the pair came from)."""
    rkey = recorded_key(key)
    ids = [("user", u, USER_PREFIX) for u in bench.users] + [("pair", p.pair_id, PAIR_PREFIX) for p in every]
    ids += [("pair", str(p.meta["paraphrase_of"]), PAIR_PREFIX) for p in every if p.meta.get("paraphrase_of")]
    ids += [("list", str(p.meta["list_id"]), "list-") for p in every if p.meta.get("list_id") is not None]
    recorded = {
        opaque(key, bench.name, kind, orig, prefix): opaque(rkey, bench.name, kind, orig, prefix)
        for kind, orig, prefix in ids
    }
    trace = {}
    for p in every:
        rid = opaque(rkey, bench.name, "pair", p.pair_id, PAIR_PREFIX)
        trace[rid] = {"source_pair_id": p.pair_id, **{k: p.meta[k] for k in TRACE_META if p.meta.get(k) is not None}}
    return recorded, trace
