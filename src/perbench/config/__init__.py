"""One run config, three front doors: YAML (``perbench run cfg.yaml``), CLI flags, Python (``RunConfig(...)``).

Every front door is checked before anything loads, and every problem is a :class:`~perbench.errors.ConfigError`
naming the file, line (for YAML) and key, what is allowed, and a "Did you mean" where a name is misspelt:

- unknown keys; each field's type and range, read from its annotation (``bool``/``int``/``float``/``str``,
  ``Optional``, ``list``, ``Literal``, with :class:`Bound` and :class:`Rule` metadata): integers are never taken
  from strings, non-finite numbers are refused;
- component parameters (benchmark, methods, decoders) against the registered class's or loader's signature
  (names, required ones, value types), decoders' parameter ranges, and each method's and decoder's own
  constructor checks (a parameter a constructor refuses, e.g. ``trust_remote_code`` without the explicit
  permission ``--trust-remote-code``, is located at that parameter: :class:`~perbench.errors.ParamError`);
- ``device``, ``dtype``, ``run_name`` (one plain path component), ``verdict_metric``'s form, the ``systems:``,
  ``adaptive:``, ``rl:`` and ``resources:`` blocks (their specs are plain data at the base, ``perbench.specs``);
- YAML: syntax errors with their line, duplicate keys, a directory, a missing or non-regular file as config, an
  alias expansion too large to be a config. An empty file means the embedded default run. Numbers follow YAML 1.2
  (``0100`` is 100, ``0o17`` octal, ``1:30`` text, ``1e-3`` a number); PyYAML's YAML 1.1 rules would read
  ``0100`` as 64 and ``1:30`` as 90.

The config is a leaf: it imports nothing of perbench but ``errors``, ``io``, ``registry``, ``specs`` and its own
modules. What needs a room's knowledge -- which names are models, the systems the config expands to (and so
``guide_with``, ``reference_method``, ``rl.methods``), which qualities the adaptive rounds can rank by -- is checked
in the preflight that ``run`` and ``validate`` share (``perbench.runner.preflight.check_config``), located by
:meth:`RunConfig.locate`.

Every value that shapes a result goes into the config hash that names the run directory, so the same config
resumes the same run.

One module per concern, each name importable from ``perbench.config``:

- :mod:`~perbench.config.run_config`: ``RunConfig`` and its front doors (YAML, a mapping, overrides, ``--set``);
- :mod:`~perbench.config.keys`: the key table (each field's annotation) and the checks across keys;
- :mod:`~perbench.config.components`: components (a registry name plus parameters) and their checks;
- :mod:`~perbench.config.rules`: single keys' ranges and rules (``device``, ``dtype``, ``run_name``, margins);
- :mod:`~perbench.config.hashing`: the config hash that names the run directory.
"""

from __future__ import annotations

# the package's own modules, then what the config is built from at the base (the located YAML, the value checks and
# the section specs, in ``perbench.specs``), importable from here as before
from perbench.config.components import Component, check_component
from perbench.config.hashing import result_hash
from perbench.config.rules import (
    BOOTSTRAP,
    DEVICE,
    DEVICES,
    DTYPE,
    DTYPES,
    MARGIN,
    MAX_BOOTSTRAP,
    MODEL,
    NAME_MAX,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    RUN_NAME,
    SEED,
    margin_problem,
)
from perbench.config.run_config import RunConfig, parse_set
from perbench.errors import ConfigError, ParamError
from perbench.specs.adaptive import AdaptiveSpec
from perbench.specs.located import (
    MAX_NODES,
    ConfigLoader,
    LinedDict,
    LinedList,
    MissingConfigError,
    Where,
    load_yaml,
    read_yaml,
)
from perbench.specs.resources import RESOURCE_FIELDS, RESOURCE_KINDS, parse_resources
from perbench.specs.rl import RLPhase
from perbench.specs.systems import SystemsSpec
from perbench.specs.values import Bound, Rule, check_value, describe

__all__ = [
    "BOOTSTRAP",
    "DEVICE",
    "DEVICES",
    "DTYPE",
    "DTYPES",
    "MARGIN",
    "MAX_BOOTSTRAP",
    "MAX_NODES",
    "MODEL",
    "NAME_MAX",
    "NON_EMPTY",
    "NON_NEGATIVE",
    "POSITIVE",
    "RESOURCE_FIELDS",
    "RESOURCE_KINDS",
    "RUN_NAME",
    "SEED",
    "AdaptiveSpec",
    "Bound",
    "Component",
    "ConfigError",
    "ConfigLoader",
    "LinedDict",
    "LinedList",
    "MissingConfigError",
    "ParamError",
    "RLPhase",
    "Rule",
    "RunConfig",
    "SystemsSpec",
    "Where",
    "check_component",
    "check_value",
    "describe",
    "load_yaml",
    "margin_problem",
    "parse_resources",
    "parse_set",
    "read_yaml",
    "result_hash",
]
