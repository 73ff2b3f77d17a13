from __future__ import annotations

import pytest

from perbench.registry import Registry, UnknownNameError, benchmarks, decoders, executors, metrics, reward_models


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
