"""perbench's own error types. The CLI prints any of them as one line and exits non-zero (a traceback
only with ``--debug``); anything else escaping a command is a bug."""

from __future__ import annotations


class PerbenchError(Exception):
    """An error a user can act on: its message names the file, line, field or key at fault."""


class ConfigError(PerbenchError, ValueError):
    """A run config (YAML, CLI flag or Python keyword) with an unknown key, wrong type or out-of-range value."""


class StoreError(PerbenchError):
    """A run's store or output folder that cannot be read or written (corrupt, read-only, disk full)."""
