"""What the loaders of the listwise and 2026 benchmarks share: reading sources, the sources' chat roles mapped to
the chat roles a template knows, a response field in any of the upstream shapes, and finishing a
:class:`~perbench.data.records.Benchmark` (dedup, users without pairs, the personalization-only subset)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from perbench.data.reading import detect_format, read_rows
from perbench.data.records import Benchmark, Message, PreferencePair, SkipReport, User, dedup_pairs, mirrored_ids
from perbench.data.rows import Row, check_text, parse_messages, type_name

#: the roles upstream releases write, by the chat role they mean (PRISM and PersonalRewardBench write ``model``,
#: ShareGPT ``gpt`` / ``human``, Chatbot Arena exports ``bot`` or ``chatbot``); anything else is refused
CHAT_ROLES: dict[str, str] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "gpt": "assistant",
    "chatbot": "assistant",
    "system": "system",
}


def rows_of(source: str | Path, *, fmt: str | None, split: str | None, config: str | None = None) -> Iterator[Row]:
    """Every row of a local file or folder, or of a hub dataset (``split=None`` reads every split of a saved or hub
    dataset; the label then names the split)."""
    kind = fmt or detect_format(source)
    every = kind in ("hub", "hf_disk") and split is None
    for label, line, data in read_rows(source, fmt=kind, split="*" if every else split, config=config):
        yield Row(label, line, data)


def row_ref(row: Row) -> str:
    """A row's place that does not depend on where the file lies: ``split#line`` for a split of a saved or hub
    dataset, else the line (pair ids, and so cache keys, survive moving the file)."""
    split = row.label.rpartition("[")[2].rstrip("]") if row.label.endswith("]") else ""
    return f"{split}#{row.line}" if split else str(row.line)


def chat_role(row: Row, path: str, value: Any) -> str:
    """The chat role (``user``, ``assistant``, ``system``) a source's role name means (:data:`CHAT_ROLES`, case and
    surrounding spaces ignored); an unknown role is a located error, never passed on to a chat template."""
    name = check_text(row, path, value).strip().lower()
    if name not in CHAT_ROLES:
        raise row.error(path, f"unknown role {value!r}; expected one of {sorted(CHAT_ROLES)}")
    return CHAT_ROLES[name]


def chat_messages(row: Row, path: str, value: Any, *, allow_empty_last: bool = False) -> tuple[Message, ...]:
    """A list of ``{role, content}`` objects -> messages with their roles mapped by :func:`chat_role`."""
    msgs = parse_messages(row, path, value, allow_empty_last=allow_empty_last)
    return tuple(Message(chat_role(row, f"{path}.{i}.role", m.role), m.content) for i, m in enumerate(msgs))


def response_text(row: Row, path: str, value: Any) -> str:
    """A response as upstream files write it: a string, a ``{role, content}`` message, or a conversation whose last
    message is the response; a message's role must mean the assistant."""
    if isinstance(value, str):
        return check_text(row, path, value, allow_empty=True)
    if isinstance(value, Mapping):
        if value.get("content") is None:
            raise row.error(f"{path}.content", "missing")
        if value.get("role") is not None and chat_role(row, f"{path}.role", value["role"]) != "assistant":
            raise row.error(f"{path}.role", f"a response is the assistant's turn, got role {value['role']!r}")
        return check_text(row, f"{path}.content", value["content"], allow_empty=True)
    if isinstance(value, list | tuple):
        msgs = chat_messages(row, path, value, allow_empty_last=True)
        if msgs[-1].role != "assistant":
            last = f"{path}.{len(msgs) - 1}.role"
            raise row.error(last, f"a response is the assistant's turn, got {msgs[-1].role!r}")
        return msgs[-1].content
    raise row.error(path, f"expected a string, a message or a list of messages, got {type_name(value)}")


def text_list(row: Row, path: str) -> list[str]:
    """A non-empty list of response texts (``chosen`` / ``rejected`` lists of RewardBench 2)."""
    values = row.seq(path)
    if not values:
        raise row.error(path, "empty list")
    return [response_text(row, f"{path}.{i}", v) for i, v in enumerate(values)]


def int_field(row: Row, path: str, *, minimum: int = 0) -> int:
    value = row.require(path)
    if isinstance(value, bool) or not isinstance(value, int):
        raise row.error(path, f"expected an integer, got {type_name(value)}")
    if value < minimum:
        raise row.error(path, f"expected an integer >= {minimum}, got {value}")
    return value


def finish(
    name: str,
    pairs: list[PreferencePair],
    users: dict[str, User],
    skipped: SkipReport,
    meta: dict[str, Any],
    *,
    mirrors: Callable[[list[PreferencePair]], frozenset[str]] = mirrored_ids,
    dedup: bool = True,
    **extra: Any,
) -> Benchmark:
    """Deduplicate (counted), drop users left without pairs (counted), and build the benchmark, with its
        ``personalization_only`` subset: the pairs whose mirror (another user's pair the other way round, same prompt
        and split) it holds, found by ``mirrors`` (default the ``file`` loader's :func:`mirrored_ids`), on which any
        user-agnostic scorer gets exactly ½ (ties ½). ``dedup=False``: repeats are kept (a benchmark whose lists share
    pairs on purpose), degenerate pairs are still dropped."""
    pairs = dedup_pairs(pairs, skipped, dedup=dedup)
    kept = {p.user_id for p in pairs}
    for uid in sorted(set(users) - kept):
        skipped.add("user_without_pairs", uid)
        del users[uid]
    mirrored = mirrors(pairs)
    if mirrored:
        meta = {**meta, "personalization_only": f"{len(mirrored)} pair(s) whose mirror another user holds"}
    subsets = {"personalization_only": mirrored} if mirrored else {}
    return Benchmark(name, pairs, users, skipped=skipped, meta=meta, weighting="pair", subsets=subsets, **extra)
