"""Bad run configs and bad command lines: each is refused before anything loads, with a ConfigError whose text
names the file, line, key, what is allowed and (for misspelt names) a "Did you mean"; the CLI prints that text
as one line on stderr with exit code 2, and only ``--debug`` shows the traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from perbench import registry
from perbench.cli import main
from perbench.config import Component, MissingConfigError, RunConfig
from perbench.errors import ConfigError, PerbenchError
from perbench.rewards.base import RMContext, ScoreItem
from perbench.rewards.baselines import LengthRM, RandomRM
from perbench.runner.preflight import check_config


def accepted(reg: registry.Registry[object], name: str) -> str:
    """The "Accepted: …" list of a component, read from its signature as the config check does."""
    params = reg.params(name)
    assert params is not None
    return ", ".join(params)


MODEL_FORMS = (
    "A model is a bundled alias (smollm2, smollm2-135m, smollm2-135m-instruct), tiny-random[:SEED], "
    "a local folder or .gguf file, or a hub id org/name[@revision]"
)
RUN_NAME = (
    "is not one plain folder name: run_name names a folder inside out_dir, so it cannot be empty, '.' or '..', "
    "absolute, or contain / or \\ (set out_dir to write elsewhere)"
)
REMOTE = (
    "trust_remote_code: true would run the Python files shipped with 'org/rm'; allow it explicitly with "
    "`perbench run --trust-remote-code` (Python: perbench.rewards.hub_rm.allow_remote_code())"
)


@dataclass(frozen=True)
class Case:
    id: str
    yaml: str
    #: the message after ``FILE:`` — ``LINE: KEY: problem`` (a callable where it lists a signature)
    text: str | Callable[[], str]

    def expected(self, path: Path) -> str:
        text = self.text() if callable(self.text) else self.text
        return f"{path}:{text}"


CASES = [
    Case(
        "string_for_int",
        "max_new_tokens: '96'\n",
        "1: max_new_tokens: expected an integer ≥ 1, got the string '96' (write numbers without quotes)",
    ),
    Case(
        "negative_max_new_tokens", "seed: 1\nmax_new_tokens: -5\n", "2: max_new_tokens: expected an integer ≥ 1, got -5"
    ),
    Case(
        "negative_k",
        "decoders:\n  - zero_shot\n  - name: args\n    k: -1\n",
        "4: decoders[1].k: expected an integer ≥ 1, got -1",
    ),
    Case("zero_n", "decoders:\n  - {name: best_of_n, n: 0}\n", "2: decoders[0].n: expected an integer ≥ 1, got 0"),
    Case("negative_bootstrap", "bootstrap: -1\n", "1: bootstrap: expected an integer in [0, 100000], got -1"),
    Case("device_tpu", "device: tpu\n", "1: device: 'tpu' is not a device; allowed: auto, cpu, cuda, cuda:N, mps"),
    Case(
        "dtype_float64",
        "dtype: float64\n",
        "1: dtype: 'float64' is not a dtype; allowed: auto, float32, bfloat16, float16",
    ),
    Case(
        "yaml_syntax_error",
        "methods: [global_bt\nseed: 1\n",
        "2: YAML syntax error: while parsing a flow sequence expected ',' or ']', but got ':' (column 5)",
    ),
    Case(
        "misspelt_decoder_param",
        "decoders:\n  - args: {kk: 3}\n",
        lambda: (
            "2: decoders[0].args.kk: decoder 'args': unknown parameter 'kk'. Did you mean 'k'? "
            f"Accepted: {accepted(registry.decoders, 'args')}"
        ),
    ),
    Case(
        "unknown_method_param",
        "methods:\n  - global_bt\n  - {name: global_bt_v2, stepz: 3}\n",
        lambda: (
            "3: methods[1].stepz: method 'global_bt_v2': unknown parameter 'stepz'. Did you mean "
            f"'steps'? Accepted: {accepted(registry.reward_models, 'global_bt_v2')}"
        ),
    ),
    Case("nan_weight", "decoders:\n  - {name: args, w: .nan}\n", "2: decoders[0].w: expected a finite number, got nan"),
    Case("inf_pa_weight", "pa_weight: .inf\n", "1: pa_weight: expected a finite number, got inf"),
    Case(
        "guide_not_in_methods",
        "methods: [global_bt]\nguide_with: [mpu]\n",
        "2: guide_with[0]: 'mpu' is not one of this config's methods or baselines, so it would guide nothing. "
        "Allowed: global_bt, length, random",
    ),
    Case(
        "duplicate_key", "seed: 1\nshots: 3\nseed: 2\n", "3: duplicate key 'seed' (first on line 1); give each key once"
    ),
    Case("smollm3", "policy: smollm3\n", f"1: policy: unknown model 'smollm3'. Did you mean 'smollm2'? {MODEL_FORMS}"),
    Case(
        "misspelt_policy_in_list",
        "policies:\n  - smollm2\n  - smolm2\n",
        f"3: policies[1]: unknown model 'smolm2'. Did you mean 'smollm2'? {MODEL_FORMS}",
    ),
    Case("tiny_random_seed", "judge: tiny-random:x\n", "1: judge: tiny-random:SEED needs an integer seed, got 'x'"),
    Case("run_name_parent", "run_name: ../x\n", f"1: run_name: '../x' {RUN_NAME}"),
    Case("run_name_absolute", "run_name: /abs\n", f"1: run_name: '/abs' {RUN_NAME}"),
    Case(
        "trust_remote_code_without_flag",
        "methods:\n  - global_bt\n  - {name: hub_rm, model: org/rm, trust_remote_code: true}\n",
        f"3: methods[1].trust_remote_code: {REMOTE}",
    ),
    Case(
        "lore_reg_without_a_reference",
        "methods:\n  - global_bt\n  - lore_reg\n",
        "3: methods[1]: lore_reg needs a reference reward model that was not fit on these pairs, given as exactly "
        "one of anchor_state (a saved global_bt state, .npz, on this RM backbone's features) or anchor_rm (a hub "
        "reward model id or folder); neither was given. Anchored on global_bt fit on the same pairs it becomes a "
        "copy of global_bt.",
    ),
    Case("unknown_key", "seed: 0\nmax_new_token: 3\n", "2: max_new_token: unknown key. Did you mean 'max_new_tokens'?"),
    Case(
        "literal",
        "tie_policy: halves\n",
        "1: tie_policy: expected one of 'strict', 'half', got the string 'halves'",
    ),
    Case(
        "quoted_bool",
        "bertscore: 'yes'\n",
        "1: bertscore: expected true or false, got the string 'yes' (write true or false without quotes)",
    ),
    Case("block_list_item", "shot_curve:\n  - 1\n  - 0\n", "3: shot_curve[1]: expected an integer ≥ 1, got 0"),
    Case("zero_max_test_prompts", "max_test_prompts: 0\n", "1: max_test_prompts: expected an integer ≥ 1, got 0"),
    Case("duplicate_seeds", "seeds: [1, 2, 1]\n", "1: seeds: seed 1 is listed twice"),
    Case(
        "seed_too_large",
        "seed: 4294967296\n",
        "1: seed: expected an integer in [0, 4294967295], got 4294967296",
    ),
    Case(
        "methods_not_a_list",
        "methods: global_bt\n",
        "1: methods: expected a list of methods, got the string 'global_bt'",
    ),
    Case(
        "length_unit",
        "methods: [{name: length, unit: bytes}]\nbaselines: [random]\n",
        "1: methods[0].unit: expected one of 'words', 'chars', got the string 'bytes'",
    ),
    Case(
        "benchmark_needs_source",
        "benchmark: file\n",
        lambda: (
            "1: benchmark: benchmark 'file' needs source: give it in the config (benchmark: {name: file, "
            "source: ...}) or with --set 'benchmark={name: file, source: ...}'. "
            f"Accepted: {accepted(registry.benchmarks, 'file')}"
        ),
    ),
    Case(
        "benchmark_param_type",
        "benchmark:\n  name: file\n  source: pairs.jsonl\n  unseen_fraction: half\n",
        "4: benchmark.unseen_fraction: expected a finite number, got the string 'half'",
    ),
    Case(
        "verdict_metric_form",
        "verdict_metric: args\n",
        "1: verdict_metric: expected DECODER:QUALITY (e.g. args:rubric_satisfaction), got 'args'",
    ),
    Case(
        "resources_unknown_kind",
        "resources:\n  fit: {num_gpus: 1}\n  decoding: {num_cpus: 2}\n",
        "3: resources.decoding: unknown kind of unit 'decoding'. Did you mean 'decode'? "
        "Allowed: features, fit, score, decode, rl",
    ),
    Case(
        "resources_unknown_field",
        "resources:\n  fit:\n    num_gpus: 1\n    gpus: 1\n",
        "4: resources.fit.gpus: unknown field 'gpus'. Did you mean 'num_gpus'? Allowed: num_cpus, num_gpus, memory_gb",
    ),
    Case(
        "resources_negative",
        "resources:\n  score:\n    num_cpus: -1\n",
        "3: resources.score.num_cpus: expected a finite number ≥ 0, got -1",
    ),
    Case(
        "resources_zero_memory",
        "resources:\n  rl: {memory_gb: 0}\n",
        "2: resources.rl.memory_gb: expected a finite number > 0, got 0",
    ),
    Case(
        "not_a_mapping",
        "- seed: 1\n",
        "1: a run config is a mapping of keys (benchmark:, methods:, …), got a list [{'seed': 1}]",
    ),
]


@pytest.fixture(autouse=True)
def no_remote_code() -> Iterator[None]:
    from perbench.rewards.hub_rm import allow_remote_code, remote_code_allowed

    assert not remote_code_allowed()
    yield
    allow_remote_code(False)


def write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(case.yaml, encoding="utf-8")
    return path


def test_at_least_25_cases() -> None:
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


def checked(path: Path) -> RunConfig:
    """The config as a run checks it: its own checks, then the rooms' rules in the preflight."""
    cfg = RunConfig.from_yaml(path)
    check_config(cfg)
    return cfg


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_from_yaml_names_file_line_key(case: Case, tmp_path: Path) -> None:
    path = write(tmp_path, case)
    with pytest.raises(ConfigError) as e:
        checked(path)
    assert str(e.value) == case.expected(path)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_prints_one_line_exit_2(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, case)
    assert main(["run", str(path), "--out-dir", str(tmp_path / "runs")]) == 2
    out, err = capsys.readouterr()
    assert err == f"perbench: error: {case.expected(path)}\n" and out == ""
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("case", CASES[:3] + CASES[7:9], ids=[c.id for c in CASES[:3] + CASES[7:9]])
def test_debug_reraises_for_the_traceback(case: Case, tmp_path: Path) -> None:
    path = write(tmp_path, case)
    for argv in (["--debug", "run", str(path)], ["run", str(path), "--debug"]):
        with pytest.raises(ConfigError) as e:
            main(argv)
        assert str(e.value) == case.expected(path)


def test_debug_prints_a_traceback_in_a_real_process(tmp_path: Path) -> None:
    path = write(tmp_path, CASES[5])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [sys.executable, "-m", "perbench.cli"]
    plain = subprocess.run([*cmd, "run", str(path)], capture_output=True, text=True, env=env)
    assert plain.returncode == 2 and plain.stderr == f"perbench: error: {CASES[5].expected(path)}\n"
    debug = subprocess.run([*cmd, "--debug", "run", str(path)], capture_output=True, text=True, env=env)
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().endswith(f"ConfigError: {CASES[5].expected(path)}")


# ------------------------------------------------------------------------------------ files and front doors
def test_directory_as_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = f"{tmp_path}: is a directory; a run config is a YAML file"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        RunConfig.from_yaml(tmp_path)
    assert main(["run", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"perbench: error: {expected}\n"


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(MissingConfigError, match=f"^{re.escape(f'{missing}: no such config file')}$"):
        RunConfig.from_yaml(missing)
    assert main(["run", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"perbench: error: config {str(missing)!r} is neither a file nor an embedded config "
        "(embedded: all_methods, decoders, default, rl, rl_full, scale)\n"
    )


def test_empty_file_means_the_embedded_default(tmp_path: Path) -> None:
    default = RunConfig.default().to_dict()
    for text in ("", "# only a comment\n", "{}\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        assert RunConfig.from_yaml(path).to_dict() == default


def test_python_front_door_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"^RunConfig: max_new_tokens: expected an integer ≥ 1, got -1$"):
        RunConfig(max_new_tokens=-1)
    with pytest.raises(ConfigError, match=r"^RunConfig: run_name: '/abs' is not one plain folder name"):
        RunConfig(run_name="/abs")
    with pytest.raises(ConfigError, match=r"^config: device: 'tpu' is not a device"):
        RunConfig.from_dict({"device": "tpu"})
    with pytest.raises(ConfigError, match=r"^overrides: max_new_tokens: expected an integer ≥ 1, got the string '5'"):
        RunConfig.default().override(max_new_tokens="5")
    with pytest.raises(ConfigError, match=r"^overrides: shot: unknown key\. Did you mean 'shots'"):
        RunConfig.default().override(shot=3)
    assert RunConfig.from_dict({"pa_weight": 1, "device": "cuda:1", "dtype": "bf16"}).pa_weight == 1


def test_yaml_numbers_in_exponent_form_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("pa_weight: 1e-2\ndecoders: [{name: args, w: 2E3}]\n")
    cfg = RunConfig.from_yaml(path)
    assert cfg.pa_weight == 0.01 and cfg.decoders[0].params["w"] == 2000.0


def test_valid_configs_keep_their_result_hash(tmp_path: Path) -> None:
    """The checks change no value: the embedded configs hash as before (runs resume into the same folder)."""
    assert RunConfig.default().result_hash() == "7a7a6315f53e"  # changes only when the default config does
    path = tmp_path / "c.yaml"
    path.write_text("methods: [global_bt, {name: length, unit: chars}]\nguide_with: ['length(unit=chars)']\n")
    cfg = RunConfig.from_yaml(path)
    assert [m.label() for m in cfg.methods] == ["global_bt", "length(unit=chars)"]


def test_a_parameter_called_name_survives_every_front_door(tmp_path: Path) -> None:
    """The file loader's own ``name`` (the benchmark's name) next to the registry name ``file``: a copy of the config
    (--set, config.yaml) keeps both instead of reading the parameter as the registry name."""
    path = tmp_path / "c.yaml"
    path.write_text("upstream_benchmarks: [{file: {source: general.jsonl, name: general}}]\n")
    cfg = RunConfig.from_yaml(path)
    again = cfg.override("command line", seed=1)
    want = Component("file", {"source": "general.jsonl", "name": "general"})
    assert cfg.upstream_benchmarks == again.upstream_benchmarks == [want]
    assert RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(cfg.to_dict()))).upstream_benchmarks == [want]


# --------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["run", "--policy", "smollm3"],
            f"command line: policy: unknown model 'smollm3'. Did you mean 'smollm2'? {MODEL_FORMS}",
        ),
        (["run", "--set", "run_name=/abs"], f"command line: run_name: '/abs' {RUN_NAME}"),
        (["run", "--max-new-tokens", "-3"], "command line: max_new_tokens: expected an integer ≥ 1, got -3"),
        (["run", "--set", "seed"], "--set expects key=value, got 'seed'"),
        (
            ["run", "--set", "seed=[1"],
            "--set seed:1: YAML syntax error: while parsing a flow sequence "
            "expected ',' or ']', but got '<stream end>' (column 3)",
        ),
        (
            ["list", "method"],
            "list: unknown kind 'method'. Did you mean 'methods'? Choose from benchmarks, "
            "methods, decoders, metrics, executors",
        ),
        (["validate"], "validate: give the data FILE, or --config RUN.yaml whose `file` benchmark has a source"),
    ],
)
def test_cli_errors(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"perbench: error: {expected}\n"


def test_registry_names_are_perbench_errors() -> None:
    with pytest.raises(PerbenchError, match="Did you mean 'global_bt'"):
        registry.reward_models.get("global_tb")


def test_validate_passes_only_the_options_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import perbench.data.loaders as loaders
    from perbench.runner import preflight

    seen: list[tuple[str, dict[str, object]]] = []

    def fake(source: str, **options: object) -> dict[str, object]:
        seen.append((source, options))
        return {"ok": True, "source": source}

    def fake_for_run(cfg: RunConfig, source: str, options: dict[str, object]) -> dict[str, object]:
        return fake(source, **options)

    monkeypatch.setattr(loaders, "validate_file", fake)
    monkeypatch.setattr(preflight, "validate_for_run", fake_for_run)
    monkeypatch.setattr(loaders, "format_validation", lambda report: "checked")
    data = tmp_path / "pairs.jsonl"
    assert main(["validate", str(data)]) == 0
    argv = ["validate", str(data), "--unseen-users", "a, b", "--no-dedup", "--on-error", "skip", "--map", "user_id=u"]
    assert main([*argv, "--test-fraction", "0.25", "--default-user", "me", "--max-chars", "80"]) == 0
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"benchmark: {{name: file, source: {data}, unseen_fraction: 0.5, dedup: false}}\n")
    assert main(["validate", "--config", str(cfg)]) == 0
    assert main(["validate", "--config", str(cfg), "--unseen-fraction", "0.1"]) == 0
    assert seen == [
        (str(data), {}),
        (
            str(data),
            {
                "mapping": "user_id=u",
                "on_error": "skip",
                "dedup": False,
                "unseen_users": ["a", "b"],
                "test_fraction": 0.25,
                "default_user": "me",
                "max_chars": 80,
            },
        ),
        (str(data), {"unseen_fraction": 0.5, "dedup": False}),
        (str(data), {"unseen_fraction": 0.1, "dedup": False}),
    ]
    other = tmp_path / "rmgap.yaml"  # a named benchmark: its own loader and the run's pre-run checks
    other.write_text(f"benchmark: {{name: rmgap, source: {tmp_path / 'absent.jsonl'}}}\n")
    capsys.readouterr()
    assert main(["validate", "--config", str(other)]) == 1 and len(seen) == 4  # not the file loader


def test_validate_refuses_a_fraction_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["validate", "x.jsonl", "--unseen-fraction", "nan"])
    assert e.value.code == 2
    assert "argument --unseen-fraction: expected a number in [0, 1], got 'nan'" in capsys.readouterr().err


def test_list_sizes_names_loaders_that_need_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "benchmarks", "--sizes"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  file .*\[needs a path: source\]$", out, re.M)
    assert re.search(r"^  prism .*\[needs a path: path\]$", out, re.M)
    assert re.search(r"^  rubrics .*\[\d+ pairs, \d+ users\]$", out, re.M)
    assert "TypeError" not in out
    assert "a run loads what its config selects" in out and "max_train_prompts" in out  # why a run has fewer


def test_list_sizes_is_offline_unless_the_user_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from perbench.cli import _offline_unless_set

    monkeypatch.delenv("HF_HUB_OFFLINE")
    with _offline_unless_set():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in os.environ
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with _offline_unless_set():
        assert os.environ["HF_HUB_OFFLINE"] == "0"


# ------------------------------------------------------------------------------------------ remote code
def test_trust_remote_code_needs_the_explicit_permission(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.rewards.hub_rm import HubRM, allow_remote_code, remote_code_allowed

    with pytest.raises(ConfigError, match=f"^hub_rm: {re.escape(REMOTE)}$"):
        HubRM(model="org/rm", trust_remote_code=True)
    case = next(c for c in CASES if c.id == "trust_remote_code_without_flag")
    path = write(tmp_path, case)
    # with the flag, the config is accepted (the error is the next problem) and the permission ends with the run
    assert main(["run", str(path), "--trust-remote-code", "--set", "bootstrap=-1"]) == 2
    assert (
        capsys.readouterr().err
        == "perbench: error: command line: bootstrap: expected an integer in [0, 100000], got -1\n"
    )
    assert not remote_code_allowed()
    allow_remote_code()
    cfg = RunConfig.from_yaml(path)
    assert cfg.methods[1].params["trust_remote_code"] is True


def test_permitted_remote_code_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.cli import _announce_remote_code
    from perbench.config import Component
    from perbench.models.loader import ModelSpec, describe_remote_code

    folder = tmp_path / "rm"
    (folder / "sub").mkdir(parents=True)
    for name in ("modeling_x.py", "configuration_x.py", "sub/helpers.py", "weights.safetensors"):
        (folder / name).write_text("")
    line = describe_remote_code(ModelSpec.parse(str(folder)))
    assert line == (
        f"trust_remote_code is on: these Python files of {folder} will run: "
        "configuration_x.py, modeling_x.py, sub/helpers.py"
    )
    _announce_remote_code([Component("hub_rm", {"model": str(folder), "trust_remote_code": True})])
    assert capsys.readouterr().err == f"[perbench] hub_rm(model={folder},trust_remote_code=True): {line}\n"


def test_pickled_weights_are_refused_naming_the_folder(tmp_path: Path) -> None:
    from perbench.rewards.hub_rm import HubRM

    folder = tmp_path / "binonly"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"")
    problem = (
        f"{folder} has no .safetensors weights (it has pytorch_model.bin); perbench loads safetensors only. "
        "Convert it once: load it with transformers and call model.save_pretrained(folder, safe_serialization=True)"
    )
    with pytest.raises(ConfigError, match=f"^hub_rm: {re.escape(problem)}$"):
        HubRM(model=str(folder)).fit([], RMContext())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"policy: {folder}\n")
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{cfg}:1: policy: {problem}')}$"):
        checked(cfg)


# ----------------------------------------------------------------------------------- report and baselines
def test_report_escapes_a_hand_edited_config_hash(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    results = {
        "config_hash": "<script>alert(1)</script>",
        "created": "<img src=x onerror=alert(2)>",
        "benchmark": {"name": "<b>bench</b>", "weighting": "<i>pair</i>"},
        "provenance": {"git": "<u>g</u>", "models": {"policy": {"name": "<s>p</s>", "fingerprint": "<q>f</q>"}}},
    }
    (run / "results.json").write_text(json.dumps(results))
    assert main(["report", str(run)]) == 0
    html = (run / "report.html").read_text()
    for raw in ("<script", "<img src=x", "<b>bench", "<i>pair", "<u>g", "<s>p", "<q>f"):
        assert raw not in html, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;bench&lt;/b&gt;" in html


def _random_scores(rm: RandomRM) -> np.ndarray:
    return rm.score([ScoreItem("u", f"prompt {i}", f"response {i}") for i in range(20)])


def test_random_baseline_is_seeded_by_the_run_seed() -> None:
    def fitted(seed: int) -> RandomRM:
        rm = RandomRM()
        rm.fit([], RMContext(seed=seed))
        return rm

    a, b, c = _random_scores(fitted(1)), _random_scores(fitted(2)), _random_scores(fitted(1))
    assert not np.array_equal(a, b) and np.array_equal(a, c)
    explicit = RandomRM(seed=7)
    explicit.fit([], RMContext(seed=1))
    assert np.array_equal(_random_scores(explicit), _random_scores(fitted(7)))
    reloaded = RandomRM()
    reloaded.load_state(fitted(2).state())  # a cached fit restores the seed it ran with
    assert np.array_equal(_random_scores(reloaded), b)
    with pytest.raises(RuntimeError, match="no seed yet"):
        RandomRM().score([ScoreItem("u", "p", "r")])


def test_length_baseline_counts_words_or_characters() -> None:
    items = [ScoreItem("u", "p", "aaaaaaaa b"), ScoreItem("u", "p", "a b c"), ScoreItem("u", "p", "ab cd ef")]
    assert LengthRM().score(items).tolist() == [2.0, 3.0, 3.0]  # words: the last two tie
    assert LengthRM(unit="chars").score(items).tolist() == [10.0, 5.0, 8.0]
    assert LengthRM(unit="chars", sign=-1).score(items).tolist() == [-10.0, -5.0, -8.0]
    assert LengthRM().params == {"sign": 1} and LengthRM(unit="chars").params == {"sign": 1, "unit": "chars"}
    with pytest.raises(ValueError, match="unit must be 'words' or 'chars'"):
        LengthRM(unit="bytes")  # type: ignore[arg-type]


def test_validate_config_applies_the_rooms_rules_as_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt model or a guide_with that names no system is refused by ``validate --config`` exactly as by
    ``run``: the preflight they share, located at the key's line, before the data file is read."""
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"user_id": "a", "prompt": "p", "chosen": "x", "rejected": "y"}\n')
    cases = {
        "policy: smolm2\n": f"2: policy: unknown model 'smolm2'. Did you mean 'smollm2'? {MODEL_FORMS}",
        "guide_with: [mpu]\n": "2: guide_with[0]: 'mpu' is not one of this config's methods or baselines, so it would "
        "guide nothing. Allowed: global_bt, length, random",
    }
    for i, (line, text) in enumerate(cases.items()):
        cfg = tmp_path / f"run{i}.yaml"
        cfg.write_text(f"benchmark: {{name: file, source: {data}}}\n{line}")
        for argv in (["validate", "--config", str(cfg)], ["run", str(cfg), "--out-dir", str(tmp_path / "runs")]):
            capsys.readouterr()
            assert main(argv) == 2
            assert capsys.readouterr().err == f"perbench: error: {cfg}:{text}\n"
    assert not (tmp_path / "runs").exists()
