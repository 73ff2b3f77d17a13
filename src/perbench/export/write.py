"""``perbench export RUN_DIR --system LABEL --out DIR``: one fitted system of a run as a self-contained folder.

The fit is read from the run's unit store (never refit: a system the run did not fit is an error). The folder
holds what :func:`perbench.export.load.load_rm` needs and nothing of the answer key: the method and its parameters,
the fitted state and every unseen user's adapted parameters (safetensors), the backbone (model spec, the
fingerprint results.json recorded, the length inputs are cut to), the users' context (ids, seen, profile items:
what the method was handed) and each unseen user's shots. Users are named by the source's ids (the ids of the
benchmark's own files and of the report); the manifest maps them to the run's opaque ids, which stay internal.
The backbone's weights are not loaded: the shots' features come from the run's feature store.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.errors import ConfigError
from perbench.export.format import (
    ADAPTED,
    FORMAT_VERSION,
    MANIFEST,
    SHOTS,
    STATE,
    USERS,
    digest,
    package_versions,
    pair_to_json,
    split_state,
    view_to_json,
)
from perbench.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, refuse_links

if TYPE_CHECKING:
    from perbench.export.source import RunSource


def export_system(run_dir: str | Path, label: str, out: str | Path) -> Path:
    """Write system ``label`` of the run in ``run_dir`` to the folder ``out`` (created; an existing export there is
    replaced, any other non-empty folder refused). Returns ``out``."""
    from perbench.export.source import RunSource

    src = RunSource.open(Path(run_dir), label)
    with src.stores:  # closed when the export ends: no -wal / -shm left beside the run's units.sqlite
        return _write(src, label, out)


def _write(src: RunSource, label: str, out: str | Path) -> Path:
    import numpy as np
    import safetensors.numpy

    from perbench.data.user_context import user_views
    from perbench.rewards.base import RMContext
    from perbench.rewards.personal import PersonalFeatureRM
    from perbench.runner.methods import MethodHandle

    sd, bench, run = src.system, src.bench, src.run
    out_dir = Path(out)
    _check_target(out_dir)
    extractor = src.extractor()
    ctx = RMContext(features=extractor, seed=sd.seed, extra={"users": user_views(bench.users)})
    handle = MethodHandle(sd.method, bench, ctx, src.stores.units, baseline=sd.baseline, system=sd)
    if src.stores.units.missing([handle.fit_key], phase="fit"):
        raise ConfigError(
            f"export: {run} holds no fitted state of {label} (units.sqlite has no fit unit {handle.fit_key}): the "
            "run did not fit it, or its config or data changed since (the fit key covers both); run the config "
            "again, then export"
        )
    rm = handle.fitted()
    arrays, strings = split_state(rm.state())
    adapts = not handle.user_agnostic and handle.uses_shots
    shots_of = {u: bench.fewshot(u, sd.shots) if adapts else [] for u in bench.unseen_users}
    source = src.source_of  # opaque -> the source's id
    adapted: dict[str, np.ndarray] = {}
    if adapts:
        rm = handle.adapted(sd.shots)  # as the run adapted them: the shots' features from the run's store
        if isinstance(rm, PersonalFeatureRM):
            adapted = {source[u]: v.detach().cpu().numpy().copy() for u, v in rm.adapted.items()}
    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "perbench_version": package_versions()["perbench"],
        "packages": package_versions(),
        "label": label,
        "method": sd.method.name,
        "params": dict(sd.method.params),
        "family": sd.family,
        "baseline": sd.baseline,
        "train_fraction": sd.train_fraction,
        "seed": sd.seed,
        "shots": sd.shots,
        "user_agnostic": handle.user_agnostic,
        "adapts_from_shots": adapts,
        "backbone": src.backbone() if handle.is_feature_rm else None,
        "benchmark": {"name": bench.name, "fingerprint": src.results_bench_fingerprint},
        "fit_key": handle.fit_key,
        "run": {"name": run.resolve().name, "config_hash": src.results.get("config_hash")},
        "seen_users": [source[u] for u in bench.seen_users],
        "unseen_users": [source[u] for u in bench.unseen_users] if adapts else [],
        "adapted_users": sorted(adapted),
        "user_ids": {source[u]: u for u in sorted(source, key=lambda k: source[k])},
        "report_ids": dict(sorted(src.report_of.items())),  # the ids the run's report shows -> the source's
        "strings": strings,
        "files": {"state": STATE, "adapted": ADAPTED, "users": USERS, "shots": SHOTS},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    _save(safetensors.numpy, out_dir / STATE, arrays, {"perbench_label": label, "method": sd.method.name})
    _save(safetensors.numpy, out_dir / ADAPTED, adapted, {"perbench_label": label, "users": "source ids"})
    atomic_write_json(out_dir / USERS, [view_to_json(v, source[u]) for u, v in user_views(bench.users).items()])
    atomic_write_jsonl(out_dir / SHOTS, [pair_to_json(p, source[u]) for u, ps in shots_of.items() for p in ps])
    atomic_write_text(out_dir / "README.md", _readme(label, manifest))
    manifest["digest"] = digest(out_dir, manifest)
    atomic_write_json(out_dir / MANIFEST, manifest)  # last: a folder without it is an unfinished export
    return out_dir


def _save(st: Any, path: Path, arrays: dict[str, Any], metadata: dict[str, str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    st.save_file(arrays, str(tmp), metadata=metadata)
    tmp.replace(path)


def _check_target(out: Path) -> None:
    refuse_links(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"export: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise ConfigError(f"export: {out} is a non-empty folder that holds no perbench export; choose another --out")
    if (out / MANIFEST).is_file():
        for name in (STATE, ADAPTED, USERS, SHOTS, MANIFEST, "README.md"):
            if (out / name).is_file():
                (out / name).unlink()
        shutil.rmtree(out / "__pycache__", ignore_errors=True)


def _readme(label: str, manifest: dict[str, Any]) -> str:
    users = list(manifest["seen_users"][:1]) or ["u1"]
    return (
        f"# perbench export: {label}\n\n"
        "```python\nimport perbench\n\n"
        'rm = perbench.load_rm(".")   # this folder; strict=True raises on an unknown user instead of warning\n'
        f'rm.score(["How do I boil an egg?"], ["Boil it for 8 minutes."], users=["{users[0]}"])\n'
        'rm.adapt("new_user", [{"prompt": "...", "chosen": "...", "rejected": "..."}])\n'
        "reward = rm.reward_func()   # TRL reward_funcs: the user from the dataset's user_id column\n```\n\n"
        "Serve it over HTTP (OpenRLHF's --remote_rm_url and a JSON shape with user ids): "
        "`perbench serve . --port 5000`.\n\n"
        f"Users are named as the benchmark's source names them. Files: {MANIFEST} (method, parameters, backbone, "
        f"users, digest), {STATE} (the fitted parameters), {ADAPTED} (each unseen user's adapted parameters), "
        f"{USERS} (each user's id and profile items), {SHOTS} (the unseen users' adaptation shots).\n"
    )
