"""Device and dtype policy, in one place: cuda -> bf16, mps -> fp16... cpu -> fp32; every choice overridable. Also
whether transformers may swap a model's layers for kernels fetched from the Hugging Face hub (never, unless asked)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perbench.errors import ConfigError

if TYPE_CHECKING:
    import torch

_DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
}


@dataclass(frozen=True)
class DevicePolicy:
    device: str
    dtype: str  # "float32" | "bfloat16" | "float16"
    #: let transformers kernelize the model's layers from hub kernels (``kernels`` package; fetched and run on load
    #: and on ``model.train()``); off unless the config's ``hub_kernels`` or ``PERBENCH_HUB_KERNELS=1`` asks
    hub_kernels: bool = False

    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype)  # type: ignore[no-any-return]


def hub_kernels_default() -> bool:
    """Whether hub kernels are allowed when the caller does not say: ``PERBENCH_HUB_KERNELS`` (1/true/yes), else no."""
    return os.environ.get("PERBENCH_HUB_KERNELS", "").strip().lower() in ("1", "true", "yes")


def no_hub_kernels(model: Any, policy: DevicePolicy | None = None) -> None:
    """Undo any hub-kernel layers transformers put on ``model`` (a ``PreTrainedModel``, or a PEFT wrapper of one)
    unless ``policy`` allows them, so that ``model.train()`` (which re-kernelizes a kernelized model in training
    mode, fetching e.g. ``kernels-community/rotary``) stays on the model's own torch code, offline."""
    if (policy.hub_kernels if policy is not None else hub_kernels_default()) or model is None:
        return
    get = getattr(model, "get_base_model", None)  # a PEFT wrapper: its transformers model
    base = get() if callable(get) else model
    if getattr(base, "_use_kernels", False):
        base.use_kernels = False  # transformers resets the layers to torch's (an empty kernel mapping: no fetch)


def resolve_device(
    device: str | None = None, dtype: str | None = None, *, here: bool = True, hub_kernels: bool | None = None
) -> DevicePolicy:
    """Pick device and dtype. ``auto`` (default): cuda if available -> bf16, else cpu -> fp32.

    ``here=False``: the policy of another machine (a Ray run's workers, ``unit_device``): a named device is taken
    as given, not checked against this machine's (``auto`` still means this machine's).

    fp32 on CPU is deliberate: multi-token forwards in bf16 are several times slower on CPUs without native
    bf16 matrix units (on CPUs with AVX-512 BF16 they are faster; docs/footguns.md). ``PERBENCH_DEVICE`` /
    ``PERBENCH_DTYPE`` override the defaults. ``hub_kernels``: None takes :func:`hub_kernels_default`.
    """
    import torch

    device = device or os.environ.get("PERBENCH_DEVICE") or "auto"
    dtype = dtype or os.environ.get("PERBENCH_DTYPE") or "auto"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and here:
        if not torch.cuda.is_available():
            built = "" if torch.version.cuda else ", a build without CUDA"
            raise ConfigError(
                f"device {device!r}: CUDA is not available here (torch {torch.__version__}{built}); use device: cpu "
                "or auto"
            )
        index = device.partition(":")[2]
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device == "mps" and here and not torch.backends.mps.is_available():
        raise ConfigError("device 'mps': Apple's MPS is not available here; use device: cpu or auto")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {sorted(set(_DTYPES))}")
    kernels = hub_kernels_default() if hub_kernels is None else hub_kernels
    return DevicePolicy(device=device, dtype=_DTYPES[dtype], hub_kernels=kernels)


def set_threads() -> None:
    """Use every core the process may use (``PERBENCH_THREADS`` overrides: on a machine shared with other
    busy processes one thread can be much faster than a contended two)."""
    import torch

    env = os.environ.get("PERBENCH_THREADS")
    if env:
        n = int(env)
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - non-Linux
            n = os.cpu_count() or 1
    torch.set_num_threads(max(1, n))
