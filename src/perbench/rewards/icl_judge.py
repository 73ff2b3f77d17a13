"""ICL judge: an instruction-tuned LM reads what is known about the user, a few of the user's own earlier
choices and two responses, and says which one the user would prefer (a
:class:`~perbench.rewards.base.PairwiseJudge`; no training).

- Model: ``model=`` (any spec ``load_lm`` accepts) if given, else ``ctx.extra["policy"]``, else the RM
  backbone ``ctx.features.lm``.
- User text: the user context only -- their first ``profile_k`` profile items
  (:func:`perbench.data.user_context.user_text`, from the user views in ``ctx.extra["users"]``; :meth:`set_users`
  adds users later, views only); none -> the judge is told nothing is known about the user. The answer key
  never reaches it.
- Examples (the shots, so ``uses_shots``): a seen user's first ``max_examples`` train pairs (the pairs given to
  ``fit``); an unseen user's shots from :meth:`adapt` (the same first ``shots`` pairs every RM adapts from),
  at most ``max_examples`` of them; each text cut to ``max_example_chars``. A user without pairs is judged
  from the profile alone (``scores_without_shots``). The judged pair itself is never an example.
- ``icl_judge_oracle`` (:class:`ICLJudgeOracle`) is the same judge with the answer key in context: an upper
  bound, never a deployable method. It reads the answer keys from ``ctx.extra["answer_keys"]``, which the
  runner gives to oracle methods only.
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
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import Message, PreferencePair, prompt_text
from perbench.data.user_context import UserView, oracle_user_text, require_views, user_text
from perbench.models.chat import encode_prompt
from perbench.models.generate import GenRequest, generate_plain
from perbench.models.loader import LoadedLM, load_lm
from perbench.progress import progress
from perbench.rewards.base import PairwiseJudge, RMContext
from perbench.rewards.lm_utils import resolve_backbone
from perbench.rewards.personal import str_array, str_list

SYSTEM = "You are an impartial judge who predicts which of two responses a specific user would prefer."
TEMPLATE = """What we know about the user:
{user}

{examples}The user asked:
{question}

[Response A]
{a}

[Response B]
{b}

Which response would this user prefer? Answer with a single letter: A or B."""
NO_INFO = "(nothing is known about this user)"
EXAMPLES_HEADER = "Earlier choices of this user (a request, the response they preferred and the one they did not):"


@dataclass(frozen=True)
class Example:
    """One of the user's own earlier pairs, as shown to the judge."""

    key: str  # the pair's content key (the judged pair is never its own example)
    request: str
    preferred: str
    other: str


def _clip(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: max(n - 1, 0)].rstrip() + "…"


def examples_block(examples: Sequence[Example], max_chars: int) -> str:
    """The examples as they appear in the judge's prompt ("" when there are none)."""
    if not examples:
        return ""
    lines = [EXAMPLES_HEADER]
    for i, ex in enumerate(examples, 1):
        lines.append(
            f"[{i}] Request: {_clip(ex.request, max_chars)}\nPreferred: {_clip(ex.preferred, max_chars)}\n"
            f"Not preferred: {_clip(ex.other, max_chars)}"
        )
    return "\n\n".join(lines) + "\n\n"


_RESULT = re.compile(r"\*\*Result:\*\*\s*\(?([AB])\b")
_LETTER = re.compile(r"(?<![A-Za-z])([AB])(?![A-Za-z])")


def parse_choice(text: str) -> str | None:
    """'A', 'B' or None from a judge's answer."""
    m = _RESULT.search(text) or _LETTER.search(text)
    return m.group(1) if m else None


class ICLJudge(PairwiseJudge):
    needs_train_pairs: ClassVar[bool] = False
    name: ClassVar[str] = "icl_judge"
    #: the user's few-shot pairs are the judge's in-context examples
    uses_shots: ClassVar[bool] = True
    #: a user without any pair is still judged (from the profile, or told nothing is known)
    scores_without_shots: ClassVar[bool] = True
    #: True only for the separately named upper bound that reads the answer key
    oracle: ClassVar[bool] = False

    def __init__(
        self,
        model: str | None = None,
        mode: str = "logprob",
        seed: int = 42,
        profile_k: int = 5,
        max_examples: int = 10,
        max_example_chars: int = 300,
        max_new_tokens: int = 16,
        batch_size: int = 8,
        **params: Any,
    ) -> None:
        if mode not in ("logprob", "generate"):
            raise ValueError(f"{self.name} mode must be 'logprob' or 'generate', not {mode!r}")
        if max_examples < 0 or max_example_chars < 1:
            raise ValueError(
                f"{self.name}: max_examples must be ≥ 0 and max_example_chars ≥ 1, got {max_examples}, "
                f"{max_example_chars}"
            )
        super().__init__(
            model=model,
            mode=mode,
            seed=seed,
            profile_k=profile_k,
            max_examples=max_examples,
            max_example_chars=max_example_chars,
            max_new_tokens=max_new_tokens,
            **params,
        )
        self.model_spec, self.mode, self.seed, self.profile_k = model, mode, seed, profile_k
        self.max_examples, self.max_example_chars = max_examples, max_example_chars
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.lm: LoadedLM | None = None
        self.texts: dict[str, str] = {}
        self.examples: dict[str, list[Example]] = {}
        self.parse_failures = 0
        self.judged = 0
        #: user id -> answer key statement; filled only for an oracle, from ``ctx.extra["answer_keys"]``
        self.answer_keys: dict[str, str] = {}

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        """No training: the model, the users' texts and each user's first ``max_examples`` train pairs."""
        self.lm = resolve_backbone(self.model_spec, ctx, prefer_policy=True)
        self.texts = {}
        self.examples = {}
        by_user: dict[str, list[PreferencePair]] = {}
        for p in pairs:
            if p.split == "train":
                by_user.setdefault(p.user_id, []).append(p)
        for uid, mine in by_user.items():
            self.adapt(uid, mine)
        self.answer_keys = dict(ctx.extra.get("answer_keys") or {}) if self.oracle else {}
        self.set_users(ctx.extra.get("users") or {})

    def shots_seen(self, available: int) -> int:
        """How many of ``available`` shots the judge's prompt shows (its ``max_examples``): its effective count."""
        return min(available, self.max_examples)

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        """The user's examples are now (the first ``max_examples`` of) ``shots``; each call replaces the last."""
        chosen = list(shots)[: self.max_examples]
        if chosen:
            self.examples[user_id] = [
                Example(p.content_key(), prompt_text(p.prompt), p.chosen, p.rejected) for p in chosen
            ]
        else:
            self.examples.pop(user_id, None)

    def user_text(self, user: UserView) -> str | None:
        """What the judge is told about ``user``: the user context (the oracle adds the answer key)."""
        if self.oracle:
            return oracle_user_text(user, self.answer_keys.get(user.user_id), self.profile_k)
        return user_text(user, "auto", self.profile_k)

    def set_users(self, users: Mapping[str, UserView]) -> None:
        """Add/replace what the judge is told about these users (user views only)."""
        for uid, u in require_views(users, self.name).items():
            t = self.user_text(u)
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
        key = pair.content_key()
        shown = [ex for ex in self.examples.get(pair.user_id, []) if ex.key != key]
        body = TEMPLATE.format(
            user=self.texts.get(pair.user_id, NO_INFO),
            examples=examples_block(shown, self.max_example_chars),
            question=prompt_text(pair.prompt),
            a=a,
            b=b,
        )
        return (Message("system", SYSTEM), Message("user", body))

    def prefer(self, pairs: Sequence[PreferencePair]) -> np.ndarray:
        lm = self._lm()
        picks: list[str | None] = []
        if self.mode == "logprob":
            picks = self._logprob_picks(lm, [self.judge_prompt(p) for p in pairs], [p.user_id for p in pairs])
        else:
            for s in range(0, len(pairs), self.batch_size):
                batch = pairs[s : s + self.batch_size]
                reqs = [GenRequest(self.judge_prompt(p), p.user_id, 0) for p in batch]
                picks += [parse_choice(g.text) for g in generate_plain(lm, reqs, self.max_new_tokens)]
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

    def _logprob_picks(
        self, lm: LoadedLM, prompts: Sequence[tuple[Message, ...]], users: Sequence[str]
    ) -> list[str | None]:
        """log p("A") vs log p("B") as the first answer token of each prompt. One user's prompts share a long
        head (the instructions, the profile, the examples): it runs once, its keys and values cached, then each
        prompt's own tail runs on top of it and the cache is cropped back — the numbers of one full forward
        per prompt at a fraction of the tokens."""
        from transformers import DynamicCache

        tok = lm.tokenizer
        a_id, b_id = (tok.encode(x, add_special_tokens=False)[0] for x in ("A", "B"))
        dec, head, dev = lm.model.get_decoder(), lm.model.get_output_embeddings(), lm.policy.device
        ids = [encode_prompt(tok, p) for p in prompts]
        by_user: dict[str, list[int]] = {}
        for i, u in enumerate(users):
            by_user.setdefault(u, []).append(i)
        out: list[str | None] = [None] * len(ids)
        bar = progress(total=len(ids), desc=f"{self.name} judging", unit="pair")
        with torch.inference_mode():
            for rows in by_user.values():
                n_head = min(len(ids[i]) for i in rows) - 1  # every prompt keeps ≥ 1 token of its own
                first = ids[rows[0]]
                for i in rows[1:]:
                    n_head = next((j for j in range(n_head) if ids[i][j] != first[j]), n_head)
                cache = DynamicCache(config=lm.model.config)
                if n_head > 0:
                    dec(input_ids=torch.tensor([first[:n_head]], device=dev), cache=cache, use_cache=True)
                for i in rows:
                    x = torch.tensor([ids[i][n_head:]], device=dev)
                    h = dec(input_ids=x, cache=cache, use_cache=True).last_hidden_state[0, -1]
                    cache.crop(-x.shape[1])
                    lp = torch.log_softmax(head(h).float(), -1)
                    la, lb = float(lp[a_id]), float(lp[b_id])
                    out[i] = "A" if la > lb else "B" if lb > la else "tie"
                    bar.update(1)
        bar.close()
        return out

    def state(self) -> dict[str, np.ndarray]:
        uids = sorted(self.texts)
        model = self.model_spec or (self.lm.name if self.lm is not None else "")
        rows = [(u, ex) for u in sorted(self.examples) for ex in self.examples[u]]
        return {
            "model": np.asarray(model),
            "text_users": str_array(uids),
            "texts": str_array([self.texts[u] for u in uids]),
            "example_users": str_array([u for u, _ in rows]),
            "example_keys": str_array([ex.key for _, ex in rows]),
            "example_requests": str_array([ex.request for _, ex in rows]),
            "example_preferred": str_array([ex.preferred for _, ex in rows]),
            "example_other": str_array([ex.other for _, ex in rows]),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.texts = dict(zip(str_list(state["text_users"]), str_list(state["texts"]), strict=True))
        self.examples = {}
        cols = [str_list(state[k]) for k in ("example_keys", "example_requests", "example_preferred", "example_other")]
        for uid, *fields in zip(str_list(state["example_users"]), *cols, strict=True):
            self.examples.setdefault(uid, []).append(Example(*fields))
        name = str(state["model"])
        if self.lm is None or self.lm.name != name:
            self.lm = load_lm(name) if name else None


class ICLJudgeOracle(ICLJudge):
    """An upper bound, not a deployable method: the ICL judge told the rule that decided the labels (the
    user's answer key, :func:`perbench.data.user_context.oracle_user_text`) besides their profile and pairs."""

    name: ClassVar[str] = "icl_judge_oracle"
    oracle: ClassVar[bool] = True
