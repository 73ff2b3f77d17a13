"""The models room's rule for a run config, run in the preflight (``perbench.runner.preflight.check_config``):
every key that names a model names one that can load (:func:`~perbench.models.loader.model_name_problem`:
a bundled alias, ``tiny-random[:SEED]``, an existing folder or ``.gguf`` file, or a hub id), checked without
loading or downloading anything; a model served by an inference endpoint (``{endpoint: URL, model: NAME}``) runs only
what needs no logits of it (:func:`check_served`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perbench.models.loader import model_name_problem
from perbench.specs.endpoint import Endpoint

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
            problem = None if name is None or isinstance(name, Endpoint) else model_name_problem(name)
            if problem is not None:
                raise (cfg.locate(key) if i is None else cfg.locate(key, i)).error(problem)


def check_served(cfg: RunConfig) -> None:
    """A policy served by an inference endpoint (``policy`` or an entry of ``policies``) gives generated text only:
    every decoder of the config must need no logits of it (``Decoder.needs_logits``) and there is no RL phase (it
    trains the policy's weights); refused before any work, at the decoder's own line."""
    from perbench import registry

    served = [("policy", cfg.policy)] if isinstance(cfg.policy, Endpoint) else []
    served += [(f"policies[{i}]", p) for i, p in enumerate(cfg.policies or []) if isinstance(p, Endpoint)]
    if not served:
        return
    key, first = served[0]
    named = f"{first.model!r}" + ("" if key == "policy" else f" ({key})")
    usable = [n for n in registry.decoders.names() if not getattr(registry.decoders.get(n), "needs_logits", True)]
    for i, d in enumerate(cfg.decoders):
        if getattr(registry.decoders.get(d.name), "needs_logits", True):
            raise cfg.locate("decoders", i).error(
                f"decoder {d.name!r} reads the policy's next-token logits, which the inference endpoint serving "
                f"{named} does not give: it needs a policy in process (a model spec). On an endpoint: "
                f"{', '.join(usable)}"
            )
    if cfg.rl is not None:
        raise cfg.locate("rl").error(
            f"RL trains the policy's weights, and {named} is served by an inference endpoint: it needs a policy in "
            "process (a model spec)"
        )
