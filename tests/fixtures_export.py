"""A small finished run and an exported mpu system, shared by the export, serve and bad-input tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perbench.api import run
from perbench.cli import main
from perbench.config import RunConfig
from tests.test_end_to_end import tiny_pool  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def run_dir(tiny_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("export-run")
    cfg = RunConfig.from_dict(
        {
            "benchmark": {"name": "rubrics", "pool": str(tiny_pool)},
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "methods": ["global_bt", "mpu", "pref"],
            "systems": {"train_fraction": [0.5, 1.0]},
            "decoders": [],
            "bootstrap": 20,
            "shot_curve": [1],
            "out_dir": str(out),
            "device": "cpu",
        }
    )
    return run(cfg).run_dir


@pytest.fixture(scope="module")
def mpu_export(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mpu-export") / "mpu"
    assert main(["export", str(run_dir), "--system", "mpu", "--out", str(out)]) == 0
    return out


def copy_export(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
