"""The command line explains itself: every flag of every command has help text, `run --help` groups its flags and
shows examples, --batch-size sets the config's batch_size with the same checks as any front door, and the
report's layout tests skip with their reason where no browser is found."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from perbench.cli import _parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_flag_of_every_command_has_help() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, p in _subparsers().items()
        for a in p._actions
        if a.help in (None, "") and not isinstance(a, argparse._HelpAction)
    ]
    assert missing == []


def test_run_help_has_groups_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for heading in ("what to compare:", "how much:", "where it runs:", "output:", "examples:"):
        assert heading in out
    assert "--batch-size N|auto" in out


def test_batch_size_flag_sets_the_config_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []

    def fake_run(cfg: Any) -> Any:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr("perbench.api.run", fake_run)
    for value, want in (("4", 4), ("auto", "auto")):
        with pytest.raises(SystemExit):
            main(["run", "--batch-size", value])
        assert seen[-1].batch_size == want
    with pytest.raises(SystemExit):  # refused at the flag's front door
        main(["run", "--batch-size", "0"])
    assert "--batch-size" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--batch-size", "many"])
    assert "is not a positive integer or auto" in capsys.readouterr().err


def test_without_a_browser_the_layout_tests_skip_saying_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from tests.conftest import NO_BROWSER, find_browser

    monkeypatch.delenv("PERBENCH_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    assert find_browser() is None
    assert "apt-get install -y chromium" in NO_BROWSER and ".ci/run" in NO_BROWSER
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    assert find_browser() == str(browser)
