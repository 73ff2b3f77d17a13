"""The loaders' keyword options are listed once (``load_keywords``) and checked once (``LoadOptions``): the two
public loaders take exactly those keywords, with the same defaults, and a caller's keywords reach the loading."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from perbench import registry
from perbench.data.load_options import OPTION_NAMES, LoadOptions, load_keywords
from perbench.data.loaders import load_benchmark_file, validate_file
from perbench.errors import ConfigError

ROWS = [
    {"user_id": u, "prompt": f"q{i}", "chosen": f"good {u} {i}", "rejected": f"bad {u} {i}", "split": s}
    for u in ("a", "b")
    for i, s in enumerate(["train", "train", "test"])
]


def write(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def test_the_keywords_are_the_options_fields_with_their_defaults() -> None:
    fields = {f.name: f for f in dataclasses.fields(LoadOptions)}
    assert tuple(fields) == OPTION_NAMES
    built = LoadOptions.build(**load_keywords())
    assert built == LoadOptions()  # the keyword defaults are the options' defaults
    for fn in (load_benchmark_file, validate_file):
        params = list(inspect.signature(fn).parameters.values())
        assert params[0].name == "source" and params[0].default is inspect.Parameter.empty
        assert [p.name for p in params[1:]] == list(OPTION_NAMES)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    accepted = registry.accepted_params(load_benchmark_file)
    assert accepted is not None and set(accepted) == {"source", *OPTION_NAMES}
    assert accepted["on_error"].annotation is not None and not accepted["max_chars"].required


def test_keywords_reach_the_loading(tmp_path: Path) -> None:
    path = write(tmp_path)
    bench = load_benchmark_file(path, unseen_users=["b"], name="named", max_pairs=4, seed=3)
    assert bench.name == "named" and bench.unseen_users == ["b"] and len(bench.pairs) <= 4
    report = validate_file(path, unseen_users=["b"], max_pairs=4, seed=3)
    assert report["ok"] and report["pairs_kept"] == len(bench.pairs) and report["users_unseen"] == 1


def test_an_unknown_keyword_is_a_type_error_naming_the_loader(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"load_benchmark_file\(\) got an unexpected keyword argument 'sead'"):
        load_benchmark_file(write(tmp_path), sead=1)
    with pytest.raises(TypeError, match=r"validate_file\(\)"):
        validate_file(write(tmp_path), sead=1)


def test_a_bad_value_is_an_error_from_load_and_a_report_from_validate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_chars must be a positive integer"):
        load_benchmark_file(write(tmp_path), max_chars=0)
    report = validate_file(write(tmp_path), max_chars=0)
    assert not report["ok"] and "max_chars must be a positive integer" in str(report["fatal"])
