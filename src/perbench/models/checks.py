"""The models room's rule for a run config, run in the preflight (``perbench.runner.preflight.check_config``):
every key that names a model names one that can load (:func:`~perbench.models.loader.model_name_problem`:
a bundled alias, ``tiny-random[:SEED]``, an existing folder or ``.gguf`` file, or a hub id), checked without
loading or downloading anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perbench.models.loader import model_name_problem

if TYPE_CHECKING:
    from perbench.config import RunConfig

#: the config keys that name models (``policies`` is a list of them)
MODEL_KEYS = ("policy", "rm_backbone", "judge", "policies")


def check_model_names(cfg: RunConfig) -> None:
    """Each model the config names, located at its key (``policies[1]``)."""
    for key in MODEL_KEYS:
        value = getattr(cfg, key)
        names = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for i, name in names:
            problem = None if name is None else model_name_problem(name)
            if problem is not None:
                raise (cfg.locate(key) if i is None else cfg.locate(key, i)).error(problem)
