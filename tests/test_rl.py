"""Training-time downstream (GRPO + LoRA via TRL) on tiny random LMs: each policy moves toward its own RM, a
uniform RM leaves the policy where it was, per-user normalisation is recorded, runs are deterministic, and
the recipe is validated."""

from __future__ import annotations

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
    RLPhase,
    RLRun,
    RLSpec,
    base_samples,
    generate_with,
    measure_kl,
    plan_groups,
    rm_reward,
    train_policy,
    trained_lm,
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
    assert kl.shape == (8,) and kl.mean() > 0


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
        ({"algorithm": "dpo"}, r"rl\.algorithm: must be one of grpo, ppo"),
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


def test_runner_rl_phase_end_to_end(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``rl:`` key through the whole runner on tiny models: every (RM, user) trains once, the trained
    policies become ``rl[METHOD]`` rows of the downstream table and the selection analysis, results.json holds
    the training record, the report draws it, and a rerun recomputes nothing."""
    from perbench.config import RunConfig
    from perbench.runner.run import run
    from tests.conftest import empty_cache
    from tests.test_end_to_end import tiny_config, tiny_pool

    monkeypatch.setenv("PERBENCH_CACHE", str(empty_cache(tmp_path / "cache")))
    pool = tiny_pool.__wrapped__(_Factory(tmp_path / "pool"))  # type: ignore[attr-defined]
    base = tiny_config(pool, tmp_path / "out").to_dict()
    rl = {"methods": ["global_bt", "mpu"], "max_users": 2, "max_train_prompts": 2, "steps": 2}
    rl |= {"batch_size": 4, "num_generations": 2, "max_new_tokens": 6, "norm_samples": 2, "learning_rate": 1e-2}
    cfg = RunConfig.from_dict(
        base | {"methods": ["global_bt", "mpu"], "baselines": [], "decoders": ["zero_shot"], "rl": rl}
    )
    first = run(cfg)
    res = first.results
    info = res["rl"]
    assert set(info) == {"rl[global_bt]", "rl[mpu]"}
    for label, entry in info.items():
        assert entry["method"] == label[3:-1]
        assert len(entry["runs"]) == 2  # group "user": one run per user
        for run_info in entry["runs"].values():
            assert len(run_info["history"]) == 2 and {"reward_norm", "kl"} <= set(run_info["history"][-1])
            assert set(run_info["normalisation"]) == set(run_info["users"])
    down = res["downstream"]
    assert {"zero_shot", "rl[global_bt]", "rl[mpu]"} <= set(down)
    for label in ("rl[global_bt]", "rl[mpu]"):
        assert 0.0 <= down[label]["rubric_satisfaction"]["mean"] <= 1.0
        assert "rm_gain" in down[label]
    assert res["work"]["computed"]["rl"] == 4
    assert 'id="rl"' in (first.run_dir / "report.html").read_text()

    second = run(cfg)
    assert second.results["work"]["computed"] == {}
    assert second.results["downstream"] == down and second.results["rl"] == info


class _Factory:
    def __init__(self, path: Any) -> None:
        self.path = path

    def mktemp(self, name: str) -> Any:
        out = self.path / name
        out.mkdir(parents=True)
        return out
