"""Progress bars for every phase longer than a few seconds (tqdm; quiet with PERBENCH_QUIET=1 or ``--quiet``).

Quiet also silences the third-party bars a run would show: transformers' ("Loading weights"), the GGUF
conversion's, datasets' and huggingface_hub's (:func:`quiet_third_party`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: environment defaults the libraries read when they are imported
_QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TQDM_DISABLE": "1",
}


def quiet() -> bool:
    return os.environ.get("PERBENCH_QUIET") == "1"


def quiet_third_party() -> None:
    """With PERBENCH_QUIET=1: turn off transformers', datasets', huggingface_hub's and every other tqdm bar, for
    libraries imported later (environment defaults) and those already imported (their own switches)."""
    if not quiet():
        return
    for k, v in _QUIET_ENV.items():
        os.environ.setdefault(k, v)
    hub = sys.modules.get("huggingface_hub")
    if hub is not None and hasattr(hub, "disable_progress_bars"):
        hub.disable_progress_bars()
    tf_logging = sys.modules.get("transformers.utils.logging")
    if tf_logging is not None:
        tf_logging.disable_progress_bar()
        tf_logging.set_verbosity_error()
    ds = sys.modules.get("datasets")
    if ds is not None and hasattr(ds, "disable_progress_bars"):
        ds.disable_progress_bars()
    gguf: Any = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf is not None and not getattr(gguf.tqdm, "_perbench_quiet", False):
        plain = gguf.tqdm

        def silent(*args: Any, **kw: Any) -> Any:
            return plain(*args, **{**kw, "disable": True})

        silent._perbench_quiet = True  # type: ignore[attr-defined]
        gguf.tqdm = silent


def progress(total: int | None = None, desc: str = "", unit: str = "it", **kw: Any) -> Any:
    from tqdm.auto import tqdm

    disable = quiet() or total == 0
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, leave=False, **kw)


def track(items: list[T], desc: str, unit: str = "step") -> Iterator[T]:
    """Iterate ``items`` behind a progress bar."""
    bar = progress(total=len(items), desc=desc, unit=unit)
    for item in items:
        yield item
        bar.update(1)
    bar.close()
