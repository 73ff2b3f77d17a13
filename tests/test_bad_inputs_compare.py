"""``perbench compare`` never pools what should not mix: runs whose tie rules differ are refused (their cells count a
tie differently), and so are runs whose equivalence margins differ unless ``--equivalence-margin`` states the one to
use; each refusal names the runs and their values. An ``--out`` that is a dangling link is a clear error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_bad_inputs_cli import Outcome, cli, one_line_error

__all__ = ["cli"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three finished runs of one benchmark, seeds 0, 1, 2: the second with a margin of 40 points, the third
    counting ties as half."""
    from perbench.cli import main

    root = tmp_path_factory.mktemp("compare")
    rows = [
        {"user_id": u, "prompt": f"Q{k}?", "chosen": f"answer {k} of {u} " * 2, "rejected": f"no {k}", "split": s}
        for u in ("u1", "u2", "u3", "u4", "u5") for k, s in enumerate(("train", "test", "test", "test", "test", "test"))
    ]  # fmt: skip
    data = root / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base = {"benchmark": {"name": "file", "source": str(data)}, "methods": [], "baselines": ["length", "random"],
            "decoders": [], "bootstrap": 20, "out_dir": str(root / "runs")}  # fmt: skip
    variants: dict[str, dict[str, Any]] = {
        "plain": {"seed": 0},
        "wide": {"seed": 1, "equivalence_margin": 0.4},
        "half": {"seed": 2, "tie_policy": "half"},
    }
    for name, extra in variants.items():
        cfg = root / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump({**base, **extra, "run_name": name}), encoding="utf-8")
        assert main(["run", str(cfg)]) == 0
    return {name: root / "runs" / name for name in variants}


def test_mixed_margins_are_refused_naming_the_runs_and_their_values(
    runs: dict[str, Path], tmp_path: Path, cli: Any
) -> None:
    err = one_line_error(cli("compare", str(runs["plain"]), str(runs["wide"]), "--out", str(tmp_path / "c")))
    assert err == (
        f"the runs differ in equivalence_margin ({runs['plain']}/results.json: config.equivalence_margin: unset, "
        f"{runs['wide']}/results.json: config.equivalence_margin: 0.4); a comparison would take one run's: pass "
        "--equivalence-margin to decide under one stated margin"
    )
    assert not (tmp_path / "c").exists()
    # in the other order too: never the first run's margin silently
    assert "differ in equivalence_margin" in one_line_error(
        cli("compare", str(runs["wide"]), str(runs["plain"]), "--out", str(tmp_path / "c"))
    )


def test_a_stated_margin_decides_both_orders_alike(runs: dict[str, Path], tmp_path: Path, cli: Any) -> None:
    margins = []
    for k, pair in enumerate(((runs["plain"], runs["wide"]), (runs["wide"], runs["plain"]))):
        out = tmp_path / f"c{k}"
        got: Outcome = cli("compare", *map(str, pair), "--out", str(out), "--equivalence-margin", "0.05")
        assert got.rc == 0, got.err
        analysis = json.loads((out / "analysis.json").read_text())["analysis"]
        margins.append({k: v.get("margin") for k, v in analysis["ranking"].items()})
    assert margins[0] == margins[1] and margins[0] and set(margins[0].values()) == {0.05}, margins
    bad = ["compare", str(runs["plain"]), str(runs["wide"]), "--out", str(tmp_path / "c"), "--equivalence-margin"]
    assert "--equivalence-margin -1.0: a margin is a finite number >= 0" in one_line_error(cli(*bad, "-1"))


def test_mixed_tie_rules_are_refused(runs: dict[str, Path], tmp_path: Path, cli: Any) -> None:
    err = one_line_error(cli("compare", str(runs["plain"]), str(runs["half"]), "--out", str(tmp_path / "c")))
    assert err == (
        f"the runs differ in tie_policy ({runs['plain']}/results.json: config.tie_policy: strict, "
        f"{runs['half']}/results.json: config.tie_policy: half); their cells count a tie differently: rerun one of "
        "them with the other's rule"
    )


def test_a_dangling_link_as_out_is_a_clear_error(runs: dict[str, Path], tmp_path: Path, cli: Any) -> None:
    link = tmp_path / "lnk"
    os.symlink(tmp_path / "gone", link)
    err = one_line_error(cli("compare", str(runs["plain"]), "--out", str(link)))
    assert err == (
        f"--out {link}: {link} is a link to {tmp_path / 'gone'}, which does not exist; name a folder for the "
        "comparison (or create the link's target)"
    )
    assert not (tmp_path / "gone").exists()
