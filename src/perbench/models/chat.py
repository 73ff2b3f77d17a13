"""How a (prompt, response) becomes token ids — one definition shared by features, scoring and decoding.

ids(x, y) = chat_template(x, add_generation_prompt=True) ⊕ tokens(y), with **no** end-of-turn token after
y. A reward read at the last token of a finished response is then the same function as a reward read at
a partial response during guided decoding (ARGS scores prefixes y_<t ⊕ v).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from perbench.data.records import Prompt, prompt_key, prompt_messages
from perbench.models.identity import tokenizer_identity


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    return list(_encode_prompt_cached(tokenizer, prompt_key(prompt), _template_id(tokenizer)))


def _template_id(tokenizer: Any) -> str:
    return str(hash(getattr(tokenizer, "chat_template", None) or ""))


@lru_cache(maxsize=8192)
def _encode_prompt_cached(tokenizer: Any, key: str, _tpl: str) -> tuple[int, ...]:
    import json

    messages = json.loads(key)
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return tuple(int(i) for i in out)
    # No template (base models): plain "content" of each turn, newline-joined.
    text = "\n".join(m["content"] for m in messages) + "\n"
    return tuple(tokenizer(text, add_special_tokens=True)["input_ids"])


def prompt_identity(lm: Any, prompt: Prompt) -> list[int] | str:
    """What a generation's cache key reads of its prompt: the token ids ``lm`` is fed, or for a model served by an
    inference server (which applies its own chat template) the prompt's messages."""
    from perbench.models.endpoint import is_served

    return prompt_key(prompt) if is_served(lm) else encode_prompt(lm.tokenizer, prompt)


def prompt_identities(lm: Any, prompts: Iterable[Prompt]) -> dict[str, list[int] | str]:
    """:func:`prompt_identity` of each distinct prompt, by :func:`prompt_key`. For a model named by a spec whose
    tokenizer can be told without loading it (:func:`~perbench.models.identity.tokenizer_identity`), the token ids
    are memoized by that identity and the prompts: a rerun whose samples are all stored loads no tokenizer."""
    from perbench.models.endpoint import is_served

    by_key = {prompt_key(p): p for p in prompts}
    if is_served(lm):
        return {k: k for k in by_key}
    order = sorted(by_key)

    def encode() -> list[list[int]]:
        return [encode_prompt(lm.tokenizer, by_key[k]) for k in order]

    spec = getattr(lm, "spec", None)
    ident = None if spec is None else tokenizer_identity(spec)
    if ident is None:
        ids = encode()
    else:
        from perbench.data.pairs import content_hash
        from perbench.memo import memo_json

        ids = memo_json("prompt_ids", [ident, content_hash(*order)], encode)
    return dict(zip(order, ids, strict=True))


def prompt_size(lm: Any, prompt: Prompt) -> int:
    """How long a prompt is, to size and order generation batches: tokens in process, characters when served."""
    return len(prompt_identity(lm, prompt))


def encode_response(tokenizer: Any, text: str) -> list[int]:
    return list(_encode_response_cached(tokenizer, text))


@lru_cache(maxsize=8192)
def _encode_response_cached(tokenizer: Any, text: str) -> tuple[int, ...]:
    # a run looks up the same responses' features many times (every system, metric and pair set)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_pair(tokenizer: Any, prompt: Prompt, response: str, max_length: int) -> tuple[list[int], int, bool]:
    """-> (ids, number of response tokens, truncated?). Over-long inputs keep their **last** ``max_length``
    tokens (the prompt's head is cut first), so the response and its final token are always kept."""
    p = encode_prompt(tokenizer, prompt)
    r = encode_response(tokenizer, response)
    ids = p + r
    if len(r) >= max_length:
        raise ValueError(f"response of {len(r)} tokens exceeds max_length={max_length}")
    if len(ids) > max_length:
        return ids[-max_length:], len(r), True
    return ids, len(r), False


__all__ = [
    "encode_pair",
    "encode_prompt",
    "encode_response",
    "prompt_identities",
    "prompt_identity",
    "prompt_messages",
    "prompt_size",
]
