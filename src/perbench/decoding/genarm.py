"""GenARM guided decoding (Xu et al., ICLR 2025), batched over prompts.

The next token is drawn from (greedy: the argmax of)

    π(v | x, y_<t) ∝ exp((log π_base(v | x, y_<t) + α · log π_r(v | x, y_<t)) / τ)

over the **whole vocabulary**. π_r is an autoregressive reward model: a causal LM sharing the policy's
tokenizer. α is the decoding coefficient (β_r / β in the paper: the reward model's training β over the KL
coefficient of the decoding objective). It is a parameter of the decoder, default 1.0 as in the reference
code, recorded in the decoder's params (and so in its config key and label) — not derived from the
reward model's training β. Both models are KV-cached (:class:`~perbench.models.stepper.CachedLM`), so a
step costs one one-token forward of the policy plus one of π_r — no candidate expansion.

What the decoder accepts as the guide (``rm``):

* an object following :class:`AutoregressiveRM` — ``lm`` (π_r, a :class:`LoadedLM`) and
  ``prompt_ids(user_ids, prompts)`` (π_r's own, possibly user-conditioned, prompt ids). The GenARM reward
  model in :mod:`perbench.rewards.genarm` is one;
* a plain :class:`LoadedLM`, used as π_r on the same prompt as the policy.

With α = 0 (or a uniform π_r) this is plain decoding of the base policy; ``sample=True`` draws with the
request's own generator (temperature τ, then top-p).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import torch

from perbench.data.records import Prompt
from perbench.decoding.base import Decoder
from perbench.models.chat import encode_prompt
from perbench.models.generate import Generation, GenRequest, decode_loop, row_generators, sample_top_p
from perbench.models.loader import LoadedLM
from perbench.models.stepper import CachedLM
from perbench.rewards.base import RewardModel


class AutoregressiveRM(Protocol):
    """The interface GenARM decoding needs from an autoregressive reward model."""

    @property
    def lm(self) -> LoadedLM | None: ...

    def prompt_ids(self, user_ids: Sequence[str], prompts: Sequence[Prompt]) -> list[list[int]]: ...


def resolve_guide(rm: object, requests: Sequence[GenRequest]) -> tuple[LoadedLM, list[list[int]]]:
    """-> (π_r, π_r's prompt ids per request) for a GenARM-style RM or a plain LoadedLM."""
    if isinstance(rm, LoadedLM):
        return rm, [encode_prompt(rm.tokenizer, r.prompt) for r in requests]
    lm = getattr(rm, "lm", None)
    if not isinstance(lm, LoadedLM) or not callable(getattr(rm, "prompt_ids", None)):
        raise TypeError(
            f"GenARM decoding needs an autoregressive RM (lm, prompt_ids) or a LoadedLM, got "
            f"{type(rm).__name__}" + (" (not fitted yet?)" if hasattr(rm, "prompt_ids") else "")
        )
    ids = rm.prompt_ids([r.user_id for r in requests], [r.prompt for r in requests])  # type: ignore[attr-defined]
    return lm, [list(x) for x in ids]


def is_autoregressive_rm(rm: object) -> bool:
    """A LoadedLM or an object with ``lm`` and ``prompt_ids`` (checked on the class and instance dict, so a
    property that raises before fit is not evaluated)."""
    if isinstance(rm, LoadedLM):
        return True
    cls = type(rm)
    return callable(getattr(cls, "prompt_ids", None)) and (hasattr(cls, "lm") or "lm" in getattr(rm, "__dict__", {}))


class GenARMDecoder(Decoder):
    name: ClassVar[str] = "genarm"
    uses_rm: ClassVar[bool] = True

    def __init__(
        self,
        alpha: float = 1.0,
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        **params: Any,
    ) -> None:
        if "beta" in params:
            raise TypeError(
                "genarm decoding: the coefficient on log π_r is `alpha` (default 1.0, the reference default); "
                "`beta` is the reward model's training parameter (alpha = 1/beta reproduces the old weighting)"
            )
        if not math.isfinite(alpha) or alpha < 0:
            raise ValueError(f"genarm: alpha must be a finite number ≥ 0, got {alpha}")
        p: dict[str, Any] = {"alpha": alpha}
        if sample:
            p.update(sample=True, temperature=temperature, top_p=top_p)
        super().__init__(**p, **params)
        self.alpha, self.sample, self.temperature, self.top_p = alpha, sample, temperature, top_p

    def reward_weight(self, rm: object) -> float | None:
        """α on log π_r: the GenARM reward is r = β·log π_r (β = the RM's ``beta``), so the weight on r is α/β
        (α itself for a guide without a ``beta``, whose reward is log π_r)."""
        beta = getattr(rm, "beta", None)
        return float(self.alpha) / float(beta) if beta else float(self.alpha)

    @classmethod
    def rm_problem(cls, rm_cls: type) -> str | None:
        """Why this RM class cannot guide GenARM decoding (None: it can)."""
        if callable(getattr(rm_cls, "prompt_ids", None)):
            return None
        return "GenARM decoding needs an autoregressive RM (next-token log-probs over the vocabulary)"

    def generate(
        self,
        policy: LoadedLM,
        requests: Sequence[GenRequest],
        rm: RewardModel | LoadedLM | None,
        *,
        max_new_tokens: int,
    ) -> list[Generation]:
        r_lm, r_ids = resolve_guide(rm, requests)
        if r_lm.tokenizer.get_vocab() != policy.tokenizer.get_vocab():
            raise ValueError(f"GenARM needs π_r ({r_lm.name}) to share the policy's tokenizer")
        gens = row_generators(requests, policy.policy.device) if self.sample else []
        r_state = CachedLM(r_lm, r_ids)
        r_hidden = r_state.prefill()
        V = min(
            int(policy.model.get_output_embeddings().weight.shape[0]),
            int(r_lm.model.get_output_embeddings().weight.shape[0]),
        )
        pending: list[torch.Tensor] = []  # π_r is advanced lazily: no wasted forward after the last token

        def choose(state: CachedLM, hidden: torch.Tensor, t: int) -> tuple[torch.Tensor, None]:
            nonlocal r_hidden
            if pending:
                r_hidden = r_state.step(pending.pop())
            lp = state.logprobs(hidden)[:, :V]
            lr = r_state.logprobs(r_hidden)[:, :V].to(lp.device)
            # A per-row constant does not change the distribution; taking π_r's max out keeps the numbers
            # small and makes a uniform π_r add exactly 0 (bit-identical to base decoding).
            scores = lp + self.alpha * (lr - lr.max(-1, keepdim=True).values)
            if self.sample:
                lq = torch.log_softmax(scores / self.temperature, dim=-1)  # temperature, then the nucleus
                tokens = sample_top_p(lq, self.top_p, gens)
            else:
                tokens = scores.argmax(-1)
            pending.append(tokens)
            return tokens, None

        return decode_loop(policy, requests, max_new_tokens, choose)
