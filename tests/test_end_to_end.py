"""A small end-to-end run on tiny random models: data -> RM -> upstream -> decoding -> downstream -> report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perbench.api import run
from perbench.config import RunConfig


@pytest.fixture(scope="session")
def tiny_pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pool from hand-written base responses (the model-written bases are tested in test_rubric_pool)."""
    from perbench.data.rubrics.build import assemble_pool
    from perbench.data.rubrics.prompts import RUBRIC_PROMPTS
    from perbench.io import atomic_write_jsonl

    styles = {
        "brief": "Start with the basics. Keep it simple and steady.",
        "list": "Here are some tips:\n- Plan ahead.\n- Keep notes.\n- Review weekly.\n- Ask for help early.",
        "casual": "Hey, you're gonna love this! Just try it and see what works for you, it's super easy.",
        "formal": "It is advisable to proceed methodically. For example, one may allocate 30 minutes each day "
        "to the task. Consistency over 4 weeks typically produces measurable improvement.",
    }
    bases = {p.prompt_id: dict(styles) for p in RUBRIC_PROMPTS[:16]}
    out = tmp_path_factory.mktemp("pool") / "pool.jsonl"
    atomic_write_jsonl(out, assemble_pool(bases, seed=0))
    return out


def tiny_config(pool: Path, out: Path) -> RunConfig:
    return RunConfig.from_dict(
        {
            "benchmark": {"name": "rubrics", "pool": str(pool)},
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "max_new_tokens": 12,
            "max_test_prompts": 2,
            "max_gen_users": 2,
            "bootstrap": 20,
            "shot_curve": [1, 5],
            "out_dir": str(out),
            "device": "cpu",
        }
    )


def test_default_config_is_valid() -> None:
    cfg = RunConfig.default()
    assert cfg.benchmark.name == "rubrics" and cfg.policy == "smollm2"
    assert {d.name for d in cfg.decoders} >= {"zero_shot", "best_of_n"}
    assert cfg.verdict_metric == "best_of_n:rubric_satisfaction" and cfg.systems is not None


def test_unknown_config_key_has_hint() -> None:
    with pytest.raises(ValueError, match="Did you mean 'max_new_tokens'"):
        RunConfig.from_dict({"max_new_token": 3})


def test_end_to_end_and_resume(tiny_pool: Path, tmp_path: Path, own_cache: Path) -> None:
    cfg = tiny_config(tiny_pool, tmp_path)
    first = run(cfg)
    res = first.results
    assert res["schema_version"] == 2
    prov = res["provenance"]
    assert prov["models"]["policy"]["fingerprint"].startswith("tiny-random")
    assert prov["models"]["policy"]["chat_template_hash"]
    assert prov["models"]["policy"]["fingerprint_basis"] == "seed and shape of the random model"
    assert prov["packages"]["torch"]
    up = res["upstream"]
    assert set(up) == {"global_bt", "length", "random"}
    for label in up:
        for group in ("seen", "unseen", "all"):
            acc = up[label]["rm_accuracy"][group]
            assert 0.0 <= acc["accuracy"] <= 1.0 and acc["n_pairs"] > 0 and "ties" in acc
    assert set(up["global_bt"]["policy_accuracy"]) == {"seen", "unseen"}
    assert {"tilt", "prefix_sum", "prefix_mean"} <= set(up["global_bt"]["policy_accuracy"]["seen"])
    assert up["global_bt"]["policy_accuracy"]["seen"]["headline"] == "tilt"
    # a baseline guides no weighted decoder here: its headline is not applicable, its curve over w is reported
    length_pa = up["length"]["policy_accuracy"]["seen"]
    assert "tilt" not in length_pa and "no decoder of this run applies a weight" in length_pa["not_applicable"]
    assert length_pa["curve"]["points"][0]["w"] == 0.0
    cell_rows = [json.loads(x) for x in (first.run_dir / "cells.jsonl").read_text().splitlines()]
    assert {c["method"] for c in cell_rows if c["metric"] == "pa"} == {"global_bt"}
    # the sequence tilt needs only the whole response's reward: at pa_weight, baselines have it, not the variants
    # the runner alone writes the results and no report; the caller's ``finish`` gets the finished run
    from perbench.runner.run import run as run_only

    finished: list[Any] = []
    alone = run_only(cfg.override(pa_weight=1.0, out_dir=str(tmp_path / "weighted")), finish=finished.append)
    assert finished == [alone] and (alone.run_dir / "results.json").exists()
    assert not (alone.run_dir / "report.html").exists() and not (alone.run_dir / "leaderboard.md").exists()
    weighted = alone.results["upstream"]
    length_pa = weighted["length"]["policy_accuracy"]["seen"]
    assert "tilt" in length_pa and "prefix_sum" not in length_pa and length_pa["variants_not_applicable"]
    assert length_pa["w"] == 1.0 and length_pa["decoder"] is None and "pa_weight" in length_pa["w_source"]
    down = res["downstream"]
    assert set(down) == {"zero_shot", "args(k=10,w=1.0)[global_bt]"}
    for d in down.values():
        assert 0.0 <= d["rubric_satisfaction"]["mean"] <= 1.0
        assert "rougeL" in d
    assert "rm_win" in down["args(k=10,w=1.0)[global_bt]"]
    assert res["work"]["computed"]["generate"] > 0
    run_dir = first.run_dir
    for name in ("results.json", "samples.jsonl", "report.html", "config.yaml"):
        assert (run_dir / name).exists(), name
    kinds = {json.loads(line)["kind"] for line in (run_dir / "samples.jsonl").read_text().splitlines()}
    assert kinds == {"pair_score", "generation"}
    assert "RM accuracy" in (run_dir / "report.html").read_text()
    # the analysis: roles, minority users selected on the reference's train-pair cells, one CI per number
    a = res["analysis"]
    assert a["roles"] == {"global_bt": "deployable", "length": "baseline", "random": "baseline", "zero_shot": "decoder"}
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert {c["method"] for c in cells if c["metric"] == "rm_acc_train"} == {"global_bt"}
    assert (
        a["minority"]["na"] is None
        and a["minority"]["selected_from"] == res["benchmark"]["users_seen"] + res["benchmark"]["users_unseen"]
    )
    v = a["verdict"]
    # 2 users × 2 prompts of ARGS cells: CIs that cannot resample users and prompts carry no "deploy"
    assert v["metric"] == "args:rubric_satisfaction" and v["deploy"] is None and v["decision"] == "too_little_data"
    assert "At least 5 users and 5 prompts are needed" in v["text"]
    seen = up["global_bt"]["rm_accuracy"]["seen"]
    assert seen["ci_source"] == "analysis" and seen["ci"] == a["table"]["global_bt"]["rm_acc_seen"]["ci"]
    guided = down["args(k=10,w=1.0)[global_bt]"]
    assert guided["rubric_satisfaction"]["ci"] == a["table"]["global_bt"]["args:rubric_satisfaction"]["ci"] == v["ci"]
    gain = guided["vs"]["zero_shot"]["rubric_satisfaction"]
    [paired] = [p for p in a["paired"]["args:rubric_satisfaction"] if p["b"] == "zero_shot"]
    assert gain["ci_source"] == "analysis" and gain["ci"] == paired["ci"]

    second = run(cfg)  # same config: same directory, nothing recomputed, identical numbers
    assert second.run_dir == run_dir
    assert second.results["work"]["computed"] == {}
    assert second.results["work"]["features"]["computed"] == 0
    assert second.results["upstream"] == res["upstream"]
    assert second.results["downstream"] == res["downstream"]


def test_cli_run_with_overrides(tiny_pool: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from perbench.cli import main

    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(tiny_pool, tmp_path).to_dict()))
    assert (
        main(
            [
                "run",
                str(cfg_path),
                "--decoders",
                "zero_shot",
                "--set",
                "baselines=[length]",
                "--run-name",
                "cli",
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert set(res["downstream"]) == {"zero_shot"} and set(res["upstream"]) == {"global_bt", "length"}
    assert "RM accuracy" in capsys.readouterr().out


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.cli import main

    assert main(["run", "--methods", "global_tb"]) == 2
    assert "Did you mean 'global_bt'" in capsys.readouterr().err


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    from perbench.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("rubrics", "global_bt", "args", "rm_accuracy"):
        assert name in out


@pytest.mark.parametrize("name", ["default", "all_methods", "decoders", "rl", "rl_full", "scale"])
def test_embedded_configs_resolve_by_name_and_validate(name: str, tmp_path: Path) -> None:
    import yaml

    from perbench.cli import _config_path

    cfg = RunConfig.from_yaml(_config_path(name))
    assert cfg.methods and cfg.benchmark.name == "rubrics"
    # the run writes its config back as YAML (the parsed file's mappings are plain data again)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    again = RunConfig.from_yaml(tmp_path / "c.yaml")
    assert again.to_dict() == cfg.to_dict() and again.result_hash() == cfg.result_hash()
    with pytest.raises(FileNotFoundError, match="neither a file nor an embedded config"):
        _config_path("no_such_config")


def test_decoders_by_reward_models_by_policies(tiny_pool: Path, tmp_path: Path, own_cache: Path) -> None:
    cfg = tiny_config(tiny_pool, tmp_path).override(policies=["tiny-random", "tiny-random:1"], baselines=[])
    res = run(cfg).results
    labels = set(res["downstream"])
    assert labels == {
        f"{d}@{p}" for d in ("zero_shot", "args(k=10,w=1.0)[global_bt]") for p in ("tiny-random", "tiny-random:1")
    }
    fps = [m["fingerprint"] for m in res["provenance"]["models"]["downstream_policies"]]
    assert len(set(fps)) == 2
    # 2 test prompts × 2 user-agnostic decoders, generated once per policy: units are keyed by policy
    assert res["work"]["computed"]["generate"] == 2 * 2 * 2
    rows = [json.loads(x) for x in (cfg.run_dir() / "samples.jsonl").read_text().splitlines()]
    gens = [r for r in rows if r["kind"] == "generation"]
    assert {r["policy"] for r in gens} == {"tiny-random", "tiny-random:1"}
    assert all(r["decoder"].endswith("@" + r["policy"]) for r in gens)
    # policy accuracy depends on the policy: computed under each one, and each (policy, method) system has its own
    other = res["upstream"]["global_bt"]["policy_accuracy_by_policy"]["tiny-random:1"]
    assert set(other) == {"seen", "unseen"} and other["seen"]["headline"] == "tilt"
    cells = [json.loads(x) for x in (cfg.run_dir() / "cells.jsonl").read_text().splitlines()]
    pa = {}
    for c in cells:
        if c["metric"] == "pa" and c["method"] == "global_bt":
            pa.setdefault(c["group"].split("|")[1], []).append(c["value"])
    assert set(pa) == {"tiny-random", "tiny-random:1"} and len(pa["tiny-random"]) == len(pa["tiny-random:1"])


def test_benchmark_parameter_errors_name_the_parameter(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from perbench.cli import main

    assert main(["run", "--benchmark", "prism", "--out-dir", str(tmp_path)]) == 2
    assert "benchmark 'prism' needs path" in capsys.readouterr().err
    assert main(["run", "--set", "benchmark={name: rubrics, pol: 3}", "--out-dir", str(tmp_path)]) == 2
    assert "Did you mean 'pool'" in capsys.readouterr().err


def test_prb_without_train_pairs_reports_not_applicable(tmp_path: Path) -> None:
    """Personalized RewardBench has one test pair per user and no train pairs: methods that learn from pairs
    are reported as not applicable (never a 0 % accuracy), user-agnostic baselines still score."""
    from tests.fixtures_upstream import prb_rows, write_jsonl

    src = write_jsonl(tmp_path / "prb.jsonl", prb_rows())
    cfg = RunConfig.from_dict(
        {
            "benchmark": {"name": "prb", "source": str(src)},
            "policy": "tiny-random",
            "rm_backbone": "tiny-random",
            "methods": ["global_bt", "mpu", "vpl"],
            "decoders": ["zero_shot", {"name": "best_of_n", "n": 2}],
            "max_new_tokens": 4,
            "max_test_prompts": 2,
            "bootstrap": 10,
            "bertscore": False,
            "out_dir": str(tmp_path / "runs"),
            "device": "cpu",
        }
    )
    res = run(cfg).results
    for m in ("global_bt", "mpu", "vpl"):
        assert "rm_accuracy" not in res["upstream"][m]
        assert "no train pairs" in res["upstream"][m]["not_applicable"]
    assert res["upstream"]["length"]["rm_accuracy"]["unseen"]["n_pairs"] > 0
    assert not any(lab.endswith("[mpu]") for lab in res["downstream"])
    assert {"decoder": "best_of_n(n=2)", "method": "mpu", "reason": "no train pairs"} in res["skipped_combinations"]
    assert "rm_acc_unseen" in res["analysis"]["table"]["length"]
    json.dumps(res, allow_nan=False)


def test_seeds_pool_into_one_analysis_with_sd(tiny_pool: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_pool, tmp_path).override(
        seeds=[0, 1], decoders=["zero_shot", {"name": "best_of_n", "n": 2}], max_new_tokens=4, bertscore=False
    )
    res = run(cfg)
    a = res.results["analysis"]
    assert [s["seed"] for s in res.results["seed_runs"]] == [0, 1]
    groups = {json.loads(line)["group"] for line in (res.run_dir / "cells.jsonl").read_text().splitlines()}
    assert {g.rsplit("|", 1)[1] for g in groups} == {"seed0", "seed1"}
    entry = a["table"]["global_bt"]["rm_acc_seen"]
    assert entry["sd_seeds"] is not None and entry["value"] is not None
    assert (res.run_dir / "report.html").exists()  # the pooled report, and every seed's own
    assert all((Path(r["run_dir"]) / "report.html").exists() for r in res.results["seed_runs"])


def test_a_run_pools_a_stochastic_methods_fits_into_one_system(tiny_pool: Path, tmp_path: Path) -> None:
    """``systems: {fit_seeds: 2}`` fits pal_b twice (two fit units) and mpu, deterministic, once; pal_b's cells go
    under the one label with their fit seed, the analysis ranks one pal_b, and results.json records the fits."""
    from perbench.systems import fit_seed_of

    cfg = tiny_config(tiny_pool, tmp_path).override(
        methods=["mpu", "pal_b"], baselines=[], systems={"fit_seeds": 2},
        decoders=["zero_shot", {"name": "best_of_n", "n": 2, "pool": 4}], max_new_tokens=4, bertscore=False,
    )  # fmt: skip
    res = run(cfg)
    members = res.results["systems"]["members"]
    assert set(members) == {"mpu", "pal_b", "pal_b(fit_seed=1)"}
    assert members["pal_b(fit_seed=1)"]["pooled_as"] == "pal_b" and members["mpu"]["stochastic_fit"] is False
    assert members["pal_b"]["fit_seeds"] == [0, fit_seed_of(0, 1)]
    rows = [json.loads(line) for line in (res.run_dir / "cells.jsonl").read_text().splitlines()]
    pal = [r for r in rows if r["method"] == "pal_b" and r["metric"] == "rm_acc_all"]
    assert {r["fit_seed"] for r in pal} == {0, fit_seed_of(0, 1)}
    assert not any(r["method"] == "pal_b(fit_seed=1)" for r in rows)
    assert not any("fit_seed" in r for r in rows if r["method"] == "mpu")
    a = res.results["analysis"]
    assert "pal_b(fit_seed=1)" not in a["methods"] and a["fit_seeds"]["fits"] == {"pal_b": 2}
    assert a["fit_seeds"]["single_seed"] == []


def test_a_file_without_train_pairs_stops_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No split column: every pair is test, so a method that fits on train pairs would score a meaningless
    0 %. The run stops with the data error before loading a model or creating its run directory."""
    from perbench.data.loaders import DataError
    from perbench.io import atomic_write_jsonl

    data = tmp_path / "prefs.jsonl"
    atomic_write_jsonl(
        data, [{"user_id": f"u{i % 3}", "prompt": f"q{i}", "chosen": "yes, sure", "rejected": "no"} for i in range(9)]
    )

    def no_models(*a: object, **k: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("perbench.models.loader.load_lm", no_models)
    cfg = RunConfig.from_dict(
        {
            "benchmark": {"name": "file", "source": str(data)},
            "methods": ["global_bt"],
            "out_dir": str(tmp_path / "runs"),
        }
    )
    with pytest.raises(DataError, match=r"prefs\.jsonl: field 'split': no train pairs"):
        run(cfg)
    assert not (tmp_path / "runs").exists()


def test_changing_only_the_tie_policy_refits_nothing(tiny_pool: Path, tmp_path: Path, own_cache: Path) -> None:
    """The tie policy is accounting, not an input of any unit: a run that differs only there is a new run directory
    (its numbers differ) that finds every unit finished in the shared cache instead of training again."""
    cfg = tiny_config(tiny_pool, tmp_path / "runs").override(methods=["global_bt", "mpu"], decoders=[])
    first = run(cfg).results
    assert first["work"]["computed"]["fit"] == 4  # two methods, two baselines
    for n, point in first["upstream"]["mpu"]["fewshot_curve"].items():  # the shots each user really adapted from
        eff = point["effective_shots"]
        assert eff["nominal"] == int(n) and len(eff["by_user"]) == first["benchmark"]["users_unseen"]
        assert eff["users_below_nominal"] == sum(v < int(n) for v in eff["by_user"].values())
    half = run(cfg.override(tie_policy="half")).results
    assert half["config_hash"] != first["config_hash"]
    assert half["work"]["computed"] == {} and half["work"]["units"]["computed"] == 0
    assert (
        half["upstream"]["mpu"]["rm_accuracy"]["seen"]["n_pairs"]
        == first["upstream"]["mpu"]["rm_accuracy"]["seen"]["n_pairs"]
    )


def test_a_baseline_only_run_without_decoders_loads_no_model(
    tiny_pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_models(*a: object, **k: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("perbench.models.loader.load_lm", no_models)
    res = run(tiny_config(tiny_pool, tmp_path).override(methods=[], decoders=[])).results
    assert set(res["upstream"]) == {"length", "random"} and res["downstream"] == {}
    assert res["provenance"]["models"]["policy"] is None
    assert res["upstream"]["length"]["rm_accuracy"]["seen"]["n_pairs"] > 0


def test_cli_run_scores_every_system_on_every_predictor(
    tiny_pool: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Benchmark validity end to end: consensus, personalization-only and all test pairs, few-shot and policy
    accuracy, and a non-personalized file loaded through the generic loader as one default user."""
    import yaml

    from perbench.cli import main

    general = tmp_path / "general.jsonl"
    rows = [{"prompt": f"Question {i}?", "chosen": f"A clear answer to {i}.", "rejected": "No."} for i in range(10)]
    general.write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = {"file": {"source": str(general), "default_user": "anyone", "name": "general"}}
    cfg = tiny_config(tiny_pool, tmp_path).to_dict()
    cfg.update(
        methods=["global_bt", "mpu"],
        # every member of the grid is a system of its own (6: a rank coefficient needs at least 5)
        systems={"train_fraction": [0.25, 0.5, 1.0]},
        seed=7,  # fits of its own: the session's shared fit cache stays as other tests expect it
        # 8 samples of 40 tokens: pools whose exact truth varies (on-policy pairs and the diagnosis have evidence)
        decoders=["zero_shot", {"name": "best_of_n", "n": 2, "pool": 8}],
        max_new_tokens=40,
        upstream_benchmarks=[extra],
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--run-name", "validity"]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "validity"
    res = json.loads((run_dir / "results.json").read_text())
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    by_metric: dict[str, set[str]] = {}
    for c in cells:
        by_metric.setdefault(c["metric"], set()).add(c["method"])
    grid = {f"{m}{f}" for m in ("global_bt", "mpu") for f in ("", "(train_fraction=0.25)", "(train_fraction=0.5)")}
    systems = grid | {"length", "random"}
    for metric in ("rm_acc_consensus", "rm_acc_pers_only", "rm_acc_all", "rm_acc_unseen", "rm_acc_on_general"):
        assert by_metric[metric] == systems, metric
    strangers = {c["user"] for c in cells if c["metric"] == "rm_acc_on_general"}  # one user, its id sealed
    assert len(strangers) == 1 and next(iter(strangers)).startswith("general/user-")
    consensus = {c["user"] for c in cells if c["metric"] == "rm_acc_consensus"}
    assert len(consensus) == res["benchmark"]["users_seen"] + res["benchmark"]["users_unseen"]  # every user
    on = res["upstream"]["mpu"]["rm_accuracy"]["on_general"]
    assert on["n_pairs"] == 10 and "unknown-user" in on["users"] and on["ci_resamples"] == "prompts"
    assert res["benchmark"]["pair_sets"]["consensus"]["users"] == len(consensus)
    v = res["analysis"]["validity"]
    assert v["predictors"] == [
        "rm_acc_consensus",
        "rm_acc_pers_only",
        "rm_acc_all",
        "rm_acc_unseen",
        "onpolicy_acc",
        "onpolicy_bok_acc@4",
        "rm_acc_on_general",
    ]  # fmt: skip  (no weighted decoder: policy accuracy is not applicable, so not a predictor)
    entry = v["by_downstream"]["best_of_n:rubric_satisfaction"]
    assert len(entry["differences"]) == 21 and {r["upstream"] for r in entry["predictors"]} == set(v["predictors"])
    # on-policy accuracy beside curated accuracy: its Δτ against rm_acc_all, both on the same replicates
    assert {(d["a"], d["b"]) for d in entry["onpolicy_vs_curated"]} <= {
        (x, y) for p in ("onpolicy_acc", "onpolicy_bok_acc@4") for x, y in ((p, "rm_acc_all"), ("rm_acc_all", p))
    } and len(entry["onpolicy_vs_curated"]) == 2
    # every pooled number beside its null and its ceiling, for every system
    room = res["analysis"]["headroom"]["best_of_n:rubric_satisfaction"]
    assert room["random_pick"]["value"] is not None and room["oracle"]["value"] >= room["random_pick"]["value"]
    assert set(room["systems"]) == systems
    for m, e in room["systems"].items():
        assert e["gain"]["value"] == pytest.approx(e["value"] - room["random_pick"]["value"]), m
        assert e["share"]["value"] is not None or e["share"]["na"], m
    verdict = res["analysis"]["verdict"]
    assert verdict["parts"][0]["kind"] == "headroom" and verdict["text"].startswith("Headroom on best_of_n:")
    qualified = set(verdict["qualified"] or [])
    called = {verdict["deploy"], verdict["pick"], *verdict["equivalent"], *verdict["tied"]} - {None}
    assert called <= qualified and all(room["systems"][m]["beats_random"] for m in called)
    assert "against its null and ceiling" in out and "beats random*" in out
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    pool_cells = [r for r in samples if r["kind"] == "bon_pool_cell"]
    assert pool_cells and all("rubric_satisfaction" in r["oracle_top"] for r in pool_cells)
    diag = res["downstream"]["best_of_n(n=2,pool=8)[mpu]"]["diagnosis"]
    assert diag["truth"] == "rubric_satisfaction" and diag["onpolicy"]["k"] == 4 and "collapsed_users" in diag
    assert diag["cells_constant_truth"] < diag["cells"] and diag["onpolicy"]["pairs"] > 0
    # the baselines are scored like every system but left out of the correlations: reference lines
    assert v["reference_lines"] == ["length", "random"] and {r["n_systems"] for r in entry["predictors"]} == {6}
    assert "reference lines left out: length, random" in out
    assert "Which benchmark to trust for best_of_n:rubric_satisfaction" in out
    assert "Which benchmark should you trust for this deployment" in (run_dir / "report.html").read_text()
    # two entries that name the same metric are refused before any model loads, naming the entry
    cfg["upstream_benchmarks"] = [extra, {"file": {"source": str(general), "default_user": "x", "name": "general"}}]
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--run-name", "dup"]) == 2
    assert (
        "upstream_benchmarks[1]: benchmark name 'general' is also upstream_benchmarks[0]'s" in capsys.readouterr().err
    )
    cfg["upstream_benchmarks"] = [{"file": {"sourc": str(general)}}]
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    assert "upstream_benchmarks[0].file.sourc: benchmark 'file': unknown parameter 'sourc'" in capsys.readouterr().err
