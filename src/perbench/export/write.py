"""``perbench export RUN_DIR --system LABEL --out DIR``: one fitted system of a run as a self-contained folder.

The fit is read from the run's unit store (never refit: a system the run did not fit is an error). The folder
holds what :func:`perbench.export.model.load_rm` needs and nothing of the answer key: the method and its
parameters, the fitted state (safetensors), the backbone (model spec, fingerprint, the length inputs are cut to),
the users' context (ids, seen, profile items: what the method was handed) and each unseen user's shots, from which
``load_rm`` adapts them again exactly as the run did.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from perbench import __version__
from perbench.errors import ConfigError
from perbench.export.format import (
    FORMAT_VERSION,
    MANIFEST,
    SHOTS,
    STATE,
    USERS,
    pair_to_json,
    split_state,
    view_to_json,
)
from perbench.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, refuse_links


def export_system(run_dir: str | Path, label: str, out: str | Path) -> Path:
    """Write system ``label`` of the run in ``run_dir`` to the folder ``out`` (created; an existing export there is
    replaced, any other non-empty folder refused). Returns ``out``."""
    import safetensors.numpy

    from perbench.config import RunConfig, Where
    from perbench.data.user_context import user_views
    from perbench.rewards.base import FeatureRM, RMContext
    from perbench.runner.methods import MethodHandle
    from perbench.runner.run import seal_all
    from perbench.runner.state import load_benchmark, needs_models
    from perbench.runner.stores import Stores
    from perbench.systems import SystemsSpec, expand

    run = Path(run_dir)
    config = run / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{config} does not exist (is {run} a run directory?)")
    if not (run / "units.sqlite").is_file():
        raise ConfigError(f"{run / 'units.sqlite'} does not exist: the run's fitted systems live there")
    cfg = RunConfig.from_yaml(config)
    spec = None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, Where("systems"))
    systems = expand(cfg.methods, cfg.baselines, spec, seed=cfg.seed, shots=cfg.shots)
    by_label = {sd.label: sd for sd in systems}
    if label not in by_label:
        import difflib

        close = difflib.get_close_matches(label, list(by_label), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"export: {run} has no system {label!r}.{hint} Its systems: {', '.join(by_label)}")
    sd = by_label[label]
    from perbench import registry

    cls = registry.reward_models.get(sd.method.name)
    feature_rm = issubclass(cls, FeatureRM)
    if not feature_rm and not sd.baseline:
        raise ConfigError(
            f"export: {label} ({sd.method.name}) is not a frozen-feature reward model; this version exports "
            "frozen-feature methods (global_bt, mpu, lore, pal, vpl, pref, …) and baselines"
        )
    out_dir = Path(out)
    _check_target(out_dir)
    # the benchmark as the run's methods saw it: sealed, with opaque user and pair ids (the fit keys name it)
    bench = seal_all(load_benchmark(cfg), {})[0]
    source_of = {str(k): str(v) for k, v in dict(bench.meta.get("source_user_ids") or {}).items()}  # opaque -> source
    user_ids = {v: k for k, v in source_of.items()}  # the source's ids -> the opaque ids the fit knows
    stores = Stores.of_run(run)
    extractor = None
    backbone: dict[str, Any] | None = None
    if needs_models(cfg):  # the run's context held the backbone (its fit keys name it), baselines' too
        from perbench.models.loader import load_lm
        from perbench.rewards.features import FeatureExtractor

        lm = load_lm(cfg.rm_backbone, device=cfg.device, dtype=cfg.dtype)
        extractor = FeatureExtractor(lm, stores.features, batch_size=cfg.feature_batch_size, max_length=cfg.max_length)
    if feature_rm and extractor is not None:
        lm = extractor.lm
        backbone = {
            "model": _model_ref(cfg.rm_backbone),
            "fingerprint": lm.fingerprint,
            "max_length": cfg.max_length,
            "feature_batch_size": cfg.feature_batch_size,
            "dtype": lm.policy.dtype,
            "device": str(lm.policy.device),
            "hidden_size": lm.hidden_size,
        }
    ctx = RMContext(features=extractor, seed=sd.seed, extra={"users": user_views(bench.users)})
    handle = MethodHandle(sd.method, bench, ctx, stores.units, baseline=sd.baseline, system=sd)
    if stores.units.missing([handle.fit_key], phase="fit"):
        raise ConfigError(
            f"export: {run} holds no fitted state of {label} (units.sqlite has no fit unit {handle.fit_key}); "
            "run the config again to fit it, then export"
        )
    rm = handle.fitted()
    arrays, strings = split_state(rm.state())
    adapts = not handle.user_agnostic and handle.uses_shots
    shots = [pair_to_json(p) for u in bench.unseen_users for p in (bench.fewshot(u, sd.shots) if adapts else [])]
    manifest = {
        "format_version": FORMAT_VERSION,
        "perbench_version": __version__,
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
        "backbone": backbone,
        "benchmark": {"name": bench.name, "fingerprint": bench.fingerprint()},
        "fit_key": handle.fit_key,
        "run": {"dir": str(run.resolve()), "name": run.resolve().name},
        "seen_users": [source_of.get(u, u) for u in bench.seen_users],
        "unseen_users": [source_of.get(u, u) for u in bench.unseen_users] if adapts else [],
        "user_ids": user_ids,
        "strings": strings,
        "files": {"state": STATE, "users": USERS, "shots": SHOTS},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{STATE}.tmp"
    safetensors.numpy.save_file(arrays, str(tmp), metadata={"perbench_label": label, "method": sd.method.name})
    tmp.replace(out_dir / STATE)
    atomic_write_json(out_dir / USERS, [view_to_json(v) for v in user_views(bench.users).values()])
    atomic_write_jsonl(out_dir / SHOTS, shots)
    atomic_write_text(out_dir / "README.md", _readme(label, out_dir))
    atomic_write_json(out_dir / MANIFEST, manifest)  # last: a folder without it is an unfinished export
    return out_dir


def _model_ref(spec: str) -> str:
    """The backbone as a later process can load it: a local folder or file as an absolute path, else the spec
    (a hub id, ``smollm2``, ``tiny-random:S``)."""
    p = Path(spec).expanduser()
    return str(p.resolve()) if p.exists() else spec


def _check_target(out: Path) -> None:
    refuse_links(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"export: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise ConfigError(f"export: {out} is a non-empty folder that holds no perbench export; choose another --out")
    if (out / MANIFEST).is_file():
        for name in (STATE, USERS, SHOTS, MANIFEST, "README.md"):
            if (out / name).is_file():
                (out / name).unlink()
        shutil.rmtree(out / "__pycache__", ignore_errors=True)


def _readme(label: str, out: Path) -> str:
    return (
        f"# perbench export: {label}\n\n"
        "```python\nimport perbench\n\n"
        f'rm = perbench.load_rm("{out}")\n'
        'rm.score(["How do I boil an egg?"], ["Boil it for 8 minutes."], users=["u1"])\n'
        'rm.adapt("new_user", [{"prompt": "...", "chosen": "...", "rejected": "..."}])\n'
        "reward = rm.reward_func()   # TRL reward_funcs: the user from the dataset's user_id column\n```\n\n"
        f"Files: {MANIFEST} (method, parameters, backbone, users), {STATE} (the fitted parameters), "
        f"{USERS} (each user's id and profile items), {SHOTS} (the unseen users' adaptation shots).\n"
    )
