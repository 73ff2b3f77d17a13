"""No answer key reaches a method, and every method gets the same shots.

For every benchmark loader, on the tiny upstream-layout fixtures: the answer key (rubric, labelling rule,
style name, persona sentence, PRB's aspects and narrative) is recorded in ``User.answer_key`` for graders,
and none of it appears in any text a reward model, a judge or a decoder reads -- the pairs, the user text,
GenARM's conditioned prompt, the ICL judge's prompt, the ICL / ICL-RAG prompts. Only the separately named
oracle judge reads it. ICL decoders and reward models see the identical few-shot set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from perbench.builders.pref_lamp import load_pref_lamp
from perbench.config import Component
from perbench.data.benchmarks.persona import load_domain_styles, load_persona
from perbench.data.benchmarks.prb import load_prb
from perbench.data.benchmarks.prism import load_prism
from perbench.data.benchmarks.tldr import load_tldr
from perbench.data.loaders import load_benchmark_file
from perbench.data.records import Benchmark, PreferencePair, ProfileItem, Prompt, User, prompt_messages
from perbench.data.rubrics.benchmark import load_rubrics
from perbench.data.rubrics.build import assemble_pool
from perbench.data.rubrics.users import RUBRIC_USERS
from perbench.data.user_context import (
    POLICIES,
    UserView,
    answer_key_summary,
    answer_key_texts,
    is_phrase,
    oracle_user_text,
    user_text,
)
from perbench.data.user_context import method_inputs as context_for
from perbench.decoding.icl import ICL, ICLRAG
from perbench.models.generate import GenRequest
from perbench.rewards.base import RewardModel, RMContext, ScoreItem
from perbench.rewards.genarm import GenARM
from perbench.rewards.icl_judge import ICLJudge, ICLJudgeOracle
from tests.fixtures_upstream import (
    PRB_SECRET,
    domain_rows,
    lamp5_user_based,
    persona_rows,
    prb_rows,
    tldr_rows,
    write_jsonl,
    write_prism,
)

SHOTS = 2


class BagEncoder:
    """A cheap stand-in for the sentence encoder (Pref-LaMP's negative mining): hashed bag of words."""

    name = "bag"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 128), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 128] += 1.0
        return np.asarray(out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9), np.float32)


GENERIC_ROWS: list[dict[str, Any]] = [
    {
        "user": "a",
        "q": f"Question {i}?",
        "good": f"Good answer {i}.",
        "bad": f"Bad answer {i}.",
        "rule": "Wants answers that name a colour.",
        "posts": ["I paint landscapes.", "My rule: Wants answers that name a colour."],
        "split": "train" if i < 3 else "test",
    }
    for i in range(5)
] + [
    {
        "user": "b",
        "q": f"Question {i}?",
        "good": f"Bad answer {i}.",
        "bad": f"Good answer {i}.",
        "rule": "Wants answers without any colour words.",
        "posts": ["I grow tomatoes."],
        "split": "train" if i < 3 else "test",
    }
    for i in range(5)
]


def _rubrics(tmp: Path) -> Benchmark:
    bases = {
        "p01": {"x": "Boil water. Add the egg.", "y": "Well, you know, it's easy! Just do it, it's fine."},
        "p04": {"x": "Pick a time. Stick to it.", "y": "Honestly? You'll figure it out, it's no big deal."},
    }
    path = tmp / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in assemble_pool(bases, seed=1)))
    return load_rubrics(pool=str(path))


def load_all(tmp: Path) -> dict[str, tuple[Benchmark, list[str]]]:
    """Every loader on its fixture, with the answer-key texts known from the fixture itself (so a loader that
    forgot to record its answer key still gets checked)."""
    tldr = write_jsonl(tmp / "cmp.jsonl", tldr_rows())
    persona = persona_rows()
    return {
        "rubrics": (_rubrics(tmp), [u.description for u in RUBRIC_USERS]),
        "prb": (
            load_prb(write_jsonl(tmp / "prb.jsonl", prb_rows()), include_profile=2),
            [PRB_SECRET] + [r["narrative"] for r in prb_rows()],
        ),
        "tldr_pal": (
            load_tldr(tldr, unseen_min_comparisons=5, n_shot=SHOTS + 1),
            [f"Prefers {x} summaries." for x in ("shorter", "longer")] + ["prefers shorter", "prefers longer"],
        ),
        "tldr_lore": (load_tldr(tldr, protocol="lore"), []),
        "persona": (
            load_persona(write_jsonl(tmp / "persona.jsonl", persona), unseen_users=["I love baroque music."]),
            sorted({r["persona"] for r in persona}),
        ),
        "domain_styles": (
            load_domain_styles(
                write_jsonl(tmp / "dom.jsonl", domain_rows()), train_fraction=0.4, unseen_styles=["playful"]
            ),
            ["Prefers responses in the style"],
        ),
        "prism": (load_prism(write_prism(tmp / "prism"), unseen_fraction=0.25), []),
        "pref_lamp": (
            load_pref_lamp(
                lamp5_user_based(tmp / "lamp"), encoder=BagEncoder(), unseen_fraction=0.25, with_table1=False
            ),
            [],
        ),
        "file": (
            load_benchmark_file(
                write_jsonl(tmp / "generic.jsonl", GENERIC_ROWS),
                mapping="user_id=user,prompt=q,chosen=good,rejected=bad,answer_key=rule,profile=posts,split=split",
                unseen_users=["b"],
            ),
            sorted({r["rule"] for r in GENERIC_ROWS}),
        ),
    }


@pytest.fixture(scope="module")
def benches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Benchmark, list[str]]]:
    return load_all(tmp_path_factory.mktemp("answer_keys"))


NAMES = ["rubrics", "prb", "tldr_pal", "tldr_lore", "persona", "domain_styles", "prism", "pref_lamp", "file"]
WITH_KEY = {"rubrics", "prb", "tldr_pal", "persona", "domain_styles", "file"}


def _prompt_text(prompt: Prompt) -> str:
    return "\n".join(m["content"] for m in prompt_messages(prompt))


def _judge(bench: Benchmark, cls: type[ICLJudge], monkeypatch: pytest.MonkeyPatch) -> ICLJudge:
    """The judge as the runner drives it: fit on the train pairs (no model needed to build prompts), then
    every unseen user adapted from their first ``SHOTS`` pairs."""
    monkeypatch.setattr("perbench.rewards.icl_judge.resolve_backbone", lambda *a, **k: None)
    judge = cls()
    judge.fit(bench.train_pairs(), RMContext(extra=context_for(bench.users, oracle=cls.oracle)))
    for u in bench.unseen_users:
        few = bench.fewshot(u, SHOTS)
        if few:
            judge.adapt(u, few)
    return judge


def method_inputs(bench: Benchmark, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(where, text) for every text that reaches a reward model, a judge or a decoder prompt."""
    for p in bench.pairs:
        yield f"pair {p.pair_id} ids", f"{p.pair_id} {p.user_id}"
        yield f"pair {p.pair_id} prompt", _prompt_text(p.prompt)
        yield f"pair {p.pair_id} responses", f"{p.chosen}\n{p.rejected}"
        yield f"pair {p.pair_id} meta", json.dumps(dict(p.meta), default=str)
    for uid, u in bench.user_views().items():
        yield f"user text {uid}", user_text(u) or ""
        yield f"user view {uid}", repr(u)  # everything the view holds, the id included
    genarm = GenARM()
    genarm.set_users(bench.user_views())
    judge = _judge(bench, ICLJudge, monkeypatch)
    decoders: list[ICL] = [ICL(k=4), ICL(k=4, format="pairs"), ICLRAG(k=4)]
    for dec in decoders:
        dec.bind_benchmark(bench, shots=SHOTS)
    for p in bench.test_pairs():
        yield f"genarm {p.pair_id}", _prompt_text(genarm.user_prompt(p.user_id, p.prompt))
        yield f"icl_judge {p.pair_id}", _prompt_text(judge.judge_prompt(p))
        for dec in decoders:
            yield (
                f"{dec.name}/{dec.format} {p.pair_id}",
                _prompt_text(dec.build_prompt(GenRequest(p.prompt, p.user_id, 0))),
            )


def _secrets(bench: Benchmark, known: list[str]) -> list[str]:
    texts = set(known)
    for u in bench.users.values():
        texts.update(t for t in answer_key_texts(u) if is_phrase(t))
    return sorted(texts)


@pytest.mark.parametrize("name", NAMES)
def test_no_answer_key_reaches_any_method(
    name: str, benches: dict[str, tuple[Benchmark, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, known = benches[name]
    secrets = _secrets(bench, known)
    if name in WITH_KEY:
        assert secrets, name
        # the answer key is kept for graders and reports, in one place
        assert all(answer_key_texts(u) for u in bench.users.values()), name
        assert all("answer_key" not in u.meta for u in bench.users.values())
    n = 0
    for where, text in method_inputs(bench, monkeypatch):
        low = text.casefold()
        leaked = [s for s in secrets if s.casefold() in low]
        assert not leaked, f"{name}: {where} contains answer key {leaked[0]!r}"
        n += 1
    assert n > len(bench.pairs)  # the prompts were really built


@pytest.mark.parametrize("name", NAMES)
def test_user_text_holds_no_answer_key_word_and_no_test_response(
    name: str, benches: dict[str, tuple[Benchmark, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stricter on what describes the user: not even a one-word answer key (a style name, "shorter") is in
    the user text; and no response a user preferred in a test pair is in any context a method reads about
    that user (user text, judge examples, ICL items)."""
    bench, _ = benches[name]
    for uid, u in bench.users.items():
        t = (user_text(u) or "").casefold()
        assert not [k for k in answer_key_texts(u) if k.casefold() in t], (name, uid)
    judge = _judge(bench, ICLJudge, monkeypatch)
    decoders = [ICL(k=100, format=fmt) for fmt in ("chosen", "pairs")]
    for dec in decoders:
        dec.bind_benchmark(bench, shots=SHOTS)
    for uid in bench.users:
        contexts = [ex.preferred + "\n" + ex.other for ex in judge.examples.get(uid, [])]
        contexts += [judge.texts.get(uid, "")] + [it.text for dec in decoders for it in dec.candidates(uid)]
        answers = {p.chosen for p in bench.select(split="test", user=uid)}
        assert not [a for a in answers if any(a in c for c in contexts)], (name, uid)


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_declares_its_user_context(name: str, benches: dict[str, tuple[Benchmark, list[str]]]) -> None:
    bench, _ = benches[name]
    uc = bench.meta["user_context"]
    assert uc["policy"] in POLICIES, name
    assert uc["policy"] == ("profile" if any(u.profile for u in bench.users.values()) else "pairs_only"), name
    if name != "rubrics":  # the built-in benchmark's loader declares it with rubric_user_context (see the docs)
        assert "derived" not in uc.get("note", ""), name
    assert "own train pairs" in " ".join(uc["included"]) or name == "prb"
    assert bool(uc["withheld_answer_key"]) == (name in WITH_KEY), name
    assert bool(uc["answer_key_fields"]) == (name in WITH_KEY), name
    assert uc["users_with_profile"] == sum(bool(u.profile) for u in bench.users.values())
    json.dumps(uc)  # goes into results.json as is


def test_a_benchmark_without_a_declaration_gets_one_derived_from_its_users() -> None:
    users = {
        "a": User("a", answer_key={"rubric_text": "Likes cats."}),
        "b": User("b", profile=(ProfileItem("1", "hi"),)),
    }
    bench = Benchmark("x", [PreferencePair("p", "a", "q", "c", "r")], users)
    uc = bench.meta["user_context"]
    assert uc["policy"] == "profile" and "derived" in uc["note"] and uc["answer_key_fields"] == ["rubric_text"]
    assert uc["users_with_answer_key"] == 1


def test_answer_key_has_one_place_and_is_fingerprinted() -> None:
    u = User("a", meta={"answer_key": {"rubric_text": "Likes cats."}, "x": 1})
    assert u.answer_key == {"rubric_text": "Likes cats."} and dict(u.meta) == {"x": 1}
    with pytest.raises(ValueError, match="both"):
        User("a", meta={"answer_key": {}}, answer_key={"rubric_text": "k"})
    pairs = [PreferencePair("p", "a", "q", "c", "r")]
    a = Benchmark("x", pairs, {"a": User("a", answer_key={"rubric_text": "Likes cats."})})
    b = Benchmark("x", pairs, {"a": User("a", answer_key={"rubric_text": "Likes dogs."})})
    assert a.fingerprint() != b.fingerprint()


def test_profile_items_quoting_the_answer_key_are_withheld_and_counted(
    benches: dict[str, tuple[Benchmark, list[str]]],
) -> None:
    bench, _ = benches["file"]
    assert [it.text for it in bench.users["a"].profile] == ["I paint landscapes."]
    assert bench.skipped.counts["profile_item_contains_answer_key"] == 1
    persona, _ = benches["persona"]
    assert persona.skipped.counts["profile_item_contains_answer_key"] == 2


def test_asking_for_the_answer_key_by_mode_is_an_error() -> None:
    u = User("a", profile=(ProfileItem("1", "I bake bread."),), answer_key={"rubric_text": "Likes short answers."})
    for mode in ("rubric", "oracle"):
        with pytest.raises(ValueError, match="answer key"):
            user_text(u, mode)
    with pytest.raises(ValueError, match="answer key"):
        GenARM(user_context="rubric").set_users({"a": UserView("a", profile=u.profile)})
    assert user_text(u) == "- I bake bread." and user_text(u, "none") is None


@pytest.mark.parametrize("name", sorted(WITH_KEY))
def test_the_oracle_judge_reads_the_answer_key_and_says_so(
    name: str, benches: dict[str, tuple[Benchmark, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perbench.registry import reward_models

    bench, _ = benches[name]
    assert reward_models.get("icl_judge_oracle") is ICLJudgeOracle
    assert "ORACLE" in reward_models.entry("icl_judge_oracle").help
    assert ICLJudgeOracle.name == "icl_judge_oracle" and ICLJudge.oracle is False
    oracle = _judge(bench, ICLJudgeOracle, monkeypatch)
    plain = _judge(bench, ICLJudge, monkeypatch)
    for p in bench.test_pairs()[:5]:
        u = bench.users[p.user_id]
        key = (u.answer_key or {})["rubric_text"]
        body = oracle.judge_prompt(p)[1].content
        assert key in body and "oracle" in body, (name, p.pair_id)
        assert key not in plain.judge_prompt(p)[1].content
        full = oracle_user_text(bench.user_views()[p.user_id], answer_key_summary(u))
        assert full is not None and full in body


# ------------------------------------------------------------------------------------------ equal shots
class Recorder(RewardModel):
    """Records what the runner gives a reward model: fit pairs and each unseen user's shots."""

    name: ClassVar[str] = "shot_recorder"
    fits: ClassVar[list[list[str]]] = []
    shots: ClassVar[dict[str, list[str]]] = {}

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        Recorder.fits.append([p.pair_id for p in pairs])

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        Recorder.shots[user_id] = [p.pair_id for p in shots]

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.zeros(len(items))


@pytest.fixture
def recorder() -> Iterator[type[Recorder]]:
    from perbench.registry import reward_models

    reward_models.register("shot_recorder", Recorder)
    Recorder.fits.clear()
    Recorder.shots.clear()
    try:
        yield Recorder
    finally:
        reward_models._entries.pop("shot_recorder", None)


def _by_user(pairs: list[PreferencePair]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in pairs:
        out.setdefault(p.user_id, []).append(p.pair_id)
    return out


@pytest.mark.parametrize("name", ["prism", "tldr_pal", "domain_styles", "file"])
def test_icl_decoders_judge_and_reward_models_get_the_same_shots(
    name: str,
    benches: dict[str, tuple[Benchmark, list[str]]],
    recorder: type[Recorder],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perbench.runner.methods import MethodHandle
    from perbench.runner.stores import Stores

    bench, _ = benches[name]
    handle = MethodHandle(Component("shot_recorder"), bench, RMContext(), Stores.in_memory().units)
    handle.adapted(SHOTS)
    fit = _by_user([p for p in bench.pairs if p.pair_id in set(recorder.fits[0])])
    rm_sets = {u: fit.get(u, []) for u in bench.seen_users} | {u: recorder.shots.get(u, []) for u in bench.unseen_users}
    # an unseen user with more train pairs than shots exists, so the cap is exercised
    assert any(len(bench.fewshot(u)) > SHOTS for u in bench.unseen_users), name
    for dec in (ICL(k=3, format="pairs"), ICLRAG(k=3, format="pairs")):
        dec.bind_benchmark(bench, shots=SHOTS)
        icl_sets = {u: [p.pair_id for p in dec.pairs.get(u, [])] for u in bench.users}
        assert icl_sets == rm_sets, (name, dec.name)
        assert dec.config_key() != type(dec)(k=3, format="pairs").config_key()  # cached apart per shot count
    judge = _judge(bench, ICLJudge, monkeypatch)
    keys = {p.content_key(): p.pair_id for p in bench.pairs}
    for u in bench.unseen_users:
        assert [keys[ex.key] for ex in judge.examples.get(u, [])] == rm_sets[u][: judge.max_examples]
    for u in bench.seen_users:
        assert [keys[ex.key] for ex in judge.examples.get(u, [])] == rm_sets[u][: judge.max_examples]


def test_shot_flags() -> None:
    assert GenARM.uses_shots is False
    assert ICLJudge.uses_shots is True and ICLJudge.scores_without_shots is True


def test_judge_examples_survive_a_saved_state(
    benches: dict[str, tuple[Benchmark, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, _ = benches["prism"]
    judge = _judge(bench, ICLJudge, monkeypatch)
    again = ICLJudge()
    again.load_state(judge.state())  # no model named in the state: nothing is loaded
    p = bench.test_pairs(seen=False)[0]
    assert again.judge_prompt(p) == judge.judge_prompt(p)
    assert "Earlier choices of this user" in judge.judge_prompt(p)[1].content


# ------------------------------------------------------------------------------------- isolation by construction
def test_methods_decoders_and_judges_are_handed_views_that_hold_no_answer_key(
    benches: dict[str, tuple[Benchmark, list[str]]], tmp_path: Path
) -> None:
    """Not a convention on a full record: what the runner hands a method (``RMContext.extra["users"]``), a
    decoder (``bind_context``) or a judge holds the user id, seen and the profile only; the consumers refuse a
    full record; the answer keys reach a method only when it is named an oracle."""
    import dataclasses

    from perbench.config import RunConfig
    from perbench.runner.downstream import Downstream
    from perbench.runner.methods import MethodHandle
    from perbench.runner.state import RunState
    from perbench.runner.stores import Stores

    bench, _ = benches["persona"]
    assert {f.name for f in dataclasses.fields(UserView)} == {"user_id", "seen", "profile"}
    cfg = RunConfig(methods=[{"name": "icl_judge"}], baselines=[], decoders=[{"name": "icl", "k": 2}])
    state = RunState(cfg, tmp_path, bench, Stores.in_memory())
    views = state.ctx.extra["users"]
    assert set(views) == set(bench.users) and all(type(v) is UserView for v in views.values())
    assert "answer_keys" not in state.ctx.extra
    plain = MethodHandle(Component("icl_judge"), bench, state.ctx, state.units)
    oracle = MethodHandle(Component("icl_judge_oracle"), bench, state.ctx, state.units)
    assert "answer_keys" not in plain.ctx.extra and set(oracle.ctx.extra["answer_keys"]) == set(bench.users)
    decoder = Downstream(state)._decoder(cfg.decoders[0])
    assert decoder.users is not None and all(type(v) is UserView for v in decoder.users.values())

    def holds_record(x: Any, depth: int = 0) -> bool:
        if isinstance(x, User | Benchmark):
            return True
        if depth > 3:
            return False
        items = x.values() if isinstance(x, dict) else x if isinstance(x, list | tuple) else []
        return any(holds_record(v, depth + 1) for v in items)

    assert not holds_record(list(vars(decoder).values()))
    for consumer in (GenARM().set_users, ICLJudge().set_users, lambda users: ICL().bind(users, [])):
        with pytest.raises(TypeError, match="user views"):
            consumer(bench.users)


@pytest.mark.parametrize("name", ["persona", "domain_styles"])
def test_ids_that_are_answer_keys_are_opaque(name: str, benches: dict[str, tuple[Benchmark, list[str]]]) -> None:
    """A persona sentence or a style name names the user and decides the labels: no user id, pair id or pair
    metadata a method receives holds it, not even as a single word."""
    bench, _ = benches[name]
    keys = {t.casefold() for u in bench.users.values() for t in answer_key_texts(u)}  # style names included
    assert keys
    for p in bench.pairs:
        text = f"{p.pair_id} {p.user_id} {json.dumps(dict(p.meta), default=str)}".casefold()
        assert not [k for k in keys if k in text], p.pair_id
    assert all(u.startswith(("user-", "style-")) for u in bench.users)


def test_withholding_a_profile_sentence_ignores_punctuation_case_and_whitespace() -> None:
    from perbench.data.records import SkipReport
    from perbench.data.user_context import withhold_answer_key

    u = User(
        "a",
        profile=tuple(
            ProfileItem(str(i), t)
            for i, t in enumerate(
                [
                    "i LOVE   baroque music!",
                    "I love baroque-music",
                    "About me: I love baroque music, really.",
                    "I love baroque musicals.",  # other words: kept
                    "Baroque music is fine.",
                ]
            )
        ),
        answer_key={"rubric_text": "I love baroque music."},
    )
    skipped = SkipReport()
    kept = withhold_answer_key(u, skipped)
    assert [it.text for it in kept.profile] == ["I love baroque musicals.", "Baroque music is fine."]
    assert skipped.counts["profile_item_contains_answer_key"] == 3


def test_tldr_pal_unseen_users_never_see_a_test_post_among_their_shots(tmp_path: Path) -> None:
    """Unseen workers with several comparisons per post: their shots and test pairs never share a post (so a
    test prompt is never among the user's shot prompts), and the first n_shot comparisons are the shots."""
    from perbench.data.checks import check_benchmark, shot_prompt_overlap

    rows = tldr_rows()
    extra = []
    for r in rows:
        if r["info"]["post"]:  # every worker (so the ranking, and who is unseen, stays)
            for j in (1, 2):  # two more comparisons of the same post by the same worker
                s = [
                    dict(x, text=f"{x['text']} (take {j}{'' if i else ', longer still'})")
                    for i, x in enumerate(r["summaries"])
                ]
                extra.append({**r, "summaries": s})
    bench = load_tldr(write_jsonl(tmp_path / "cmp.jsonl", rows + extra), unseen_min_comparisons=5, n_shot=3)
    unseen = bench.unseen_users
    assert set(unseen) == {"w10", "w11", "w12"}
    for u in unseen:
        shots, test = bench.fewshot(u), bench.select(split="test", user=u)
        assert len(shots) >= 3 and test
        assert not {p.meta["post_id"] for p in shots} & {p.meta["post_id"] for p in test}, u
        posts = [p.meta["post_id"] for p in shots]
        assert len(set(posts)) < len(posts)  # several comparisons of one post: the test can fail
    assert shot_prompt_overlap(bench) == 0
    assert not [n for n in check_benchmark(bench, needs_train=True) if "share their prompt" in n]


# ------------------------------------------------------------------------------------------ equal information
@pytest.mark.parametrize("name", ["prism", "pref_lamp", "persona", "prb"])
@pytest.mark.parametrize("cls", [ICL, ICLRAG])
def test_default_icl_prompts_show_the_rms_shots_and_the_same_profile_items(
    name: str, cls: type[ICL], benches: dict[str, tuple[Benchmark, list[str]]]
) -> None:
    """On benchmarks with user profiles, a default ICL / ICL-RAG prompt shows exactly the few-shot pairs the
    reward models adapt from (both responses of each) plus the profile items GenARM and the ICL judge read, and
    ``shown`` counts what it showed."""
    bench, _ = benches[name]
    dec = cls()
    dec.bind_context(bench.context_view(SHOTS))
    views = bench.user_views()
    assert any(v.profile for v in views.values()), name
    checked = 0
    for u in bench.unseen_users:
        shots = bench.fewshot(u, SHOTS)
        profile = [it.item_id for it in views[u].profile[:5]]
        items = dec.retrieve(GenRequest("What should I do next?", u, 3))
        assert sorted(it.item_id for it in items if it.source == "pairs") == sorted(p.pair_id for p in shots), u
        assert sorted(it.item_id for it in items if it.source == "profile") == sorted(profile), u
        assert dec.shown(u) == {"pairs": len(shots), "profile_items": len(profile)}
        text = _prompt_text(dec.build_prompt(GenRequest("What should I do next?", u, 3)))
        for p in shots:
            assert p.chosen[:100] in text and p.rejected[:100] in text
        genarm_text = user_text(views[u]) or ""
        assert all(it.text[:100] in genarm_text for it in views[u].profile[:5])  # the same items GenARM reads
        checked += bool(shots or profile)
    assert checked, name


def test_the_judges_effective_shot_count_is_what_it_saw(
    benches: dict[str, tuple[Benchmark, list[str]]], tmp_path: Path
) -> None:
    from perbench.config import RunConfig
    from perbench.runner.methods import MethodHandle
    from perbench.runner.state import RunState
    from perbench.runner.stores import Stores
    from perbench.runner.upstream import Upstream

    bench, _ = benches["prism"]
    cfg = RunConfig(methods=[{"name": "icl_judge", "max_examples": 1}], baselines=[], decoders=[])
    state = RunState(cfg, tmp_path, bench, Stores.in_memory())
    h = MethodHandle(cfg.methods[0], bench, state.ctx, state.units)
    users = bench.unseen_users
    eff = Upstream(state)._effective_shots(h, users, SHOTS)
    assert any(len(bench.fewshot(u, SHOTS)) > 1 for u in users)
    assert eff["by_user"] == {u: min(len(bench.fewshot(u, SHOTS)), 1) for u in users}
    assert eff["max"] == 1 and ICLJudge(max_examples=1).shots_seen(7) == 1


def test_which_methods_saw_the_profile_is_on_record(benches: dict[str, tuple[Benchmark, list[str]]]) -> None:
    """Personalized RewardBench gives profiles and no shots: GenARM and the ICL judge read the first profile items,
    a frozen-feature RM sees them only when the loader puts them into every prompt (``include_profile``); what
    each saw is recorded (and the report marks the methods that saw none)."""
    from perbench.rewards.global_bt import GlobalBT
    from perbench.runner.information import profile_access

    bench, _ = benches["prb"]  # loaded with include_profile=2
    assert profile_access(GenARM(), bench)["saw_profile"] and profile_access(ICLJudge(), bench)["saw_profile"]
    got = profile_access(GlobalBT(), bench)
    assert got["saw_profile"] and "top 2 profile items in every prompt" in got["how"]
    without = Benchmark(bench.name, bench.pairs, bench.users, meta={**bench.meta, "include_profile": 0})
    blind = profile_access(GlobalBT(), without)
    assert blind["saw_profile"] is False and "include_profile" in blind["note"]
    assert profile_access(GenARM(user_context="none"), without)["saw_profile"] is False
    assert profile_access(GenARM(), without)["saw_profile"]
    assert profile_access(GlobalBT(), benches["tldr_lore"][0]) is None  # no profiles: nothing to record
