"""``perbench.load_rm(DIR)``: an exported system (see :mod:`perbench.export.write`) as an
:class:`~perbench.export.model.ExportedRM`, verified before anything is built from it.

What is checked, each failure one error naming the file and the field: the manifest's ``format_version``, fields
and their types; the versions of the packages it was written with (perbench newer than this one: refused; others
that differ: one warning); the ``digest`` over the state, the adapted users, the users, the shots and the
manifest (an edited, removed or swapped file is refused); the method and its parameters against the registry
(unknown keys refused); the backbone's fingerprint, required and compared with the backbone found here unless
``trust_backbone=True``. The unseen users' adapted parameters are read from the folder, never recomputed, and
nothing is written outside it: the backbone's weights load on the first score (the features of what is scored
are kept in memory only).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from perbench.errors import ConfigError
from perbench.export.format import (
    FORMAT_VERSION,
    MANIFEST,
    digest,
    join_state,
    package_versions,
    pair_from_json,
    read_json,
    view_from_json,
)
from perbench.export.model import ExportedRM
from perbench.rewards.base import RewardModel

#: manifest fields and the JSON types each must have
FIELDS: dict[str, tuple[type, ...]] = {
    "label": (str,),
    "method": (str,),
    "params": (dict,),
    "files": (dict,),
    "packages": (dict,),
    "digest": (str,),
    "user_ids": (dict,),
    "seen_users": (list,),
    "unseen_users": (list,),
    "strings": (dict,),
    "seed": (int,),
}


def _fail(where: Path, field: str | None, problem: str) -> ConfigError:
    return ConfigError(f"load_rm: {where}: {field + ': ' if field else ''}{problem}")


def load_rm(
    path: str | Path,
    *,
    backbone: str | None = None,
    device: str | None = None,
    strict: bool = False,
    trust_backbone: bool = False,
) -> ExportedRM:
    """The system exported to ``path``. ``backbone`` loads the backbone from another place (a folder or hub id);
    its fingerprint must still equal the recorded one unless ``trust_backbone=True`` (then a differing or missing
    fingerprint is a warning). ``strict``: scoring a user the system has no parameters for raises instead of
    warning once."""
    folder = Path(path)
    mpath = folder / MANIFEST
    m = _manifest(folder, mpath)
    rm = _build(m, mpath)
    extractor = None
    from perbench.rewards.base import FeatureRM, RMContext

    if isinstance(rm, FeatureRM):
        extractor = _extractor(m.get("backbone"), backbone, device, mpath, trust_backbone)
        rm.bind(extractor)
    files = m["files"]
    source_to_internal = {str(k): str(v) for k, v in m["user_ids"].items()}
    views = _users(folder / files["users"], source_to_internal)
    if hasattr(rm, "set_users"):
        rm.set_users(views)
    ctx = RMContext(features=extractor, seed=int(m["seed"]), extra={"users": views})
    state = _read_state(folder / files["state"], m["strings"], mpath)
    cls = type(rm)
    if not state and not cls.needs_train_pairs:
        rm.fit([], ctx)  # a stateless baseline takes its seed from the context
    try:
        rm.load_state(state)
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise _fail(
            folder / files["state"], None, f"does not hold a {m['method']} state ({type(e).__name__}: {e})"
        ) from None
    out = ExportedRM(rm, m, folder, strict=strict)
    _restore_unseen(out, folder, m, mpath)
    return out


def _json(path: Path, kind: type, what: str) -> Any:
    try:
        value = read_json(path)
    except ValueError as e:
        raise ConfigError(f"load_rm: {e}") from None
    if not isinstance(value, kind):
        raise _fail(path, None, f"expected {what}, got {type(value).__name__}")
    return value


def _manifest(folder: Path, mpath: Path) -> dict[str, Any]:
    if not mpath.is_file():
        raise ConfigError(f"load_rm: {mpath} does not exist (write one with `perbench export`)")
    m: dict[str, Any] = _json(mpath, dict, "a JSON object")
    v = m.get("format_version")
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(mpath, "format_version", f"expected the integer {FORMAT_VERSION}, got {json.dumps(v)}")
    if v > FORMAT_VERSION:
        raise _fail(mpath, "format_version", f"{v} is newer than this perbench reads ({FORMAT_VERSION}); upgrade")
    if v < FORMAT_VERSION:
        raise _fail(mpath, "format_version", f"{v} is an older format (this perbench reads {FORMAT_VERSION}); export "
                    "the system again with `perbench export`")  # fmt: skip
    for key, types in FIELDS.items():
        if key not in m:
            raise _fail(mpath, key, "missing")
        if not isinstance(m[key], types) or isinstance(m[key], bool):
            raise _fail(mpath, key, f"expected {types[0].__name__}, got {type(m[key]).__name__}")
    for key in ("state", "adapted", "users", "shots"):
        name = m["files"].get(key)
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise _fail(mpath, f"files.{key}", f"expected a file name inside the folder, got {json.dumps(name)}")
    for key in ("user_ids", "report_ids"):
        ids = m.get(key, {})
        if not isinstance(ids, dict) or not all(isinstance(k, str) and isinstance(u, str) for k, u in ids.items()):
            raise _fail(mpath, key, "expected a map of user ids to strings")
    for key in ("seen_users", "unseen_users"):
        if not all(isinstance(u, str) for u in m[key]):
            raise _fail(mpath, key, "expected a list of user ids (strings)")
    _check_packages(m["packages"], mpath)
    want = digest(folder, m)
    if m["digest"] != want:
        missing = [
            m["files"][k] for k in ("state", "adapted", "users", "shots") if not (folder / m["files"][k]).is_file()
        ]
        why = f"{', '.join(missing)} missing" if missing else "a file was edited or taken from another export"
        raise _fail(mpath, "digest", f"the folder does not match the digest its manifest records ({why}); export "
                    "the system again")  # fmt: skip
    return m


def _check_packages(packages: Mapping[str, Any], mpath: Path) -> None:
    import re

    here = package_versions()
    theirs = packages.get("perbench")
    if not isinstance(theirs, str):
        raise _fail(mpath, "packages.perbench", f"expected the version that wrote the export, got {json.dumps(theirs)}")

    def release(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v.partition("+")[0])[:3])

    if not release(theirs):
        raise _fail(mpath, "packages.perbench", f"not a version: {theirs!r}")
    newer = release(theirs) > release(str(here["perbench"]))
    if newer:
        raise _fail(mpath, "packages.perbench", f"written by perbench {theirs}, newer than this one "
                    f"({here['perbench']}); "
                    "upgrade perbench")  # fmt: skip
    differ = [f"{k} {packages.get(k)} (here {v})" for k, v in here.items() if k != "perbench" and packages.get(k) != v]
    if differ:
        warnings.warn(f"load_rm: {mpath}: written with {', '.join(differ)}; scores can differ in the last float bits",
                      stacklevel=3)  # fmt: skip


def _build(m: Mapping[str, Any], mpath: Path) -> RewardModel:
    from perbench import registry
    from perbench.registry import UnknownNameError

    try:
        cls = registry.reward_models.get(m["method"])
    except UnknownNameError as e:
        raise _fail(mpath, "method", str(e)) from None
    accepted = registry.reward_models.params(m["method"])
    if accepted is not None:
        unknown = sorted(set(m["params"]) - set(accepted))
        if unknown:
            raise _fail(mpath, f"params.{unknown[0]}", f"{m['method']} takes no parameter {unknown[0]!r} (it takes: "
                        f"{', '.join(sorted(accepted)) or 'none'})")  # fmt: skip
    try:
        rm: RewardModel = cls(**dict(m["params"]))
    except (TypeError, ValueError) as e:
        raise _fail(mpath, "params", f"{m['method']} refuses its parameters ({' '.join(str(e).split())})") from None
    return rm


def _extractor(bb: Any, override: str | None, device: str | None, mpath: Path, trust: bool) -> Any:
    from perbench.cache import MEMORY, Store
    from perbench.device import DevicePolicy, resolve_device
    from perbench.models.lazy import LazyLM
    from perbench.rewards.features import FeatureExtractor

    if not isinstance(bb, Mapping) or not isinstance(bb.get("model"), str):
        raise _fail(mpath, "backbone.model", "missing: a frozen-feature system needs its backbone")
    dtype = str(bb.get("dtype") or "float32")
    model = override or str(bb["model"])
    lm = LazyLM(model, DevicePolicy(str(bb.get("device") or "cpu"), dtype), resolve_device(device, dtype))
    want = bb.get("fingerprint")
    if not isinstance(want, str) or not want:
        problem = "missing: nothing says which backbone the system was fit on"
        if not trust:
            raise _fail(mpath, "backbone.fingerprint", f"{problem} (load_rm(..., trust_backbone=True) accepts the "
                        "backbone as found)")  # fmt: skip
        warnings.warn(f"load_rm: {mpath}: backbone.fingerprint: {problem}; trusted as asked", stacklevel=3)
    elif lm.fingerprint != want:
        problem = f"the backbone {model} has fingerprint {lm.fingerprint}, but the system was fit on {want}"
        if not trust:
            raise _fail(mpath, "backbone.fingerprint", f"{problem}; load the same model (backbone=...) or export "
                        "again")  # fmt: skip
        warnings.warn(f"load_rm: {mpath}: backbone.fingerprint: {problem}; trusted as asked", stacklevel=3)
    for key in ("max_length", "feature_batch_size"):
        v = bb.get(key)
        if key == "feature_batch_size" and v == "auto":
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            want = "a positive integer" + (" or auto" if key == "feature_batch_size" else "")
            raise _fail(mpath, f"backbone.{key}", f"expected {want}, got {json.dumps(v)}")
    size = bb["feature_batch_size"]
    return FeatureExtractor(
        lm, Store(MEMORY), batch_size=size if size == "auto" else int(size), max_length=int(bb["max_length"])
    )


def _users(path: Path, internal: Mapping[str, str]) -> dict[str, Any]:
    rows = _json(path, list, "a JSON list of users")
    views = {}
    for i, row in enumerate(rows):
        try:
            v = view_from_json(row, f"[{i}]")
        except ValueError as e:
            raise _fail(path, None, str(e)) from None
        uid = internal.get(v.user_id, v.user_id)
        views[uid] = type(v)(uid, v.seen, v.profile)
    return views


def _read_state(path: Path, strings: Mapping[str, Any], mpath: Path) -> dict[str, np.ndarray]:
    import safetensors.numpy

    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in strings.values()):
        raise _fail(mpath, "strings", "expected lists of strings")
    try:
        arrays = safetensors.numpy.load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for a damaged file
        raise _fail(path, None, f"not a readable safetensors file ({e})") from None
    return join_state(arrays, strings)


def _restore_unseen(out: ExportedRM, folder: Path, m: Mapping[str, Any], mpath: Path) -> None:
    """The run's unseen users as the run adapted them: their stored parameters (PersonalFeatureRM heads), else
    (another kind of method) adapted again from the stored shots."""
    import safetensors.numpy

    from perbench.rewards.personal import PersonalFeatureRM

    shots_path = folder / m["files"]["shots"]
    unseen = set(m["unseen_users"])
    by_user: dict[str, list[Any]] = {}
    for i, line in enumerate(shots_path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            p = pair_from_json(row, f"{shots_path}:{i}")
        except (ValueError, json.JSONDecodeError) as e:
            raise ConfigError(
                f"load_rm: {shots_path}:{i}: {e}" if isinstance(e, json.JSONDecodeError) else f"load_rm: {e}"
            ) from None
        if p.user_id not in unseen:
            raise _fail(shots_path, None, f"line {i}: user_id: {p.user_id!r} is not one of the export's unseen users")
        by_user.setdefault(p.user_id, []).append(p)
    if not m.get("adapts_from_shots", True) or out.user_agnostic:
        return
    apath = folder / m["files"]["adapted"]
    try:
        adapted = safetensors.numpy.load_file(str(apath))
    except Exception as e:
        raise _fail(apath, None, f"not a readable safetensors file ({e})") from None
    stray = sorted(set(adapted) - unseen)
    if stray:
        raise _fail(apath, stray[0], "not one of the export's unseen users (manifest unseen_users)")
    rm = out.rm
    for user, pairs in by_user.items():
        uid = out.internal(user)
        if isinstance(rm, PersonalFeatureRM) and user in adapted:
            import torch

            rm.adapted[uid] = torch.from_numpy(np.array(adapted[user]))
            kept = getattr(rm, "shots", None)
            if isinstance(kept, dict):  # PReF keeps each user's shots for active selection
                kept[uid] = [p.__class__(p.pair_id, uid, p.prompt, p.chosen, p.rejected, "train") for p in pairs]
            out.adapted_users.add(user)
        else:
            out.adapt(user, pairs, replace=True)
