"""Property tests: whatever a config holds — random keys, values of random types, random YAML text —
``RunConfig.from_dict`` / ``from_yaml`` either return a config or raise a ConfigError, never anything else."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perbench import registry
from perbench.config import RunConfig
from perbench.errors import ConfigError

FIELDS = [f.name for f in dataclasses.fields(RunConfig)]
METHODS = registry.reward_models.names()
DECODERS = registry.decoders.names()
BENCHMARKS = registry.benchmarks.names()
PARAMS = ["k", "w", "n", "temperature", "top_p", "alpha", "unit", "sign", "seed", "steps", "l2", "model", "kk"]
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["smollm2", "tiny-random", "cpu", "cuda:0", "auto", "org/name", "../x", "1e-3", "", "args"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(PARAMS), st.integers()), inner, max_size=4),
    ),
    max_leaves=12,
)
param_maps = st.dictionaries(st.sampled_from(PARAMS), values, max_size=3)


def component(names: list[str]) -> st.SearchStrategy[Any]:
    name = st.one_of(st.sampled_from(names), st.text(max_size=8))
    return st.one_of(
        name,
        st.builds(lambda n, p: {"name": n, **p}, name, param_maps),
        st.builds(lambda n, p: {n: p}, name, st.one_of(st.none(), param_maps, values)),
        values,
    )


field_values: dict[str, st.SearchStrategy[Any]] = {
    "benchmark": component(BENCHMARKS),
    "methods": st.one_of(st.lists(component(METHODS), max_size=3), values),
    "decoders": st.one_of(st.lists(component(DECODERS), max_size=3), values),
    "baselines": st.one_of(st.lists(st.sampled_from(METHODS), max_size=3), values),
    "guide_with": st.one_of(st.none(), st.lists(st.sampled_from(METHODS), max_size=2), values),
}
#: values of the right shape for most fields (so that many fuzzed configs get past the first key)
plausible = st.one_of(
    st.integers(-2, 40),
    st.booleans(),
    st.none(),
    st.floats(-2, 2),
    st.sampled_from(["smollm2", "tiny-random:1", "strict", "half", "cpu", "local", "global_bt", "args:rougeL"]),
    st.lists(st.integers(-1, 30), max_size=3),
)
config_dicts = st.tuples(
    st.dictionaries(st.sampled_from(FIELDS), st.one_of(plausible, values), max_size=6),
    st.dictionaries(st.text(max_size=10), values, max_size=1),
    st.booleans(),
).flatmap(
    lambda t: st.fixed_dictionaries(
        {k: field_values.get(k, st.just(v)) for k, v in {**t[0], **(t[1] if t[2] else {})}.items()}
    )
)


def ok_or_config_error(build: Any, *args: Any) -> None:
    try:
        cfg = build(*args)
    except ConfigError:
        return
    assert isinstance(cfg, RunConfig)


@FUZZ
@given(config_dicts)
def test_from_dict_succeeds_or_raises_config_error(data: dict[str, Any]) -> None:
    ok_or_config_error(RunConfig.from_dict, data)


@FUZZ
@given(st.one_of(values, st.lists(values), st.integers(), st.text()))
def test_from_dict_of_anything(data: Any) -> None:
    ok_or_config_error(RunConfig.from_dict, data)


@pytest.fixture(scope="module")
def yaml_dir() -> Any:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def dumped(data: dict[str, Any]) -> str:
    try:
        return yaml.safe_dump(data, sort_keys=False)
    except yaml.YAMLError:  # e.g. a key type safe_dump refuses
        return "seed: 0\n"


yaml_texts = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.sampled_from(list("abk:-[]{},'\"&*!|>#%@ \n\t0123.e")), max_size=80),
    config_dicts.map(dumped),
    # well-formed configs with one line cut short, doubled or indented oddly
    st.tuples(config_dicts.map(dumped), st.integers(0, 200), st.sampled_from(["", "\n", "  ", ": ", "- "])).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
    ),
)


@FUZZ
@given(text=yaml_texts)
def test_from_yaml_succeeds_or_raises_config_error(text: str, yaml_dir: Path) -> None:
    path = yaml_dir / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    ok_or_config_error(RunConfig.from_yaml, path)


@FUZZ
@given(raw=st.binary(max_size=60))
def test_from_yaml_of_any_bytes(raw: bytes, yaml_dir: Path) -> None:
    path = yaml_dir / "bytes.yaml"
    path.write_bytes(raw)
    ok_or_config_error(RunConfig.from_yaml, path)
