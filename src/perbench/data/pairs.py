"""Preference pairs and their prompts: the records every loader builds, and the identity (text normal form, content
hashes) that deduplication and mirror matching compare them by."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

Split = Literal["train", "test"]
SPLITS: tuple[str, ...] = ("train", "test")


@dataclass(frozen=True)
class Message:
    role: str
    content: str


Prompt = str | tuple[Message, ...]


def prompt_text(prompt: Prompt) -> str:
    """A plain-text view of a prompt (the last user turn for chat prompts), used by retrieval and reports."""
    if isinstance(prompt, str):
        return prompt
    users = [m.content for m in prompt if m.role == "user"]
    return users[-1] if users else (prompt[-1].content if prompt else "")


def prompt_messages(prompt: Prompt) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m.role, "content": m.content} for m in prompt]


@lru_cache(maxsize=8192)
def prompt_key(prompt: Prompt) -> str:
    """The canonical JSON of a prompt's messages: one key for equal prompts, whatever their Python form."""
    return json.dumps(prompt_messages(prompt), ensure_ascii=False, sort_keys=True)


def content_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PreferencePair:
    pair_id: str
    user_id: str
    prompt: Prompt
    chosen: str
    rejected: str
    split: Split = "test"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def content_key(self) -> str:
        """Identity by content: (user, prompt, chosen, rejected); computed once per pair (its fields never change)."""
        got: str | None = self.__dict__.get("_content_key")
        if got is None:
            got = content_hash(self.user_id, prompt_key(self.prompt), self.chosen, self.rejected)
            object.__setattr__(self, "_content_key", got)
        return got


#: characters that change no visible text: zero-width space, (non-)joiners, word joiner, byte-order mark
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def canonical_text(text: str) -> str:
    """``text`` in Unicode NFC without zero-width characters: two spellings that look identical agree."""
    return unicodedata.normalize("NFC", text).translate(_ZERO_WIDTH)


def normalize_text(text: str) -> str:
    """The form texts are compared in: :func:`canonical_text`, runs of whitespace as one space, ends stripped."""
    return " ".join(canonical_text(text).split())


def is_blank(text: str) -> bool:
    """The one emptiness rule: nothing visible is left once the text is in :func:`normalize_text` form (the form
    ids and dedup compare in), so a response that is only whitespace or zero-width characters is empty."""
    return not normalize_text(text)


def prompt_identity(prompt: Prompt) -> str:
    """A prompt as deduplication compares it: every text in :func:`normalize_text` form."""
    if isinstance(prompt, str):
        return prompt_key(normalize_text(prompt))
    return prompt_key(tuple(Message(m.role.strip(), normalize_text(m.content)) for m in prompt))


def pair_identity(pair: PreferencePair) -> str:
    """What deduplication compares: (user, prompt, chosen, rejected), whitespace and Unicode-form differences
    ignored (:func:`normalize_text`)."""
    return content_hash(
        pair.user_id, prompt_identity(pair.prompt), normalize_text(pair.chosen), normalize_text(pair.rejected)
    )
