"""Names of metrics the config checks and the analysis shares."""

from __future__ import annotations

#: descriptive qualities of generated text (``DECODER:words``, the length in whitespace words): never better or worse,
#: so never ranked; reported beside the pick (its trade-offs against zero-shot decoding)
DESCRIPTIVE_QUALITIES = frozenset({"words"})
