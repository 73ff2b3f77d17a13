"""An exported system as a reward model to use outside perbench (:func:`perbench.export.load.load_rm` builds it).

Users are named as the benchmark's source names them (the ids of its files and of the report); the fitted state
knows them by the run's opaque ids, and :meth:`ExportedRM.internal` maps one to the other. A user the system has no
parameters for (neither seen, nor adapted) is scored with the method's documented fallback — with a warning, once
per user, or an error under ``strict=True``: a mistyped id never trains on an unpersonalized reward without a word.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.pairs import Split
from perbench.data.records import PreferencePair, Prompt
from perbench.errors import PerbenchError
from perbench.export.format import check_shot, pair_from_json, prompt_from_json, response_text
from perbench.rewards.base import RewardModel, ScoreItem


class UnknownUserError(PerbenchError, LookupError):
    """A user the exported system has no parameters for, under ``strict=True``."""


class UnknownUserWarning(UserWarning):
    """A user the exported system has no parameters for, scored with the method's fallback."""


class ExportedRM:
    """A fitted perbench system: ``label`` (its name in the run), ``method``, ``manifest`` (everything the folder
    records), ``rm`` (the underlying :class:`~perbench.rewards.base.RewardModel`), ``strict`` (an unknown user is an
    error rather than a warning)."""

    def __init__(self, rm: RewardModel, manifest: Mapping[str, Any], path: Path, *, strict: bool = False) -> None:
        self.rm = rm
        self.manifest = dict(manifest)
        self.path = path
        self.strict = strict
        self.label = str(manifest["label"])
        self.method = str(manifest["method"])
        #: the source's user ids -> the opaque ids the system was fit under (the run's sealed benchmark)
        self.user_ids: dict[str, str] = {str(k): str(v) for k, v in dict(manifest.get("user_ids") or {}).items()}
        #: any other id a user is known by -> the source's: the fitted state's, and the one the run's report shows
        self._source: dict[str, str] = {
            **{str(k): str(v) for k, v in dict(manifest.get("report_ids") or {}).items()},
            **{v: k for k, v in self.user_ids.items()},
        }
        self._seen: set[str] = {str(u) for u in self.manifest.get("seen_users") or []}
        #: users (source ids) with parameters of their own besides the seen ones: adapted here or in the run
        self.adapted_users: set[str] = set()
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"ExportedRM({self.label!r}, method={self.method!r}, path={str(self.path)!r})"

    @property
    def user_agnostic(self) -> bool:
        return bool(self.manifest.get("user_agnostic"))

    @property
    def seen_users(self) -> list[str]:
        """The users the system was fit on, by the source's ids."""
        return [str(u) for u in self.manifest.get("seen_users") or []]

    @property
    def users(self) -> list[str]:
        """Every user with parameters of their own (seen, or adapted), by the source's ids."""
        return sorted(self._seen | self.adapted_users)

    def internal(self, user: str) -> str:
        """The id ``user`` (a source id) has inside the fitted state; any other id is its own."""
        return self.user_ids.get(user, user)

    def source_id(self, user: str) -> str:
        """The source's id of ``user``: itself, or the source id a run's opaque id stands for (results written
        before reports named users by their source ids show the opaque ones)."""
        return self._source.get(user, user)

    def known(self, user: str) -> bool:
        """Whether ``user`` has their own parameters (a seen user, or adapted). A user-agnostic system knows
        everyone."""
        user = self.source_id(user)
        return self.user_agnostic or user in self._seen or user in self.adapted_users

    def check_user(self, value: Any, where: str = "user") -> str:
        """A row's user as the internal id: a string (or an integer, as a dataset column may hold), known or
        warned about (raised under ``strict``)."""
        if isinstance(value, bool) or not isinstance(value, str | int | np.integer):
            raise ValueError(
                f"{where}: a user id is a string, got {'None' if value is None else type(value).__name__} {value!r}"[
                    :160
                ]
            )
        user = self.source_id(str(value))
        if not self.known(user):
            msg = (
                f"{self.label}: user {user!r} is unknown to this system (neither seen nor adapted): scored with the "
                f"method's fallback, not personalized; adapt() them first"
            )
            if self.strict:
                raise UnknownUserError(
                    msg + f". Known users: {', '.join(self.users[:8])}{' …' if len(self.users) > 8 else ''}"
                )
            if user not in self._warned:
                self._warned.add(user)
                warnings.warn(msg + " (load_rm(..., strict=True) raises instead)", UnknownUserWarning, stacklevel=3)
        return self.internal(user)

    def score(self, prompts: Sequence[Any], responses: Sequence[Any], users: Any) -> np.ndarray:
        """r_u(x, y) for each (prompt, response, user); ``users`` one id for every row, or one per row. A prompt is a
        string, a list of ``{role, content}`` messages or one such message; a response a string, or a
        conversation whose last message is the completion (as :meth:`reward_func` takes them)."""
        for name, value in (("prompts", prompts), ("responses", responses)):
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                got = "one string" if isinstance(value, str | bytes) else type(value).__name__
                raise ValueError(f"score: {name} must be a list (one per row), got {got}")
        if len(prompts) != len(responses):
            raise ValueError(f"score: {len(prompts)} prompts but {len(responses)} responses")
        if users is None:
            raise ValueError("score: users is None; pass one user id for every row, or a list of one per row")
        rows = [users] * len(prompts) if isinstance(users, str | int) and not isinstance(users, bool) else users
        if not isinstance(rows, Sequence) or isinstance(rows, bytes):
            raise ValueError(f"score: users must be a user id or a list of them, got {type(users).__name__}")
        if len(rows) != len(prompts):
            raise ValueError(f"score: {len(prompts)} prompts but {len(rows)} users")
        items = [
            ScoreItem(
                self.check_user(u, f"score: users[{i}]"),
                prompt_from_json(p, f"score: prompts[{i}]"),
                response_text(r, f"score: responses[{i}]"),
            )
            for i, (p, r, u) in enumerate(zip(prompts, responses, rows, strict=True))
        ]
        return np.asarray(self.rm.score_distinct(items), dtype=np.float64)

    def score_pairs(self, pairs: Sequence[PreferencePair]) -> tuple[np.ndarray, np.ndarray]:
        """(chosen scores, rejected scores) of preference pairs, each scored for its own user (a source id, or the
        run's opaque one)."""
        out = []
        for i, p in enumerate(pairs):
            uid = p.user_id if p.user_id in self._source else self.check_user(p.user_id, f"score_pairs: pairs[{i}]")
            out.append(p if uid == p.user_id else _with_user(p, uid, p.split))
        return self.rm.score_pairs(out)

    def adapt(self, user: str, shots: Sequence[PreferencePair | Mapping[str, Any]], *, replace: bool = False) -> None:
        """Fit ``user``'s parameters from their few-shot pairs only (``PreferencePair``s or ``{prompt, chosen,
        rejected}`` mappings), as the run adapted its unseen users. A user who already has parameters (seen, or
        adapted) is refused unless ``replace=True``; a shot without a preference (chosen = rejected, a blank side)
        is refused. A user-agnostic system ignores the shots."""
        if not isinstance(user, str) or not user:
            raise ValueError(f"adapt: a user id is a non-empty string, got {user!r}")
        if self.user_agnostic or not self.manifest.get("adapts_from_shots", True):
            return
        if isinstance(shots, str | bytes | Mapping) or not isinstance(shots, Sequence):
            raise ValueError(f"adapt({user!r}): shots must be a list of pairs, got {type(shots).__name__}")
        if not shots:
            raise ValueError(f"adapt({user!r}): no shots (a user is adapted from at least one preference pair)")
        if self.known(user) and not replace:
            kind = "was fit on" if user in self._seen else "already has adapted parameters for"
            raise ValueError(
                f"adapt({user!r}): the system {kind} this user; adapt(..., replace=True) replaces them with a head "
                "fit on these shots only"
            )
        pairs = []
        for i, s in enumerate(shots):
            where = f"adapt({user!r}): shots[{i}]"
            if isinstance(s, PreferencePair):
                check_shot(s, where)
                pairs.append(s)
            else:
                pairs.append(pair_from_json(s, where, user))
        uid = self.internal(user)
        self.rm.adapt(uid, [p if p.user_id == uid else _with_user(p, uid) for p in pairs])
        self.adapted_users.add(user)

    def reward_func(self, user_column: str = "user_id") -> Callable[..., list[float]]:
        """A TRL reward function: ``f(prompts, completions, **columns) -> list[float]``, each completion scored for
        the user in the dataset column ``user_column`` (TRL passes a dataset's extra columns as keyword
        arguments). Conversational prompts and completions (lists of messages) work as well as plain strings."""

        def reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
            if user_column not in columns:
                have = ", ".join(sorted(k for k in columns if not k.startswith("completion"))) or "none"
                raise ValueError(
                    f"{self.label} reward: the dataset has no {user_column!r} column to take each row's user from "
                    f"(its columns: {have}); add one, or pass reward_func(user_column=...)"
                )
            return [float(v) for v in self.score(list(prompts), list(completions), list(columns[user_column]))]

        reward.__name__ = f"perbench_{_slug(self.label)}"
        reward.__qualname__ = reward.__name__
        return reward


def _with_user(p: PreferencePair, user: str, split: Split = "train") -> PreferencePair:
    return PreferencePair(p.pair_id, user, p.prompt, p.chosen, p.rejected, split, p.meta)


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label).strip("_") or "rm"


__all__ = ["ExportedRM", "Prompt", "UnknownUserError", "UnknownUserWarning"]
