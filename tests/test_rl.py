"""Training-time downstream (GRPO / RLOO + LoRA via TRL) on tiny random LMs: each policy moves toward its own RM,
a uniform RM leaves the policy where it was, per-user normalisation is recorded, runs are deterministic, the
recipe is validated; the references (placebo rewards, the KL-matched random update), the seed-covering CIs, the
user context in the prompt and the whole phase through the runner."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from perbench.errors import ConfigError
from perbench.models.generate import GenRequest, generate_plain
from perbench.models.loader import LoadedLM, tiny_random_lm
from perbench.rewards.base import PreferencePair, RewardModel, RMContext, ScoreItem
from perbench.training import (
    RandomReward,
    RLPhase,
    RLRun,
    RLSpec,
    ShuffledUsers,
    base_samples,
    derangement,
    generate_with,
    kl_matched,
    measure_kl,
    plan_groups,
    random_update,
    rm_reward,
    train_policy,
    trained_lm,
    update_norms,
)

USERS = ("u1", "u2")
TRAIN = [(f"Tell me about topic {i}.", u) for u in USERS for i in range(4)]
HELD_OUT = [
    GenRequest(f"Explain item {i} briefly.", u, seed=100 * i + j) for u in USERS for i in range(3) for j in range(12)
]
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SPEC = RLSpec(
    steps=6,
    learning_rate=1e-2,
    num_generations=4,
    batch_size=8,
    max_new_tokens=10,
    norm_samples=2,
    beta=0.04,
    group="all",
    lora_target_modules=ALL_LINEAR,
    seed=0,
)


class TokenPreferenceRM(RewardModel):
    """Mean preference of the response's tokens, with a per-user scale and offset: r_u(y) = a_u·mean w[y] + b_u.
    The affine map per user is what the per-user normalisation undoes."""

    name: ClassVar[str] = "token_preference"
    needs_train_pairs: ClassVar[bool] = False

    def __init__(self, tokenizer: Any, weights: np.ndarray, **params: Any) -> None:
        super().__init__(**params)
        self.tokenizer, self.weights = tokenizer, weights
        self.affine = {"u1": (1.0, 0.0), "u2": (3.0, 5.0)}

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        return None

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        out = []
        for it in items:
            ids = self.tokenizer(it.response, add_special_tokens=False)["input_ids"]
            a, b = self.affine[it.user_id]
            out.append(a * float(np.mean(self.weights[ids])) + b if ids else b)
        return np.array(out, np.float64)

    def state(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights}


class ConstantRM(RewardModel):
    name: ClassVar[str] = "constant"
    user_agnostic: ClassVar[bool] = True
    needs_train_pairs: ClassVar[bool] = False

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        return None

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        return np.full(len(items), 0.5)


@pytest.fixture(scope="module")
def lm() -> LoadedLM:
    """A tiny random Llama whose output layer is sharpened (final norm × 5), so a few GRPO steps can move it."""
    from perbench.device import DevicePolicy

    lm = tiny_random_lm(0, DevicePolicy("cpu", "float32"))
    with torch.no_grad():
        lm.model.model.norm.weight.mul_(5.0)
    return lm


@pytest.fixture(scope="module")
def rms(lm: LoadedLM) -> dict[str, TokenPreferenceRM]:
    """Two RMs with opposite token preferences: along and against a random direction of the embedding space."""
    emb = lm.model.get_input_embeddings().weight.detach().float().numpy()
    u = np.random.default_rng(5).standard_normal(emb.shape[1])
    w = emb @ (u / np.linalg.norm(u))
    w = (w - w.mean()) / w.std()
    return {"A": TokenPreferenceRM(lm.tokenizer, w, side="A"), "B": TokenPreferenceRM(lm.tokenizer, -w, side="B")}


@pytest.fixture(scope="module")
def samples(lm: LoadedLM) -> list[Any]:
    return base_samples(lm, TRAIN, SPEC)


@pytest.fixture(scope="module")
def runs(
    lm: LoadedLM, rms: dict[str, TokenPreferenceRM], samples: list[Any], tmp_path_factory: Any
) -> dict[str, RLRun]:
    out = {}
    for name, rm in rms.items():
        spec = SPEC if name == "A" else RLSpec.from_dict({**SPEC.to_dict(), "beta": 0.0})  # B: the KL probe path
        out[name] = train_policy(lm, rm_reward(rm), TRAIN, spec, tmp_path_factory.mktemp(name), samples=samples)
    return out


def held_out_rewards(rms: dict[str, TokenPreferenceRM], policy: LoadedLM) -> dict[str, dict[str, float]]:
    """Per RM and user: mean score of the policy's sampled completions on held-out prompts (fixed seeds)."""
    gens = generate_plain(policy, HELD_OUT, SPEC.max_new_tokens, sample=True)
    items = [ScoreItem(r.user_id, r.prompt, g.text) for r, g in zip(HELD_OUT, gens, strict=True)]
    users = np.array([r.user_id for r in HELD_OUT])
    return {k: {u: float(rm.score(items)[users == u].mean()) for u in USERS} for k, rm in rms.items()}


def test_each_policy_moves_toward_its_own_rm(lm: LoadedLM, rms: dict[str, TokenPreferenceRM], runs: dict[str, RLRun]):
    before = held_out_rewards(rms, lm)
    for k, run in runs.items():
        after = held_out_rewards(rms, trained_lm(run, lm))
        other = "B" if k == "A" else "A"
        for u in USERS:
            sd = run.normalisation[u].sd  # gains in units of the base policy's reward sd for that user
            assert (after[k][u] - before[k][u]) / sd > 0.25, (k, u, before[k][u], after[k][u], sd)
            # the other RM prefers the opposite tokens: under it, this policy got worse
            assert after[other][u] < before[other][u], (k, u)
    # the two policies differ: weights and greedy outputs
    assert any(not np.array_equal(runs["A"].lora_state[n], runs["B"].lora_state[n]) for n in runs["A"].lora_state)
    greedy = {k: [g.token_ids for g in generate_with(run, lm, HELD_OUT[:4], 8)] for k, run in runs.items()}
    assert greedy["A"] != greedy["B"]
    # history: one row per step, the training reward ends above the base level (normalised reward 0), KL recorded
    for run in runs.values():
        assert [h["step"] for h in run.history] == list(range(1, SPEC.steps + 1))
        assert run.summary()["reward_norm_end"] > 0
        assert all(h["kl"] is not None for h in run.history) and run.history[-1]["kl"] > 0
    kl = measure_kl(runs["A"], lm, HELD_OUT[:8], SPEC.max_new_tokens)
    assert kl.shape == (8,) and (kl >= 0).all() and kl.mean() > 0
    # the per-step KL summed over the vocabulary: exactly 0 for the base policy against itself
    assert np.allclose(measure_kl(lm, lm, HELD_OUT[:4], SPEC.max_new_tokens), 0.0, atol=1e-5)


def test_uniform_rm_leaves_the_policy_unchanged(lm: LoadedLM, tmp_path: Any):
    """A constant reward gives every completion of a group the same reward: all advantages are exactly 0, the
    KL term's gradient is exactly 0 at the reference, so Adam never moves the (zero-initialised) LoRA B."""
    run = train_policy(lm, rm_reward(ConstantRM()), TRAIN, SPEC, tmp_path)
    for key, value in run.lora_state.items():
        if "lora_B" in key:
            assert not value.any(), key
    assert all(h["grad_norm"] == 0 and h["kl"] == 0 and h["reward_norm"] == 0 for h in run.history)
    reqs = HELD_OUT[:6]
    base = [g.token_ids for g in generate_plain(lm, reqs, 8)]
    assert [g.token_ids for g in generate_with(run, lm, reqs, 8)] == base
    # sd 0 is replaced by 1 and noted, per user
    for u in USERS:
        norm = run.normalisation[u]
        assert (norm.mean, norm.sd, norm.n) == (0.5, 1.0, 4 * SPEC.norm_samples) and norm.note
    assert len(run.notes) == len(USERS)


def test_normalisation_is_recorded_per_user(
    lm: LoadedLM, rms: dict[str, TokenPreferenceRM], runs: dict[str, RLRun], samples: list[Any]
):
    run = runs["A"]
    assert run.users == list(USERS)
    for u in USERS:
        raw = rms["A"].score([ScoreItem(s.user_id, s.prompt, s.text) for s in samples if s.user_id == u])
        norm = run.normalisation[u]
        assert norm.n == len(raw) == 4 * SPEC.norm_samples and norm.note is None
        assert norm.mean == pytest.approx(raw.mean()) and norm.sd == pytest.approx(raw.std(ddof=1))
    # u2's RM scores are u1's scaled ×3 and shifted +5: the normalisation records that map
    assert run.normalisation["u2"].mean > 4


def test_training_is_deterministic(
    lm: LoadedLM, rms: dict[str, TokenPreferenceRM], runs: dict[str, RLRun], samples, tmp_path
):
    again = train_policy(lm, rm_reward(rms["A"]), list(reversed(TRAIN)), SPEC, tmp_path, samples=samples)
    first = runs["A"]
    assert again.fingerprint == first.fingerprint  # the prompts' order does not matter
    assert sorted(again.lora_state) == sorted(first.lora_state)
    assert all(np.array_equal(again.lora_state[k], first.lora_state[k]) for k in first.lora_state)

    def timeless(run: RLRun) -> list[dict[str, float | None]]:
        return [{k: v for k, v in h.items() if k != "seconds"} for h in run.history]

    assert timeless(again) == timeless(first)
    reqs = HELD_OUT[:4]
    assert [g.token_ids for g in generate_with(again, lm, reqs, 8)] == [
        g.token_ids for g in generate_with(first, lm, reqs, 8)
    ]
    # the base model was not touched by training or by generate_with
    assert not any("lora" in name for name, _ in lm.model.named_modules())
    # a run survives its store round trip
    meta, arrays = first.to_record()
    back = RLRun.from_record(meta, arrays)
    assert back.fingerprint == first.fingerprint and back.normalisation == first.normalisation
    assert [g.token_ids for g in generate_with(back, lm, reqs, 8)] == [
        g.token_ids for g in generate_with(first, lm, reqs, 8)
    ]


def test_plan_groups():
    prompts = [(f"p{i}", u) for u in ("a", "b", "c") for i in range(5)] + [("p0", "a")]
    per_user = plan_groups(RLSpec(max_users=2, max_train_prompts=3), prompts)
    assert len(per_user) == 2 and all(len(v) == 3 and {u for _, u in v} == {k} for k, v in per_user.items())
    assert plan_groups(RLSpec(max_users=2, max_train_prompts=3), list(reversed(prompts))) == per_user
    pooled = plan_groups(RLSpec(group="all"), prompts, users=["a", "c"])
    assert list(pooled) == ["all"] and len(pooled["all"]) == 10


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"algorithm": "ppo"}, r"rl\.algorithm: 'ppo' is not available.*TRL"),
        ({"algorithm": "dpo"}, r"rl\.algorithm: must be one of grpo, rloo, ppo"),
        ({"algorithm": "rloo", "scale_rewards": "group"}, r"rl\.scale_rewards: RLOO's advantage"),
        ({"batch_size": 6, "num_generations": 4}, r"rl\.batch_size: must be a multiple of num_generations"),
        ({"num_generations": 1, "batch_size": 4}, r"rl\.num_generations"),
        ({"steps": 0}, r"rl\.steps: must be an integer ≥ 1"),
        ({"learning_rate": "fast"}, r"rl\.learning_rate: must be a number"),
        ({"beta": -0.1}, r"rl\.beta: must be a number ≥ 0"),
        ({"temperature": 0}, r"rl\.temperature"),
        ({"lora_dropout": 1.0}, r"rl\.lora_dropout"),
        ({"lora_target_modules": []}, r"rl\.lora_target_modules"),
        ({"lora_target_modules": "q_proj"}, r"rl\.lora_target_modules"),
        ({"group": "cohort"}, r"rl\.group: must be one of user, all"),
        ({"group": "all", "max_users": 2}, r"rl\.max_users: only applies to group: user"),
        ({"norm_samples": 1}, r"rl\.norm_samples"),
        ({"scale_rewards": "global"}, r"rl\.scale_rewards"),
        ({"stepz": 3}, r"rl: unknown key 'stepz'\. Did you mean 'steps'"),
    ],
)
def test_spec_validation(data: dict[str, Any], match: str):
    with pytest.raises(ConfigError, match=match):
        RLSpec.from_dict(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"seeds": []}, r"rl\.seeds: must be a non-empty list of integers"),
        ({"seeds": [0, "1"]}, r"rl\.seeds: must be a non-empty list of integers"),
        ({"seeds": [0, 0]}, r"rl\.seeds: every seed must differ"),
        ({"seeds": [0, 1], "seed": 3}, r"rl\.seeds: give seed .* or seeds .*, not both"),
        ({"placebo": "noise"}, r"rl\.placebo: must be one of random, shuffled, none"),
        ({"kl_matched": "yes"}, r"rl\.kl_matched: must be true or false"),
        ({"eval_samples": -1}, r"rl\.eval_samples: must be an integer ≥ 0"),
        ({"kl_samples": 0}, r"rl\.kl_samples: must be an integer ≥ 1"),
        ({"context_items": "2"}, r"rl\.context_items: must be an integer ≥ 0"),
        ({"placebos": "random"}, r"rl: unknown key 'placebos'\. Did you mean 'placebo'"),
    ],
)
def test_phase_validation(data: dict[str, Any], match: str):
    with pytest.raises(ConfigError, match=match):
        RLPhase.from_dict(data)


def test_phase_defaults_and_round_trip():
    phase = RLPhase.from_dict({"seeds": [3, 1], "algorithm": "rloo", "placebo": None, "context_items": 2})
    assert phase.training_seeds == (3, 1) and phase.plan_seed == 3 and phase.placebo == "none"
    assert phase.spec.advantage_scaling == "none" and RLSpec().advantage_scaling == "group"
    assert RLPhase.from_dict(phase.to_dict()) == phase
    default = RLPhase.from_dict({"seed": 4})
    assert default.training_seeds == (4,) and default.placebo == "random" and default.kl_matched
    assert default.eval_samples == 1 and default.context_items == 0


def test_random_reward_is_a_fixed_uninformative_function():
    r = RandomReward(0)
    users, prompts, texts = ["u1", "u1", "u2"], ["p", "p", "p"], ["a", "a", "a"]
    v = r(users, prompts, texts)
    assert v[0] == v[1] != v[2]  # one function per user: the same text, the same reward
    assert np.array_equal(r(users, prompts, texts), v)
    assert not np.array_equal(RandomReward(1)(users, prompts, texts), v)  # one function per training seed
    many = r(["u1"] * 4000, [f"p{i}" for i in range(4000)], ["x"] * 4000)
    assert abs(many.mean()) < 0.05 and abs(many.std() - 1) < 0.05  # the z-scored RMs' scale
    assert r.identity != RandomReward(1).identity


def test_shuffled_users_scores_each_user_with_another_users_reward(rms: dict[str, TokenPreferenceRM]):
    assert derangement(["u2", "u1", "u3"]) == {"u1": "u2", "u2": "u3", "u3": "u1"}
    with pytest.raises(ValueError, match="at least 2 users"):
        derangement(["u1"])
    rm = rm_reward(rms["A"])
    shuffled = ShuffledUsers(rm, derangement(USERS))
    texts = ["Hello there", "Hello there"]
    got = shuffled(["u1", "u2"], ["p", "p"], texts)
    assert np.array_equal(got, rm(["u2", "u1"], ["p", "p"], texts))
    assert not np.allclose(got, rm(["u1", "u2"], ["p", "p"], texts))  # u2's scale and offset differ from u1's
    assert shuffled.identity != rm.identity
    with pytest.raises(ValueError, match="no stand-in user"):
        ShuffledUsers(rm, {"u1": "u2"})(["u3"], ["p"], ["x"])


def test_training_seeds_enter_the_ci():
    """A value whose training seeds disagree gets a CI as wide as that disagreement; the same cells without it
    get the cells-only width. A comparison carries both arms' seed variance."""
    from perbench.stats.bootstrap import bootstrap_ci
    from perbench.training.evaluation import ArmValues, compare, summarise

    rng = np.random.default_rng(0)
    cells = tuple((f"u{i % 6}", f"p{i // 6}") for i in range(36))
    within = rng.normal(0.5, 0.05, 36)
    offsets = np.array([0.3, -0.3, 0.2, -0.2])[:, None]
    seeds = (0, 1, 2, 3)
    noisy = ArmValues("rl[a]", seeds, cells, {"q": within + offsets})
    calm = ArmValues("rl[b]", seeds, cells, {"q": within + 0 * offsets})

    def width(ci: Any) -> float:
        return float(ci[1] - ci[0])

    cells_only = bootstrap_ci(within, [u for u, _ in cells], [p for _, p in cells], n_boot=400).ci
    wide = summarise(noisy, {"u0": True}, n_boot=400, seed=0)["q"]
    narrow = summarise(calm, {"u0": True}, n_boot=400, seed=0)["q"]
    assert wide["mean"] == pytest.approx(narrow["mean"]) and wide["seeds"] == 4
    assert wide["per_seed"] == pytest.approx((within.mean() + offsets[:, 0]).tolist())
    assert width(wide["ci"]) > 4 * width(cells_only)
    assert width(narrow["ci"]) < 1.5 * width(cells_only)
    assert "4 training seeds" in wide["ci_note"]
    diff = compare(noisy, calm, n_boot=400, seed=0)["q"]
    assert diff["delta"] == pytest.approx(0.0, abs=1e-12) and width(diff["ci"]) > 4 * width(cells_only)
    assert diff["n"] == 36 and diff["excludes_zero"] is False


def _seeded_cells(rng: np.random.Generator, S: int, sd_seed: float, U: int = 12, P: int = 8) -> np.ndarray:
    """(S, U·P) values whose population mean is 0: user, prompt and cell effects, and one offset per seed."""
    cell = (rng.normal(0, 0.2, U)[:, None] + rng.normal(0, 0.2, P)[None, :]).ravel() + rng.normal(0, 0.2, U * P)
    return cell[None, :] + rng.normal(0, sd_seed, S)[:, None] + rng.normal(0, 0.05, (S, U * P))


def test_the_seed_covering_ci_covers_the_population_mean_with_three_seeds() -> None:
    """A seeded simulation: with 3 training seeds whose spread is of the order of the cells' own standard error,
    the CI that resamples seeds (with the unbiased seed variance) covers the population mean in ≥ 90 % of 200
    runs; the same cells with the seeds averaged first (what a seed-blind bootstrap sees) cover less."""
    from perbench.training.evaluation import ArmValues, summarise

    U, P, runs = 12, 8, 200
    cells = tuple((f"u{u}", f"p{p}") for u in range(U) for p in range(P))
    hit = blind = 0
    for r in range(runs):
        m = _seeded_cells(np.random.default_rng(r), 3, 0.1, U, P)
        lo, hi = summarise(ArmValues("rl[x]", (0, 1, 2), cells, {"q": m}), {}, n_boot=300, seed=r)["q"]["ci"]
        hit += lo <= 0.0 <= hi
        lo, hi = summarise(ArmValues("rl[x]", (0,), cells, {"q": m.mean(0, keepdims=True)}), {}, n_boot=300, seed=r)[
            "q"
        ]["ci"]
        blind += lo <= 0.0 <= hi
    assert hit / runs >= 0.9, hit / runs
    assert blind < hit


def test_arms_trained_with_the_same_seeds_are_compared_seed_by_seed() -> None:
    """A reward's run and its placebo share each training seed's draw (the seed offsets cancel in the difference):
    drawn as pairs, the difference's CI is far narrower than with each arm's seeds drawn apart."""
    from perbench.training.evaluation import ArmValues, compare

    rng = np.random.default_rng(1)
    cells = tuple((f"u{i % 6}", f"p{i // 6}") for i in range(36))
    base = rng.normal(0.5, 0.05, 36)
    offsets = np.array([0.3, -0.3, 0.2])[:, None]  # one per training seed, shared by both arms
    arm = ArmValues("rl[a]", (0, 1, 2), cells, {"q": base + offsets + 0.1})
    placebo = ArmValues("rl[placebo]", (0, 1, 2), cells, {"q": base + offsets})
    apart = ArmValues("rl[placebo]", (10, 11, 12), cells, {"q": base + offsets})  # other seeds: not paired
    paired, unpaired = compare(arm, placebo, n_boot=400, seed=0)["q"], compare(arm, apart, n_boot=400, seed=0)["q"]
    assert paired["delta"] == pytest.approx(0.1) == unpaired["delta"]
    assert paired["ci"][1] - paired["ci"][0] < 0.2 * (unpaired["ci"][1] - unpaired["ci"][0])
    assert paired["excludes_zero"] and not unpaired["excludes_zero"]


def test_random_update_has_the_runs_size_and_is_matched_to_its_kl(lm: LoadedLM, runs: dict[str, RLRun]):
    run = runs["A"]
    same = random_update(run, 1.0, seed=0)
    a, b = update_norms(run.lora_state), update_norms(same.lora_state)
    assert a.keys() == b.keys() and all(b[k] == pytest.approx(a[k], rel=1e-4) for k in a)
    key = next(k for k in run.lora_state if "lora_B" in k)
    assert not np.allclose(same.lora_state[key], run.lora_state[key])  # a random direction
    assert random_update(run, 1.0, seed=0).fingerprint == same.fingerprint != random_update(run, 1.0, 1).fingerprint
    reqs = HELD_OUT[:8]
    matched, rec = kl_matched(run, lm, reqs, 8, seed=0)
    assert rec.target_kl > 0 and rec.scale != 1.0
    assert abs(rec.kl / rec.target_kl - 1) < abs(rec.kl_at_equal_norm / rec.target_kl - 1)
    assert rec.kl == pytest.approx(float(measure_kl(matched, lm, reqs, 8, temperature=run.spec.temperature).mean()))


def test_rloo_trains_toward_its_rm(lm: LoadedLM, rms: dict[str, TokenPreferenceRM], samples: list[Any], tmp_path):
    """RLOO through TRL's RLOOTrainer moves each user's policy toward the RM. (β 0: TRL's RLOO charges the KL in
    the reward, and the tiny model's per-token KL after a few steps at this step size outweighs its reward.)"""
    spec = RLSpec.from_dict({**SPEC.to_dict(), "algorithm": "rloo", "beta": 0.0})
    assert spec.advantage_scaling == "none"
    run = train_policy(lm, rm_reward(rms["A"]), TRAIN, spec, tmp_path, samples=samples)
    before, after = held_out_rewards(rms, lm), held_out_rewards(rms, trained_lm(run, lm))
    for u in USERS:
        assert after["A"][u] > before["A"][u] and after["B"][u] < before["B"][u], u
    assert run.summary()["reward_norm_end"] > 0
    # the history's kl is the probe's exp(q) − q − 1, the estimator GRPO logs
    assert all(h["kl"] is not None and h["kl"] >= 0 for h in run.history) and run.history[-1]["kl"] > 0


def _context_bench(unseen: bool = False) -> Any:
    from perbench.data.records import AspectPole, Benchmark, PreferencePair, ProfileItem, User

    users = {
        "u1": User("u1", rubric=(AspectPole("format", "bullets"),), answer_key={"rubric_text": "wants bullet lists"}),
        "u2": User("u2", seen=not unseen, answer_key={"rubric_text": "wants one line answers"}),
        "u3": User("u3", profile=(ProfileItem("i1", "I write short poems about my garden."),)),
    }
    pairs = [
        PreferencePair(f"{u}-{i}", u, f"Question {i} from {u}?", f"{u} liked answer {i}", f"{u} disliked {i}", "train")
        for u in users
        for i in range(3)
    ]
    pairs += [PreferencePair(f"{u}-t", u, "How do I plan a trip?", "a", "b", "test") for u in users]
    return Benchmark("ctx", pairs, users)


def test_user_context_in_the_prompt_never_the_answer_key():
    """The shared-policy mode's prompt: each user's own first k profile items and first k train pairs (an unseen
    user's among the shots the RMs adapt from) in front of the request; never the answer key; different users get
    different prompts; the decoder is bound with user views only."""
    from perbench.data.records import prompt_key
    from perbench.data.user_context import answer_key_texts
    from perbench.runner.training import user_context

    bench = _context_bench()
    ctx = user_context(bench, 2, shots=10)
    q = "How do I plan a trip?"
    shown = {u: ctx.view(q, u) for u in bench.users}
    for u in ("u1", "u2", "u3"):
        view = shown[u]
        assert isinstance(view, str) and view.endswith(q)
        mine = bench.select(split="train", user=u)
        assert all(p.chosen in view and str(p.prompt) in view for p in mine[:2]) and mine[2].chosen not in view
        assert not any(t in view for t in answer_key_texts(bench.users[u]))
        assert "bullet" not in view and "one line" not in view
        assert ctx.shown[u] == {prompt_key(p.prompt) for p in mine[:2]}
    assert "u2" not in shown["u1"] and "u1" not in shown["u2"] and shown["u1"] != shown["u2"]
    assert "short poems" in str(shown["u3"]) and "short poems" not in str(shown["u1"])  # the profile, its own
    assert ctx.view(q, "u1") is shown["u1"]  # one rendering per (prompt, user)
    assert ctx.record["items"] == 2 and ctx.record["declared_policy"] == "profile"
    # an unseen user is shown no more than the shots every RM adapts from
    unseen = _context_bench(unseen=True)
    one = user_context(unseen, 2, shots=1)
    first = unseen.fewshot("u2", 1)
    assert one.shown["u2"] == {prompt_key(first[0].prompt)}
    assert unseen.fewshot("u2")[1].chosen not in str(one.view(q, "u2"))
    assert len(one.shown["u1"]) == 2  # a seen user: their first k train pairs


def test_the_policy_sees_the_context_and_the_reward_the_request(
    lm: LoadedLM, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
):
    """With a view, TRL's prompts (checked token for token against perbench's rendering) carry the user's
    context, the normalisation samples are drawn from those prompts, and the reward scores the original request."""
    from perbench.training import rl, run_fingerprint

    scored: list[str] = []

    class Recorder(ConstantRM):
        def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
            scored.extend(str(it.prompt) for it in items)
            return super().score(items)

    checked: list[str] = []
    original = rl._check_prompt_rendering

    def check(trainer: Any, policy: LoadedLM, prompt: Any) -> None:
        checked.append(str(prompt))
        original(trainer, policy, prompt)

    monkeypatch.setattr(rl, "_check_prompt_rendering", check)

    def view(p: Any, u: str) -> Any:
        return f"Context about {u}: likes cats.\n\n{p}"

    spec = RLSpec.from_dict({**SPEC.to_dict(), "steps": 1})
    run = train_policy(lm, rm_reward(Recorder()), TRAIN, spec, tmp_path, view=view)
    assert checked and checked[0].startswith("Context about")
    assert scored and set(scored) <= {p for p, _ in TRAIN}  # the reward never sees the context
    assert run.fingerprint != run_fingerprint(lm, run.reward_identity, TRAIN, spec)
    assert run.fingerprint == run_fingerprint(lm, run.reward_identity, TRAIN, spec, view)
    plain, shown = base_samples(lm, TRAIN[:2], spec), base_samples(lm, TRAIN[:2], spec, view)
    assert [s.prompt for s in shown] == [s.prompt for s in plain]  # samples keep the request the reward scores
    assert [s.text for s in shown] != [s.text for s in plain]  # drawn from the prompts with context


def test_spec_from_yaml_values_and_phase():
    spec = RLSpec.from_dict({"learning_rate": "1e-4", "lora_target_modules": ["q_proj", "v_proj"], "steps": 3})
    assert spec.learning_rate == 1e-4 and spec.lora_target_modules == ("q_proj", "v_proj") and spec.steps == 3
    assert RLSpec.from_dict(spec.to_dict()) == spec
    phase = RLPhase.from_dict({"steps": 2, "methods": ["mpu"]})
    assert phase.spec.steps == 2 and phase.check_methods(["global_bt", "mpu"]) == ["mpu"]
    assert RLPhase.from_dict({}).check_methods(["global_bt", "mpu"]) == ["global_bt", "mpu"]
    with pytest.raises(ConfigError, match=r"rl\.methods: 'pal_b' not among the configured methods"):
        phase.__class__.from_dict({"methods": ["pal_b"]}).check_methods(["global_bt", "mpu"])
    with pytest.raises(ConfigError, match=r"rl\.methods"):
        RLPhase.from_dict({"methods": "mpu"})


def test_group_user_rejects_several_users(lm: LoadedLM, tmp_path: Any):
    with pytest.raises(ValueError, match="group: user trains one policy per user"):
        train_policy(lm, rm_reward(ConstantRM()), TRAIN, RLSpec(group="user"), tmp_path)


def _rl_run(tmp_path: Any, rl: dict[str, Any], methods: list[str], **overrides: Any) -> Any:
    from perbench.api import run
    from perbench.config import RunConfig
    from tests.test_end_to_end import tiny_config, tiny_pool

    pool = tiny_pool.__wrapped__(_Factory(tmp_path / "pool"))  # type: ignore[attr-defined]
    base = tiny_config(pool, tmp_path / "out").to_dict() | overrides
    rl = {"max_train_prompts": 2, "steps": 1, "batch_size": 4, "num_generations": 2, "max_new_tokens": 6} | rl
    rl |= {"norm_samples": 2, "learning_rate": 1e-2}
    cfg = RunConfig.from_dict(base | {"methods": methods, "baselines": [], "decoders": ["zero_shot"], "rl": rl})
    return cfg, run(cfg)


def test_runner_rl_phase_end_to_end(tmp_path: Any, capsys: Any) -> None:
    """The ``rl:`` key through the whole runner on tiny models: every (arm, user, seed) trains once; the RM arms,
    the placebo, the KL-matched random updates and the base policy are decoded greedily and sampled on the same
    cells; the CIs resample the training seeds; the RM arms and the placebo become downstream rows, the RM arms
    cells of the selection analysis; the report shows the placebo; a rerun through the CLI recomputes nothing
    and its summary shows the placebo."""
    import yaml

    from perbench.cli import main

    rl = {"methods": ["mpu"], "max_users": 1, "seeds": [0, 1], "eval_samples": 1}
    # every user with a test pair on a chosen prompt is evaluated there, so the trained user has several cells
    cfg, first = _rl_run(tmp_path, rl, ["global_bt", "mpu"], max_gen_users=None)
    res = first.results
    info = res["rl"]
    arms = info["arms"]
    assert list(arms) == ["rl[mpu]", "rl_placebo", "rl_random[mpu]"]
    assert info["design"]["seeds"] == [0, 1] and info["design"]["placebo"] == "random"
    for label in ("rl[mpu]", "rl_placebo"):
        runs = arms[label]["runs"]
        assert len(runs) == 2 and {r["seed"] for r in runs.values()} == {0, 1}  # 1 user × 2 seeds
        for r in runs.values():
            assert len(r["history"]) == 1 and {"reward_norm", "kl"} <= set(r["history"][-1])
            assert set(r["normalisation"]) == set(r["users"]) and r["kl_eval"] >= 0
            assert (r.get("kl_match") is not None) == (label != "rl_placebo")
    for r in arms["rl_random[mpu]"]["runs"].values():
        assert r["of"] == "rl[mpu]" and r["scale"] > 0 and r["target_kl"] >= 0
    # every arm on the same cells, in both modes; the CIs carry the seeds
    samples = first.run_dir / "samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for mode, suffix in (("greedy", ""), ("sampled", "_sampled")):
        table = info["evaluation"][mode]
        assert set(table) == {*arms, "rl_base"}
        cells = {
            label: {
                (r["user_id"], r["prompt_id"]) for r in rows if r.get("decoder") == label.replace("[", f"{suffix}[")
            }
            for label in ("rl[mpu]", "rl_random[mpu]")
        } | {
            label: {(r["user_id"], r["prompt_id"]) for r in rows if r.get("decoder") == label + suffix}
            for label in ("rl_placebo", "rl_base")
        }
        assert len({frozenset(c) for c in cells.values()}) == 1 and len(cells["rl_placebo"]) >= 2
        for label in arms:
            entry = table[label]["rubric_satisfaction"]
            assert entry["seeds"] == 2 and len(entry["per_seed"]) == 2 and "2 training seeds" in entry["ci_note"]
        assert table["rl_base"]["rubric_satisfaction"]["seeds"] == 1
        vs = table["rl[mpu]"]["vs"]
        assert {v["against"] for v in vs.values()} == {"rl_base", "rl_placebo", "rl_random[mpu]"}
        assert vs["placebo"]["rubric_satisfaction"]["n"] == len(cells["rl_placebo"])
    sampled = [r for r in rows if r.get("decoder") == "rl_sampled[mpu]"]
    assert sampled and {r["rl_seed"] for r in sampled} == {0, 1} and {r["sample"] for r in sampled} == {0}
    # downstream rows and cells
    down = res["downstream"]
    assert {"rl[mpu]", "rl_placebo", "rl_sampled[mpu]", "rl_placebo_sampled"} <= set(down)
    assert "rl_base" not in down and "rl_random[mpu]" not in down
    assert down["rl[mpu]"]["seeds"] == 2 and "rubric_satisfaction" in down["rl[mpu]"]["vs"]["zero_shot"]
    # the rows keep their seed-covering CIs, the RL table's (the analysis resamples the seeds too, drawn apart)
    for e in (down["rl[mpu]"]["rubric_satisfaction"], down["rl[mpu]"]["vs"]["zero_shot"]["rubric_satisfaction"]):
        assert "2 training seeds" in e["ci_note"] and "ci_source" not in e
    assert down["rl[mpu]"]["guide"] == "mpu" and down["rl_placebo"]["guide"] is None
    metrics = set(res["analysis"]["metrics"]["downstream"])
    assert {"rl:rubric_satisfaction", "rl_sampled:rubric_satisfaction", "rl:rm_win"} <= metrics
    assert not any(m.startswith(("rl_placebo", "rl_random", "rl_base")) for m in metrics)
    assert res["work"]["computed"]["rl"] == 4
    # the rl cells are one row per training seed, and a verdict on an rl metric resamples the seeds
    from perbench.config import RunConfig
    from perbench.runner.results import analyze_cells

    cell_rows = [json.loads(line) for line in (first.run_dir / "cells.jsonl").read_text().splitlines()]
    rl_rows = [r for r in cell_rows if r["metric"] == "rl:rubric_satisfaction"]
    assert {r["rl_seed"] for r in rl_rows} == {0, 1} and len(rl_rows) == 2 * len(cells["rl[mpu]"])
    assert not any("rl_seed" in r for r in cell_rows if not r["metric"].startswith(("rl:", "rl_sampled:")))
    on_rl = RunConfig.from_dict(cfg.to_dict() | {"verdict_metric": "rl:rubric_satisfaction"})
    on_rl = analyze_cells(cell_rows, on_rl)["verdict"]
    assert "2 training seeds" in on_rl["ci_note"] and "seed_note" not in on_rl
    assert on_rl["value"] == pytest.approx(down["rl[mpu]"]["rubric_satisfaction"]["mean"])
    html = (first.run_dir / "report.html").read_text()
    assert 'id="rl"' in html and "rl_placebo" in html and "KL-matched" in html
    # the same config through the CLI: the summary shows the placebo; nothing is trained or decoded again
    before = json.loads((first.run_dir / "results.json").read_text())
    cfg_path = tmp_path / "rl.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.to_dict()))
    capsys.readouterr()
    assert main(["run", str(cfg_path)]) == 0
    out = capsys.readouterr().out
    assert "rl_placebo " in out and "vs placebo" in out and "rl[mpu] " in out
    after = json.loads((first.run_dir / "results.json").read_text())
    assert after["work"]["computed"] == {}
    assert after["downstream"] == before["downstream"] and after["rl"] == before["rl"]


def test_runner_shared_policy_with_user_context(tmp_path: Any) -> None:
    """``group: all`` with ``context_items``: one policy per (arm, seed) for every user, trained and evaluated
    with each user's own context (never the answer key) in the prompt; RLOO; the shuffled-user placebo."""
    from perbench.data.isolation import seal
    from perbench.data.user_context import answer_key_texts
    from perbench.runner.state import load_benchmark

    rl = {"group": "all", "context_items": 1, "algorithm": "rloo", "placebo": "shuffled", "kl_matched": False}
    rl |= {"eval_samples": 0}
    cfg, first = _rl_run(tmp_path, rl, ["global_bt"])
    info = first.results["rl"]
    assert list(info["arms"]) == ["rl[global_bt]", "rl_shuffled[global_bt]"]
    assert info["design"]["user_context"]["items"] == 1 and info["design"]["algorithm"] == "rloo"
    for arm in info["arms"].values():
        (run_info,) = arm["runs"].values()
        assert run_info["group"] == "all" and len(run_info["users"]) > 1
    assert set(info["evaluation"]) == {"greedy"}
    assert info["evaluation"]["greedy"]["rl[global_bt]"]["vs"]["placebo"]["against"] == "rl_shuffled[global_bt]"
    sealed = seal(load_benchmark(cfg))  # the ids the run's methods use; samples record them re-keyed
    bench = sealed.bench
    method_id = {r: m for m, r in sealed.recorded.items()}
    rows = [json.loads(x) for x in (first.run_dir / "samples.jsonl").read_text().splitlines()]
    rl_rows = [r for r in rows if r.get("decoder") in ("rl[global_bt]", "rl_shuffled[global_bt]", "rl_base")]
    assert {r["user_id"] for r in rl_rows} == set(run_info["users"])
    for r in rl_rows:
        user = bench.users[method_id[r["user_id"]]]
        first_pair = bench.select(split="train", user=method_id[r["user_id"]])[0]
        assert first_pair.chosen.strip()[:40] in r["policy_prompt"] and r["policy_prompt"].endswith(r["prompt"])
        assert not any(len(t.split()) > 1 and t in r["policy_prompt"] for t in answer_key_texts(user))


class _Factory:
    def __init__(self, path: Any) -> None:
        self.path = path

    def mktemp(self, name: str) -> Any:
        out = self.path / name
        out.mkdir(parents=True)
        return out
