"""Reward-model populations (``systems:``), the adaptive block's checks and the rounds' cell order."""

from __future__ import annotations

from pathlib import Path

import pytest

from perbench.config import Component, RunConfig, Where
from perbench.data.records import PreferencePair
from perbench.errors import ConfigError
from perbench.runner.adaptive import AdaptiveSpec, cell_order
from perbench.runner.preflight import check_config
from perbench.systems import SystemsSpec, expand, family_of, train_subset


def _spec(data: dict) -> SystemsSpec:  # type: ignore[type-arg]
    return SystemsSpec.from_dict(data, Where("cfg.yaml"))


def test_a_grid_expands_methods_into_labelled_systems() -> None:
    spec = _spec({"train_fraction": [0.5, 1.0], "seed": [0, 3], "params": {"lore": {"K": [2, 5]}}})
    systems = expand([Component("mpu"), Component("lore", {"tau": 50})], ["length"], spec, seed=0, shots=10)
    labels = [s.label for s in systems]
    assert labels[:4] == ["mpu(train_fraction=0.5)", "mpu(train_fraction=0.5,seed=3)", "mpu", "mpu(seed=3)"]
    assert "lore(K=5,tau=50,train_fraction=0.5,seed=3)" in labels and "lore(K=2,tau=50)" in labels
    assert len(systems) == 4 + 2 * 4 + 1 and labels[-1] == "length" and systems[-1].baseline
    lore = next(s for s in systems if s.label == "lore(K=5,tau=50,train_fraction=0.5,seed=3)")
    assert lore.method == Component("lore", {"tau": 50, "K": 5}) and lore.seed == 3 and lore.train_fraction == 0.5
    assert {family_of(x) for x in labels} == {"mpu", "lore", "length"}
    assert lore.record()["family"] == "lore" and lore.record()["shots"] == 10
    assert not any("@" in x or "|" in x for x in labels)
    # without a block, each method is one system with the plain label
    assert [s.label for s in expand([Component("mpu")], [], None, seed=0, shots=10)] == ["mpu"]
    # only the listed methods expand
    only = expand(
        [Component("mpu"), Component("pref")], [], _spec({"seed": [1, 2], "methods": ["pref"]}), seed=0, shots=5
    )
    assert [s.label for s in only] == ["mpu", "pref(seed=1)", "pref(seed=2)"]


def test_train_fraction_subsets_are_per_user_nested_and_fixed_by_the_seed() -> None:
    pairs = [
        PreferencePair(f"{u}{i}", u, f"prompt {i}", f"good {u}{i}", f"bad {u}{i}") for u in "abc" for i in range(9)
    ]
    quarter, half = train_subset(pairs, 0.25, 4), train_subset(pairs, 0.5, 4)
    assert {p.pair_id for p in quarter} < {p.pair_id for p in half} < {p.pair_id for p in pairs}
    for u in "abc":  # every user keeps ⌈f·n⌉ of their pairs
        assert sum(p.user_id == u for p in quarter) == 3 and sum(p.user_id == u for p in half) == 5
    assert train_subset(pairs, 0.25, 4) == quarter and train_subset(pairs, 0.25, 5) != quarter
    assert train_subset(pairs, 1.0, 4) == pairs
    assert [p for p in pairs if p in half] == half  # original order kept


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text("methods: [global_bt, mpu]\nbaselines: [length]\n" + text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("systems:\n  train_fraction: [0.5, 1.5]\n", "4: systems.train_fraction[1]: expected a number in (0, 1]"),
        (
            "systems:\n  train_fractions: [0.5]\n",
            "4: systems.train_fractions: unknown key. Did you mean 'train_fraction'?",
        ),
        (
            "systems:\n  params:\n    lore: {K: [2]}\n",
            "5: systems.params.lore: 'lore' is not one of this config's methods",
        ),
        (
            "systems:\n  params:\n    mpu: {l3: [0.1]}\n",
            "5: systems.params.mpu.l3: method 'mpu': unknown parameter 'l3'. Accepted: l2",
        ),
        ("systems:\n  seed: [1, 1]\n", "4: systems.seed: a value is listed twice"),
        ("systems:\n  methods: [mpuu]\n", "'mpuu' is not one of this config's methods. Did you mean 'mpu'?"),
        ("systems:\n  seed: [0, 1]\nguide_with: [mpu(seed=2)]\n", "guide_with[0]: 'mpu(seed=2)' is not one of"),
        ("adaptive:\n  budget: 0\n", "4: adaptive.budget: expected a number of generations ≥ 1 or minutes"),
        ("adaptive:\n  budget: 3 hours\n", "adaptive.budget: expected a number of generations ≥ 1 or minutes"),
        ("adaptive:\n  round: 4\n", "3: adaptive: needs a budget"),
        ("adaptive:\n  budget: 10\n  metric: rouge\n", "5: adaptive.metric: expected one of rubric_satisfaction"),
    ],
)
def test_bad_systems_and_adaptive_blocks_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        check_config(RunConfig.from_yaml(path))
    assert str(e.value).startswith(str(path)) and message in str(e.value), str(e.value)


def test_good_blocks_parse_and_guide_with_names_systems(tmp_path: Path) -> None:
    cfg = RunConfig.from_yaml(
        _yaml(
            tmp_path, "systems:\n  seed: [0, 1]\nguide_with: [mpu, mpu(seed=1)]\nadaptive: {budget: 4min, round: 3}\n"
        )
    )
    assert cfg.systems == {"seed": [0, 1]} and cfg.guide_with == ["mpu", "mpu(seed=1)"]
    spec = AdaptiveSpec.from_dict(cfg.adaptive, Where("x"))
    assert spec.minutes == 4.0 and spec.generations is None and spec.round == 3 and spec.budget_text == "4 min"
    assert AdaptiveSpec.from_dict({"budget": 96}, Where("x")).budget_text == "96 generations"
    # a config without the new keys keeps the hash it had
    assert RunConfig().result_hash() == RunConfig(systems=None, adaptive=None, max_pool_prompts=None).result_hash()
    assert RunConfig(systems={"seed": [0, 1]}).result_hash() != RunConfig().result_hash()


def test_the_cell_order_spreads_every_prefix_over_users_and_prompts() -> None:
    cells = [(f"p{j}", f"u{i:02d}") for j in range(16) for i in range(32)]
    order = cell_order(cells, seed=0)
    assert sorted(order) == sorted(cells) and order == cell_order(list(reversed(cells)), seed=0)
    assert order != cell_order(cells, seed=1)
    for k in (8, 16, 32):  # a prefix holds distinct users, and as many prompts as it can
        assert len({u for _, u in order[:k]}) == k and len({p for p, _ in order[:k]}) == min(k, 16)
    assert len({p for p, _ in order[:64]}) == 16 and len({u for _, u in order[:64]}) == 32
