"""Every built-in user's wants are reachable by the default policy at the default run's length."""

from __future__ import annotations

from pathlib import Path

import pytest

from perbench.config import RunConfig
from perbench.data.records import AspectPole
from perbench.data.rubrics.aspects import ASPECTS, satisfies_all, word_count
from perbench.data.rubrics.prompts import RUBRIC_PROMPTS
from perbench.data.rubrics.reachability import (
    FLOOR,
    pole_shares,
    prompts_satisfiable,
    read_snapshot,
    unreachable_wants,
    wanted_by,
    witness,
    write_snapshot,
)
from perbench.data.rubrics.users import RUBRIC_USERS, RubricUser


def _best_of_n_params(cfg: RunConfig) -> dict[str, object]:
    from perbench.decoding.best_of_n import BestOfN

    spec = next(d for d in cfg.decoders if d.name == "best_of_n")
    dec = BestOfN(**spec.params)
    return {"pool": dec.pool_size, "temperature": dec.temperature, "top_p": dec.top_p}


def test_every_default_want_fits_in_the_default_generation_length() -> None:
    """A rubric whose shortest text has more words than the run generates tokens can never be met (a word is at
    least one token): e.g. ``length=detailed`` (>= 120 words) at 56 new tokens."""
    budget = RunConfig.default().max_new_tokens
    for u in RUBRIC_USERS:
        w = witness(u.rubric)
        assert satisfies_all(w, u.rubric), u.user_id
        assert word_count(w) <= budget, f"{u.user_id} needs {word_count(w)} words; the run generates {budget} tokens"
    # the check bites: a want of 120 words does not fit, a short one does
    assert word_count(witness((AspectPole("length", "detailed"),))) >= 120 > budget
    assert word_count(witness((AspectPole("length", "concise"), AspectPole("format", "bulleted")))) <= budget


def test_default_pool_snapshot_is_the_default_runs_pool() -> None:
    snap = read_snapshot()
    cfg = RunConfig.default()
    spec = {k: snap.spec[k] for k in ("policy", "seed", "max_new_tokens", "pool", "temperature", "top_p")}
    assert spec == {
        "policy": cfg.policy,
        "seed": cfg.seed,
        "max_new_tokens": cfg.max_new_tokens,
        **_best_of_n_params(cfg),
    }, "default changed: run bench/rubric_reachability.py --write-default"
    assert set(snap.texts) == {p.prompt_id for p in RUBRIC_PROMPTS if p.split == "test"}
    assert all(len(row) == spec["pool"] and all(t.strip() for t in row) for row in snap.texts.values())


def test_every_default_want_is_reachable_in_the_default_pool() -> None:
    snap = read_snapshot()
    texts = snap.all_texts()
    below = unreachable_wants(texts)
    assert not below, "wants met by fewer than 5 % of the default pool: " + ", ".join(
        f"{u} {w} {100 * s:.1f} %" for u, w, s in below
    )
    # and every user can be fully satisfied: some sample meets the whole rubric on some prompt
    for u in RUBRIC_USERS:
        assert prompts_satisfiable(snap.texts, u.rubric) >= 1, u.user_id


def test_pole_shares_and_the_floor() -> None:
    bold, plain = "A **key** point.", "A plain point."
    shares = pole_shares([bold] + [plain] * 19)
    assert shares[("emphasis", "bold")] == pytest.approx(0.05) and shares[("emphasis", "plain")] == pytest.approx(0.95)
    for name, spec in ASPECTS.items():  # every text lands on one pole or in the dead zone
        assert sum(shares[(name, p)] for p in (*spec.poles, None)) == pytest.approx(1.0)
    wants_bold = [RubricUser("x", True, (AspectPole("emphasis", "bold"), AspectPole("register", "formal")), "d.")]
    assert unreachable_wants([bold] + [plain] * 19, wants_bold) == []  # 5 % is enough
    assert unreachable_wants([bold] + [plain] * 20, wants_bold) == [("x", "emphasis=bold", pytest.approx(1 / 21))]
    assert unreachable_wants([plain] * 20, wants_bold, floor=0.0) == []
    assert wanted_by(wants_bold) == {("emphasis", "bold"): ["x"], ("register", "formal"): ["x"]}
    assert prompts_satisfiable({"a": [plain], "b": [plain, bold]}, wants_bold[0].rubric) == 1
    assert FLOOR == 0.05
    with pytest.raises(ValueError, match="no texts"):
        pole_shares([])


def test_snapshot_roundtrip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "pool.jsonl"
    write_snapshot(path, {"seed": 3}, {"p04": ["a", "b"], "p08": ["c"]})
    snap = read_snapshot(path)
    assert snap.spec == {"seed": 3} and snap.texts == {"p04": ["a", "b"], "p08": ["c"]}
    assert snap.all_texts() == ["a", "b", "c"]
    path.write_text('{"kind": "spec"}\n{"prompt_id": "p04", "sample": "0", "text": "a"}\n')
    with pytest.raises(ValueError, match=r"pool.jsonl:2: field 'sample'"):
        read_snapshot(path)
    path.write_text('{"prompt_id": "p04", "sample": 0, "text": "a"}\n')
    with pytest.raises(ValueError, match="no spec line"):
        read_snapshot(path)
    path.write_text('{"kind": "spec"}\n{oops\n')
    with pytest.raises(ValueError, match=r"pool.jsonl:2: invalid JSON"):
        read_snapshot(path)


@pytest.mark.real
def test_default_pool_snapshot_matches_the_bundled_policy() -> None:
    """The snapshot is what the bundled policy samples: the first two samples of a test prompt, drawn again the way
    a default run draws them; and every user's witness fits in the run's token budget."""
    from perbench.decoding.best_of_n import BestOfN
    from perbench.models.chat import encode_response
    from perbench.models.generate import GenRequest
    from perbench.models.loader import load_lm
    from perbench.runner.state import seed_for

    cfg = RunConfig.default()
    snap = read_snapshot()
    policy = load_lm(cfg.policy, device="cpu")
    assert policy.fingerprint == snap.spec["fingerprint"]
    spec = next(d for d in cfg.decoders if d.name == "best_of_n")
    dec = BestOfN(**spec.params)
    from perbench.data.records import prompt_key

    text = {p.prompt_id: p.text for p in RUBRIC_PROMPTS}
    pids = sorted(snap.texts)[:1]
    reqs = [GenRequest(text[pid], "*", seed=seed_for(cfg.seed, prompt_key(text[pid]))) for pid in pids]
    gens = dec.pool(policy, reqs, max_new_tokens=cfg.max_new_tokens, n=2)
    assert [[g.text for g in row] for row in gens] == [snap.texts[pid][:2] for pid in pids]
    for u in RUBRIC_USERS:
        assert len(encode_response(policy.tokenizer, witness(u.rubric))) <= cfg.max_new_tokens, u.user_id
