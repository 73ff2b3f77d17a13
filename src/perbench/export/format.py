"""The exported folder's files and their (de)serialisation: shared by the writer (which reads a run) and the reader
(which needs only models and rewards)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.records import Message, PreferencePair, ProfileItem, Prompt, prompt_messages
from perbench.data.user_context import UserView

#: the folder's version: a reader refuses a folder of a newer one
FORMAT_VERSION = 1
MANIFEST = "perbench_rm.json"
STATE = "state.safetensors"
USERS = "users.json"
SHOTS = "shots.jsonl"


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


def prompt_to_json(prompt: Prompt) -> Any:
    return prompt if isinstance(prompt, str) else prompt_messages(prompt)


def prompt_from_json(value: Any, where: str) -> Prompt:
    """A prompt as a string, or a list of ``{role, content}`` messages (TRL's conversational form)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        return tuple(Message(str(m["role"]), str(m["content"])) for m in value)
    raise ValueError(
        f"{where}: a prompt is a string or a list of {{role, content}} messages, got {type(value).__name__}"
    )


def pair_to_json(p: PreferencePair) -> dict[str, Any]:
    return {
        "pair_id": p.pair_id,
        "user_id": p.user_id,
        "prompt": prompt_to_json(p.prompt),
        "chosen": p.chosen,
        "rejected": p.rejected,
    }


def pair_from_json(row: Mapping[str, Any], where: str, user: str | None = None) -> PreferencePair:
    """A shot from ``{prompt, chosen, rejected}`` (``user_id`` and ``pair_id`` optional)."""
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
    if missing:
        raise ValueError(f"{where}: a shot needs prompt, chosen and rejected; missing {', '.join(missing)}")
    for k in ("chosen", "rejected"):
        if not isinstance(row[k], str):
            raise ValueError(f"{where}: {k} must be a string, got {type(row[k]).__name__}")
    uid = user if user is not None else str(row.get("user_id", ""))
    prompt = prompt_from_json(row["prompt"], f"{where}: prompt")
    return PreferencePair(
        str(row.get("pair_id", where)), uid, prompt, str(row["chosen"]), str(row["rejected"]), "train"
    )


def view_to_json(v: UserView) -> dict[str, Any]:
    return {"user_id": v.user_id, "seen": v.seen, "profile": [{"id": i.item_id, "text": i.text} for i in v.profile]}


def view_from_json(row: Mapping[str, Any]) -> UserView:
    items = tuple(ProfileItem(str(i["id"]), str(i["text"])) for i in row.get("profile") or [])
    return UserView(str(row["user_id"]), bool(row.get("seen", False)), items)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
