"""The exported RM's front doors under hostile input: one test per class of input (what score takes, user ids,
adaptation, a tampered export, an export that cannot be made). Each is a clear error naming the argument, file
or field, or a warning that says what happened — never a silent fallback or a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import perbench
from perbench.cli import main
from perbench.errors import ConfigError
from perbench.export.model import UnknownUserError
from tests.fixtures_export import copy_export, mpu_export, run_dir, tiny_pool  # noqa: F401 - fixtures


def test_score_takes_only_the_texts_the_user_meant(mpu_export: Path) -> None:  # noqa: F811
    rm = perbench.load_rm(mpu_export)
    u = rm.seen_users[0]
    with pytest.raises(ValueError, match=r"prompts must be a list .* got one string"):
        rm.score("How are you today?", ["fine"], u)
    with pytest.raises(ValueError, match="responses must be a list"):
        rm.score(["Q?"], "fine", u)
    with pytest.raises(ValueError, match=r"responses\[0\]: .*got None"):
        rm.score(["Q?"], [None], u)
    with pytest.raises(ValueError, match=r"prompts\[0\]: .*got None"):
        rm.score([None], ["A"], u)
    with pytest.raises(ValueError, match=r"responses\[0\]: an empty conversation"):
        rm.score(["Q?"], [[]], u)
    with pytest.raises(ValueError, match=r"prompts\[0\]\[0\]: a message"):
        rm.score([[{"role": "user"}]], ["A"], u)
    # a message list or one {role, content} message is the conversation it spells, as reward_func reads it
    text = rm.score(["Q?"], ["Fine, thanks."], u)
    as_messages = rm.score(
        [{"role": "user", "content": "Q?"}], [[{"role": "assistant", "content": "Fine, thanks."}]], u
    )
    as_message = rm.score(["Q?"], [{"role": "assistant", "content": "Fine, thanks."}], u)
    assert text[0] == as_messages[0] == as_message[0]
    assert rm.reward_func()(["Q?"], [[{"role": "assistant", "content": "Fine, thanks."}]], user_id=[u]) == [text[0]]


def test_user_ids_are_strings_and_unknown_ones_are_never_silent(mpu_export: Path) -> None:  # noqa: F811
    rm = perbench.load_rm(mpu_export)
    with pytest.raises(ValueError, match="users is None"):
        rm.score(["Q?"], ["A"], None)
    with pytest.raises(ValueError, match=r"users\[0\]: a user id is a string, got None"):
        rm.score(["Q?"], ["A"], [None])
    with pytest.raises(ValueError, match=r"users\[0\]: a user id is a string, got float 101.0"):
        rm.score(["Q?"], ["A"], [101.0])
    with pytest.warns(UserWarning, match="'nobody' is unknown to this system") as caught:
        rm.score(["Q?", "Q2?"], ["A", "B"], ["nobody", "nobody"])
        rm.score(["Q?"], ["A"], "nobody")
    assert len([w for w in caught if "nobody" in str(w.message)]) == 1  # once per user
    strict = perbench.load_rm(mpu_export, strict=True)
    with pytest.raises(UnknownUserError, match="'nobody' is unknown"):
        strict.score(["Q?"], ["A"], "nobody")
    with pytest.raises(UnknownUserError):
        strict.reward_func()(["Q?"], ["A"], user_id=["nobody"])


def test_adapt_refuses_a_known_user_and_shots_without_a_preference(mpu_export: Path) -> None:  # noqa: F811
    rm = perbench.load_rm(mpu_export)
    seen = rm.seen_users[0]
    shot = {"prompt": "Q?", "chosen": "A long, careful answer.", "rejected": "No."}
    before = rm.score(["Q?"], ["A"], seen)
    with pytest.raises(ValueError, match=r"was fit on this user; .*replace=True"):
        rm.adapt(seen, [shot])
    assert rm.score(["Q?"], ["A"], seen)[0] == before[0]  # untouched
    rm.adapt(seen, [shot], replace=True)
    assert rm.score(["Q?"], ["A"], seen)[0] != before[0]
    with pytest.raises(ValueError, match="already has adapted parameters"):
        rm.adapt(rm.manifest["adapted_users"][0], [shot])
    with pytest.raises(ValueError, match=r"shots\[0\]: chosen and rejected are the same text"):
        rm.adapt("new", [{"prompt": "Q?", "chosen": "Same  text", "rejected": "Same text"}])
    with pytest.raises(ValueError, match=r"shots\[0\]: chosen or rejected is blank"):
        rm.adapt("new", [{"prompt": "Q?", "chosen": "  ", "rejected": "Other"}])
    with pytest.raises(ValueError, match="no shots"):
        rm.adapt("new", [])
    with pytest.raises(ValueError, match="shots must be a list"):
        rm.adapt("new", shot)  # type: ignore[arg-type]
    assert not rm.known("new")


def _tamper(src: Path, dst: Path, edit: str) -> Path:
    out = copy_export(src, dst)
    m = json.loads((out / "perbench_rm.json").read_text())
    if edit == "params":
        m["params"]["not_a_param"] = 1
    elif edit == "format_null":
        m["format_version"] = None
    elif edit == "format_str":
        m["format_version"] = "1.0"
    elif edit == "method":
        m["method"] = "mpuu"
    elif edit == "fingerprint":
        m["backbone"].pop("fingerprint")
    elif edit == "state":  # another system's fitted state under this manifest
        (out / "state.safetensors").write_bytes((out / "state.safetensors").read_bytes()[:-4] + b"\x00\x00\x00\x00")
    elif edit == "shots":
        (out / "shots.jsonl").unlink()
    elif edit == "users":
        (out / "users.json").write_text('{"u01": {}}')
    if edit in ("params", "method"):  # a manifest made consistent again: the field's own check speaks
        from perbench.export.format import digest

        m["digest"] = digest(out, m)
    (out / "perbench_rm.json").write_text(json.dumps(m))
    return out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("params", "params.not_a_param: mpu takes no parameter"),
        ("format_null", "format_version: expected the integer 2, got null"),
        ("format_str", 'format_version: expected the integer 2, got "1.0"'),
        ("method", "method: .*mpuu"),
        ("fingerprint", "digest: the folder does not match"),
        ("state", "digest: the folder does not match .*edited"),
        ("shots", r"digest: .*shots.jsonl missing"),
        ("users", "digest: the folder does not match"),
    ],
)
def test_a_tampered_export_is_refused_naming_file_and_field(
    mpu_export: Path,  # noqa: F811
    tmp_path: Path,
    edit: str,
    message: str,
) -> None:
    out = _tamper(mpu_export, tmp_path / "rm", edit)
    with pytest.raises(ConfigError, match=f"load_rm: {out / 'perbench_rm.json'}: {message}"):
        perbench.load_rm(out)


def test_the_backbone_fingerprint_is_required_unless_trusted(mpu_export: Path, tmp_path: Path) -> None:  # noqa: F811
    from perbench.export.format import MANIFEST, digest

    out = copy_export(mpu_export, tmp_path / "rm")
    m = json.loads((out / MANIFEST).read_text())
    m["backbone"].pop("fingerprint")
    m["digest"] = digest(out, m)  # consistent, but nothing says which backbone
    (out / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ConfigError, match=r"backbone\.fingerprint: missing"):
        perbench.load_rm(out)
    with pytest.warns(UserWarning, match="backbone.fingerprint: missing.*trusted as asked"):
        assert perbench.load_rm(out, trust_backbone=True).known(m["seen_users"][0])
    with pytest.raises(ConfigError, match=r"backbone\.fingerprint: the backbone tiny-random:1 has fingerprint"):
        perbench.load_rm(mpu_export, backbone="tiny-random:1")


def test_export_says_why_it_cannot_export(
    run_dir: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a run whose benchmark file moved away: the reason (a path read from the current folder) is in the error
    moved = tmp_path / "run"
    shutil.copytree(run_dir, moved)
    cfg = (moved / "config.yaml").read_text()
    pool = next(line.split(":", 1)[1].strip() for line in cfg.splitlines() if line.strip().startswith("pool:"))
    (moved / "config.yaml").write_text(cfg.replace(pool, "elsewhere/pool"))
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(moved), "--system", "mpu", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "does not load here" in err and "relative are read from the current folder" in err
    # the data changed since the run: the recorded fingerprint says so
    results = json.loads((moved / "results.json").read_text())
    results["benchmark"]["fingerprint"] = "0" * 16
    (moved / "results.json").write_text(json.dumps(results))
    (moved / "config.yaml").write_text(cfg)
    assert main(["export", str(moved), "--system", "mpu", "--out", str(tmp_path / "b")]) == 2
    assert "its data changed since the run" in capsys.readouterr().err
    (moved / "results.json").unlink()
    assert main(["export", str(moved), "--system", "mpu", "--out", str(tmp_path / "c")]) == 2
    assert "the run has not finished" in capsys.readouterr().err
