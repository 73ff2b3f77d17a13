"""RMGAP (2026): instances with four stylistically distinct responses, each judged under four prompt groups of three
paraphrased prompts, as the release ``data/test.jsonl`` writes them.

A row (the repository's "Dataset Format" and its schema test): ``id``, ``domain`` (``Chat``, ``Writing``,
``Reasoning`` or ``Safety``), ``source``, ``responses`` (four ``{key, text}`` objects with distinct keys),
``prompt_groups`` (four ``{group, winner, prompts}`` objects: ``winner`` is a response key, ``prompts`` three
``{text}`` objects -- the base prompt and two rewrites) and ``style_assignments`` (the responses' styles; read by
nothing, like ``source`` and ``models``). The loader applies the release's own rules: four responses, four groups,
three prompts each, a canonical domain, a winner among the keys, no empty text. A file in another layout (e.g. flat
rows with ``group_id`` / ``chosen``) is a located error naming this one.

Pairs: per prompt, the group's winner against each other response (responses in key order, as RMGAP scores them);
the three pairs of a prompt form a list (``meta["list_id"]``: best-of-4), the three prompts of a group are
paraphrases (``meta["paraphrase_of"]``); ``meta["subset"]`` is the domain and ``meta["response_order"]`` the
chosen and rejected responses' places in key order, from which :mod:`perbench.metrics.rmgap` computes RMGAP's
Pair, BoN and Consistency as the authors do (the instance, group and keys are kept too, for reports; they do
not reach methods). The
preference is stated in the prompt, so every pair belongs to one user (``user``, default ``anyone``); the
personalization-only subset matches a pair (a ≻ b) under one prompt group with a pair (b ≻ a) of the same instance
under another group: a prompt-agnostic scorer gets exactly ½ on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perbench.data.benchmarks.common import finish, rows_of
from perbench.data.records import Benchmark, PreferencePair, SkipReport, User, mirrored_ids
from perbench.data.rows import DataError, ErrorSink, OnError, Row, check_ident, check_text, type_name
from perbench.data.user_context import describe_user_context

RMGAP_DOMAINS = ("Chat", "Writing", "Reasoning", "Safety")
RESPONSES, GROUPS, PROMPTS = 4, 4, 3
LAYOUT = (
    "RMGAP's data/test.jsonl layout: {id, domain, responses: [{key, text}] x4, "
    "prompt_groups: [{group, winner: <a response key>, prompts: [{text}] x3}] x4}"
)


def _objects(row: Row, path: str, n: int) -> list[Mapping[str, Any]]:
    values = row.seq(path)
    if len(values) != n:
        raise row.error(path, f"expected {n} entries (the release's rule), got {len(values)}")
    for i, v in enumerate(values):
        if not isinstance(v, Mapping):
            raise row.error(f"{path}.{i}", f"expected an object, got {type_name(v)}")
    return list(values)


def _field(row: Row, path: str, obj: Mapping[str, Any], key: str) -> Any:
    if obj.get(key) is None:
        raise row.error(f"{path}.{key}", "missing")
    return obj[key]


def parse_rmgap_row(row: Row) -> tuple[str, str, dict[str, str], list[tuple[str, str, list[str]]]]:
    """-> (id, domain, {key: text}, [(group, winner key, [3 prompt texts])]); located errors on every rule."""
    if not row.has("prompt_groups"):
        flat = [f for f in ("group_id", "chosen", "prompt") if row.has(f)]
        why = f" (this row is flat: it has {', '.join(flat)})" if flat else ""
        raise row.error("prompt_groups", f"missing{why}; expected {LAYOUT}")
    rid = row.ident("id")
    domain = row.text("domain").strip()
    if domain not in RMGAP_DOMAINS:
        raise row.error("domain", f"{domain!r} is not one of RMGAP's domains {list(RMGAP_DOMAINS)}")
    texts: dict[str, str] = {}
    for i, r in enumerate(_objects(row, "responses", RESPONSES)):
        key = check_ident(row, f"responses.{i}.key", _field(row, f"responses.{i}", r, "key"))
        if key in texts:
            raise row.error(f"responses.{i}.key", f"duplicate response key {key!r}")
        texts[key] = check_text(row, f"responses.{i}.text", _field(row, f"responses.{i}", r, "text"))
    groups: list[tuple[str, str, list[str]]] = []
    for g, group in enumerate(_objects(row, "prompt_groups", GROUPS)):
        where = f"prompt_groups.{g}"
        winner = check_ident(row, f"{where}.winner", _field(row, where, group, "winner"))
        if winner not in texts:
            raise row.error(f"{where}.winner", f"{winner!r} is none of the response keys {sorted(texts)}")
        prompts = [
            check_text(row, f"{where}.prompts.{k}.text", _field(row, f"{where}.prompts.{k}", p, "text"))
            for k, p in enumerate(_objects(row, f"{where}.prompts", PROMPTS))
        ]
        name = str(group["group"]) if group.get("group") is not None else str(g)
        if name in {n for n, _, _ in groups}:
            raise row.error(f"{where}.group", f"duplicate group {name!r}")
        groups.append((name, winner, prompts))
    return rid, domain, texts, groups


def rmgap_mirror_key(pair: PreferencePair) -> tuple[str, str]:
    """RMGAP's preferences live in the prompt groups: a mirror is the same instance under another group."""
    return str(pair.meta["rmgap_instance"]), str(pair.meta["rmgap_group"])


def load_rmgap(
    source: str | Path,
    *,
    split: str | None = None,
    user: str = "anyone",
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load RMGAP's release (``data/test.jsonl``, a Parquet/JSON export, a ``save_to_disk`` folder or a hub id) in its
    published nested layout (the module docstring)."""
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    pairs: list[PreferencePair] = []
    first_at: dict[str, str] = {}
    rows_read = 0
    for row in rows_of(source, fmt=fmt, split=split):
        rows_read += 1
        try:
            rid, domain, texts, groups = parse_rmgap_row(row)
            if rid in first_at:
                raise row.error("id", f"duplicate id {rid!r} (first at {first_at[rid]})")
        except DataError as e:
            sink(e, n=GROUPS * PROMPTS * (RESPONSES - 1))
            continue
        first_at[rid] = row.where
        keys = sorted(texts)
        for group, winner, prompts in groups:
            for k, prompt in enumerate(prompts):
                for loser in keys:
                    if loser == winner:
                        continue
                    meta: dict[str, Any] = {
                        "source": row.where,
                        "subset": domain,
                        "response_order": [keys.index(winner), keys.index(loser)],
                        "domain": domain,
                        "list_id": f"{rid}:{group}:{k}",
                        "paraphrase_of": f"{rid}:{group}",
                        "rmgap_instance": rid,
                        "rmgap_group": group,
                        "chosen_key": winner,
                        "rejected_key": loser,
                    }
                    pid = f"rmgap:{rid}:{group}:{k}:{loser}"
                    pairs.append(PreferencePair(pid, user, prompt, texts[winner], texts[loser], "test", meta))
    users = {user: User(user, seen=False, meta={"general": True})}
    meta = {
        "source": str(source),
        "layout": LAYOUT,
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "users": f"one user ({user!r}): the preference is stated in each prompt group",
        "split_policy": "every pair test (RMGAP releases one test set)",
        "seen_policy": "evaluation-only: the one user is unseen, no few-shot pairs",
        "evaluation_only": True,
        "listwise": "one list per prompt (meta list_id), three paraphrases per prompt group (meta paraphrase_of)",
        "user_context": describe_user_context("pairs_only", {user: User(user)}, included=[], note="no user context"),
    }
    return finish(name or "rmgap", pairs, users, skipped, meta, mirrors=lambda ps: mirrored_ids(ps, rmgap_mirror_key))
