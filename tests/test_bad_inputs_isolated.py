"""Isolated methods (``{name: isolated, method: ...}``) that fail: one located line naming the method and the call.

A method that cannot start (its module is missing, it is no ``RewardModel``, it reads the run's features, its module
imports the runner) is found by the preflight's probe of the child and refused at its config line before the run
directory exists; a call that fails later (``score`` one value short or a scalar, the child exiting or importing the
runner in ``fit``) is one ``perbench: error:`` line naming the method and the call. NaN scores are counted, shown in
the command's summary and the report, and their method is never a candidate of the verdict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.errors import PerbenchError
from perbench.rewards.base import RMContext, ScoreItem
from tests.test_bad_inputs_cli import Outcome, cli, one_line_error

__all__ = ["cli"]


def data(tmp_path: Path) -> Path:
    rows = [
        {"user_id": u, "prompt": f"Q{k}?", "chosen": f"answer {k} of {u} " * (1 + k % 2), "rejected": f"no {k}",
         "split": "train" if k < 3 else "test"}
        for u in ("u1", "u2", "u3", "u4", "u5", "u6") for k in range(6)
    ]  # fmt: skip
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config(tmp_path: Path, *methods: str) -> Path:
    spec = {
        "benchmark": {"name": "file", "source": str(data(tmp_path))},
        "policy": "tiny-random", "rm_backbone": "tiny-random", "baselines": [],
        "methods": [{"name": "isolated", "method": m} for m in methods],
        "decoders": [], "bootstrap": 20, "shot_curve": [], "bertscore": False, "device": "cpu",
        "out_dir": str(tmp_path / "runs"), "run_name": "r",
    }  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("method", "problem"),
    [
        ("tests.no_such_module:Method", "ModuleNotFoundError: No module named 'tests.no_such_module'"),
        ("tests.isolated_bad:NotAModel", "is not a RewardModel class"),
        ("global_bt", "reads the run's backbone features (a FeatureRM)"),
        ("tests.isolated_imports_runner:Method", "ImportError: perbench.runner is not importable"),
    ],
)
def test_a_method_that_cannot_start_is_refused_at_its_line_before_the_run_directory(
    method: str, problem: str, tmp_path: Path, cli: Callable[..., Outcome]
) -> None:
    cfg = config(tmp_path, "tests.isolated_bad:Length", method)
    err = one_line_error(cli("run", str(cfg)))
    assert err.startswith(f"{cfg}:") and f"methods[1]: isolated method {method}: cannot start: " in err, err
    assert problem in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("method", "call", "problem"),
    [
        ("OneShort", "score", "returned an array of shape (2,) for 3 items; return one number per item"),
        ("Scalar", "score", "returned a scalar for 3 items"),
        ("ExitsInFit", "fit", "its process exited (exit code 3) before replying"),
        ("ImportsRunnerInFit", "fit", "raised ImportError: perbench.runner is not importable"),
    ],
)
def test_a_failing_call_names_the_method_and_the_call(method: str, call: str, problem: str) -> None:
    from perbench.rewards.isolated import Isolated

    rm = Isolated(f"tests.isolated_bad:{method}")
    try:
        with pytest.raises(PerbenchError) as got:
            rm.fit([], RMContext(extra={"users": {}}))
            rm.score([ScoreItem("u", "Q?", text) for text in ("a", "bb", "ccc")])
    finally:
        rm.close()
    assert str(got.value).startswith(f"isolated method tests.isolated_bad:{method}: {call}: ")
    assert problem in str(got.value)


def test_a_child_exiting_in_fit_is_one_line_through_the_command(tmp_path: Path, cli: Callable[..., Outcome]) -> None:
    err = one_line_error(cli("run", str(config(tmp_path, "tests.isolated_bad:ExitsInFit"))))
    assert err == (
        "isolated method tests.isolated_bad:ExitsInFit: fit: its process exited (exit code 3) before replying; "
        "its own messages, if any, are on stderr above"
    )


def test_nan_scores_are_counted_shown_and_never_lead(tmp_path: Path, cli: Callable[..., Outcome]) -> None:
    got = cli("run", str(config(tmp_path, "tests.isolated_bad:SomeNaN")))
    assert got.rc == 0, got.err
    label = "isolated(method=tests.isolated_bad:SomeNaN)"
    results: dict[str, Any] = json.loads((tmp_path / "runs" / "r" / "results.json").read_text())
    n = results["upstream"][label]["rm_accuracy"]["seen"]["invalid"]
    assert 0 < n < 18  # some of the 18 seen pairs have a response scored NaN
    analysis = results["analysis"]
    assert analysis["roles"][label] == "invalid" and analysis["invalid_scores"][label] >= n
    bad = analysis["invalid_scores"][label]
    text = analysis["verdict"]["text"]
    assert f"{label} leads" not in text and "Deploy" not in text
    assert f"Never a candidate, for returning invalid (NaN) scores: {label} ({bad} pairs)." in text
    assert f"({bad} pairs with an invalid (NaN) score: counted wrong, never a candidate)" in got.out
    report = (tmp_path / "runs" / "r" / "report.html").read_text()
    assert "invalid scores (pairs, counted wrong)" in report and f"never a candidate: {bad} pairs" in report
