"""The loaders' keyword options in one place: :class:`LoadOptions`, a frozen dataclass checked once, and
:func:`keyword_options`, the one keyword signature of :func:`~perbench.data.loaders.load_benchmark_file` and
:func:`~perbench.data.loaders.validate_file` (both take the same keywords and hand the loading a
:class:`LoadOptions`)."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from perbench.data.fields import FieldMap
from perbench.data.policies import DEFAULT_MAX_CHARS
from perbench.data.reading import FORMATS, Source
from perbench.data.rows import OnError, is_number
from perbench.errors import ConfigError

R = TypeVar("R")


@dataclass(frozen=True)
class LoadOptions:
    """Every option of :func:`~perbench.data.loaders.load_benchmark_file` (and so of
    :func:`~perbench.data.loaders.validate_file`), checked once.

    A bad value is a :class:`~perbench.errors.ConfigError` naming the option.
    """

    mapping: FieldMap = field(default_factory=FieldMap)
    name: str | None = None
    unseen_users: tuple[str, ...] | None = None
    unseen_fraction: float = 0.0
    seed: int = 0
    fmt: str | None = None
    split: str | None = None
    config: str | None = None
    on_error: OnError = "raise"
    dedup: bool = True
    test_fraction: float | None = None
    default_user: str | None = None
    max_chars: int | None = DEFAULT_MAX_CHARS
    max_pairs: int | None = None
    max_prompts: int | None = None

    @classmethod
    def build(
        cls,
        *,
        mapping: str | Mapping[str, str] | FieldMap | None = None,
        unseen_users: Sequence[str] | None = None,
        **options: Any,
    ) -> LoadOptions:
        if unseen_users is not None:
            if isinstance(unseen_users, str) or not all(isinstance(u, str | int) for u in unseen_users):
                raise ConfigError(f"unseen_users must be a list of user ids, got {unseen_users!r}")
            unseen_users = tuple(str(u).strip() for u in unseen_users)
        return cls(mapping=FieldMap.parse(mapping), unseen_users=unseen_users, **options)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if not is_number(self.unseen_fraction) or not 0.0 <= self.unseen_fraction < 1.0:
            raise ConfigError(f"unseen_fraction must be a number in [0, 1), got {self.unseen_fraction!r}")
        if self.test_fraction is not None and (not is_number(self.test_fraction) or not 0 < self.test_fraction < 1):
            raise ConfigError(f"test_fraction must be a number in (0, 1), or None, got {self.test_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.dedup, bool):
            raise ConfigError(f"dedup must be true or false, got {self.dedup!r}")
        if self.max_chars is not None and (
            isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) or self.max_chars < 1
        ):
            raise ConfigError(
                f"max_chars must be a positive integer, or None to keep texts whole, got {self.max_chars!r}"
            )
        for key in ("max_pairs", "max_prompts"):
            cap = getattr(self, key)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ConfigError(f"{key} must be a positive integer, or None for no cap, got {cap!r}")
        if self.fmt is not None and self.fmt not in FORMATS:
            raise ConfigError(f"unknown format {self.fmt!r}; use one of {', '.join(FORMATS)}")
        if self.default_user is not None:
            if not isinstance(self.default_user, str) or not self.default_user.strip():
                raise ConfigError(f"default_user must be a non-empty user id, got {self.default_user!r}")
            if self.mapping.explicit("user_id"):
                raise ConfigError(
                    f"default_user={self.default_user!r} is for files without a user field, but the mapping names "
                    f"one (user_id={self.mapping.source('user_id')}); drop one of them"
                )
            object.__setattr__(self, "default_user", self.default_user.strip())
        if self.test_fraction is not None and self.mapping.explicit("split"):
            raise ConfigError(
                f"test_fraction={self.test_fraction} splits a file without a split field, but the mapping names one "
                f"(split={self.mapping.source('split')}); drop one of them"
            )


def load_keywords(
    *,
    mapping: str | Mapping[str, str] | FieldMap | None = None,
    name: str | None = None,
    unseen_users: Sequence[str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    fmt: str | None = None,
    split: str | None = None,
    config: str | None = None,
    on_error: OnError = "raise",
    dedup: bool = True,
    test_fraction: float | None = None,
    default_user: str | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
    max_pairs: int | None = None,
    max_prompts: int | None = None,
) -> dict[str, Any]:
    """The loaders' keyword options, with the types a caller may give them and their defaults: the one list of
    them. -> the options as a mapping, for :meth:`LoadOptions.build` (which checks them)."""
    return dict(locals())  # the parameters, every one (nothing else is bound yet)


#: the loaders' keyword options, in order
OPTION_NAMES: tuple[str, ...] = tuple(inspect.signature(load_keywords).parameters)


def keyword_options(fn: Callable[[Source, Mapping[str, Any]], R]) -> Callable[..., R]:
    """``fn(source, options)`` as ``fn(source, *, mapping=..., ...)``: the keywords of :func:`load_keywords` (an
    unknown one is a TypeError), in its signature too (what the registry and ``perbench validate`` read to check a
    config's options); ``fn`` gets them as a mapping, every option present."""

    @functools.wraps(fn)
    def call(source: Source, **keywords: Any) -> R:
        unknown = sorted(set(keywords) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"{fn.__name__}() got an unexpected keyword argument {unknown[0]!r}")
        return fn(source, load_keywords(**keywords))

    own = inspect.signature(fn)
    first = next(iter(own.parameters.values()))
    options = list(inspect.signature(load_keywords).parameters.values())
    call.__signature__ = own.replace(parameters=[first, *options])  # type: ignore[attr-defined]
    hints = typing.get_type_hints(fn)
    call.__annotations__ = {
        first.name: hints[first.name],
        **{k: v for k, v in typing.get_type_hints(load_keywords).items() if k != "return"},
        "return": hints["return"],
    }
    return call
