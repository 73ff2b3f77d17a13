"""The second bad-input corpus: hostile inputs as a new user meets them, through the command line.

Data files and run configs go through ``perbench validate`` and ``perbench run``; run directories through
``perbench report`` and ``perbench compare``. Every case ends in a located one-line error with exit code 2
(``validate``: a FAILED report, exit 1), or in a result that counts what it skipped. On every case: no traceback,
no hang (each command runs under an alarm), and nothing written outside the run directory (a snapshot of
everything else is compared before and after). The classes are those of docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.cli import main

Rows = list[dict[str, Any]]


def row(user: Any, prompt: Any, chosen: Any, rejected: Any, split: str | None = "test") -> dict[str, Any]:
    out = {"user_id": user, "prompt": prompt, "chosen": chosen, "rejected": rejected}
    return out if split is None else {**out, "split": split}


#: three users with train and test pairs; u1 and u2 mirror each other (Pet? in train, Toy? in test)
BASE: Rows = [
    row("u1", "Pet?", "A cat.", "A dog.", "train"),
    row("u1", "Toy?", "Yarn.", "A ball."),
    row("u2", "Pet?", "A dog.", "A cat.", "train"),
    row("u2", "Toy?", "A ball.", "Yarn."),
    row("u3", "Tea?", "Green tea.", "Black tea.", "train"),
    row("u3", "Sea?", "Blue.", "Grey."),
]
HAT = [row("u1", "Hat?", "Red hat.", "Blue hat."), row("u2", "Hat?", "Blue hat.", "Red hat.")]


def jsonl(rows: list[Any]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def convo(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def mirrored_rows(prompts: int, users: tuple[str, ...] = ("a", "b", "c", "d")) -> Rows:
    """Each prompt: every user pair (i < j) holds one mirror (i: x > y, j: y > x) of two responses of different
    lengths, so any user-agnostic scorer gets exactly ½ with ties ½ (and not ½ once a mirror is broken)."""
    rows = []
    for k in range(prompts):
        for i, u in enumerate(users):
            for v in users[i + 1 :]:
                x, y = f"short {k} {u}{v}", f"a much longer answer {k} {u}{v}"
                rows += [row(u, f"Q{k}?", x, y, None), row(v, f"Q{k}?", y, x, None)]
    return rows


# -------------------------------------------------------------------------------------------------- harness
@dataclass
class Outcome:
    rc: int
    out: str
    err: str


class Hang(Exception):
    pass


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> Callable[..., Outcome]:
    """Run ``perbench ARGV`` in-process under a 30 s alarm; no traceback may reach the user. With the ``area``
    fixture, the first command seals it (what lies outside runs/ must not change from then on)."""
    sealed = request.getfixturevalue("area") if "area" in request.fixturenames else None

    def run(*argv: str) -> Outcome:
        if sealed is not None:
            sealed.seal()
        capsys.readouterr()  # what the test printed before is not the command's output

        def alarm(signum: int, frame: Any) -> None:
            raise Hang(f"perbench {' '.join(argv)} hung")

        old = signal.signal(signal.SIGALRM, alarm)
        signal.alarm(30)
        try:
            rc = main(list(argv))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        out, err = capsys.readouterr()
        # a library logger may still hold an earlier test's closed capture: logging reports that failure of the
        # test harness itself as "--- Logging error ---" with a traceback; it is not perbench's output
        harness = re.sub(r"--- Logging error ---\n.*?\nArguments: [^\n]*\n", "", err, flags=re.S)
        assert "Traceback" not in out + harness, err
        return Outcome(rc, out, err)

    return run


def snapshot(root: Path, skip: Path) -> dict[str, Any]:
    """Every file and link under ``root`` except ``skip``: (size, mtime) of files, targets of links."""
    out: dict[str, Any] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        if here == skip or skip in here.parents:
            dirs[:] = []
            continue
        for name in dirs + files:
            p = here / name
            if p == skip:
                continue
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns, p.read_bytes()[:64])
    return out


class Area(dict[str, Path]):
    """in/ (inputs), runs/ (what perbench may write), outside/victim (what it must never touch). :meth:`seal`
    (called by the ``cli`` fixture before the first command) records everything outside runs/."""

    def __init__(self, root: Path) -> None:
        super().__init__({"in": root / "in", "runs": root / "runs", "outside": root / "outside"})
        self.root = root
        self.sealed: dict[str, Any] | None = None

    def seal(self) -> None:
        if self.sealed is None:
            self.sealed = snapshot(self.root, self["runs"])


@pytest.fixture
def area(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Area]:
    """The folders of :class:`Area`; no model's weights may load. Afterwards nothing outside runs/ has changed."""

    def no_weights(*a: object, **k: object) -> None:
        raise AssertionError("a model's weights were loaded")

    # where weights load (patched where they are looked up at call time, so no module keeps the stand-in)
    monkeypatch.setattr("perbench.models.loader.tiny_random_lm", no_weights)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_weights)
    monkeypatch.setattr("transformers.AutoModelForSequenceClassification.from_pretrained", no_weights)
    out = Area(tmp_path)
    for p in out.values():
        p.mkdir()
    (out["outside"] / "victim").write_text("precious\n")
    yield out
    assert out.sealed is not None
    assert snapshot(tmp_path, out["runs"]) == out.sealed, "something was written outside the run directory"
    assert (out["outside"] / "victim").read_text() == "precious\n"


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def baseline_config(area: Area, source: Path, **extra: Any) -> dict[str, Any]:
    """A run that needs no model: baselines only, no decoders."""
    return {
        "benchmark": {"name": "file", "source": str(source), **extra.pop("options", {})},
        "methods": [],
        "decoders": [],
        "bootstrap": 20,
        "out_dir": str(area["runs"]),
        "run_name": "r",
        **extra,
    }


def one_line_error(o: Outcome) -> str:
    assert o.rc == 2 and o.out == "" and o.err.startswith("perbench: error: ") and o.err.count("\n") == 1, o
    return o.err[len("perbench: error: ") : -1]


# --------------------------------------------------------------------------------------------- data files
@dataclass(frozen=True)
class Err:
    """A located error: ``FILE:LINE: field 'F': …`` in the data file (``at="config"``: at the config's key)."""

    line: int | None
    field: str | None
    text: str
    at: str = "data"


Check = Callable[[dict[str, Any], str, Path], None]


@dataclass(frozen=True)
class DataCase:
    id: str
    klass: int
    name: str
    make: Callable[[Path], None]
    options: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    error: Err | None = None
    check: Check | None = None


def data(content: bytes | Callable[[], bytes]) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(content() if callable(content) else content)

    return make


def skips(expected: dict[str, int], rows_skipped: int | None = None, pairs: int | None = None) -> Check:
    def check(results: dict[str, Any], validated: str, src: Path) -> None:
        bench = results["benchmark"]
        assert bench["skipped"]["counts"] == expected
        if rows_skipped is not None:
            assert bench["meta"]["rows_skipped"] == rows_skipped and f"{rows_skipped} row(s) lost" in validated
        if pairs is not None:
            assert bench["pairs"] == pairs and f"pairs kept   : {pairs} " in validated
        for reason, n in expected.items():
            assert f"{reason}: {n} " in validated

    return check


def merged(users: int) -> Check:
    def check(results: dict[str, Any], validated: str, src: Path) -> None:
        meta = results["benchmark"]["meta"]
        assert meta["user_id_merges"]["count"] == 1 and "id merges    : 1 user id(s)" in validated
        assert results["benchmark"]["users_seen"] + results["benchmark"]["users_unseen"] == users
        assert any("Unicode NFC" in n for n in meta["notes"])

    return check


def warns(text: str, pairs: int | None = None) -> Check:
    def check(results: dict[str, Any], validated: str, src: Path) -> None:
        assert f"warning      : {text}" in validated
        assert pairs is None or results["benchmark"]["pairs"] == pairs

    return check


def exactly_half(*groups: str) -> Check:
    """User-agnostic baselines score exactly ½ (ties ½) in each group, and the mirrors are the pers.-only split."""

    def check(results: dict[str, Any], validated: str, src: Path) -> None:
        for label in ("length", "random"):
            acc = results["upstream"][label]["rm_accuracy"]
            for g in groups:
                assert acc[g]["accuracy"] == 0.5, (label, g, acc[g]["accuracy"])
            assert acc["pers_only"]["accuracy"] == 0.5
        assert results["benchmark"]["subsets"]["personalization_only"]["pairs"] == results["benchmark"]["pairs"]

    return check


def _mirrors_share_splits(results: dict[str, Any], validated: str, src: Path) -> None:
    from perbench.data.loaders import load_benchmark_file

    exactly_half("seen")(results, validated, src)
    bench = load_benchmark_file(src, test_fraction=0.5)
    split_of = {(p.user_id, p.prompt, p.chosen): p.split for p in bench.pairs}
    assert {"train", "test"} == set(split_of.values())
    counts = {s: sum(v == s for v in split_of.values()) for s in ("train", "test")}
    assert counts["test"] == results["benchmark"]["test_pairs_seen"]
    # a user-agnostic scorer is exactly ½ on each split only if no mirror is cut in two
    for p in bench.pairs:
        mirror = [q for q in bench.pairs if (q.prompt, q.chosen, q.rejected) == (p.prompt, p.rejected, p.chosen)]
        assert any(q.split == p.split for q in mirror), p


def capped(pairs: int, note: str) -> Check:
    def check(results: dict[str, Any], validated: str, src: Path) -> None:
        assert results["benchmark"]["pairs"] == pairs and results["benchmark"]["meta"]["cap"]["pairs"][1] == pairs
        assert any(note in n for n in results["benchmark"]["meta"]["notes"]) and "cap          :" in validated

    return check


def _pers_only_subset(results: dict[str, Any], validated: str, src: Path) -> None:
    assert results["benchmark"]["subsets"]["personalization_only"]["pairs"] == 4
    assert "mirrors      : 4 pair(s)" in validated
    assert "pers_only" in results["upstream"]["length"]["rm_accuracy"]


def fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


JOSE = "Jos\u00e9"
CAFE = "Caf\u00e9 au lait."
LONG = " ".join(f"word{i}" for i in range(40))

DATA_CASES: list[DataCase] = [
    # 1. rows lost or changed ------------------------------------------------------------------------
    DataCase(
        "json_object_holds_rows_under_two_keys",
        1,
        "d.json",
        data(json.dumps({"data": BASE[:4], "more": BASE[4:]}).encode()),
        error=Err(None, None, "\"data\" (4 items) is read, 'more' (2 objects) would not be"),
    ),
    DataCase(
        "json_object_with_metadata_beside_data",
        1,
        "d.json",
        data(json.dumps({"data": BASE, "version": 2, "columns": ["user_id", "prompt"]}).encode()),
        check=skips({}, pairs=6),
    ),
    DataCase(
        "jsonl_array_on_one_line",
        1,
        "d.jsonl",
        data(jsonl([*BASE[:4], BASE[4:]])),
        error=Err(5, None, "a list of 2 value(s), 2 of them objects; JSON Lines holds one object per line"),
    ),
    DataCase(
        "jsonl_array_line_skipped_counts_its_rows",
        1,
        "d.jsonl",
        data(jsonl([*BASE, HAT])),
        options={"on_error": "skip"},
        check=skips({"invalid:row": 2}, rows_skipped=2, pairs=6),
    ),
    DataCase(
        "jsonl_array_line_holding_a_whole_user",
        1,
        "d.jsonl",
        data(jsonl([*BASE[:4], BASE[4:]])),
        options={"on_error": "skip"},
        error=Err(None, "user_id", "would remove 1 user(s) entirely, e.g. 'u3'"),
    ),
    DataCase(
        "two_objects_on_one_line_skipped",
        1,
        "d.jsonl",
        data(lambda: jsonl(BASE) + (json.dumps(HAT[0]) + json.dumps(HAT[1]) + "\n").encode()),
        options={"on_error": "skip"},
        check=skips({"invalid:row": 2}, rows_skipped=2, pairs=6),
    ),
    DataCase(
        "json_file_of_arrays_skipped",
        1,
        "d.json",
        data(json.dumps([*BASE, HAT]).encode()),
        options={"on_error": "skip"},
        check=skips({"invalid:row": 2}, rows_skipped=2, pairs=6),
    ),
    DataCase(
        "bad_rows_are_a_whole_user",
        1,
        "d.jsonl",
        data(jsonl([*BASE[:4], {**BASE[4], "chosen": 5}, {**BASE[5], "rejected": None}])),
        options={"on_error": "skip"},
        error=Err(None, "user_id", "would remove 1 user(s) entirely, e.g. 'u3' ("),
    ),
    DataCase(
        "conversation_sides_ask_different_questions",
        1,
        "d.jsonl",
        data(jsonl([*BASE, {"user_id": "u3", "chosen": convo("Hat?", "Red."), "rejected": convo("Cap?", "Blue.")}])),
        error=Err(7, "rejected", "its conversation before the response differs from 'chosen''s"),
    ),
    DataCase(
        "conversation_sides_differ_skipped",
        1,
        "d.jsonl",
        data(jsonl([*BASE, {"user_id": "u3", "chosen": convo("Hat?", "Red."), "rejected": convo("Cap?", "Blue.")}])),
        options={"on_error": "skip"},
        check=skips({"invalid:rejected": 1}, rows_skipped=1, pairs=6),
    ),
    DataCase(
        "prompt_column_differs_from_the_user_turn",
        1,
        "d.jsonl",
        data(jsonl([*BASE, {**row("u3", "Hat?", convo("Cap?", "Red."), convo("Cap?", "Blue."))}])),
        error=Err(7, "prompt", "its question differs from the user turn in 'chosen''s conversation"),
    ),
    DataCase(
        "conversation_agrees_with_the_prompt_column",
        1,
        "d.jsonl",
        data(jsonl([*BASE, row("u3", "Hat?", convo(" Hat? ", "Red."), convo("Hat?", "Blue."))])),
        check=skips({}, pairs=7),
    ),
    DataCase(
        "user_ids_in_nfc_and_nfd",
        1,
        "d.jsonl",
        data(jsonl([*BASE[:4], {**BASE[4], "user_id": JOSE}, {**BASE[5], "user_id": _nfd(JOSE)}])),
        check=merged(users=3),
    ),
    DataCase(
        "user_id_with_a_zero_width_space",
        1,
        "d.jsonl",
        data(jsonl([*BASE[:3], {**BASE[3], "user_id": "u2\u200b"}, *BASE[4:]])),
        check=merged(users=3),
    ),
    DataCase(
        "duplicate_pair_in_another_unicode_form",
        1,
        "d.jsonl",
        data(jsonl([*BASE, row("u3", "Milk?", CAFE, "Water."), row("u3", "Milk?", _nfd(CAFE), "Water.")])),
        check=skips({"duplicate_pair": 1}, pairs=7),
    ),
    DataCase(
        "duplicate_pair_with_a_zero_width_space",
        1,
        "d.jsonl",
        data(jsonl([*BASE, row("u1", "Toy?", "Yar\u200bn.", "A ball.")])),
        check=skips({"duplicate_pair": 1}, pairs=6),
    ),
    DataCase(
        "sides_equal_up_to_a_zero_width_space",
        1,
        "d.jsonl",
        data(jsonl([*BASE, row("u3", "Hat?", "Red.", "Re\u200bd.")])),
        check=skips({"chosen_equals_rejected": 1}, pairs=6),
    ),
    # 3. validate says what run will say ------------------------------------------------------------
    DataCase(
        "no_train_pairs_warns_which_methods_cannot_run",
        3,
        "d.jsonl",
        data(jsonl([{k: v for k, v in r.items() if k != "split"} for r in BASE])),
        check=warns(
            "no train pairs for seen users: the methods that fit on train pairs (factorized_ranker, genarm, global_bt,",
            pairs=6,
        ),
    ),
    DataCase(
        "no_train_pairs_with_a_method_that_fits",
        3,
        "d.jsonl",
        data(jsonl([{k: v for k, v in r.items() if k != "split"} for r in BASE])),
        config={"methods": ["global_bt"], "policy": "tiny-random", "rm_backbone": "tiny-random"},
        error=Err(None, "split", "no train pairs (split policy: all test"),
    ),
    DataCase(
        "no_seen_users_warns",
        3,
        "d.jsonl",
        data(jsonl([{**r, "seen": False} for r in BASE])),
        check=warns("no seen users: the methods that fit on train pairs ("),
    ),
    DataCase(
        "unseen_user_without_shots_warns",
        3,
        "d.jsonl",
        data(jsonl([*BASE[:4], {**BASE[4], "split": "test", "seen": False}, {**BASE[5], "seen": False}])),
        check=warns("1 unseen user(s) have no train pairs to adapt from (e.g. 'u3'): methods that adapt from shots"),
    ),
    DataCase(
        "response_over_max_length_tokens",
        3,
        "d.jsonl",
        data(jsonl([*BASE, row("u3", "Essay?", LONG, "No.")])),
        config={"methods": ["global_bt"], "policy": "tiny-random", "rm_backbone": "tiny-random", "max_length": 32},
        error=Err(7, "chosen", "tokens (tiny-random's tokenizer) does not fit max_length=32"),
    ),
    # 6. located, never a traceback -------------------------------------------------------------------
    DataCase(
        "unseen_fraction_of_one",
        6,
        "d.jsonl",
        data(jsonl(BASE)),
        options={"unseen_fraction": 1},
        error=Err(None, None, "unseen_fraction must be a number in [0, 1), got 1", at="config"),
    ),
    DataCase("data_is_dev_zero", 6, "d.jsonl", link_to("/dev/zero"), error=Err(None, None, "is a character device")),
    # 7. hangs --------------------------------------------------------------------------------------
    DataCase("data_is_a_named_pipe", 7, "d.jsonl", fifo, error=Err(None, None, "is a named pipe, not a regular file")),
    # 9. mirrors, splits, caps ----------------------------------------------------------------------
    DataCase(
        "dedup_keeps_mirrors_together",
        9,
        "d.jsonl",
        data(
            jsonl(
                [
                    row("a", "Q?", "short", "a much longer one", None),
                    row("b", "Q?", "a much longer one", "short", None),
                    row("c", "Q?", "short", "a much longer one", None),
                    row("b", "Q?", "a much longer one", "short", None),  # b's duplicate: c's mirror goes with it
                    *mirrored_rows(3),
                ]
            )
        ),
        config={"tie_policy": "half"},
        check=lambda r, v, s: (
            exactly_half("all")(r, v, s),
            skips({"duplicate_pair": 1, "mirror_of_skipped_pair": 1})(r, v, s),
        ),
    ),
    DataCase(
        "test_fraction_keeps_mirrors_in_one_split",
        9,
        "d.jsonl",
        data(jsonl(mirrored_rows(6))),
        options={"test_fraction": 0.5},
        config={"tie_policy": "half"},
        check=_mirrors_share_splits,
    ),
    DataCase("personalization_only_split_for_a_file", 9, "d.jsonl", data(jsonl(BASE)), check=_pers_only_subset),
    DataCase(
        "max_pairs_cap",
        9,
        "d.jsonl",
        data(jsonl(mirrored_rows(3))),
        options={"max_pairs": 10},
        check=capped(10, "capped to 10 of 36 pairs"),
    ),
    DataCase(
        "max_prompts_cap",
        9,
        "d.jsonl",
        data(jsonl(mirrored_rows(3))),
        options={"max_prompts": 1},
        check=capped(12, "capped to 12 of 36 pairs on 1 of 3 prompts"),
    ),
    DataCase(
        "max_pairs_zero",
        9,
        "d.jsonl",
        data(jsonl(BASE)),
        options={"max_pairs": 0},
        error=Err(None, None, "max_pairs must be a positive integer, or None for no cap, got 0", at="config"),
    ),
]


def test_the_cli_corpus_is_big_and_covers_every_class() -> None:
    ids = [c.id for c in DATA_CASES + CONFIG_CASES + RUN_DIR_CASES + LINK_CASES] + MODEL_CASES
    assert len(ids) >= 60 and len(set(ids)) == len(ids)
    classes = {c.klass for c in DATA_CASES + CONFIG_CASES + RUN_DIR_CASES + LINK_CASES}
    assert classes >= {1, 3, 5, 6, 7, 8, 9}  # 2 and 4 are MODEL_CASES


@pytest.mark.parametrize("case", DATA_CASES, ids=[c.id for c in DATA_CASES])
def test_data_file(case: DataCase, area: Area, cli: Callable[..., Outcome]) -> None:
    src = area["in"] / case.name
    case.make(src)
    cfg = write_config(area["in"] / "run.yaml", baseline_config(area, src, options=case.options, **case.config))
    validated = cli("validate", "--config", str(cfg))
    ran = cli("run", str(cfg))
    if case.error is not None:
        e = case.error
        message = one_line_error(ran)
        if e.at == "config":
            assert message.startswith(f"{cfg}:1: benchmark: file: ")
        else:
            head = str(src) if e.line is None else f"{src}:{e.line}"
            assert message.startswith(head + (f": field '{e.field}': " if e.field else ": ")), message
        assert e.text in message
        assert validated.rc == 1 and "FAILED" in validated.out and e.text in validated.out
        assert not (area["runs"] / "r").exists()  # a refused run leaves no run directory
        return
    assert validated.rc == 0 and "status       : OK" in validated.out, validated.out
    assert ran.rc == 0 and ran.err == "", ran.err
    results = json.loads((area["runs"] / "r" / "results.json").read_text())
    text = validated.out
    if not case.options:  # plain `perbench validate FILE` agrees, and warns about every registered method
        plain = cli("validate", str(src))
        assert plain.rc == 0 and plain.out.replace("warning", "").count("status       : OK") == 1
        text += plain.out
    assert case.check is not None
    case.check(results, text, src)


# ------------------------------------------------------------------------------------------------ configs
@dataclass(frozen=True)
class ConfigCase:
    id: str
    klass: int
    #: extra config keys (YAML text appended to a baselines-only config), or the whole file (``raw``)
    yaml: str | Callable[[dict[str, Path]], str]
    #: ``LINE: KEY: problem`` after ``FILE:`` (a substring for long messages); None: the config is accepted
    error: str | None = None
    check: Callable[[dict[str, Any], Path], None] | None = None
    raw: bool = False
    skip_if: Callable[[], bool] | None = None


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _custom_code_folder(area: Area) -> str:
    folder = area["in"] / "custom"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mine", "auto_map": {"AutoConfig": "conf.C"}}))
    (folder / "conf.py").write_text("raise SystemExit('this must never run')\n")
    (folder / "model.safetensors").write_bytes(b"")
    return f"policy: {folder}\n"


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def _config_value(key: str, value: Any) -> Callable[[dict[str, Any], Path], None]:
    def check(results: dict[str, Any], run_dir: Path) -> None:
        assert results["config"][key] == value
        assert yaml.safe_load((run_dir / "config.yaml").read_text())[key] == value

    return check


CONFIG_CASES: list[ConfigCase] = [
    # 5. read as written --------------------------------------------------------------------------
    ConfigCase("yaml_leading_zero_is_decimal", 5, "max_new_tokens: 0100\n", check=_config_value("max_new_tokens", 100)),
    ConfigCase("yaml_octal_needs_its_prefix", 5, "seed: 0o17\n", check=_config_value("seed", 15)),
    ConfigCase(
        "yaml_sexagesimal_is_text",
        5,
        "seed: 1:30\n",
        "7: seed: expected an integer in [0, 4294967295], got the string '1:30' (YAML 1.2 reads digits with _ or : "
        "as text: write the plain number, e.g. 1000 or 90)",
    ),
    ConfigCase(
        "yaml_underscore_int_is_text",
        5,
        "bootstrap: 1_000\n",
        "7: bootstrap: expected an integer in [0, 100000], got the string",
    ),
    ConfigCase("yaml_alias_bomb", 5, BOMB, "its aliases expand to over 100000 values", raw=True),
    ConfigCase("yaml_recursive_alias", 5, "baselines: &a [*a]\n", "an alias refers to itself", raw=True),
    ConfigCase(
        "reference_method_misspelt",
        5,
        "reference_method: lenght\n",
        "7: reference_method: 'lenght' is not one of this config's methods or baselines, so per-user gains and "
        "minority users would be measured against nothing. Did you mean 'length'? Allowed: length, random",
    ),
    ConfigCase(
        "reference_method_a_baseline",
        5,
        "reference_method: random\n",
        check=_config_value("reference_method", "random"),
    ),
    ConfigCase(
        "baselines_with_parameters",
        9,
        "baselines: [{name: length, unit: chars}, random]\n",
        check=lambda r, d: (
            r["upstream"]["length(unit=chars)"]["rm_accuracy"]["seen"]["n_pairs"] == 3
            or pytest.fail("no length(chars)")
        ),
    ),
    ConfigCase(
        "baseline_parameter_misspelt",
        9,
        "baselines:\n  - {name: length, units: chars}\n",
        "8: baselines[0].units: method 'length': unknown parameter 'units'. Did you mean 'unit'?",
    ),
    # 6. located, never a traceback ---------------------------------------------------------------
    ConfigCase(
        "out_dir_is_a_file",
        6,
        lambda a: (a["in"] / "afile").write_text("x") and f"out_dir: {a['in'] / 'afile'}\n",
        "7: out_dir: {in}/afile is a file, not a folder",
    ),
    ConfigCase(
        "out_dir_below_a_file",
        6,
        lambda a: (a["in"] / "afile").write_text("x") and f"out_dir: {a['in'] / 'afile' / 'runs'}\n",
        "7: out_dir: {in}/afile is a file, not a folder",
    ),
    ConfigCase(
        "run_name_over_the_file_name_limit",
        6,
        "run_name: " + "r" * 300 + "\n",
        "7: run_name: a folder name of 300 bytes; file systems allow at most 255",
    ),
    ConfigCase(
        "device_cuda_without_cuda",
        6,
        "device: cuda\n",
        "7: device: device 'cuda': CUDA is not available here",
        skip_if=_cuda,
    ),
    ConfigCase(
        "model_folder_with_its_own_code",
        6,
        _custom_code_folder,
        "7: policy: {in}/custom ships its own Python code (config.json auto_map, model type 'mine'; files: conf.py)",
    ),
    ConfigCase(
        "hub_id_typed_for_a_local_path_offline",
        6,
        "rm_backbone: models/my-rm\ndecoders: [zero_shot]\npolicy: tiny-random\n",
        "7: rm_backbone: 'models/my-rm' is not a local folder and the hub cannot be reached (offline)",
    ),
    ConfigCase(
        "file_benchmark_parameter_misspelt",
        6,
        "benchmark: {name: file, source: SRC, max_pair: 3}\n",
        "7: benchmark.max_pair: benchmark 'file': unknown parameter 'max_pair'. Did you mean 'max_pairs'?",
    ),
    # 7. hangs --------------------------------------------------------------------------------------
    ConfigCase(
        "max_new_tokens_past_the_context",
        7,
        "max_new_tokens: 1000000000\ndecoders: [zero_shot]\npolicy: tiny-random\nrm_backbone: tiny-random\n",
        "7: max_new_tokens: 1000000000 new tokens cannot fit the context of tiny-random (2048 positions",
    ),
]


def config_text(area: Area, src: Path, extra: str) -> str:
    """A baselines-only config in six lines, then the case's ``extra`` lines from line 7; a base key the case
    gives again is left as a comment, so every line keeps its number."""
    base = [
        ("benchmark", f"benchmark: {{name: file, source: {src}}}"),
        ("methods", "methods: []"),
        ("decoders", "decoders: []"),
        ("bootstrap", "bootstrap: 20"),
        ("out_dir", f"out_dir: {area['runs']}"),
        ("run_name", "run_name: r"),
    ]
    given = {line.split(":", 1)[0] for line in extra.splitlines() if line and not line.startswith((" ", "#"))}
    lines = [f"# {key}: given below" if key in given else text for key, text in base]
    return "\n".join(lines) + "\n" + extra


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c.id for c in CONFIG_CASES])
def test_config(case: ConfigCase, area: Area, cli: Callable[..., Outcome]) -> None:
    if case.skip_if is not None and case.skip_if():
        pytest.skip("the condition this case needs is absent on this machine")
    src = area["in"] / "d.jsonl"
    src.write_bytes(jsonl(BASE))
    extra = (case.yaml(area) if callable(case.yaml) else case.yaml).replace("SRC", str(src))
    cfg = area["in"] / "run.yaml"
    cfg.write_text(extra if case.raw else config_text(area, src, extra), encoding="utf-8")
    ran = cli("run", str(cfg))
    validated = cli("validate", "--config", str(cfg))
    if case.error is None:
        assert ran.rc == 0 and validated.rc == 0 and "status       : OK" in validated.out, (ran, validated)
        run_dir = area["runs"] / "r"
        assert case.check is not None
        case.check(json.loads((run_dir / "results.json").read_text()), run_dir)
        return
    message = one_line_error(ran)
    if case.raw:
        assert message.startswith(f"{cfg}:") and case.error in message, message
    else:
        assert message.startswith(f"{cfg}:" + case.error.replace("{in}", str(area["in"]))), message
    # validate reads the same config first (the same line), or loads the data and fails where the run would
    if validated.rc == 2:
        assert one_line_error(validated) == message
    else:
        assert validated.rc == 1 and "FAILED" in validated.out and message in validated.out, validated.out
    assert not (area["runs"] / "r").exists()


def test_a_config_that_is_a_named_pipe_or_dev_zero(area: Area, cli: Callable[..., Outcome]) -> None:
    pipe = area["in"] / "run.yaml"
    os.mkfifo(pipe)
    for path, what in ((pipe, "a named pipe"), (Path("/dev/zero"), "a character device")):
        for argv in (("run", str(path)), ("validate", "--config", str(path))):
            assert one_line_error(cli(*argv)) == f"{path}: is {what}, not a file; a run config is a YAML file"


# ------------------------------------------------------------------------------------------ run directories
@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two finished baselines-only runs (seeds 0 and 1: different groups), to damage and report or compare."""
    root = tmp_path_factory.mktemp("finished")
    src = root / "d.jsonl"
    src.write_bytes(jsonl(BASE))
    out = {}
    for seed in (0, 1):
        cfg = {**baseline_config({"runs": root / "runs"}, src), "seed": seed, "run_name": f"s{seed}"}
        assert main(["run", str(write_config(root / f"s{seed}.yaml", cfg))]) == 0
        out[f"s{seed}"] = root / "runs" / f"s{seed}"
    return out


@dataclass(frozen=True)
class RunDirCase:
    id: str
    klass: int
    #: damages the copied run directory ``a`` (``b`` stays whole)
    damage: Callable[[Path], None]
    #: the error after ``perbench: error: ``, relative to ``a`` (``{a}``)
    error: str


def _truncate(name: str, keep: float) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        raw = (run / name).read_bytes()
        (run / name).write_bytes(raw[: int(len(raw) * keep)])

    return damage


def _write(name: str, content: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / name).write_bytes(content)

    return damage


def _edit_cells(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        lines = (run / "cells.jsonl").read_text().splitlines()
        (run / "cells.jsonl").write_text("".join(line + "\n" for line in edit(lines)))

    return damage


def _cell(change: Callable[[dict[str, Any]], None]) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        first = json.loads(lines[0])
        change(first)
        return [json.dumps(first), *lines[1:]]

    return edit


def _replace(name: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / name).unlink()
        make(run / name)

    return damage


RUN_DIR_CASES: list[RunDirCase] = [
    RunDirCase("results_truncated", 6, _truncate("results.json", 0.5), "{a}/results.json:"),
    RunDirCase(
        "results_not_an_object", 6, _write("results.json", b"[1, 2]\n"), "{a}/results.json: expected a JSON object"
    ),
    RunDirCase(
        "results_not_utf8",
        6,
        _write("results.json", b'{"x": "\xff"}\n'),
        "{a}/results.json:1: not UTF-8 text (byte 0xff)",
    ),
    RunDirCase(
        "results_is_dev_zero",
        7,
        _replace("results.json", lambda p: p.symlink_to("/dev/zero")),
        "{a}/results.json: is a character device",
    ),
    RunDirCase("results_is_a_named_pipe", 7, _replace("results.json", fifo), "{a}/results.json: is a named pipe"),
    RunDirCase("results_missing", 6, lambda run: (run / "results.json").unlink(), "{a}/results.json: does not exist"),
    RunDirCase("cells_truncated_mid_line", 6, _truncate("cells.jsonl", 0.5), "{a}/cells.jsonl:"),
    RunDirCase(
        "cells_line_not_an_object",
        6,
        _edit_cells(lambda lines: [*lines, "[1]"]),
        "{a}/cells.jsonl:{n}: expected a JSON object, got list",
    ),
    RunDirCase(
        "cells_value_not_a_number",
        6,
        _edit_cells(_cell(lambda c: c.update(value="0.5"))),
        "{a}/cells.jsonl:1: field 'value': expected a finite number, got \"0.5\"",
    ),
    RunDirCase(
        "cells_value_nan",
        6,
        _edit_cells(lambda lines: [lines[0].replace('"value": ', '"value": NaN, "was": '), *lines[1:]]),
        "{a}/cells.jsonl:1: field 'value': expected a finite number, got NaN",
    ),
    RunDirCase(
        "cells_rl_seed_not_an_integer",
        6,
        _edit_cells(_cell(lambda c: c.update(rl_seed="0"))),
        "{a}/cells.jsonl:1: field 'rl_seed': expected an integer training seed, got \"0\"",
    ),
    RunDirCase(
        "cells_missing_a_field",
        6,
        _edit_cells(_cell(lambda c: c.pop("user"))),
        "{a}/cells.jsonl:1: field 'user': missing",
    ),
    RunDirCase(
        "cells_lost_rows",
        6,
        _edit_cells(lambda lines: lines[:-3]),
        "{a}/cells.jsonl: holds {m} cell row(s) but results.json records {n}: the file lost or gained rows",
    ),
    RunDirCase(
        "cells_edited_in_place",
        6,
        _edit_cells(_cell(lambda c: c.update(value=1.0 - c["value"]))),
        "{a}/cells.jsonl: differs from the cells the run wrote",
    ),
    RunDirCase("cells_not_utf8", 6, _write("cells.jsonl", b"\xfe\n"), "{a}/cells.jsonl:1: not UTF-8 text"),
    RunDirCase(
        "samples_damaged", 6, lambda run: (run / "samples.jsonl").write_text("{\n"), "{a}/samples.jsonl:1: not JSON"
    ),
]


def _copy(finished: dict[str, Path], runs: Path) -> tuple[Path, Path]:
    a, b = runs / "a", runs / "b"
    shutil.copytree(finished["s0"], a, symlinks=True)
    shutil.copytree(finished["s1"], b, symlinks=True)
    return a, b


@pytest.mark.parametrize("case", RUN_DIR_CASES, ids=[c.id for c in RUN_DIR_CASES])
def test_run_directory(case: RunDirCase, finished: dict[str, Path], area: Area, cli: Callable[..., Outcome]) -> None:
    a, b = _copy(finished, area["runs"])
    n = len((a / "cells.jsonl").read_text().splitlines())
    case.damage(a)
    expected = case.error.format(a=a, n=n + 1, m=n - 3)
    if "{n}" in case.error and "holds" in case.error:
        expected = case.error.format(a=a, n=n, m=n - 3)
    report = one_line_error(cli("report", str(a)))
    assert report.startswith(expected), report
    compared = one_line_error(cli("compare", str(b), str(a), "--out", str(area["runs"] / "cmp")))
    assert compared == report
    assert not (area["runs"] / "cmp").exists()


def test_compare_out_naming_a_file(finished: dict[str, Path], area: Area, cli: Callable[..., Outcome]) -> None:
    a, b = _copy(finished, area["runs"])
    target = area["runs"] / "file"
    target.write_text("x")
    for out in (target, target / "below"):
        message = one_line_error(cli("compare", str(a), str(b), "--out", str(out)))
        assert message == f"--out {out}: {target} is a file, not a folder; name a folder for the comparison"
    assert target.read_text() == "x"
    assert cli("compare", str(a), str(b), "--out", str(area["runs"] / "cmp")).rc == 0  # and whole runs compare


# ------------------------------------------------------------------------------------------ links (class 8)
@dataclass(frozen=True)
class LinkCase:
    id: str
    klass: int
    #: the file or folder in the run directory that is planted as a link into outside/
    name: str
    #: the command: "run" (a rerun into the directory), "report", or "compare" (the link in its --out folder)
    command: str
    hard: bool = False


LINK_CASES: list[LinkCase] = [
    LinkCase("lock_link_on_run", 8, ".lock", "run"),
    LinkCase("lock_hard_link_on_run", 8, ".lock", "run", hard=True),
    LinkCase("units_store_link_on_run", 8, "units.sqlite", "run"),
    LinkCase("store_journal_link_on_run", 8, "units.sqlite-wal", "run"),
    LinkCase("results_link_on_run", 8, "results.json", "run"),
    LinkCase("plots_link_on_run", 8, "plots", "run"),
    LinkCase("plots_link_on_report", 8, "plots", "report"),
    LinkCase("report_link_on_report", 8, "report.html", "report"),
    LinkCase("leaderboard_link_on_compare", 8, "leaderboard.md", "compare"),
    LinkCase("plots_link_on_compare", 8, "plots", "compare"),
]


@pytest.mark.parametrize("case", LINK_CASES, ids=[c.id for c in LINK_CASES])
def test_no_write_through_a_link(
    case: LinkCase, finished: dict[str, Path], area: Area, cli: Callable[..., Outcome]
) -> None:
    outside = area["outside"]
    target = outside / "victim" if case.name != "plots" else outside
    src = area["in"] / "d.jsonl"
    src.write_bytes(jsonl(BASE))
    if case.command == "run":
        folder = area["runs"] / "r"
        if case.name == "plots":  # a finished run received with a planted link, run again
            shutil.copytree(finished["s0"], folder, symlinks=True)
        else:
            folder.mkdir()
        argv = ["run", str(write_config(area["in"] / "run.yaml", baseline_config(area, src)))]
    elif case.command == "report":
        folder, _ = _copy(finished, area["runs"])
        argv = ["report", str(folder)]
    else:
        a, b = _copy(finished, area["runs"])
        folder = area["runs"] / "cmp"
        folder.mkdir()
        argv = ["compare", str(a), str(b), "--out", str(folder)]
    planted = folder / case.name
    if planted.exists():
        shutil.rmtree(planted) if planted.is_dir() else planted.unlink()
    if case.hard:
        os.link(target, planted)
    else:
        planted.symlink_to(target, target_is_directory=target.is_dir())
    message = one_line_error(cli(*argv))
    if case.hard:
        assert message == f"{planted} is a hard link to another file; perbench would write into it: remove it and rerun"
    else:
        assert message.startswith(f"{planted} is a symbolic link (to {target}); perbench never writes through a link")
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]  # the fixture checks the victim's content


# ------------------------------------------------------------------------- the CLI end to end on models
MODEL_CASES = [
    "prb_methods_not_applicable_cli",
    "seen_user_without_train_pairs_per_user_method_cli",
    "hub_rm_without_a_trained_head_cli",
]


def _tiny_config(out: Path, benchmark: dict[str, Any], methods: list[Any]) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "policy": "tiny-random",
        "rm_backbone": "tiny-random",
        "methods": methods,
        "decoders": [],
        "bootstrap": 10,
        "shot_curve": [1],
        "bertscore": False,
        "device": "cpu",
        "out_dir": str(out),
    }


def test_not_applicable_paths_and_a_random_head_through_the_cli(
    tmp_path: Path, tiny_lm: Any, cli: Callable[..., Outcome]
) -> None:
    """Class 2: an evaluation-only benchmark and a seen user without train pairs leave methods not applicable; the
    CLI summary after results.json must report that, not crash. Class 4: a language model read as a reward model
    (its score head initialised at random) is refused."""
    from tests.fixtures_upstream import prb_rows, write_jsonl

    prb = write_jsonl(tmp_path / "prb.jsonl", prb_rows())
    cfg = write_config(
        tmp_path / "prb.yaml", _tiny_config(tmp_path / "runs", {"name": "prb", "source": str(prb)}, ["global_bt"])
    )
    ran = cli("run", str(cfg))
    assert ran.rc == 0 and f"  {'global_bt':<28} not applicable: no train pairs" in ran.out, ran

    rows = [
        *BASE[:4],
        {**BASE[4], "split": "test"},
        BASE[5],
        *[row(u, "Cup?", "Tall.", "Short.", "train") for u in ("u1", "u2")],
    ]
    src = tmp_path / "d.jsonl"
    src.write_bytes(jsonl(rows))
    bench = {"name": "file", "source": str(src)}
    cfg = write_config(tmp_path / "mpu.yaml", _tiny_config(tmp_path / "runs", bench, ["mpu"]))
    validated = cli("validate", "--config", str(cfg))
    assert validated.rc == 0 and "seen -> unseen: 1 user(s) without train pairs" in validated.out
    assert "methods that adapt from shots (mpu) report them not applicable" in validated.out
    ran = cli("run", str(cfg))
    assert ran.rc == 0 and "\n  mpu " in ran.out, ran

    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "lm"
    tok = tiny_lm.tokenizer
    small = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tok.pad_token_id,
        num_labels=1,
    )
    LlamaForCausalLM(small).save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg = write_config(
        tmp_path / "hub.yaml", _tiny_config(tmp_path / "runs", bench, [{"name": "hub_rm", "model": str(folder)}])
    )
    ran = cli("run", str(cfg))
    message = ran.err.splitlines()[-1]  # after transformers' own progress bar while it loads the weights
    assert ran.rc == 2 and ran.out == ""
    assert message.startswith(f"perbench: error: hub_rm: {folder} has no trained weights for score.weight")
    assert "allow_untrained_head: true" in message
