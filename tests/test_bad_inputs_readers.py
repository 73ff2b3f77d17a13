"""The third bad-input corpus: the readers and front doors that landed last (``perbench plan``, ``compare``, the
shared unit cache, ``upstream_benchmarks``, ``--set``, run names, RL recipes), through the command line.

Every case ends in a located one-line error with exit code 2, a counted skip, or the correct result; no
traceback, no hang, nothing written outside the run directory (the ``cli`` and ``area`` fixtures of the second
corpus check all three). The classes are those of docs/reliability.md, third pass.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from perbench.cache import pack_arrays, unpack_arrays
from perbench.sealed import HEAD
from tests import test_bad_inputs_cli as corpus
from tests.test_bad_inputs_cli import (
    BASE,
    RUN_DIR_CASES,
    Area,
    Outcome,
    _copy,
    baseline_config,
    jsonl,
    one_line_error,
    row,
    write_config,
)

# the second corpus's fixtures: a sealed area (nothing written outside runs/), the CLI under an alarm, finished runs
area, cli, finished = corpus.area, corpus.cli, corpus.finished

CLI = Callable[..., Outcome]


def _base(area: Area, **extra: Any) -> Path:
    src = area["in"] / "d.jsonl"
    if not src.exists():
        src.write_bytes(jsonl(BASE))
    return write_config(area["in"] / "run.yaml", baseline_config(area, src, **extra))


def line_of(cfg: Path, key: str) -> int:
    """The line of a top-level ``key`` in a config file."""
    return next(i for i, line in enumerate(cfg.read_text().splitlines(), 1) if line.startswith(f"{key}:"))


def _results(area: Area, name: str = "r") -> dict[str, Any]:
    out: dict[str, Any] = json.loads((area["runs"] / name / "results.json").read_text())
    return out


# ------------------------------------------------------------------- 1. one reader for every run-directory command
@pytest.mark.parametrize("case", RUN_DIR_CASES, ids=[c.id for c in RUN_DIR_CASES])
def test_plan_reads_a_run_directory_as_report_does(case: Any, finished: dict[str, Path], area: Area, cli: CLI) -> None:
    """Class 1: every damaged run directory that report and compare refuse, plan refuses with the same line."""
    a, _ = _copy(finished, area["runs"])
    case.damage(a)
    report = one_line_error(cli("report", str(a)))
    assert one_line_error(cli("plan", str(a))) == report


@dataclass(frozen=True)
class ResultsEdit:
    id: str
    klass: int
    edit: Callable[[dict[str, Any]], None]
    #: the error after ``perbench: error: {a}/``
    error: str


RESULTS_EDITS = [
    ResultsEdit(
        "schema_version_unknown",
        13,
        lambda r: r.update(schema_version=99),
        "results.json: field 'schema_version': 99 is a schema this version does not know (it reads up to 2)",
    ),
    ResultsEdit(
        "schema_version_a_string",
        13,
        lambda r: r.update(schema_version="1"),
        "results.json: field 'schema_version': expected a schema version (an integer ≥ 1), got \"1\"",
    ),
    ResultsEdit(
        "analysis_not_an_object", 1, lambda r: r.update(analysis=[]), "results.json: field 'analysis': expected a JSON"
    ),
    ResultsEdit(
        "roles_not_strings",
        1,
        lambda r: r["analysis"].update(roles={"length": 1}),
        "results.json: field 'analysis.roles': expected an object of method → role (strings)",
    ),
    ResultsEdit(
        "cells_record_removed",
        7,
        lambda r: r.pop("cells"),
        "cells.jsonl: results.json (of the current schema) has no record of this file's count and digest",
    ),
    ResultsEdit(
        "bootstrap_of_a_billion",
        9,
        lambda r: r["config"].update(bootstrap=10**9),
        "results.json: field 'config.bootstrap': expected an integer in [0, 100000], got 1000000000",
    ),
    ResultsEdit(
        "margin_of_five",
        4,
        lambda r: r["config"].update(equivalence_margin=5),
        "results.json: field 'config.equivalence_margin': expected a margin in the metric's own units in [0, 1) "
        "(0.05 = 5 points of a proportion), got 5.0 (did you mean 0.05, i.e. 5 points?)",
    ),
    ResultsEdit(
        "negative_margin",
        13,
        lambda r: r["config"].update(equivalence_margin=-0.1),
        "results.json: field 'config.equivalence_margin': expected a margin in the metric's own units",
    ),
]


@pytest.mark.parametrize("case", RESULTS_EDITS, ids=[c.id for c in RESULTS_EDITS])
def test_results_fields_are_checked_by_every_reader(
    case: ResultsEdit, finished: dict[str, Path], area: Area, cli: CLI
) -> None:
    """Classes 1, 4, 7, 9, 13: report, compare (the damaged run second of two: the file is named) and plan read
    results.json through one reader; the Python API (read_cells) too."""
    from perbench.data.rows import DataError
    from perbench.runner.cells import read_cells

    a, b = _copy(finished, area["runs"])
    results = json.loads((a / "results.json").read_text())
    case.edit(results)
    (a / "results.json").write_text(json.dumps(results))
    expected = f"{a}/{case.error}"
    for argv in (("report", str(a)), ("compare", str(b), str(a), "--out", str(area["runs"] / "cmp")), ("plan", str(a))):
        message = one_line_error(cli(*argv))
        assert message.startswith(expected), (argv, message)
    with pytest.raises(DataError) as raised:
        read_cells(a / "cells.jsonl")
    assert str(raised.value).startswith(expected)
    assert not (area["runs"] / "cmp").exists()


def test_an_older_schema_without_the_cells_record_is_read_with_a_note(
    finished: dict[str, Path], area: Area, cli: CLI
) -> None:
    """Class 7: schema 1 did not always record the cells file: such a run is read, and the report says the file
    could not be checked; the current schema without the record is refused (``RESULTS_EDITS``)."""
    a, _ = _copy(finished, area["runs"])
    results = json.loads((a / "results.json").read_text())
    del results["cells"]
    (a / "results.json").write_text(json.dumps({**results, "schema_version": 1}))
    assert cli("report", str(a)).rc == 0
    assert "records no digest of it (written by an older version): not checked" in (a / "report.html").read_text()


# ------------------------------------------------------------------------------- 2. and 4. the planner's requests
def test_the_planner_refuses_degenerate_requests_in_its_units(finished: dict[str, Path], area: Area, cli: CLI) -> None:
    """Class 2: --effect 0 is refused (it would print 'differ by exactly 0'); class 4: a margin or effect beyond
    the range of a proportion is refused, naming its units (points, like --effect)."""
    a, _ = _copy(finished, area["runs"])
    metric = ["--metric", "rm_acc_seen"]
    with pytest.raises(SystemExit) as stop:  # refused by the flag's own type, as argparse refuses: exit 2
        cli("plan", str(a), "--effect", "0", *metric)
    assert stop.value.code == 2
    assert one_line_error(cli("plan", str(a), "--margin", "150", *metric)) == (
        "plan: --margin 150 points: an equivalence margin lies in [0, 100) points for rm_acc_seen"
    )
    ok = cli("plan", str(a), "--effect", "5", *metric)
    assert ok.rc == 0 and "rm_acc_seen" in ok.out, ok


# --------------------------------------------------------------------------------------------- 3. --set key=null
def test_set_null_resets_a_key_or_is_refused_with_the_reason(area: Area, cli: CLI) -> None:
    cfg = _base(area, seeds=[0, 1], max_test_prompts=4)
    ran = cli("run", str(cfg), "--set", "seeds=null", "--set", "max_test_prompts=null")
    assert ran.rc == 0, ran
    results = _results(area)
    assert results["config"]["seeds"] is None and results["config"]["max_test_prompts"] is None
    assert yaml.safe_load((area["runs"] / "r" / "config.yaml").read_text())["seeds"] is None
    assert not (area["runs"] / "r-seed0").exists()  # one run, not one per seed
    assert one_line_error(cli("run", str(cfg), "--set", "bootstrap=null")) == (
        "command line: bootstrap: expected an integer in [0, 100000], got null"
    )


# ------------------------------------------------------------------------------------------ 4. the config's margin
def test_equivalence_margin_is_bounded_in_the_metrics_units(area: Area, cli: CLI) -> None:
    cfg = _base(area, equivalence_margin=5)
    assert one_line_error(cli("run", str(cfg))) == (
        f"{cfg}:{line_of(cfg, 'equivalence_margin')}: equivalence_margin: expected a margin in the metric's own "
        "units in [0, 1) (0.05 = 5 points of a proportion), got 5 (did you mean 0.05, i.e. 5 points?)"
    )
    assert not (area["runs"] / "r").exists()


# ----------------------------------------------------------------------------- 5. extras report what they skipped
def test_an_extra_benchmark_reports_its_skips_on_the_cli_in_results_and_the_report(area: Area, cli: CLI) -> None:
    extra = area["in"] / "general.jsonl"
    extra.write_bytes(jsonl([*BASE, row("u1", "Hat?", "A red hat.", "\u200b")]))  # only a zero-width space
    cfg = _base(area, upstream_benchmarks=[{"name": "file", "source": str(extra)}])
    ran = cli("run", str(cfg))
    assert ran.rc == 0, ran
    assert "Skipped while loading general: empty_response: 1 pair(s)\n" in ran.out, ran.out
    skipped = _results(area)["upstream_benchmarks"]["general"]["skipped"]
    assert skipped["total"] == 1 and skipped["counts"] == {"empty_response": 1}
    assert [e.rsplit("/", 1)[-1] for e in skipped["examples"]["empty_response"]] == ["general.jsonl:7"]
    assert "upstream benchmark general: 6 pairs, 1 skipped" in (area["runs"] / "r" / "report.html").read_text()


# ------------------------------------------------------------------------------- 6. checksums on cached unit values
def _alter(raw: bytes) -> bytes:
    """The stored value with a different payload that still decodes, under the old checksum."""
    head, payload = raw[:HEAD], raw[HEAD:]
    if payload.startswith(b"PK"):
        arrays = unpack_arrays(payload)
        changed = {k: (v + 1 if v.dtype.kind == "f" else v) for k, v in arrays.items()}
        return head + pack_arrays(**changed)
    value = json.loads(payload)
    return head + json.dumps({"altered": True, "was": value}).encode()


def test_an_altered_unit_value_is_set_aside_and_recomputed(
    area: Area, cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERBENCH_CACHE", str(area["runs"] / "cache"))
    cfg = _base(area)
    assert cli("run", str(cfg)).rc == 0
    first = _results(area)["upstream"]
    altered = 0
    for path in (area["runs"] / "r" / "units.sqlite", area["runs"] / "cache" / "units.sqlite"):
        db = sqlite3.connect(path)
        rows = db.execute("SELECT key, value FROM kv").fetchall()
        with db:
            db.executemany("UPDATE kv SET value = ? WHERE key = ?", [(_alter(bytes(v)), k) for k, v in rows])
        altered += len(rows)
        db.close()
    assert altered > 0
    again = cli("run", str(cfg))
    assert again.rc == 0 and "is not the one stored (its checksum does not match its key and bytes" in again.err, again
    assert "set it aside (recomputed)" in again.err
    assert _results(area)["upstream"] == first  # recomputed, not reused
    db = sqlite3.connect(area["runs"] / "r" / "units.sqlite")
    assert db.execute("SELECT COUNT(*) FROM set_aside").fetchone()[0] > 0  # kept for inspection
    db.close()


# ---------------------------------------------------------------------------- 7. compare never writes into a run
def test_compare_never_writes_into_a_run_directory(finished: dict[str, Path], area: Area, cli: CLI) -> None:
    a, b = _copy(finished, area["runs"])
    before = {p.name: p.read_bytes() for p in a.iterdir() if p.is_file()}
    assert one_line_error(cli("compare", str(a), str(b), "--out", str(a))) == (
        f"--out {a}: is a run directory (it holds results.json); a comparison never writes into a run: name another "
        "folder"
    )
    assert one_line_error(cli("compare", str(a), str(b), "--out", str(a / "cmp"))).startswith(
        f"--out {a / 'cmp'}: is inside {a}, which is a run directory"
    )
    runs_named_compare = area["runs"] / "compare"  # the default folder, when a run is called `compare`
    shutil.copytree(a, runs_named_compare, symlinks=True)
    assert "is a run directory" in one_line_error(cli("compare", str(a), str(b)))
    assert {p.name: p.read_bytes() for p in a.iterdir() if p.is_file()} == before and not (a / "cmp").exists()


# --------------------------------------------------------------------------- 8. RL recipes checked before any work
RL_CASES = [
    ("rl_negative_seed", {"seeds": [-1, 2]}, "rl.seeds: every seed must be an integer in [0, 4294967295], got -1"),
    ("rl_seed_too_big", {"seed": 2**32}, "rl.seed: must be an integer in [0, 4294967295], got 4294967296"),
    (
        "rl_tokens_past_the_context",
        {"max_new_tokens": 5000},
        "rl.max_new_tokens: 5000 new tokens after prompts of up to 512 (rl.max_prompt_tokens) cannot fit the context "
        "of tiny-random (2048 positions)",
    ),
    (
        "rl_lora_target_the_policy_lacks",
        {"lora_target_modules": ["c_attn", "q_proj"]},
        "rl.lora_target_modules: 'c_attn' name(s) no module of tiny-random, so LoRA would have nothing to adapt "
        "there; its modules: ",
    ),
]


@pytest.mark.parametrize(("rl", "error"), [c[1:] for c in RL_CASES], ids=[c[0] for c in RL_CASES])
def test_rl_recipes_are_checked_against_the_policy_before_any_work(
    rl: dict[str, Any], error: str, area: Area, cli: CLI
) -> None:
    cfg = _base(area, methods=["global_bt"], policy="tiny-random", rm_backbone="tiny-random", rl=rl)
    for argv in (("run", str(cfg)), ("validate", "--config", str(cfg))):
        out = cli(*argv)
        message = one_line_error(out) if out.rc == 2 else out.out
        assert f"{cfg}:" in message and error in message, (argv, out)
    assert not (area["runs"] / "r").exists()


# ------------------------------------------------------------------------------------- 9. bounded resampling
def test_resampling_counts_are_bounded_before_anything_is_allocated(
    finished: dict[str, Path], area: Area, cli: CLI
) -> None:
    a, b = _copy(finished, area["runs"])
    cfg = _base(area, bootstrap=10**9)
    out = str(area["runs"] / "cmp")
    assert one_line_error(cli("compare", str(a), str(b), "--n-boot", "1000000000", "--out", out)) == (
        "--n-boot 1000000000: bootstrap resamples are an integer in [0, 100000]"
    )
    assert one_line_error(cli("run", str(cfg))) == (
        f"{cfg}:{line_of(cfg, 'bootstrap')}: bootstrap: expected an integer in [0, 100000], got 1000000000"
    )
    assert not (area["runs"] / "cmp").exists() and not (area["runs"] / "r").exists()


# -------------------------------------------------------------- 11. a local path that looks like a hub id, offline
def test_a_missing_local_path_that_looks_like_a_hub_id(area: Area, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """``data/pairs`` typed for ``data/pairs.jsonl`` has the shape of a hub id; offline, the hub cannot give it."""
    (area["in"] / "data").mkdir()
    (area["in"] / "data" / "pairs.jsonl").write_bytes(jsonl(BASE))
    cfg = write_config(area["in"] / "run.yaml", baseline_config(area, Path("data/pairs")))
    absolute = area["in"] / "data" / "pairs"  # not hub-shaped (an absolute path): the same hint
    other = write_config(area["in"] / "other.yaml", baseline_config(area, absolute))
    monkeypatch.chdir(area["in"])
    message = one_line_error(cli("run", str(cfg)))
    assert message.startswith("data/pairs: no such file or folder, and not a dataset the hub can give (offline): ")
    assert message.endswith("Did you mean data/pairs.jsonl?"), message
    validated = cli("validate", "--config", str(cfg))
    assert validated.rc == 1 and message in validated.out
    assert one_line_error(cli("run", str(other))) == (
        f"{absolute}: no such file or folder (and not a hub id 'org/name'). Did you mean {absolute}.jsonl?"
    )
    assert not (area["runs"] / "r").exists()


# ------------------------------------------------------------------------------------ 12. one emptiness rule
@pytest.mark.parametrize("blank", ["\u200b", " \u200b\u2060 ", "\ufeff"])
def test_a_response_of_invisible_characters_is_empty(blank: str, area: Area, cli: CLI) -> None:
    src = area["in"] / "d.jsonl"
    src.write_bytes(jsonl([*BASE, row("u1", "Hat?", "A red hat.", blank)]))
    cfg = _base(area)
    validated = cli("validate", "--config", str(cfg))
    assert validated.rc == 0 and "empty_response" in validated.out, validated.out
    assert cli("run", str(cfg)).rc == 0
    assert _results(area)["benchmark"]["skipped"]["counts"] == {"empty_response": 1}


# ---------------------------------------------------------------------------------------------- 13. smaller ones
def test_compare_seed_names_its_flag(finished: dict[str, Path], area: Area, cli: CLI) -> None:
    a, b = _copy(finished, area["runs"])
    assert one_line_error(cli("compare", str(a), str(b), "--seed", "-1", "--out", str(area["runs"] / "cmp"))) == (
        "--seed -1: the bootstrap seed is an integer in [0, 4294967295]"
    )


def test_run_name_over_the_limit_once_a_seed_suffix_is_added(area: Area, cli: CLI) -> None:
    cfg = _base(area, run_name="r" * 250, seeds=[0, 10])
    assert one_line_error(cli("run", str(cfg))) == (
        f"{cfg}:{line_of(cfg, 'run_name')}: run_name: with seeds each seed's run folder is RUN_NAME-seedN: 257 "
        "bytes for seed 10; file systems allow at most 255: choose a shorter run_name"
    )


def test_out_dir_with_a_tilde_is_the_home_folder(area: Area, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    home = area["runs"] / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(area["in"])  # a folder named `~` would appear here (the fixture checks nothing does)
    cfg = _base(area)
    data = yaml.safe_load(cfg.read_text())
    cfg = write_config(cfg, {**data, "out_dir": "~/x"})
    assert cli("run", str(cfg)).rc == 0
    assert (home / "x" / "r" / "results.json").is_file()


def test_an_empty_perbench_cache_is_an_error(area: Area, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERBENCH_CACHE", "")
    assert one_line_error(cli("run", str(_base(area)))).startswith(
        "PERBENCH_CACHE is set but empty: set it to a folder for the shared cache, or unset it"
    )
    assert not (area["runs"] / "r").exists()


def test_a_negative_penalty_in_a_systems_grid(area: Area, cli: CLI) -> None:
    cfg = _base(area, methods=["global_bt"], systems={"params": {"global_bt": {"l2": [0.1, -1.0]}}})
    message = one_line_error(cli("run", str(cfg)))
    assert message.startswith(f"{cfg}:") and message.endswith(
        ": systems.params.global_bt.l2: expected a number ≥ 0, got -1.0"
    )


def test_many_seeds_do_not_print_the_whole_list(area: Area, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERBENCH_QUIET", "0")
    seeds = list(range(3))
    ran = cli("run", str(_base(area, seeds=seeds)))
    assert ran.rc == 0 and "seed 2 (3 of 3 seeds)" in ran.out and str(seeds) not in ran.out, ran.out


def test_the_third_corpus_covers_every_class() -> None:
    klasses = {c.klass for c in RESULTS_EDITS} | {1, 2, 3, 5, 6, 8, 11, 12}
    assert klasses >= set(range(1, 14)) - {10}  # 10 (Ray connections) is tests/test_executors.py's
    assert np.isfinite(1.0)
