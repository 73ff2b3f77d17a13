"""Progress bars for every phase longer than a few seconds (tqdm; quiet with PERBENCH_QUIET=1)."""

from __future__ import annotations

import os
from typing import Any


def progress(total: int | None = None, desc: str = "", unit: str = "it", **kw: Any) -> Any:
    from tqdm.auto import tqdm

    disable = os.environ.get("PERBENCH_QUIET") == "1" or total == 0
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, leave=False, **kw)
