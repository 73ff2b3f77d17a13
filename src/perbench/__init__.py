"""perbench: which personalized reward model should I deploy?

Importing this package is light (no torch); heavy modules load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
