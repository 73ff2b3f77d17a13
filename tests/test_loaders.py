"""The generic loader: formats, field maps, located errors, counted skips, split/seen policies, validation."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from perbench.data.fields import FieldMap
from perbench.data.loaders import format_validation, load_benchmark_file, validate_file
from perbench.data.reading import read_rows
from perbench.data.records import Message
from perbench.data.rows import MISSING, DataError, resolve
from tests.fixtures_upstream import save_to_disk, write_json, write_jsonl, write_parquet

ROWS: list[dict[str, Any]] = [
    {"ground_truth_persona": "likes cats", "question": "Pet?", "chosen": "A cat.", "rejected": "A dog."},
    {"ground_truth_persona": "likes cats", "question": "Toy?", "chosen": "Yarn.", "rejected": "A ball."},
    {"ground_truth_persona": "likes dogs", "question": "Pet?", "chosen": "A dog.", "rejected": "A cat."},
]
MAP = "user_id=ground_truth_persona,prompt=question"


def test_read_rows_every_format(tmp_path: Path) -> None:
    expected = [r["question"] for r in ROWS]
    files = {
        "jsonl": write_jsonl(tmp_path / "d.jsonl", ROWS),
        "json": write_json(tmp_path / "d.json", ROWS),
        "json_data": write_json(tmp_path / "dd.json", {"data": ROWS}),
        "parquet": write_parquet(tmp_path / "d.parquet", ROWS),
    }
    with open(tmp_path / "d.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(ROWS)
    files["csv"] = tmp_path / "d.csv"
    for kind, path in files.items():
        got = list(read_rows(path))
        assert [r["question"] for _, _, r in got] == expected, kind
        assert got[0][0] == str(path)
    assert [n for _, n, _ in read_rows(files["jsonl"])] == [1, 2, 3]
    assert [n for _, n, _ in read_rows(files["csv"])] == [2, 3, 4]  # line 1 is the header


def test_json_lines_under_json_suffix_and_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "batch3.json"
    p.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n", encoding="utf-8")
    assert [n for _, n, _ in read_rows(p)] == [1, 3]


def test_invalid_json_and_non_objects_are_located(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:2: invalid JSON"):
        list(read_rows(p))
    q = write_json(tmp_path / "list.json", [ROWS[0], [1, 2]])
    with pytest.raises(DataError, match=r"list\.json:2: expected a JSON object, got a list of 2 value"):
        list(read_rows(q))
    r = write_json(tmp_path / "obj.json", {"rows": ROWS})
    with pytest.raises(DataError, match=r"obj\.json: expected a list of objects"):
        list(read_rows(r))


def test_unknown_suffix_missing_file_and_plain_folder(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("hi", encoding="utf-8")
    with pytest.raises(DataError, match="unknown file type"):
        list(read_rows(tmp_path / "x.txt"))
    with pytest.raises(FileNotFoundError):
        list(read_rows(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="not a saved HF dataset"):
        list(read_rows(tmp_path))


def test_csv_multiline_cells_keep_true_line_numbers(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text('user_id,prompt,chosen,rejected\nu,"two\nlines",a,b\nu,p,5,\n', encoding="utf-8")
    assert [n for _, n, _ in read_rows(p)] == [2, 4]
    bench = load_benchmark_file(p)  # an empty response is a degenerate pair: dropped and counted, not an error
    assert bench.skipped.counts["empty_response"] == 1 and bench.skipped.examples["empty_response"] == ["m.csv:4"]


def test_load_from_disk_dataset_and_datasetdict(tmp_path: Path) -> None:
    save_to_disk(tmp_path / "ds", ROWS)
    save_to_disk(tmp_path / "dd", ROWS, split="test")
    bench = load_benchmark_file(tmp_path / "ds", mapping=MAP)
    assert len(bench.pairs) == 3 and bench.meta["format"] == "hf_disk"
    bench = load_benchmark_file(tmp_path / "dd", mapping=MAP)
    assert bench.pairs[0].meta["source"].endswith("dd[test]:1")
    with pytest.raises(DataError, match="no split 'train'"):
        load_benchmark_file(tmp_path / "dd", mapping=MAP, split="train")


def test_fieldmap_parse_and_errors() -> None:
    fm = FieldMap.parse("user_id=ground_truth_persona, prompt=question,split=")
    assert fm.source("user_id") == "ground_truth_persona" and fm.source("chosen") == "chosen"
    assert fm.disabled("split") and "split" not in fm.to_dict()
    assert FieldMap.parse({"prompt": "q"}).source("prompt") == "q"
    with pytest.raises(DataError, match="field 'usr': unknown field"):
        FieldMap.parse("usr=x")
    with pytest.raises(DataError, match="expected 'canonical=source'"):
        FieldMap.parse("user_id")
    with pytest.raises(DataError, match="mapped twice"):
        FieldMap.parse("prompt=a,prompt=b")
    with pytest.raises(DataError, match="required field cannot be switched off"):
        FieldMap.parse("chosen=")


def test_resolve_dotted_paths_and_indices() -> None:
    row = {"info": {"post": "hi"}, "summaries": [{"text": "a"}, {"text": "b"}], "a.b": 1}
    assert resolve(row, "info.post") == "hi"
    assert resolve(row, "summaries.1.text") == "b"
    assert resolve(row, "a.b") == 1
    assert resolve(row, "summaries.5.text") is MISSING and resolve(row, "info.x") is MISSING


def test_mapping_dotted_paths_and_chat_prompts(tmp_path: Path) -> None:
    rows = [
        {"worker": "w1", "info": {"post": "Long post."}, "summaries": [{"text": "good"}, {"text": "bad"}]},
        {
            "worker": "w2",
            "info": {"post": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
            "summaries": [{"text": "hey"}, {"text": "greetings, esteemed"}],
        },
    ]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    bench = load_benchmark_file(
        p, mapping="user_id=worker,prompt=info.post,chosen=summaries.0.text,rejected=summaries.1.text"
    )
    assert bench.pairs[0].prompt == "Long post." and bench.pairs[0].chosen == "good"
    assert bench.pairs[1].prompt == (Message("system", "Be brief."), Message("user", "Hi"))


def test_trl_conversations_and_implicit_prompt(tmp_path: Path) -> None:
    conv = [{"role": "user", "content": "Q?"}]
    rows = [
        {
            "user_id": "u",
            "chosen": [*conv, {"role": "assistant", "content": "yes"}],
            "rejected": [*conv, {"role": "assistant", "content": "no"}],
        }
    ]
    bench = load_benchmark_file(write_jsonl(tmp_path / "t.jsonl", rows))
    assert bench.pairs[0].prompt == (Message("user", "Q?"),) and bench.pairs[0].chosen == "yes"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chosen": 5}, "d.jsonl:2: field 'chosen': expected a string or a list of messages, got int"),
        ({"question": None}, "d.jsonl:2: field 'question': missing (null)"),
        ({"question": "   "}, "d.jsonl:2: field 'question': empty text"),
        (
            {"ground_truth_persona": ["x"]},
            "d.jsonl:2: field 'ground_truth_persona': expected a string or integer id, got list",
        ),
    ],
)
def test_bad_rows_raise_located_errors(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    rows = [dict(r) for r in ROWS]
    rows[1].update(change)
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_benchmark_file(p, mapping=MAP)
    assert message in str(err.value)
    bench = load_benchmark_file(p, mapping=MAP, on_error="skip")
    assert len(bench.pairs) == 2 and bench.skipped.total() == 1
    assert message in next(iter(bench.skipped.examples.values()))[0]


def test_missing_mapped_column_names_the_source_field(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(DataError, match=r"d\.jsonl:1: field 'persona': missing"):
        load_benchmark_file(p, mapping="user_id=persona,prompt=question")


def test_dedup_and_degenerate_are_counted(tmp_path: Path) -> None:
    rows = [*ROWS, ROWS[0], {**ROWS[2], "rejected": ROWS[2]["chosen"]}]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    bench = load_benchmark_file(p, mapping=MAP)
    assert len(bench.pairs) == 3 and bench.weighting == "pair"
    assert bench.skipped.counts["duplicate_pair"] == 1
    assert bench.skipped.counts["chosen_equals_rejected"] == 1
    assert bench.skipped.examples["duplicate_pair"] == ["d.jsonl:4"]
    rows_weighted = load_benchmark_file(p, mapping=MAP, dedup=False)
    assert len(rows_weighted.pairs) == 4 and rows_weighted.weighting == "row"


def test_split_defaults_to_test_and_is_documented(tmp_path: Path) -> None:
    bench = load_benchmark_file(write_jsonl(tmp_path / "d.jsonl", ROWS), mapping=MAP)
    assert {p.split for p in bench.pairs} == {"test"}
    assert bench.meta["split_policy"] == "all test (no split field mapped)"
    rows = [{**r, "part": s} for r, s in zip(ROWS, ["train", "validation", "test"], strict=True)]
    bench = load_benchmark_file(write_jsonl(tmp_path / "s.jsonl", rows), mapping=MAP + ",split=part")
    assert [p.split for p in bench.pairs] == ["train", "test", "test"]
    rows[0]["part"] = "holdout"
    with pytest.raises(DataError, match=r"s2\.jsonl:1: field 'part': unknown split 'holdout'"):
        load_benchmark_file(write_jsonl(tmp_path / "s2.jsonl", rows), mapping=MAP + ",split=part")


def test_seen_policies(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "d.jsonl", ROWS)
    assert load_benchmark_file(p, mapping=MAP).unseen_users == []
    bench = load_benchmark_file(p, mapping=MAP, unseen_users=["likes dogs"])
    assert bench.unseen_users == ["likes dogs"] and bench.seen_users == ["likes cats"]
    with pytest.raises(DataError, match="field 'unseen_users': unknown user"):
        load_benchmark_file(p, mapping=MAP, unseen_users=["nobody"])
    a = load_benchmark_file(p, mapping=MAP, unseen_fraction=0.5, seed=3)
    b = load_benchmark_file(p, mapping=MAP, unseen_fraction=0.5, seed=3)
    assert a.unseen_users == b.unseen_users and len(a.unseen_users) == 1
    rows = [{**r, "is_seen": r["ground_truth_persona"] == "likes cats"} for r in ROWS]
    bench = load_benchmark_file(write_jsonl(tmp_path / "s.jsonl", rows), mapping=MAP + ",seen=is_seen")
    assert bench.unseen_users == ["likes dogs"]
    rows[1]["is_seen"] = False
    with pytest.raises(DataError, match=r"s2\.jsonl:2: field 'is_seen': user 'likes cats' was seen=True"):
        load_benchmark_file(write_jsonl(tmp_path / "s2.jsonl", rows), mapping=MAP + ",seen=is_seen")


def test_profile_rubric_and_reference_fields(tmp_path: Path) -> None:
    posts = ["post one", {"id": 7, "text": "post two"}]
    rows = [{**r, "persona_text": r["ground_truth_persona"], "posts": posts, "gold": "gold"} for r in ROWS]
    bench = load_benchmark_file(
        write_jsonl(tmp_path / "d.jsonl", rows),
        mapping=MAP + ",answer_key=persona_text,profile=posts,reference=gold",
    )
    user = bench.users["likes cats"]
    assert user.answer_key == {"rubric_text": "likes cats"}
    assert [p.text for p in user.profile] == ["post one", "post two"]
    with pytest.raises(DataError, match=r"field 'rubric_text': this field was renamed: map it to 'answer_key'"):
        load_benchmark_file(write_jsonl(tmp_path / "d.jsonl", rows), mapping=MAP + ",rubric_text=persona_text")
    assert user.profile[1].item_id == "7"
    assert bench.reference("likes dogs", "Pet?") is not None


def test_duplicate_pair_id_with_different_content(tmp_path: Path) -> None:
    rows = [{**r, "pid": "same"} for r in ROWS[:2]]
    with pytest.raises(DataError, match="duplicate pair id 'same'"):
        load_benchmark_file(write_jsonl(tmp_path / "d.jsonl", rows), mapping=MAP + ",pair_id=pid")


def test_validate_file_report_and_text(tmp_path: Path) -> None:
    rows = [*ROWS, ROWS[0], {**ROWS[1], "chosen": 3}]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    report = validate_file(p, mapping=MAP)  # on_error: raise, as a run: the bad row fails it
    assert report["rows_read"] == 5 and report["pairs_kept"] == 3 and report["users"] == 2
    assert report["skipped"]["duplicate_pair"]["count"] == 1
    assert report["first_error"].startswith(f"{p}:5: field 'chosen'") and "on_error: skip" in report["fatal"]
    assert report["ok"] is False and report["splits"] == {"train": 0, "test": 3}
    text = format_validation(report)
    assert "pairs kept   : 3 (pair-weighted)" in text and "FAILED (1 row(s) with errors" in text
    skipping = validate_file(p, mapping=MAP, on_error="skip")  # a run with on_error: skip loads it
    assert skipping["ok"] and skipping["skipped"]["invalid:chosen"]["count"] == 1
    good = validate_file(write_jsonl(tmp_path / "g.jsonl", ROWS), mapping=MAP)
    assert good["ok"] and "status       : OK" in format_validation(good)
    fatal = validate_file(tmp_path / "missing.jsonl", mapping=MAP)
    assert fatal["ok"] is False and "no such file" in fatal["fatal"]
    assert "a run would stop here" in format_validation(fatal)
    assert "unknown field" in validate_file(p, mapping="persona=x")["fatal"]


def test_data_error_pickles_and_is_a_value_error() -> None:
    err = DataError("data.jsonl", 7, "chosen", "expected a string, got int")
    assert str(err) == "data.jsonl:7: field 'chosen': expected a string, got int"
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.line == 7


def test_loaders_module_keeps_its_public_names() -> None:
    import perbench.data.loaders as loaders
    from perbench.data.policies import assign_unseen

    assert loaders.DataError is DataError and loaders.assign_unseen is assign_unseen
    back = pickle.loads(pickle.dumps(loaders.DataError("d.csv", 2, None, "bad")))
    assert type(back) is DataError and str(back) == "d.csv:2: bad"
    for name in loaders.__all__:
        assert callable(getattr(loaders, name))


def test_registry_file_entry(tmp_path: Path) -> None:
    from perbench.registry import benchmarks

    load = benchmarks.get("file")
    bench = load(source=write_jsonl(tmp_path / "d.jsonl", ROWS), mapping=MAP)
    assert len(bench.pairs) == 3
