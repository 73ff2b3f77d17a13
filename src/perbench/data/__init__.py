"""Benchmarks: typed records, loaders, and the built-in rubric benchmark."""

from perbench.data.records import (
    AspectPole,
    Benchmark,
    Message,
    PreferencePair,
    ProfileItem,
    Reference,
    SkipReport,
    User,
    prompt_text,
)

__all__ = [
    "AspectPole",
    "Benchmark",
    "Message",
    "PreferencePair",
    "ProfileItem",
    "Reference",
    "SkipReport",
    "User",
    "prompt_text",
]
