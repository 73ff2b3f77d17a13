from __future__ import annotations

import typing

import pytest

from perbench.registry import (
    Registry,
    UnknownNameError,
    accepted_params,
    benchmarks,
    decoders,
    executors,
    metrics,
    reward_models,
)


def test_lazy_target_is_imported_on_first_get() -> None:
    reg: Registry[object] = Registry("thing")
    reg.register("dumps", "json:dumps", help="lazy")
    import json

    assert isinstance(reg.entry("dumps").target, str)
    assert reg.get("dumps") is json.dumps
    assert reg.entry("dumps").target is json.dumps


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(UnknownNameError) as e:
        reward_models.get("global_tb")
    assert "Did you mean 'global_bt'" in str(e.value)
    assert "Known:" in str(e.value)


def test_duplicate_registration_is_an_error() -> None:
    reg: Registry[int] = Registry("n")
    reg.register("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", 2)


def test_builtin_entries_resolve() -> None:
    for reg in (benchmarks, reward_models, decoders, metrics, executors):
        for entry in reg:
            assert callable(reg.get(entry.name)), entry.name


def test_importing_perbench_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, perbench, perbench.registry, perbench.config, perbench.data; "
        "print(int(any(m in sys.modules for m in ('torch', 'transformers'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


class _Base:
    def __init__(self, **params: object) -> None:
        self.params = params


class _Middle(_Base):
    def __init__(self, depth: int = 1, **params: object) -> None:
        super().__init__(depth=depth, **params)


class _Leaf(_Middle):
    def __init__(self, width: float, unknown: NotImportedAtRuntime | None = None, **params: object) -> None:  # noqa: F821
        super().__init__(**params)


def test_accepted_params_follow_params_forwarded_to_bases() -> None:
    ps = accepted_params(_Leaf)
    assert ps is not None and list(ps) == ["width", "unknown", "depth"]
    assert ps["width"].required and not ps["depth"].required  # only the class's own required parameters
    assert ps["width"].annotation is float and ps["depth"].annotation is int
    assert ps["unknown"].annotation is None  # a name only type checkers see: resolved as "anything"


def test_accepted_params_of_loaders() -> None:
    def loader(path: str, *, seed: int = 0) -> None: ...

    def open_loader(path: str, **kwargs: object) -> None: ...

    ps = accepted_params(loader)
    assert ps is not None and {n: (p.required, p.annotation) for n, p in ps.items()} == {
        "path": (True, str),
        "seed": (False, int),
    }
    assert accepted_params(open_loader) is None  # takes any keyword


def test_builtin_help_documents_units_seed_and_source() -> None:
    assert "unit: chars" in reward_models.entry("length").help
    assert "run's seed" in reward_models.entry("random").help
    assert "source:" in benchmarks.entry("file").help
    assert "--trust-remote-code" in reward_models.entry("hub_rm").help
    length = reward_models.params("length")
    assert length is not None and list(length) == ["sign", "unit"]
    assert typing.get_args(length["unit"].annotation) == ("words", "chars")
