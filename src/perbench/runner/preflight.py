"""Checks a run makes before any model work, so that what would fail mid-run fails first, as one located line.

- :func:`check_config` (first; ``perbench validate --config`` runs it too): the config rules that need a room's
  knowledge, each defined in the room that owns it -- model names (``models/checks.py``), the systems the config
  expands to and the keys that name them (``systems.py``), the adaptive rounds' quality (``runner/adaptive.py``),
  each isolated method's child started once (``rewards/isolated.py``: import, class, constructor).
  Each error names the file, line and key, as the config's own checks do;
- :func:`check_setup` (before the data loads): ``out_dir`` is a folder (not a file), the device exists (and
  ``unit_device``, where the executor computes units in this process);
- :func:`check_models` (after the data loads, before any weights load; ``perbench validate --config`` runs it
  too): every response fits ``max_length`` tokens of the tokenizers that will read it, and ``max_new_tokens``
  fits the context of every policy that decodes. The tokenizers and configs load alone, without weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from perbench.config import RunConfig
from perbench.data.pairs import content_hash
from perbench.data.records import Benchmark
from perbench.data.rows import DataError
from perbench.errors import ConfigError


def check_config(cfg: RunConfig) -> None:
    """The rules of the rooms for ``cfg`` (see the module docstring); the config checked itself when it was made."""
    from perbench.models.checks import check_model_names, check_served
    from perbench.rewards.isolated import check_isolated
    from perbench.runner.adaptive import check_adaptive
    from perbench.systems import check_system_names, check_systems

    check_model_names(cfg)
    check_served(cfg)
    check_system_names(cfg, check_systems(cfg))
    check_adaptive(cfg)
    check_isolated(cfg)


def check_setup(cfg: RunConfig) -> None:
    """``out_dir`` can hold the run's folder, ``device`` exists on this machine, ``PERBENCH_CACHE`` (when set)
    names a folder, and the RL recipe fits the policy (:func:`perbench.runner.rl_checks.check_rl`)."""
    from perbench.io import cache_path

    cache_path()
    run_dir = cfg.run_dir()
    for p in (run_dir, *run_dir.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                key = "run_name" if p == run_dir and cfg.run_name else "out_dir"
                raise ConfigError(
                    f"{cfg.where(key)}: {p} is a file, not a folder; out_dir names the folder that holds run folders"
                )
            break
    from perbench.device import resolve_device

    if cfg.device != "auto":
        try:
            resolve_device(cfg.device, cfg.dtype)
        except ConfigError as e:
            raise ConfigError(f"{cfg.where('device')}: {e}") from None
    if cfg.unit_device not in (None, "auto"):  # checked here only where the units compute here
        from perbench import registry

        if not getattr(registry.executors.get(cfg.executor), "remote", False):
            try:
                resolve_device(cfg.unit_device, cfg.unit_dtype or cfg.dtype)
            except ConfigError as e:
                raise ConfigError(
                    f"{cfg.where('unit_device')}: {e} (the {cfg.executor} executor computes units here)"
                ) from None
    from perbench.runner.rl_checks import check_rl

    check_rl(cfg)


def model_specs(cfg: RunConfig) -> dict[str, str]:
    """The models a run loads, by the config key that names them (``policies[1]``); a policy an inference server
    serves is not loaded here (its server applies its own tokenizer and context)."""
    specs = {"rm_backbone": cfg.rm_backbone}
    if isinstance(cfg.policy, str):
        specs["policy"] = cfg.policy
    for i, p in enumerate(cfg.policies or []):
        if isinstance(p, str):
            specs.setdefault(f"policies[{i}]", p)
    return specs


def check_models(cfg: RunConfig, bench: Benchmark) -> None:
    """Token limits and context lengths, from tokenizers and configs only (see the module docstring). A passing
    token check is memoized by the tokenizer's identity (:func:`perbench.models.identity.tokenizer_identity`), the
    texts checked and the limit, a context by the model's (:func:`~perbench.models.identity.model_identity`), each
    read without loading anything: a rerun loads no tokenizer and no config."""
    from perbench.memo import Memo
    from perbench.models.identity import model_identity, tokenizer_identity
    from perbench.models.loader import model_context

    texts = _long_texts(cfg, bench)
    digest = content_hash(*sorted(texts))
    memo = Memo()
    try:
        checked: set[str] = set()
        for key, spec in model_specs(cfg).items():
            where = cfg.where("policies" if key.startswith("policies") else key)
            if spec not in checked:
                checked.add(spec)
                check = partial(_check_responses, cfg, texts, spec, where)
                ident = tokenizer_identity(spec)  # a passing check is stored, keyed by what the tokenizer reads
                check() if ident is None else memo.json("preflight_tokens", [ident, digest, cfg.max_length], check)
            if key != "rm_backbone" and (cfg.decoders or cfg.rl):
                ident = model_identity(spec)
                read = partial(model_context, spec)
                context = read() if ident is None else memo.json("model_context", [ident], read)
                if context is not None and cfg.max_new_tokens >= context:
                    raise ConfigError(
                        f"{cfg.where('max_new_tokens')}: {cfg.max_new_tokens} new tokens cannot fit the context of "
                        f"{spec} ({context} positions, prompt included); use at most {context // 2} or so"
                    )
    finally:
        memo.close()


def _long_texts(cfg: RunConfig, bench: Benchmark) -> dict[str, tuple[str, str]]:
    """The responses a tokenizer must count (text -> where it was read, its side): those of at least ``max_length``
    characters, since a token holds at least one character and shorter texts always fit."""
    texts: dict[str, tuple[str, str]] = {}
    for p in bench.pairs:
        for side in ("chosen", "rejected"):
            text = getattr(p, side)
            if len(text) >= cfg.max_length:
                texts.setdefault(text, (str(p.meta.get("source") or p.pair_id), side))
    return texts


def _check_responses(cfg: RunConfig, texts: Mapping[str, tuple[str, str]], spec: str, where: str) -> bool:
    """``spec``'s tokenizer loads, and every response in ``texts`` has fewer than ``max_length`` tokens (a longer
    one leaves no room for its prompt: the scorers refuse it mid-run). Errors name the pair's file and line, the
    side and the fix."""
    from perbench.models.chat import encode_response
    from perbench.models.loader import load_tokenizer

    try:
        tokenizer = load_tokenizer(spec)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    for text, (source, side) in texts.items():
        n = len(encode_response(tokenizer, text))
        if n >= cfg.max_length:
            path, _, line = source.rpartition(":")
            raise DataError(
                path or source,
                int(line) if line.isdigit() else None,
                side,
                f"a response of {n} tokens ({spec}'s tokenizer) does not fit max_length={cfg.max_length}; raise "
                f"max_length ({cfg.where('max_length')}) or cut long texts when loading (max_chars)",
            )
    return True


def check_paths(run_dir: Path) -> None:
    """Nothing a run writes in ``run_dir`` is a symbolic link (checked before the first write)."""
    from perbench.io import refuse_links

    for name in RUN_FILES:
        refuse_links(run_dir / name, run_dir)


#: what a run writes in its folder
RUN_FILES = (
    ".lock",
    "config.yaml",
    "units.sqlite",
    "units.sqlite-wal",
    "units.sqlite-shm",
    "results.json",
    "samples.jsonl",
    "cells.jsonl",
    "samples.parquet",
    "cells.parquet",
    "report.html",
    "leaderboard.md",
    "plots",
)


def validate_for_run(cfg: RunConfig, source: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``perbench validate --config RUN.yaml``: the file loaded with the config's loader ``options`` and checked as
    that run checks it (its methods' need for train pairs, token limits, out_dir and device), so validate says OK
    exactly when the run would get past its data."""
    from perbench import registry
    from perbench.data.checks import check_benchmark
    from perbench.data.loaders import validate_with
    from perbench.runner.state import needs_models

    needs_train = any(registry.reward_models.get(m.name).needs_train_pairs for m in cfg.methods)

    check_config(cfg)

    def checks(bench: Benchmark) -> None:
        check_setup(cfg)
        check_benchmark(bench, needs_train=needs_train)
        if needs_models(cfg):
            check_models(cfg, bench)

    return validate_with(source, options, checks, [m.name for m in cfg.methods + cfg.baselines])
