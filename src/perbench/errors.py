"""perbench's own error types. The CLI prints any of them as one line and exits non-zero (a traceback
only with ``--debug``); anything else escaping a command is a bug."""

from __future__ import annotations


class PerbenchError(Exception):
    """An error a user can act on: its message names the file, line, field or key at fault."""


class ConfigError(PerbenchError, ValueError):
    """A run config (YAML, CLI flag or Python keyword) with an unknown key, wrong type or out-of-range value."""


class ParamError(ConfigError):
    """A component refusing one of its parameters (``owner: problem``); ``param`` names it, so that a config check
    can point at that parameter's own line."""

    def __init__(self, owner: str, param: str, problem: str) -> None:
        super().__init__(f"{owner}: {problem}")
        self.param, self.problem = param, problem


class StoreError(PerbenchError):
    """A run's store or output folder that cannot be read or written (corrupt, read-only, disk full)."""
