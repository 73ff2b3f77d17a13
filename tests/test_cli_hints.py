"""A quiet CLI that points to the fix: ``--version``; ``--quiet`` / PERBENCH_QUIET=1 also silence transformers'
bars; each hostile input's message names the fix that works (``--default-user``, ``--test-fraction``), in the CLI
and the Python API, and that fix does work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from perbench.cli import main


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def no_user(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "nouser.jsonl", [{"prompt": f"q{i}", "chosen": f"yes {i}", "rejected": f"no {i}"} for i in range(12)]
    )


@pytest.fixture
def no_split(tmp_path: Path) -> Path:
    rows = [{"user_id": f"u{i % 3}", "prompt": f"q{i}", "chosen": f"yes {i}", "rejected": f"no {i}"} for i in range(30)]
    return _write(tmp_path / "nosplit.jsonl", rows)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import perbench

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"perbench {perbench.__version__}"


def test_a_file_without_a_user_field_names_default_user(
    no_user: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"benchmark: {{name: file, source: {no_user}}}\npolicy: tiny-random\nrm_backbone: tiny-random\n")
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perbench: error: {no_user}:1: field 'user_id': missing")
    assert "--default-user NAME" in err and "default_user: NAME" in err and "on_error: skip" not in err
    assert main(["validate", str(no_user)]) == 1  # FAILED: exit 1 (errors that stop a command: 2)
    out = capsys.readouterr().out
    assert "--default-user NAME" in out and "FAILED" in out
    assert main(["validate", str(no_user), "--default-user", "anyone"]) == 0  # the named fix works
    assert "status       : OK" in capsys.readouterr().out


def test_a_file_without_a_split_field_names_test_fraction(
    no_split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perbench.data.loaders import NoTrainPairsWarning, load_benchmark_file

    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"benchmark: {{name: file, source: {no_split}}}\npolicy: tiny-random\nrm_backbone: tiny-random\n")
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "no train pairs" in err and "--test-fraction 0.2" in err and "test_fraction: 0.2" in err
    assert main(["validate", str(no_split)]) == 0
    warning = next(line for line in capsys.readouterr().out.splitlines() if "warning" in line)
    assert "cannot run" in warning and "--test-fraction 0.2" in warning
    with pytest.warns(NoTrainPairsWarning, match=r"test_fraction=0\.2"):  # the Python API says so too
        bench = load_benchmark_file(no_split)
    assert bench.train_pairs() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the named fix works, and then nothing warns
        fixed = load_benchmark_file(no_split, test_fraction=0.2)
    assert fixed.train_pairs() and fixed.test_pairs()
    assert main(["validate", str(no_split), "--test-fraction", "0.2"]) == 0
    assert "warning" not in capsys.readouterr().out


LOAD = "from perbench.models.loader import load_lm; load_lm({folder!r}, device='cpu')"


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_silences_transformers_bars(tmp_path: Path, tiny_lm, quiet: bool) -> None:  # type: ignore[no-untyped-def]
    """A folder model loads through transformers, which draws "Loading weights"; quiet, nothing is drawn."""
    folder = tmp_path / "model"
    if not folder.exists():
        tiny_lm.model.save_pretrained(folder)
        tiny_lm.tokenizer.save_pretrained(folder)
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["PERBENCH_QUIET"] = "1" if quiet else "0"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1] / "src"), env.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, "-c", LOAD.format(folder=str(folder))], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert ("Loading weights" in res.stderr) is not quiet, res.stderr[-2000:]
