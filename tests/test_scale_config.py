"""``perbench run scale`` is sized for a GPU: on a CPU it is refused before any work, with its estimated time."""

from __future__ import annotations

from pathlib import Path

import pytest

from perbench.config import RunConfig
from perbench.runner import estimate
from tests.test_rubrics_large import more_bases  # noqa: F401 - a fixture


def _scale() -> RunConfig:
    from perbench.cli.shared import config_path

    return RunConfig.from_yaml(config_path("scale"))


def test_scale_is_the_papers_size() -> None:
    cfg = _scale()
    assert cfg.benchmark.params["size"] == "large"
    [bon] = [d for d in cfg.decoders if d.name == "best_of_n"]
    assert bon.params["pool"] == 64  # Best-of-n curve: n = 1, 2, 4, …, 64
    assert cfg.systems == {"train_fraction": [0.25, 0.5, 1.0]}
    names = {m.name for m in cfg.methods}
    assert {"global_bt_v2", "pdpo", "genarm"} <= names  # every LoRA method
    from perbench import registry
    from perbench.decoding.args import ARGS
    from perbench.rewards.base import FeatureRM

    frozen = {n for n in registry.reward_models.names() if issubclass(registry.reward_models.get(n), FeatureRM)}
    assert frozen - {"lore_reg"} <= names  # lore_reg needs an anchor model not fitted on these pairs
    per_prefix = {n for n in names if ARGS.rm_problem(registry.reward_models.get(n)) is None}
    assert set(cfg.guide_with or []) == per_prefix
    assert cfg.verdict_metric == "best_of_n:rubric_satisfaction"


def test_scale_on_a_cpu_is_refused_with_its_estimate(
    more_bases: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the CLI, as a user runs it: one line, before any model loads or the run's folder exists."""
    from perbench.cli import main

    out = tmp_path / "runs"
    code = main(["run", "scale", "--device", "cpu", "--out-dir", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "this run would take about" in err and " h on this CPU" in err and "H200" in err
    assert "--set allow_slow=true" in err and "--device cuda" in err
    assert not out.exists()  # refused before the run directory or any model


def test_the_estimate_is_the_plan_times_the_measured_costs(more_bases: Path) -> None:  # noqa: F811
    from perbench.runner.state import load_benchmark

    default = RunConfig.default()
    sizes = estimate.plan_sizes(default, load_benchmark(default))
    cpu = estimate.estimate_seconds(sizes, estimate.CPU_COSTS)
    # the default run measured 323 s on 2 cores (the costs' source): the estimate is within a factor of 1.5
    assert 323 / 1.5 < cpu["total"] < 323 * 1.5
    assert sizes.sizes["pool_token"] == 16 * 32 * 56 and sizes.sizes["lora_step"] == 0
    scale = _scale()
    bench = load_benchmark(scale)
    big = estimate.plan_sizes(scale, bench)
    assert big.systems == 44 and big.sizes["lora_step"] == 9 * 30
    assert estimate.estimate_seconds(big, estimate.CPU_COSTS)["total"] > estimate.CPU_LIMIT_S
    assert estimate.estimate_seconds(big, estimate.GPU_COSTS)["total"] < 8 * 60
    # allow_slow runs it anyway; on tiny models the same plan costs a CPU almost nothing
    estimate.check_cpu_time(scale.override(allow_slow=True, device="cpu"), bench)
    estimate.check_cpu_time(scale.override(policy="tiny-random", rm_backbone="tiny-random", device="cpu"), bench)
    assert scale.override(allow_slow=True).result_hash() == scale.result_hash()
