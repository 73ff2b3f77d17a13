"""ARGS reward-guided decoding (Khanov et al., ICLR 2024), batched over prompts.

At each step take the policy's top-k next tokens v and score them
``log π(v | x, y_<t) + w · r_u(x, y_<t ⊕ v)``; greedy takes the argmax, sampling draws from
softmax(score / τ). Log-probabilities (not raw logits) so scores are comparable across steps.

The RM must be a :class:`~perbench.rewards.base.FeatureRM` whose backbone shares the policy's tokenizer.
Its k candidate rewards come from one tree forward on the RM's KV cache (:meth:`CachedLM.expand`), scored
by :func:`candidate_rewards` — the RM's one reward function
(:meth:`~perbench.rewards.base.FeatureRM.rewards`), with each row's user and prompt, exactly as ``score``
computes it for a finished response.
When the RM backbone *is* the policy, that same forward also advances the policy: one k-token forward
per step, no second model. A token-level scorer (:class:`TokenScorer`, e.g. the token ranker) scores the k
candidates from the policy's current hidden state and the candidates' embeddings: no extra forward.

``prune`` (off by default) shrinks the candidate set before the candidate forward: a candidate whose
log π is more than ``prune`` nats below its row's best cannot win unless its reward beats the best
candidate's by more than ``prune / w``, so it is dropped; the forward then covers only the widest row's
kept candidates (a row's other slots are masked out of the choice). Outputs are those of exact ARGS
whenever every dropped candidate's reward gap to the row's best is below ``prune / w``; there is no
useful a-priori bound on that gap for a learned RM, so this is an option, not the default
(``docs/benchmarks.md`` gives the measured reward gaps, candidate counts and speed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import torch

from perbench.data.records import Prompt
from perbench.decoding.base import Decoder
from perbench.models.chat import encode_prompt
from perbench.models.generate import Generation, GenRequest, decode_loop, row_generators, sample_rows
from perbench.models.loader import LoadedLM
from perbench.models.stepper import CachedLM
from perbench.rewards.base import FeatureRM, RewardModel


class ARGS(Decoder):
    name: ClassVar[str] = "args"
    uses_rm: ClassVar[bool] = True

    def __init__(
        self,
        k: int = 10,
        w: float = 1.0,
        sample: bool = False,
        temperature: float = 0.7,
        prune: float | None = None,
        **params: Any,
    ) -> None:
        if prune is not None and not prune >= 0:
            raise ValueError(f"args: prune must be a number of nats ≥ 0 (or unset), got {prune}")
        p: dict[str, Any] = {"k": k, "w": w}
        if sample:
            p.update(sample=True, temperature=temperature)
        if prune is not None:  # recorded only when set: the exact decoder keeps its config key
            p["prune"] = prune
        super().__init__(**p, **params)
        self.k, self.w, self.sample, self.temperature, self.prune = k, w, sample, temperature, prune
        #: candidates fed to the candidate forward / candidates the policy offered, summed over steps
        self.candidates_scored = 0
        self.candidates_offered = 0

    def _candidates(self, lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """-> (B, k') log π and token ids of the candidates to score, and the (B, k') mask of those kept
        (None: all). k' = k without ``prune``, else the widest row's count of candidates within ``prune``
        nats of its best (top-k is sorted, so each row keeps a prefix)."""
        top_lp, cands = lp.topk(self.k, dim=-1)  # (B, k), sorted
        self.candidates_offered += cands.numel()
        if self.prune is None:
            self.candidates_scored += cands.numel()
            return top_lp, cands, None
        keep = top_lp >= top_lp[:, :1] - self.prune
        width = int(keep.sum(-1).max())
        self.candidates_scored += cands.shape[0] * width
        return top_lp[:, :width], cands[:, :width], keep[:, :width]

    def reward_weight(self, rm: object) -> float | None:
        """ARGS adds w·r_u to each candidate's log-probability."""
        return float(self.w)

    @classmethod
    def rm_problem(cls, rm_cls: type) -> str | None:
        """Why this RM class cannot guide ARGS (None: it can)."""
        if issubclass(rm_cls, FeatureRM) or callable(getattr(rm_cls, "candidate_rewards", None)):
            return None
        return "ARGS needs per-prefix rewards (a frozen-feature RM or a token-level scorer)"

    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]:
        if is_token_scorer(rm):
            return self._generate_token_level(policy, requests, rm, max_new_tokens)  # type: ignore[arg-type]
        if not isinstance(rm, FeatureRM) or rm.extractor is None:
            raise TypeError(f"ARGS needs a fitted frozen-feature reward model, got {type(rm).__name__}")
        rm_lm = rm.extractor.lm
        if rm_lm.tokenizer.get_vocab() != policy.tokenizer.get_vocab():
            raise ValueError(f"ARGS needs the RM backbone ({rm_lm.name}) to share the policy's tokenizer")
        shared = rm_lm.model is policy.model
        users = [r.user_id for r in requests]
        prompts = [r.prompt for r in requests]
        gens = row_generators(requests, policy.policy.device) if self.sample else []
        rm_state: CachedLM | None = None
        if not shared:
            rm_state = CachedLM(rm_lm, [encode_prompt(rm_lm.tokenizer, r.prompt) for r in requests])
            rm_state.prefill()

        def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
            top_lp, cands, keep = self._candidates(state.logprobs(hidden))  # (B, k')
            scorer = state if shared else rm_state
            assert scorer is not None
            hc = scorer.expand(cands)  # (B, k', d)
            B = hc.shape[0]
            r = candidate_rewards(rm, users, prompts, hc)
            score = top_lp + self.w * r.to(top_lp.device)
            if keep is not None:
                score = score.masked_fill(~keep, float("-inf"))
            idx = sample_rows(score, self.temperature, gens) if self.sample else score.argmax(-1)
            tokens = cands.gather(1, idx[:, None])[:, 0]
            scorer.commit(idx)
            if shared:
                return tokens, hc[torch.arange(B), idx]
            return tokens, None

        return decode_loop(policy, requests, max_new_tokens, choose)

    def _generate_token_level(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: TokenScorer, max_new_tokens: int
    ) -> list[Generation]:
        """A token-level scorer reads the policy's own hidden state: no candidate forward at all."""
        if rm.backbone_fingerprint != policy.fingerprint:
            raise ValueError(
                f"ARGS: the token-level ranker was built on {rm.backbone_fingerprint}, not on "
                f"the policy {policy.fingerprint} (set rm_backbone to the policy)"
            )
        users = [r.user_id for r in requests]
        gens = row_generators(requests, policy.policy.device) if self.sample else []

        def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, None]:
            top_lp, cands, keep = self._candidates(state.logprobs(hidden))
            r = rm.candidate_rewards(users, hidden, cands).to(top_lp.device)
            score = top_lp + self.w * r
            if keep is not None:
                score = score.masked_fill(~keep, float("-inf"))
            idx = sample_rows(score, self.temperature, gens) if self.sample else score.argmax(-1)
            return cands.gather(1, idx[:, None])[:, 0], None

        return decode_loop(policy, requests, max_new_tokens, choose)


def candidate_rewards(
    rm: FeatureRM, user_ids: Sequence[str], prompts: Sequence[Prompt], hidden: torch.Tensor
) -> torch.Tensor:
    """(B, k) rewards of k candidates per row from the RM backbone's (B, k, d) states at x_b ⊕ y_<t ⊕ v."""
    B, k, d = hidden.shape
    with torch.inference_mode():
        r = rm.rewards(
            [u for u in user_ids for _ in range(k)],
            [p for p in prompts for _ in range(k)],
            hidden.reshape(B * k, d).float(),
        )
    return r.view(B, k)


class TokenScorer(Protocol):
    """A reward that scores (policy hidden state, next token) pairs directly, e.g.
    :class:`~perbench.decoding.token_ranker.TokenRanker`."""

    @property
    def backbone_fingerprint(self) -> str: ...

    def candidate_rewards(self, user_ids: Sequence[str], hidden: torch.Tensor, cands: torch.Tensor) -> torch.Tensor: ...


def is_token_scorer(rm: object) -> bool:
    """Checked on the class: a property lookup on an unbound RM could raise."""
    return callable(getattr(type(rm), "candidate_rewards", None))
