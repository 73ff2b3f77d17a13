"""A method module that imports the runner at the top: an isolated child refuses it when it starts."""

from __future__ import annotations

import perbench.runner.run  # noqa: F401
from tests.isolated_bad import Length


class Method(Length):
    pass
