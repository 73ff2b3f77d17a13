"""Progress bars for every phase longer than a few seconds (tqdm; quiet with PERBENCH_QUIET=1)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def progress(total: int | None = None, desc: str = "", unit: str = "it", **kw: Any) -> Any:
    from tqdm.auto import tqdm

    disable = os.environ.get("PERBENCH_QUIET") == "1" or total == 0
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, leave=False, **kw)


def track(items: list[T], desc: str, unit: str = "step") -> Iterator[T]:
    """Iterate ``items`` behind a progress bar."""
    bar = progress(total=len(items), desc=desc, unit=unit)
    for item in items:
        yield item
        bar.update(1)
    bar.close()
