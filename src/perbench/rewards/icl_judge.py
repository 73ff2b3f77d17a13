"""ICL judge: an instruction-tuned LM reads what is known about the user and two responses, and says which
one the user would prefer (a :class:`~perbench.rewards.base.PairwiseJudge`; no training).

- Model: ``model=`` (any spec ``load_lm`` accepts) if given, else ``ctx.extra["policy"]``, else the RM
  backbone ``ctx.features.lm``.
- User text: ``User.rubric_text`` if the benchmark exposes one, else their first ``profile_k`` profile items
  (from ``ctx.extra["users"]``; :meth:`set_users` adds users later); none -> the judge is told nothing is
  known about the user. Loaders must keep answer keys out of ``rubric_text``.
- Order: A/B is shuffled per pair by an RNG seeded with (``seed``, the pair's content key): the same pair
  always gets the same order, whatever the batch.
- ``mode="logprob"`` (default; better for small models, never fails to parse): compare log p("A") and
  log p("B") as the first answer token after the generation prompt; equal -> tie (0.5).
- ``mode="generate"``: greedy answer of up to ``max_new_tokens`` tokens, parsed as ``**Result:** A|B``
  or else the first standalone ``A``/``B``; unparseable -> NaN, counted in :attr:`parse_failures`
  (scored as wrong by the metrics, never silently "A" as in the reference code).
- ``prefer`` -> 1.0 (chosen preferred), 0.0 (rejected preferred), 0.5 (tie), NaN (parse failure).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import Message, PreferencePair, User, prompt_text
from perbench.decoding.base import GenRequest
from perbench.decoding.greedy import ZeroShot
from perbench.decoding.stepper import CachedLM
from perbench.models.chat import encode_prompt
from perbench.models.loader import LoadedLM, load_lm
from perbench.rewards.base import PairwiseJudge, RMContext
from perbench.rewards.genarm import user_text
from perbench.rewards.lm_utils import resolve_backbone
from perbench.rewards.personal import str_array, str_list

SYSTEM = "You are an impartial judge who predicts which of two responses a specific user would prefer."
TEMPLATE = """What we know about the user:
{user}

The user asked:
{question}

[Response A]
{a}

[Response B]
{b}

Which response would this user prefer? Answer with a single letter: A or B."""
NO_INFO = "(nothing is known about this user)"
_RESULT = re.compile(r"\*\*Result:\*\*\s*\(?([AB])\b")
_LETTER = re.compile(r"(?<![A-Za-z])([AB])(?![A-Za-z])")


def parse_choice(text: str) -> str | None:
    """'A', 'B' or None from a judge's answer."""
    m = _RESULT.search(text) or _LETTER.search(text)
    return m.group(1) if m else None


class ICLJudge(PairwiseJudge):
    name: ClassVar[str] = "icl_judge"
    uses_shots: ClassVar[bool] = False  # reads the user's rubric/profile in context; no few-shot adaptation

    def __init__(
        self,
        model: str | None = None,
        mode: str = "logprob",
        seed: int = 42,
        profile_k: int = 5,
        max_new_tokens: int = 16,
        batch_size: int = 8,
        **params: Any,
    ) -> None:
        if mode not in ("logprob", "generate"):
            raise ValueError(f"icl_judge mode must be 'logprob' or 'generate', not {mode!r}")
        super().__init__(
            model=model, mode=mode, seed=seed, profile_k=profile_k, max_new_tokens=max_new_tokens, **params
        )
        self.model_spec, self.mode, self.seed, self.profile_k = model, mode, seed, profile_k
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.lm: LoadedLM | None = None
        self.texts: dict[str, str] = {}
        self.parse_failures = 0
        self.judged = 0

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        self.lm = resolve_backbone(self.model_spec, ctx, prefer_policy=True)
        self.texts = {}
        self.set_users(ctx.extra.get("users") or {})

    def set_users(self, users: Mapping[str, User]) -> None:
        for uid, u in users.items():
            t = user_text(u, "auto", self.profile_k)
            if t:
                self.texts[uid] = t
            else:
                self.texts.pop(uid, None)

    def _lm(self) -> LoadedLM:
        if self.lm is None:
            self.lm = load_lm(self.model_spec) if self.model_spec else None
        if self.lm is None:
            raise RuntimeError(f"{self.name} used before fit")
        return self.lm

    def swapped(self, pair: PreferencePair) -> bool:
        """True when the chosen response is shown as B."""
        return random.Random(f"{self.seed}|{pair.content_key()}").random() < 0.5

    def judge_prompt(self, pair: PreferencePair) -> tuple[Message, ...]:
        a, b = (pair.rejected, pair.chosen) if self.swapped(pair) else (pair.chosen, pair.rejected)
        body = TEMPLATE.format(user=self.texts.get(pair.user_id, NO_INFO), question=prompt_text(pair.prompt), a=a, b=b)
        return (Message("system", SYSTEM), Message("user", body))

    def prefer(self, pairs: Sequence[PreferencePair]) -> np.ndarray:
        lm = self._lm()
        picks: list[str | None] = []
        for s in range(0, len(pairs), self.batch_size):
            batch = pairs[s : s + self.batch_size]
            prompts = [self.judge_prompt(p) for p in batch]
            if self.mode == "logprob":
                picks += self._logprob_picks(lm, prompts)
            else:
                gens = ZeroShot().generate(
                    lm,
                    [GenRequest(pr, p.user_id, 0) for pr, p in zip(prompts, batch, strict=True)],
                    None,
                    max_new_tokens=self.max_new_tokens,
                )
                picks += [parse_choice(g.text) for g in gens]
        out = np.empty(len(pairs), dtype=np.float64)
        for i, (p, pick) in enumerate(zip(pairs, picks, strict=True)):
            if pick is None:
                out[i] = np.nan
                self.parse_failures += 1
            elif pick == "tie":
                out[i] = 0.5
            else:
                chosen_letter = "B" if self.swapped(p) else "A"
                out[i] = 1.0 if pick == chosen_letter else 0.0
        self.judged += len(pairs)
        return out

    def _logprob_picks(self, lm: LoadedLM, prompts: Sequence[tuple[Message, ...]]) -> list[str | None]:
        tok = lm.tokenizer
        a_id, b_id = (tok.encode(x, add_special_tokens=False)[0] for x in ("A", "B"))
        state = CachedLM(lm, [encode_prompt(tok, p) for p in prompts])
        with torch.inference_mode():
            lp = state.logprobs(state.prefill())
        out: list[str | None] = []
        for la, lb in zip(lp[:, a_id].tolist(), lp[:, b_id].tolist(), strict=True):
            out.append("A" if la > lb else "B" if lb > la else "tie")
        return out

    def state(self) -> dict[str, np.ndarray]:
        uids = sorted(self.texts)
        model = self.model_spec or (self.lm.name if self.lm is not None else "")
        return {
            "model": np.asarray(model),
            "text_users": str_array(uids),
            "texts": str_array([self.texts[u] for u in uids]),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.texts = dict(zip(str_list(state["text_users"]), str_list(state["texts"]), strict=True))
        name = str(state["model"])
        if self.lm is None or self.lm.name != name:
            self.lm = load_lm(name) if name else None
