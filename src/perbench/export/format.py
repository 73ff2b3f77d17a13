"""The exported folder's files and their (de)serialisation: shared by the writer (which reads a run) and the reader
(which needs only models and rewards).

User ids: every file names users as the benchmark's source does (``u01``, a PRISM user id); the manifest's
``user_ids`` maps each to the id the fitted state holds (the run's opaque id), which no caller needs to know.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.records import Message, PreferencePair, ProfileItem, Prompt, prompt_messages
from perbench.data.user_context import UserView

#: the folder's version: a reader refuses a folder of another one (1: before digests and stored adaptations)
FORMAT_VERSION = 2
MANIFEST = "perbench_rm.json"
STATE = "state.safetensors"
ADAPTED = "adapted.safetensors"
USERS = "users.json"
SHOTS = "shots.jsonl"
#: the files the manifest's ``digest`` covers, in the order they are hashed (the manifest itself, less its digest,
#: comes last)
DIGESTED = ("state", "adapted", "users", "shots")
#: the packages whose versions an export records and its reader compares (what the scores depend on)
PACKAGES = ("perbench", "numpy", "safetensors", "torch", "transformers")


def split_state(state: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """A method's state as (numeric arrays for safetensors, string arrays as lists): safetensors holds numbers
    only."""
    arrays: dict[str, np.ndarray] = {}
    strings: dict[str, list[str]] = {}
    for k, v in state.items():
        a = np.asarray(v)
        if a.dtype.kind in ("U", "S", "O"):
            strings[k] = [str(x) for x in a.reshape(-1).tolist()]
        else:
            arrays[k] = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    return arrays, strings


def join_state(arrays: Mapping[str, np.ndarray], strings: Mapping[str, Sequence[str]]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in strings.items():
        out[k] = np.asarray(list(v), dtype=str) if v else np.zeros(0, dtype="<U1")
    return out


def package_versions() -> dict[str, str | None]:
    """The versions of :data:`PACKAGES` here (None: not installed), as results.json's provenance records them."""
    from perbench.runner.results import package_versions as every

    have = every()
    return {name: have.get(name) for name in PACKAGES}


def digest(folder: Path, manifest: Mapping[str, Any]) -> str:
    """sha256 over the digested files (each one's name and bytes; a missing optional file hashes as absent) and the
    manifest without its ``digest``: a file edited, swapped for another export's, or removed changes it."""
    h = hashlib.sha256(b"perbench-export\x00")
    files = manifest.get("files")
    files = files if isinstance(files, Mapping) else {}
    for key in DIGESTED:
        name = files.get(key)
        h.update(f"{key}\x00{name}\x00".encode())
        path = folder / str(name) if isinstance(name, str) else None
        if path is not None and path.is_file():
            h.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            h.update(b"\x00absent")
    rest = {k: v for k, v in manifest.items() if k != "digest"}
    h.update(json.dumps(rest, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()


def message_from_json(value: Any, where: str) -> Message:
    if not (
        isinstance(value, Mapping) and isinstance(value.get("role"), str) and isinstance(value.get("content"), str)
    ):
        raise ValueError(f"{where}: a message is a {{role, content}} mapping of strings, got {_shown(value)}")
    return Message(str(value["role"]), str(value["content"]))


def prompt_to_json(prompt: Prompt) -> Any:
    return prompt if isinstance(prompt, str) else prompt_messages(prompt)


def prompt_from_json(value: Any, where: str) -> Prompt:
    """A prompt as a string, a list of ``{role, content}`` messages (TRL's conversational form) or one such
    message; an empty conversation, ``None`` or any other value is refused."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return (message_from_json(value, where),)
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError(f"{where}: an empty conversation (no message to score)")
        return tuple(message_from_json(m, f"{where}[{i}]") for i, m in enumerate(value))
    raise ValueError(f"{where}: a prompt is a string or a list of {{role, content}} messages, got {_shown(value)}")


def response_text(value: Any, where: str) -> str:
    """A response as the text to score: a string, one ``{role, content}`` message, or a conversation (a list of
    messages: its last message, the completion TRL passes). ``None``, an empty conversation or any other value is
    refused, never scored as its Python text."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return message_from_json(value, where).content
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError(f"{where}: an empty conversation (no completion to score)")
        return message_from_json(value[-1], f"{where}[{len(value) - 1}]").content
    raise ValueError(f"{where}: a response is a string or a list of {{role, content}} messages, got {_shown(value)}")


def _shown(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {json.dumps(value, default=str)[:40]}"


def pair_to_json(p: PreferencePair, user: str | None = None) -> dict[str, Any]:
    return {
        "pair_id": p.pair_id,
        "user_id": p.user_id if user is None else user,
        "prompt": prompt_to_json(p.prompt),
        "chosen": p.chosen,
        "rejected": p.rejected,
    }


def pair_from_json(row: Any, where: str, user: str | None = None) -> PreferencePair:
    """A shot from ``{prompt, chosen, rejected}`` (``user_id`` and ``pair_id`` optional). A shot whose chosen and
    rejected responses are the same text says nothing about the user: refused."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: a shot is a {{prompt, chosen, rejected}} mapping, got {_shown(row)}")
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
    if missing:
        raise ValueError(f"{where}: a shot needs prompt, chosen and rejected; missing {', '.join(missing)}")
    chosen = response_text(row["chosen"], f"{where}: chosen")
    rejected = response_text(row["rejected"], f"{where}: rejected")
    uid = user if user is not None else str(row.get("user_id", ""))
    prompt = prompt_from_json(row["prompt"], f"{where}: prompt")
    pair = PreferencePair(str(row.get("pair_id", where)), uid, prompt, chosen, rejected, "train")
    check_shot(pair, where)
    return pair


def check_shot(pair: PreferencePair, where: str) -> None:
    """A shot that says nothing about the user (a blank side, or chosen = rejected up to whitespace, the rule the
    loaders drop such pairs by) is refused: adapting to it would give the user a head fit on nothing."""
    from perbench.data.dedup import degenerate_reason

    reason = degenerate_reason(pair)
    if reason == "empty_response":
        raise ValueError(f"{where}: chosen or rejected is blank: the shot shows no preference")
    if reason is not None:
        raise ValueError(f"{where}: chosen and rejected are the same text: the shot shows no preference")


def view_to_json(v: UserView, user: str | None = None) -> dict[str, Any]:
    return {
        "user_id": v.user_id if user is None else user,
        "seen": v.seen,
        "profile": [{"id": i.item_id, "text": i.text} for i in v.profile],
    }


def view_from_json(row: Any, where: str) -> UserView:
    if not isinstance(row, Mapping) or not isinstance(row.get("user_id"), str):
        raise ValueError(f"{where}: user_id: each user is a mapping with a string user_id, got {_shown(row)}")
    profile = row.get("profile") or []
    if not isinstance(profile, list) or not all(
        isinstance(i, Mapping) and isinstance(i.get("text"), str) for i in profile
    ):
        raise ValueError(f"{where}: profile: a list of {{id, text}} items")
    items = tuple(ProfileItem(str(i.get("id", n)), str(i["text"])) for n, i in enumerate(profile))
    return UserView(str(row["user_id"]), bool(row.get("seen", False)), items)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
