"""The reward-model interface every method implements.

- ``fit(pairs, ctx)`` on the seen users' train pairs;
- ``adapt(user_id, shots)`` to an unseen user from their few-shot pairs only;
- ``score(items)`` for (user, prompt, response) in batches.

Frozen-feature methods subclass :class:`FeatureRM` and implement ``reward_from_features``: a reward for
*any* backbone hidden state, which is what gives them per-token rewards (policy accuracy) and ARGS
candidate scoring for free.

**One method, one reward function.** Every consumer of a frozen-feature reward — ``score`` (RM accuracy,
Best-of-N, win rate), ``token_rewards`` (policy accuracy), ARGS candidate scoring and the RGD-induced
policy — calls :meth:`FeatureRM.rewards` with the user *and the prompt* of every row. A method whose reward
reads the prompt beyond φ(x, y) (PAL-B's prompt-side prototypes) sets ``prompt_conditioned`` and overrides
:meth:`FeatureRM.prompt_rewards`; its ``reward_from_features`` raises, so no caller can silently drop the
prompt.

**Per-prefix rewards.** ``no_prefix_reward`` is None for a method that defines r_u(x, y_≤t) for every
prefix of a response (feature heads, token-factorised rewards such as GenARM's β·log π_r and P-DPO's
implicit reward, LoRA heads); it then implements ``token_rewards`` and
``teacher_forced_candidate_rewards``. Otherwise it holds the reason, which the runner reports as "not
applicable".
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair, Prompt, prompt_key

if TYPE_CHECKING:
    import torch

    from perbench.rewards.features import FeatureExtractor


@dataclass(frozen=True)
class ScoreItem:
    user_id: str
    prompt: Prompt
    response: str


@dataclass
class RMContext:
    """What a method may use while fitting: the shared feature extractor (may be None for baselines)."""

    features: FeatureExtractor | None = None
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)


NO_PREFIX_REWARD = "this method defines no reward for a partial response"


def item_key(item: ScoreItem, *, per_user: bool) -> tuple[str, ...]:
    """What makes two scored items the same: their (prompt, response), and with ``per_user`` their user."""
    key = (prompt_key(item.prompt), item.response)
    return (item.user_id, *key) if per_user else key


def distinct_items(items: Sequence[ScoreItem], *, per_user: bool) -> tuple[list[int], np.ndarray]:
    """(the index of each distinct item's first occurrence, each item's position among them), items being the
    same by :func:`item_key`."""
    index: dict[tuple[str, ...], int] = {}
    reps: list[int] = []
    inverse = []
    for i, it in enumerate(items):
        key = item_key(it, per_user=per_user)
        if key not in index:
            index[key] = len(reps)
            reps.append(i)
        inverse.append(index[key])
    return reps, np.asarray(inverse, dtype=np.intp)


class RewardModel(ABC):
    name: ClassVar[str] = "reward_model"
    #: None when the method defines r_u(x, y_≤t) for every prefix (see the module docstring); else why not.
    no_prefix_reward: ClassVar[str | None] = NO_PREFIX_REWARD
    #: True when the score ignores the user (global RMs, baselines): decoding runs once per prompt.
    user_agnostic: ClassVar[bool] = False
    #: False for methods that score without fitting on train pairs (baselines, pretrained RMs, in-context
    #: judges): with no train pairs at all, the others are reported as not applicable
    needs_train_pairs: ClassVar[bool] = True
    #: False when ``adapt`` ignores the shots (e.g. an in-context judge reads the user's rubric instead):
    #: results then do not depend on the shot count and are computed once.
    uses_shots: ClassVar[bool] = True
    #: True when a fit depends on its seed beyond the data (a random initialisation, sampled contexts or minibatches):
    #: one fit is one draw, and ``systems: {fit_seeds: N}`` fits it N times and pools them into one system
    stochastic_fit: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = params

    def config_key(self) -> str:
        """Identity of (method, hyper-parameters) for cache keys."""
        return hashlib.sha256(json.dumps([self.name, self.params], sort_keys=True, default=str).encode()).hexdigest()[
            :16
        ]

    @abstractmethod
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None: ...

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:  # noqa: B027 - optional hook
        """Adapt to a new user from their few-shot pairs. User-agnostic methods ignore it."""

    @abstractmethod
    def score(self, items: Sequence[ScoreItem]) -> np.ndarray: ...

    # Trained state, so finished fits are reused across runs (keyed by content).
    def state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:  # noqa: B027 - stateless default
        pass

    def score_pairs(self, pairs: Sequence[PreferencePair]) -> tuple[np.ndarray, np.ndarray]:
        """(chosen, rejected) scores of ``pairs``, for a caller's own use. A run never calls it: it scores pairs
        with :func:`score_pair_sides`, so no method decides which score belongs to which side."""
        return score_pair_sides(self, pairs, np.random.default_rng())

    def score_distinct(self, items: Sequence[ScoreItem]) -> np.ndarray:
        """``score(items)``, calling ``score`` once per distinct item: (prompt, response) for a user-agnostic
        RM, (user, prompt, response) otherwise. Pairs share responses (a candidate pool, one response in several
        pairs of a user, the same texts for every user): on the rubric benchmark's test pairs 794 scored texts
        are 681 distinct per user and 95 distinct per prompt. ``score`` is a function of the item, so the
        scores are those of ``score(items)``."""
        reps, inverse = distinct_items(items, per_user=not self.user_agnostic)
        if len(reps) == len(items):
            return np.asarray(self.score(items))
        scores: np.ndarray = np.asarray(self.score([items[i] for i in reps]))
        return np.take(scores, inverse)

    # Per-prefix rewards (policy accuracy, guided decoding); only where ``no_prefix_reward`` is None.
    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """r_u(x, y_≤t) for every response token t (the last one equals ``score``)."""
        raise NotImplementedError(f"{self.name}: {self.no_prefix_reward or 'token_rewards not implemented'}")

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        """(T, k) r_u(x, y_<t ⊕ v) for every response position t and candidate token v = ``cands[t, j]``,
        with y = ``response_ids`` (token ids of this method's tokenizer, T of them), teacher-forced: one
        forward over the full response (plus, for hidden-state heads, one tree batch of the candidates)."""
        raise NotImplementedError(f"{self.name}: {self.no_prefix_reward or 'candidate rewards not implemented'}")


def scores_in_order(rm: RewardModel, items: Sequence[ScoreItem], rng: np.random.Generator) -> np.ndarray:
    """``rm.score_distinct(items)``, the items handed over in an order drawn from ``rng`` (a run draws it from a
    secret of its own) and the scores put back in ``items``' order: the order carries nothing a method could read
    (which item is a chosen response, which user or prompt comes next). ``score`` is a function of the item, so a
    method that scores honestly gets the same scores in any order."""
    order = rng.permutation(len(items))
    return put_back(order, rm.score_distinct([items[i] for i in order]))


def put_back(order: np.ndarray, values: Any) -> np.ndarray:
    """``values`` of items handed over as ``items[order[j]]``, back in the items' own order."""
    got = np.asarray(values)
    out = np.empty(len(order), got.dtype if got.dtype.kind in "biuf" else np.float64)
    out[order] = got
    return out


def score_pair_sides(
    rm: RewardModel, pairs: Sequence[PreferencePair], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, rejected) scores of ``pairs``: both sides of every pair in one flat list, chosen and rejected
    responses interleaved at random (:func:`scores_in_order`); the caller, never the method, says which score
    belongs to which side."""
    items = [ScoreItem(p.user_id, p.prompt, p.chosen) for p in pairs]
    items += [ScoreItem(p.user_id, p.prompt, p.rejected) for p in pairs]
    scores = scores_in_order(rm, items, rng)
    return scores[: len(pairs)], scores[len(pairs) :]


class FeatureRM(RewardModel):
    """A reward that is a function of frozen backbone features φ (and the user, and, for
    ``prompt_conditioned`` methods, the prompt)."""

    no_prefix_reward: ClassVar[str | None] = None
    #: True when the reward reads the prompt beyond φ(x, y): ``reward_from_features`` then raises and every
    #: consumer goes through :meth:`rewards` (which passes the prompts).
    prompt_conditioned: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.extractor: FeatureExtractor | None = None

    def bind(self, extractor: FeatureExtractor) -> None:
        self.extractor = extractor

    @property
    def backbone_fingerprint(self) -> str:
        return self._require_extractor().fingerprint

    def _require_extractor(self) -> FeatureExtractor:
        if self.extractor is None:
            raise RuntimeError(f"{self.name}: no feature extractor bound (call fit or bind first)")
        return self.extractor

    @abstractmethod
    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        """(N, d) features -> (N,) rewards; must accept partial-response features too. The implementation
        hook of prompt-free methods: callers use :meth:`rewards`."""

    def prompt_rewards(self, user_ids: Sequence[str], prompts: Sequence[Prompt], feats: torch.Tensor) -> torch.Tensor:
        """The hook of ``prompt_conditioned`` methods (rows' prompts given); others never reach it."""
        raise NotImplementedError(f"{self.name} is prompt-conditioned but does not implement prompt_rewards")

    def rewards(self, user_ids: Sequence[str], prompts: Sequence[Prompt], feats: torch.Tensor) -> torch.Tensor:
        """**The** reward function: (N, d) backbone states of (x_i, y_i or a prefix of it), with each row's
        user and prompt -> (N,) rewards. ``score``, ``token_rewards``, ARGS and the RGD-induced policy all
        call this, so a method is one reward function everywhere."""
        if len(user_ids) != len(feats) or len(prompts) != len(feats):
            raise ValueError(
                f"{self.name}.rewards: {len(feats)} feature rows but {len(user_ids)} users and {len(prompts)} prompts"
            )
        if self.prompt_conditioned:
            return self.prompt_rewards(user_ids, prompts, feats)
        return self.reward_from_features(user_ids, feats)

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        import torch

        feats = self._require_extractor().last([(it.prompt, it.response) for it in items], desc=f"{self.name} features")
        with torch.no_grad():
            r = self.rewards([it.user_id for it in items], [it.prompt for it in items], torch.from_numpy(feats))
        return r.double().numpy()

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """r(x, y_≤t) for every response token t, from one (cached) forward per response."""
        toks = self._require_extractor().tokens([(it.prompt, it.response) for it in items])
        return per_token_rewards(items, [tf.hidden for tf in toks], self.rewards)

    def teacher_forced_candidate_rewards(
        self, item: ScoreItem, response_ids: Sequence[int], cands: torch.Tensor
    ) -> torch.Tensor:
        """The RM backbone's state at x ⊕ y_<t ⊕ v for all T·k candidates (one forward over x ⊕ y, then tree
        batches of candidates; see :func:`~perbench.models.stepper.tree_candidate_hidden`) -> rewards."""
        import torch

        from perbench.models.chat import encode_prompt
        from perbench.models.stepper import tree_candidate_hidden

        ext = self._require_extractor()
        ids = [*encode_prompt(ext.lm.tokenizer, item.prompt), *response_ids][-ext.max_length :]  # as encode_pair
        T, k = cands.shape
        with torch.inference_mode():
            h = tree_candidate_hidden(ext.lm, ids, len(ids) - len(response_ids), cands)
            flat = h.reshape(T * k, -1).float()
            return self.rewards([item.user_id] * (T * k), [item.prompt] * (T * k), flat).view(T, k)


#: rows of token states one reward call takes (bounds the memory of the stacked states)
TOKEN_ROWS = 1 << 16


def per_token_rewards(
    items: Sequence[ScoreItem],
    hidden: Sequence[np.ndarray],
    reward: Callable[[Sequence[str], Sequence[Prompt], torch.Tensor], torch.Tensor],
) -> list[np.ndarray]:
    """``reward(users, prompts, states)`` at every token state of every item (``hidden[i]``: item i's (T_i, d)
    states), stacked into calls of up to :data:`TOKEN_ROWS` rows instead of one call per response (a reward
    is row-wise, so only float rounding can tell the two apart) -> one (T_i,) array per item."""
    import torch

    out: list[np.ndarray] = []
    start = 0
    while start < len(items):
        stop, rows = start, 0
        while stop < len(items) and (stop == start or rows + len(hidden[stop]) <= TOKEN_ROWS):
            rows += len(hidden[stop])
            stop += 1
        lengths = [len(h) for h in hidden[start:stop]]
        users = [it.user_id for it, n in zip(items[start:stop], lengths, strict=True) for _ in range(n)]
        prompts = [it.prompt for it, n in zip(items[start:stop], lengths, strict=True) for _ in range(n)]
        with torch.no_grad():
            flat = torch.from_numpy(np.concatenate(hidden[start:stop]))
            r = reward(users, prompts, flat).double().cpu().numpy()
        out.extend(np.split(r, np.cumsum(lengths)[:-1]))
        start = stop
    return out


def pair_feature_arrays(
    extractor: FeatureExtractor, pairs: Sequence[PreferencePair], desc: str = "pair features"
) -> tuple[np.ndarray, np.ndarray]:
    """φ(x, y_w), φ(x, y_l) for pairs; unique texts are extracted once."""
    texts: dict[tuple[str, str], tuple[Prompt, str]] = {}
    for p in pairs:
        for y in (p.chosen, p.rejected):
            texts.setdefault((prompt_key(p.prompt), y), (p.prompt, y))
    order = list(texts)
    feats = extractor.last([texts[k] for k in order], desc=desc)
    index = {k: i for i, k in enumerate(order)}
    fw = feats[[index[(prompt_key(p.prompt), p.chosen)] for p in pairs]]
    fl = feats[[index[(prompt_key(p.prompt), p.rejected)] for p in pairs]]
    return fw, fl


class PairwiseJudge(RewardModel):
    """Methods that compare two responses instead of scoring one (e.g. an in-context LLM judge).

    ``prefer`` returns, per pair, 1.0 (chosen preferred), 0.0 (rejected preferred), 0.5 (tie) or NaN (the
    judge's output could not be parsed: counted and reported, scored as wrong).
    """

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        raise TypeError(f"{self.name} is a pairwise judge: use prefer(pairs)")

    @abstractmethod
    def prefer(self, pairs: Sequence[PreferencePair]) -> np.ndarray: ...


def prefer_blind(judge: PairwiseJudge, pairs: Sequence[PreferencePair], rng: np.random.Generator) -> np.ndarray:
    """``judge.prefer(pairs)`` with the pairs in an order drawn from ``rng`` and each pair's two responses shown as
    A/B in an order drawn from ``rng`` too (a swapped pair goes in with ``chosen`` and ``rejected`` exchanged),
    mapped back: 1.0 when the judge prefers the chosen response, 0.0 the rejected, 0.5 a tie, NaN unparsed. A
    judge that always answers "the first" scores 50 % in expectation; an honest judge without position bias
    scores as before."""
    order = rng.permutation(len(pairs))
    swap = rng.random(len(pairs)) < 0.5
    shown = [
        replace(pairs[i], chosen=pairs[i].rejected, rejected=pairs[i].chosen) if swap[i] else pairs[i] for i in order
    ]
    got = np.asarray(judge.prefer(shown), np.float64)
    if got.shape != (len(pairs),):
        raise ValueError(f"{judge.name}.prefer returned {got.shape} values for {len(pairs)} pairs")
    out = put_back(order, got)
    return np.where(swap, 1.0 - out, out)  # 1 - NaN is NaN, 1 - 0.5 is 0.5
