"""``perbench.load_rm(DIR)``: an exported system (see :mod:`perbench.export.write`) as a reward model to use
outside perbench.

The folder's backbone is loaded (``load_lm``) and its fingerprint checked against the one the system was fit on;
the fitted state is loaded, and every unseen user of the run is adapted again from the shots stored beside it, so
the scores are the run's. ``score(prompts, responses, users)`` scores texts, ``adapt(user, shots)`` fits a new
user from their own preference pairs, and ``reward_func()`` is a callable for TRL's ``reward_funcs`` that takes
each completion's user from a dataset column.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.pairs import Split
from perbench.data.records import PreferencePair, Prompt
from perbench.errors import ConfigError
from perbench.export.format import (
    FORMAT_VERSION,
    MANIFEST,
    join_state,
    pair_from_json,
    prompt_from_json,
    read_json,
    view_from_json,
)
from perbench.rewards.base import RewardModel, ScoreItem


class ExportedRM:
    """A fitted perbench system: ``label`` (its name in the run), ``method``, ``manifest`` (everything the folder
    records), ``rm`` (the underlying :class:`~perbench.rewards.base.RewardModel`)."""

    def __init__(self, rm: RewardModel, manifest: Mapping[str, Any], path: Path) -> None:
        self.rm = rm
        self.manifest = dict(manifest)
        self.path = path
        self.label = str(manifest["label"])
        self.method = str(manifest["method"])
        self.adapted_users: set[str] = set()
        #: the source's user ids -> the opaque ids the system was fit under (the run's sealed benchmark)
        self.user_ids: dict[str, str] = {str(k): str(v) for k, v in dict(manifest.get("user_ids") or {}).items()}

    def internal(self, user: str) -> str:
        """The id ``user`` has inside the fitted state: a seen or unseen user of the run by its source id (or its
        opaque one) maps to the opaque id; any other id is its own."""
        return self.user_ids.get(user, user)

    def __repr__(self) -> str:
        return f"ExportedRM({self.label!r}, method={self.method!r}, path={str(self.path)!r})"

    @property
    def seen_users(self) -> list[str]:
        return list(self.manifest.get("seen_users") or [])

    def known(self, user: str) -> bool:
        """Whether ``user`` has their own parameters (a seen user, or adapted). Any other user is scored with the
        method's documented fallback (e.g. the average seen user); a user-agnostic system knows everyone."""
        if self.manifest.get("user_agnostic"):
            return True
        return self.internal(user) in self.adapted_users or user in set(self.seen_users)

    def score(self, prompts: Sequence[Any], responses: Sequence[str], users: str | Sequence[str]) -> np.ndarray:
        """r_u(x, y) for each (prompt, response, user); ``users`` one id for every row, or one per row. A prompt is
        a string or a list of ``{role, content}`` messages."""
        if len(prompts) != len(responses):
            raise ValueError(f"score: {len(prompts)} prompts but {len(responses)} responses")
        ids = (
            [self.internal(users)] * len(prompts) if isinstance(users, str) else [self.internal(str(u)) for u in users]
        )
        if len(ids) != len(prompts):
            raise ValueError(f"score: {len(prompts)} prompts but {len(ids)} users")
        items = [
            ScoreItem(u, prompt_from_json(p, f"score: prompt {i}"), str(r))
            for i, (p, r, u) in enumerate(zip(prompts, responses, ids, strict=True))
        ]
        return np.asarray(self.rm.score_distinct(items), dtype=np.float64)

    def score_pairs(self, pairs: Sequence[PreferencePair]) -> tuple[np.ndarray, np.ndarray]:
        """(chosen scores, rejected scores) of preference pairs, each scored for its own user."""
        return self.rm.score_pairs(
            [
                p if self.internal(p.user_id) == p.user_id else _with_user(p, self.internal(p.user_id), p.split)
                for p in pairs
            ]
        )

    def adapt(self, user: str, shots: Sequence[PreferencePair | Mapping[str, Any]]) -> None:
        """Fit ``user``'s parameters from their few-shot pairs only (``PreferencePair``s or ``{prompt, chosen,
        rejected}`` mappings), as the run adapted its unseen users; replaces an earlier adaptation of the user. A
        user-agnostic system ignores the shots."""
        if self.manifest.get("user_agnostic") or not self.manifest.get("adapts_from_shots", True):
            return
        pairs = [
            s if isinstance(s, PreferencePair) else pair_from_json(s, f"adapt({user!r}): shot {i}", user)
            for i, s in enumerate(shots)
        ]
        uid = self.internal(user)
        pairs = [p if p.user_id == uid else _with_user(p, uid) for p in pairs]
        self.rm.adapt(uid, pairs)
        if pairs:
            self.adapted_users.add(uid)

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
            texts = [_completion_text(c) for c in completions]
            return [float(v) for v in self.score(list(prompts), texts, [str(u) for u in columns[user_column]])]

        reward.__name__ = f"perbench_{_slug(self.label)}"
        reward.__qualname__ = reward.__name__
        return reward


def _with_user(p: PreferencePair, user: str, split: Split = "train") -> PreferencePair:
    return PreferencePair(p.pair_id, user, p.prompt, p.chosen, p.rejected, split, p.meta)


def _completion_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list | tuple) and c and isinstance(c[-1], Mapping):
        return str(c[-1].get("content", ""))
    return str(c)


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label).strip("_") or "rm"


def load_rm(path: str | Path, *, backbone: str | None = None, device: str | None = None) -> ExportedRM:
    """The system exported to ``path``. ``backbone`` loads the backbone from another place (a folder or hub id);
    its fingerprint must still equal the one the system was fit on."""
    from perbench import registry
    from perbench.rewards.base import FeatureRM, RMContext

    folder = Path(path)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise ConfigError(f"load_rm: {manifest_path} does not exist (write one with `perbench export`)")
    try:
        m = read_json(manifest_path)
    except ValueError as e:
        raise ConfigError(f"load_rm: {e}") from None
    for key in ("format_version", "label", "method", "params", "files"):
        if key not in m:
            raise ConfigError(f"load_rm: {manifest_path}: missing field {key!r}")
    if int(m["format_version"]) > FORMAT_VERSION:
        raise ConfigError(
            f"load_rm: {manifest_path}: format_version {m['format_version']} is newer than this perbench reads "
            f"({FORMAT_VERSION}); upgrade perbench"
        )
    cls = registry.reward_models.get(str(m["method"]))
    rm = cls(**dict(m["params"]))
    extractor = None
    bb = m.get("backbone")
    if isinstance(rm, FeatureRM):
        if not isinstance(bb, Mapping):
            raise ConfigError(f"load_rm: {manifest_path}: a {m['method']} system needs its backbone (field 'backbone')")
        extractor = _extractor(bb, backbone, device, manifest_path)
        rm.bind(extractor)
    state = _read_state(folder / str(m["files"]["state"]), m.get("strings") or {})
    users_path = folder / str(m["files"]["users"])
    views = {}
    if users_path.is_file():
        views = {v.user_id: v for v in (view_from_json(r) for r in read_json(users_path))}
    if hasattr(rm, "set_users"):
        rm.set_users(views)
    ctx = RMContext(features=extractor, seed=int(m.get("seed", 0)), extra={"users": views})
    if not state and not cls.needs_train_pairs:
        rm.fit([], ctx)  # a stateless baseline takes its seed from the context
    rm.load_state(state)
    out = ExportedRM(rm, m, folder)
    shots_path = folder / str(m["files"]["shots"])
    if shots_path.is_file():
        by_user: dict[str, list[PreferencePair]] = {}
        for i, line in enumerate(shots_path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    p = pair_from_json(json.loads(line), f"{shots_path}:{i}")
                except (ValueError, json.JSONDecodeError) as e:
                    raise ConfigError(f"load_rm: {e}") from None
                by_user.setdefault(p.user_id, []).append(p)
        for user, pairs in by_user.items():
            out.adapt(user, pairs)
    return out


def _read_state(path: Path, strings: Mapping[str, Sequence[str]]) -> dict[str, np.ndarray]:
    import safetensors.numpy

    if not path.is_file():
        raise ConfigError(f"load_rm: {path} does not exist: the export is incomplete")
    try:
        arrays = safetensors.numpy.load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for a damaged file
        raise ConfigError(f"load_rm: {path}: not a readable safetensors file ({e})") from None
    return join_state(arrays, strings)


def _extractor(bb: Mapping[str, Any], override: str | None, device: str | None, where: Path) -> Any:
    from perbench.models.loader import load_lm
    from perbench.rewards.features import FeatureExtractor

    model = override or str(bb.get("model"))
    lm = load_lm(model, device=device, dtype=bb.get("dtype") or None)
    want = bb.get("fingerprint")
    if want and lm.fingerprint != want:
        raise ConfigError(
            f"load_rm: {where}: the backbone {model} has fingerprint {lm.fingerprint}, but the system was fit on "
            f"{want}; load the same model (backbone=...) or export again"
        )
    return FeatureExtractor(
        lm, batch_size=bb.get("feature_batch_size") or "auto", max_length=int(bb.get("max_length") or 1024)
    )


__all__ = ["ExportedRM", "Prompt", "load_rm"]
