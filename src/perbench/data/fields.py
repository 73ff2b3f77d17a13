"""The canonical fields of a preference pair and :class:`FieldMap`: which source column feeds each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from perbench.data.rows import DataError, type_name
from perbench.errors import ConfigError

CANONICAL_FIELDS: tuple[str, ...] = (
    "pair_id",
    "user_id",
    "prompt",
    "chosen",
    "rejected",
    "split",
    "seen",
    "profile",
    "answer_key",
    "reference",
)
#: fields that were renamed: mapping one is an error that says what to use instead
RENAMED_FIELDS: dict[str, str] = {
    "rubric_text": "map it to 'answer_key' (what decided the labels: kept from every method, read by graders) "
    "or to 'profile' (what the user wrote about themselves: given to methods)",
}
REQUIRED_FIELDS: tuple[str, ...] = ("user_id", "prompt", "chosen", "rejected")


@dataclass(frozen=True)
class FieldMap:
    """Which source path feeds each canonical field; unmapped fields use their own name.

    ``FieldMap.parse("user_id=ground_truth_persona,prompt=question")``; a source may be a dotted path
    (``info.post``, ``summaries.0.text``). An empty source (``split=``) switches an optional field off.
    """

    paths: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str | Mapping[str, str] | FieldMap | None) -> FieldMap:
        if spec is None:
            return cls({})
        if isinstance(spec, FieldMap):
            return spec
        items: list[tuple[str, str]] = []
        if isinstance(spec, str):
            for chunk in spec.split(","):
                if not chunk.strip():
                    continue
                if "=" not in chunk:
                    raise DataError("mapping", None, chunk.strip(), "expected 'canonical=source'")
                key, _, value = chunk.partition("=")
                items.append((key.strip(), value.strip()))
        elif isinstance(spec, Mapping):
            for key, value in spec.items():
                if not isinstance(value, str):
                    raise DataError("mapping", None, str(key), f"expected a source path string, got {type_name(value)}")
                items.append((str(key).strip(), value.strip()))
        else:
            raise ConfigError(f"mapping must be a string, a dict or a FieldMap, got {type_name(spec)}")
        paths: dict[str, str] = {}
        for key, value in items:
            if key in RENAMED_FIELDS:
                raise DataError("mapping", None, key, f"this field was renamed: {RENAMED_FIELDS[key]}")
            if key not in CANONICAL_FIELDS:
                raise DataError("mapping", None, key, f"unknown field; known: {', '.join(CANONICAL_FIELDS)}")
            if key in paths:
                raise DataError("mapping", None, key, "mapped twice")
            if not value and key in REQUIRED_FIELDS:
                raise DataError("mapping", None, key, "a required field cannot be switched off")
            paths[key] = value
        return cls(paths)

    def source(self, canonical: str) -> str:
        return self.paths.get(canonical, canonical)

    def explicit(self, canonical: str) -> bool:
        return bool(self.paths.get(canonical))

    def disabled(self, canonical: str) -> bool:
        return canonical in self.paths and not self.paths[canonical]

    def to_dict(self) -> dict[str, str]:
        return {k: self.source(k) for k in CANONICAL_FIELDS if not self.disabled(k)}

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.paths.items())
