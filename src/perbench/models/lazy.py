"""A model known before its weights load: :class:`LazyLM` gives its fingerprint, name, tokenizer and chat
template at once (``identity.py``, ``load_tokenizer``) and loads the weights (``load_lm``) the first time something
reads them (``model``, ``hidden_size``, ``eos_ids``, ...).

A run's driver plans under the device and dtype its units compute under (``unit_device`` / ``unit_dtype``), which
may not be its own (a CPU driver, GPU workers): ``planned`` is that policy, and the fingerprint is made with its
dtype; ``policy`` is where this process would load the weights (its own device, the planned dtype, so a model it
loads has the fingerprint it planned with)."""

from __future__ import annotations

from typing import Any

from perbench.device import DevicePolicy
from perbench.models.identity import (
    TINY_HIDDEN,
    TINY_RANDOM,
    ModelSpec,
    model_fingerprint,
    model_label,
    tokenizer_identity,
)
from perbench.models.loader import (
    LoadedLM,
    from_pretrained_error,
    load_lm,
    load_tokenizer,
    padded_left,
    template_hash,
    text_config,
)


class LazyLM(LoadedLM):
    """A :class:`LoadedLM` whose weights load on first use. ``planned``: the device and dtype the fingerprint is
    made for; ``here``: where this process loads it (default the planned policy)."""

    def __init__(self, spec: str, planned: DevicePolicy, here: DevicePolicy | None = None) -> None:
        # LoadedLM's fields are properties here: no dataclass __init__
        self.spec = ModelSpec.parse(spec)
        self.planned = planned
        self._here = here or planned
        if self._here.dtype != planned.dtype:
            raise ValueError(f"{spec}: loads in {self._here.dtype} but is planned in {planned.dtype}")
        self._lm: LoadedLM | None = None
        self._fingerprint: str | None = None
        self._tokenizer: Any = None

    def __repr__(self) -> str:
        state = "loaded" if self._lm is not None else "not loaded"
        return f"LazyLM({self.spec.name!r}, {self.planned.dtype}, {state})"

    # identity, not field-by-field equality: comparing two would load both
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded in this process."""
        return self._lm is not None

    def load(self) -> LoadedLM:
        """The model with its weights (loaded once per process by ``load_lm``)."""
        if self._lm is None:
            lm = load_lm(
                self.spec, device=self._here.device, dtype=self._here.dtype, hub_kernels=self._here.hub_kernels
            )
            if lm.fingerprint != self.fingerprint:
                raise RuntimeError(
                    f"model {self.spec.name}: loaded as {lm.fingerprint}, planned as {self.fingerprint} (its files or "
                    "its hub revision changed during the run?); rerun"
                )
            self._lm = lm
        return self._lm

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        if self._fingerprint is None:
            try:
                self._fingerprint = model_fingerprint(self.spec, self.planned.dtype)
            except (OSError, ValueError) as e:
                raise from_pretrained_error(self.spec.name, e) from e
        return self._fingerprint

    @property
    def name(self) -> str:  # type: ignore[override]
        return model_label(self.spec)

    @property
    def policy(self) -> DevicePolicy:  # type: ignore[override]
        return self._lm.policy if self._lm is not None else self._here

    @property
    def tokenizer(self) -> Any:
        if self._lm is not None:
            return self._lm.tokenizer
        if self._tokenizer is None:  # the object load_lm shares (the same files): padded as load_lm pads it
            self._tokenizer = padded_left(load_tokenizer(self.spec))
        return self._tokenizer

    @property
    def chat_template_hash(self) -> str:
        """:attr:`LoadedLM.chat_template_hash`, memoized by the tokenizer's identity where it can be told
        (:func:`~perbench.models.identity.tokenizer_identity`): a rerun's provenance loads no tokenizer."""
        ident = tokenizer_identity(self.spec)
        if ident is None:
            return template_hash(self.tokenizer)
        from perbench.memo import memo_json

        return str(memo_json("chat_template_hash", [ident], lambda: template_hash(self.tokenizer)))

    @property
    def hidden_size(self) -> int:
        """The width of its hidden states, from its config (the loaded model's once loaded)."""
        if self._lm is not None:
            return self._lm.hidden_size
        if self.spec.name.startswith(TINY_RANDOM):
            return TINY_HIDDEN
        return int(text_config(self.spec).hidden_size)

    @property
    def model(self) -> Any:
        return self.load().model
