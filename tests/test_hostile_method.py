"""A method written to cheat, registered at run time and run in-process and as ``{name: isolated, …}``: every route it
tries besides learning (the order of what it scores, its own ``score_pairs``, ``oracle = True``, earlier runs'
files in reach, rebuilding a benchmark sealed with a private secret) leaves it at chance with no key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.hostile_probe import FirstJudge, Hostile

BENCH = {"max_train_prompts": 2, "max_test_prompts": 2, "consensus_per_prompt": 0}
SECRET = "a private secret of this test, not in the package"


def _spec(tmp_path: Path, methods: list[Any], **bench: Any) -> dict[str, Any]:
    return {
        "benchmark": {"name": "rubrics", **BENCH, **bench},
        "policy": "tiny-random", "rm_backbone": "tiny-random", "baselines": [], "methods": methods,
        "decoders": [], "bootstrap": 20, "shot_curve": [1], "bertscore": False, "out_dir": str(tmp_path / "runs"),
        "device": "cpu",
    }  # fmt: skip


def _chance(acc: dict[str, Any]) -> None:
    """50 % within 4 standard errors of a coin (the run's order is drawn from a fresh secret each time)."""
    n, a = acc["n_pairs"], acc["accuracy"]
    assert abs(a - 0.5) <= 4 * np.sqrt(0.25 / n), (a, n)


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    from perbench.registry import reward_models

    monkeypatch.chdir(tmp_path)  # earlier runs are in the working folder, and in the child's parent's
    reward_models.register("hostile", Hostile)
    reward_models.register("first_judge", FirstJudge)
    yield
    reward_models._entries.pop("hostile", None)
    reward_models._entries.pop("first_judge", None)


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from perbench.api import run
    from perbench.config import RunConfig

    return run(RunConfig.from_dict(spec)).results


def test_a_hostile_method_scores_at_chance_and_recovers_no_key(
    hostile: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perbench.data.isolation import seal
    from perbench.data.rubrics.benchmark import load_rubrics

    # an earlier run of the public benchmark, its results in reach: they map every user back to the source
    earlier = _run({**_spec(tmp_path, []), "baselines": ["length"]})  # a baseline only: no model, seconds
    assert len(earlier["benchmark"]["meta"]["source_user_ids"]) == 32

    # the routes are real: the order (chosen first) and its own score_pairs would give 100 %; rebuilding the
    # public benchmark from the package gives the very ids a run hands methods
    bench = seal(load_rubrics(**BENCH)).bench
    pairs = bench.test_pairs()
    s_w, s_l = Hostile(report=str(tmp_path / "x")).score_pairs(pairs)
    assert np.mean(s_w > s_l) == 1.0
    first = Hostile(report=str(tmp_path / "x")).score(
        [*(_item(p, p.chosen) for p in pairs), *(_item(p, p.rejected) for p in pairs)]
    )
    assert np.mean(first[: len(pairs)] > first[len(pairs) :]) == 1.0

    reports = {where: tmp_path / f"{where}.json" for where in ("public", "public_child", "secret", "secret_child")}

    def methods(tag: str) -> list[Any]:
        mine = {"report": str(reports[tag]), "rebuild": BENCH}
        child = {"report": str(reports[f"{tag}_child"]), "rebuild": BENCH}
        return [
            {"name": "hostile", **mine},
            {"name": "isolated", "method": "tests.hostile_probe:Hostile", "params": child},
            "first_judge",
        ]

    public = _run(_spec(tmp_path, methods("public")))
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET, encoding="utf-8")
    private = _run(_spec(tmp_path, methods("secret"), secret_file=str(secret_file)))

    for res in (public, private):
        for up in res["upstream"].values():
            for group in ("seen", "unseen", "all"):
                _chance(up["rm_accuracy"][group])  # order, score_pairs and "the first is better" give nothing
        roles = res["analysis"]["roles"]
        # a class attribute makes no oracle: no answer key, and no reference line either
        assert len(roles) == 3 and all(r == "deployable" for r in roles.values())

    found = {k: json.loads(p.read_text(encoding="utf-8")) for k, p in reports.items()}
    for where, got in found.items():
        assert got["users"] == 32 and got["answer_keys"] == 0, (where, got)  # oracle = True gets no answer key
        assert got["files"] > 0, where  # earlier runs' files were in reach (cwd, or the parent's through /proc)
        assert got["users_named"] == got["pairs_named"] == got["users_mapped"] == 0, (where, got)
    # the public default can be rebuilt from the package (docs say so); under a private secret nothing matches
    assert found["public"]["rebuilt"] == found["public_child"]["rebuilt"] == 32
    assert found["secret"]["rebuilt"] == found["secret_child"]["rebuilt"] == 0


def _item(p: Any, y: str) -> Any:
    from perbench.rewards.base import ScoreItem

    return ScoreItem(p.user_id, p.prompt, y)


def test_only_a_method_registered_as_oracle_gets_the_answer_keys_and_is_a_reference_line(
    hostile: Any, tmp_path: Path
) -> None:
    from perbench.registry import reward_models

    report = tmp_path / "oracle.json"
    reward_models.register("registered_oracle", Hostile, role="oracle")
    try:
        res = _run(_spec(tmp_path, [{"name": "registered_oracle", "report": str(report)}]))
    finally:
        reward_models._entries.pop("registered_oracle", None)
    assert json.loads(report.read_text(encoding="utf-8"))["answer_keys"] == 1
    assert set(res["analysis"]["roles"].values()) == {"oracle"}


def test_a_private_secret_deals_rubrics_within_each_group_and_holds_out_two_prompts_per_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections import Counter

    from perbench.data.rubrics.benchmark import load_rubrics
    from perbench.data.rubrics.prompts import PROMPT_TOPICS

    public = load_rubrics(max_train_prompts=2, max_test_prompts=2)
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n", encoding="utf-8")
    private = load_rubrics(max_train_prompts=2, max_test_prompts=2, secret_file=str(path))
    monkeypatch.setenv("PERBENCH_RUBRICS_SECRET", SECRET)
    assert load_rubrics(max_train_prompts=2, max_test_prompts=2).fingerprint() == private.fingerprint()
    monkeypatch.delenv("PERBENCH_RUBRICS_SECRET")
    assert private.meta["answer_key"] == "drawn by a private secret" and SECRET not in json.dumps(private.meta)
    for seen in (True, False):  # the same rubrics in each group, dealt to other users
        rubrics = [
            Counter(u.rubric for u in b.users.values() if u.seen == seen) for b in (public, private)
        ]  # fmt: skip
        assert rubrics[0] == rubrics[1]
    moved = sum(public.users[u].rubric != private.users[u].rubric for u in public.users)
    assert moved >= 16, moved
    test_prompts = {p.meta["prompt_id"] for p in load_rubrics(secret_file=str(path)).test_pairs()}
    assert Counter(PROMPT_TOPICS[p] for p in test_prompts) == dict.fromkeys(set(PROMPT_TOPICS.values()), 2)
    assert test_prompts != {p.meta["prompt_id"] for p in load_rubrics().test_pairs()}
    path.write_text("short", encoding="utf-8")
    with pytest.raises(ValueError, match=r"secret_file: the secret in .* has 5 bytes; give at least 16"):
        load_rubrics(secret_file=str(path))
    with pytest.raises(ValueError, match=r"secret_file: cannot read .*missing"):
        load_rubrics(secret_file=str(tmp_path / "missing"))
    path.write_text(SECRET, encoding="utf-8")
    with pytest.raises(ValueError, match="paraphrases"):
        load_rubrics(paraphrases=1, secret_file=str(path))
