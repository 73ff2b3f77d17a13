"""What several ``perbench`` subcommands share: embedded configs by name, and the argument types."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def config_path(name: str) -> str:
    """A YAML path, or the name of an embedded config (``default``, ``all_methods``)."""
    if Path(name).exists():
        return name
    from importlib import resources

    from perbench.config import MissingConfigError

    configs = resources.files("perbench") / "configs"
    embedded = configs / f"{name.removesuffix('.yaml')}.yaml"
    if embedded.is_file():
        return str(embedded)
    known = sorted(p.name.removesuffix(".yaml") for p in configs.iterdir() if p.name.endswith(".yaml"))
    raise MissingConfigError(f"config {name!r} is neither a file nor an embedded config (embedded: {', '.join(known)})")


def fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return v


def size_or_auto(text: str) -> int | str:
    """A batch size: a positive integer, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or auto") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or auto")
    return value


def finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def non_negative(text: str) -> float:
    v = finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return v


def positive(text: str) -> float:
    v = finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def probability(text: str) -> float:
    v = finite(text)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return v


def names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
