"""ICL and ICL-RAG: the policy alone, with k of the user's own items in the prompt (no reward model).

Where the items come from (train data only — test pairs never reach a prompt):

* ``format="chosen"``: the user's profile (``User.profile``, e.g. LaMP's ``"<title>" is a title for
  "<abstract>"`` items or past posts); for users without a profile, their own train pairs rendered as
  request + the response they preferred;
* ``format="pairs"``: the user's own train pairs as preference pairs (request, preferred, dispreferred);
  users without train pairs fall back to their profile items.

How the k items are picked: ``retrieval="random"`` (seeded by the request's seed and the user), ``bm25``
(``bm25s``, English stopwords, ties keep the user's order) or ``dense`` (cosine of the bundled MiniLM
encoder's unit-norm embeddings, or any encoder ``load_encoder`` accepts). The query is the request's text
(the last user turn); an item's retrieval key is its text (a pair: request + preferred response).
Retrieved items are listed best first. ``icl`` defaults to random items, ``icl_rag`` to BM25.

What a user's items may contain: the user context only (:func:`perbench.data.user_context.context_items`:
profile items, never the answer key) and the user's own train pairs. Which train pairs
(:meth:`ICL.bind_benchmark` with the run's ``shots``): a seen user's train pairs, all of them (the pairs the
reward models are fit on; ``k`` caps what one prompt shows); an unseen user's first ``shots`` train pairs,
exactly ``Benchmark.fewshot(user, shots)``, the set every reward model adapts from. ``shots=None`` gives
unseen users all their train pairs (standalone use only; a run passes its ``shots``).

The decoder needs the users' data: call :meth:`ICL.bind` (or :meth:`ICL.bind_benchmark`) before
:meth:`generate`. Decoding itself is :class:`~perbench.decoding.greedy.ZeroShot` on the augmented prompt
(greedy by default, or sampled).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import ContextView, Message, PreferencePair, Prompt, prompt_text
from perbench.data.user_context import UserView, context_items, require_views
from perbench.decoding.base import Decoder
from perbench.decoding.greedy import ZeroShot
from perbench.models.generate import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel

if TYPE_CHECKING:
    from perbench.data.records import Benchmark

RETRIEVALS = ("random", "bm25", "dense")
FORMATS = ("chosen", "pairs")
HEADERS = {
    "profile": "Here are some items from this user's profile:",
    "chosen": "Here are earlier requests from this user, each with the response they preferred:",
    "pairs": "Here are earlier requests from this user, each with the response they preferred and one they did not:",
}
INSTRUCTION = "Now answer the following request the way this user would prefer."


@dataclass(frozen=True)
class ContextItem:
    item_id: str
    text: str  # as shown in the prompt
    key: str  # what retrieval compares with the query
    source: str  # "profile" | "chosen" | "pairs"


def _clip(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


class ICL(Decoder):
    name: ClassVar[str] = "icl"
    uses_rm: ClassVar[bool] = False
    #: generates per (prompt, user): the prompt depends on the user even though no RM is involved
    per_user: ClassVar[bool] = True
    default_retrieval: ClassVar[str] = "random"

    def __init__(
        self,
        k: int = 4,
        retrieval: str | None = None,
        format: str = "chosen",
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_item_chars: int = 600,
        encoder: str = "minilm",
        **params: Any,
    ) -> None:
        retrieval = retrieval or self.default_retrieval
        if retrieval not in RETRIEVALS:
            raise ValueError(f"{self.name}: retrieval must be one of {RETRIEVALS}, got {retrieval!r}")
        if format not in FORMATS:
            raise ValueError(f"{self.name}: format must be one of {FORMATS}, got {format!r}")
        if k < 0:
            raise ValueError(f"{self.name}: k must be ≥ 0, got {k}")
        p: dict[str, Any] = {"k": k, "retrieval": retrieval, "format": format}
        if sample:
            p.update(sample=True, temperature=temperature, top_p=top_p)
        if encoder != "minilm" and retrieval == "dense":
            p["encoder"] = encoder
        if max_item_chars != 600:
            p["max_item_chars"] = max_item_chars
        super().__init__(**p, **params)
        self.k, self.retrieval, self.format, self.max_item_chars, self.encoder = (
            k,
            retrieval,
            format,
            max_item_chars,
            encoder,
        )
        self.decoder = ZeroShot(sample=sample, temperature=temperature, top_p=top_p)
        self.users: dict[str, UserView] | None = None
        self.pairs: dict[str, list[PreferencePair]] = {}
        self.shots: int | None = None  # the unseen users' shot count bound by bind_benchmark
        self._bm25: dict[str, Any] = {}
        self._emb: dict[str, np.ndarray] = {}

    # ---------------------------------------------------------------- data
    def bind(self, users: Mapping[str, UserView], pairs: Sequence[PreferencePair]) -> None:
        """The users' views and their pairs; only ``split == "train"`` pairs are ever used. A full user record
        (which holds the answer key) is refused."""
        self.users = require_views(users, self.name)
        self.shots = None
        self.pairs = {}
        for p in pairs:
            if p.split == "train":
                self.pairs.setdefault(p.user_id, []).append(p)
        self._bm25.clear()

    def bind_context(self, view: ContextView) -> None:
        """Bind what the runner hands a decoder (:meth:`~perbench.data.records.Benchmark.context_view`): the
        users' views, seen users with all their train pairs, unseen users with their first ``shots`` train pairs
        (what the reward models adapt from)."""
        self.bind(view.users, [p for mine in view.pairs.values() for p in mine])
        self.shots = view.shots

    def bind_benchmark(self, bench: Benchmark, shots: int | None = None) -> None:
        """:meth:`bind_context` of ``bench.context_view(shots)`` (None: unseen users with all their pairs)."""
        self.bind_context(bench.context_view(shots))

    def config_key(self) -> str:
        """Parameters plus the bound shot count: generations from different few-shot sets are cached apart."""
        if self.shots is None:
            return super().config_key()
        blob = json.dumps([self.name, self.params, {"shots": self.shots}], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def candidates(self, user_id: str) -> list[ContextItem]:
        """Every item this user could show, in the user's own order."""
        if self.users is None:
            raise RuntimeError(
                f"{self.name}: call bind_context(view), bind(users, pairs) or bind_benchmark(bench) first"
            )
        profile = list(context_items(self.users.get(user_id)))
        pairs = self.pairs.get(user_id, [])
        n = self.max_item_chars
        if (self.format == "chosen" and profile) or (self.format == "pairs" and not pairs):
            return [ContextItem(it.item_id, _clip(it.text, n), it.text, "profile") for it in profile]
        out = []
        for p in pairs:
            x = _clip(prompt_text(p.prompt), n)
            if self.format == "chosen":
                text = f"Request: {x}\nResponse this user preferred: {_clip(p.chosen, n)}"
            else:
                text = (
                    f"Request: {x}\nPreferred response: {_clip(p.chosen, n)}\n"
                    f"Dispreferred response: {_clip(p.rejected, n)}"
                )
            out.append(ContextItem(p.pair_id, text, f"{prompt_text(p.prompt)}\n{p.chosen}", self.format))
        return out

    # ---------------------------------------------------------------- retrieval
    def retrieve(self, request: GenRequest) -> list[ContextItem]:
        items = self.candidates(request.user_id)
        k = min(self.k, len(items))
        if k == 0:
            return []
        if self.retrieval == "random":
            h = int(hashlib.sha256(f"icl|{request.seed}|{request.user_id}".encode()).hexdigest()[:8], 16)
            picks = np.random.default_rng(h).choice(len(items), size=k, replace=False)
            return [items[int(i)] for i in picks]
        query = prompt_text(request.prompt)
        scores = (
            self._bm25_scores(request.user_id, items, query)
            if self.retrieval == "bm25"
            else self._dense_scores(items, query)
        )
        order = sorted(range(len(items)), key=lambda i: (-float(scores[i]), i))[:k]
        return [items[i] for i in order]

    def _bm25_scores(self, user_id: str, items: Sequence[ContextItem], query: str) -> np.ndarray:
        import bm25s

        cache_key = f"{user_id}|{self.format}|{len(items)}"
        if cache_key not in self._bm25:
            toks = bm25s.tokenize([it.key for it in items], stopwords="en", show_progress=False, return_ids=False)
            toks = [t or ["\x00empty"] for t in toks]  # bm25s cannot index an empty document
            index = bm25s.BM25()
            index.index(toks, show_progress=False)
            self._bm25[cache_key] = index
        q = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not q:
            return np.zeros(len(items))
        return np.asarray(self._bm25[cache_key].get_scores(q), np.float64)

    def _dense_scores(self, items: Sequence[ContextItem], query: str) -> np.ndarray:
        from perbench.models.encoder import load_encoder

        enc = load_encoder(self.encoder)
        todo = sorted({it.key for it in items} - set(self._emb))
        if todo:
            self._emb.update(zip(todo, enc.encode(todo), strict=True))
        q = enc.encode([query])[0]
        return np.array([float(self._emb[it.key] @ q) for it in items])

    # ---------------------------------------------------------------- prompts
    def build_prompt(self, request: GenRequest) -> Prompt:
        items = self.retrieve(request)
        if not items:
            return request.prompt
        blocks = "\n\n".join(f"[{i}] {it.text}" for i, it in enumerate(items, 1))
        context = f"{HEADERS[items[0].source]}\n\n{blocks}\n\n{INSTRUCTION}\n\n"
        if isinstance(request.prompt, str):
            return context + request.prompt
        msgs = list(request.prompt)
        last = max((i for i, m in enumerate(msgs) if m.role == "user"), default=None)
        if last is None:
            return (*msgs, Message("user", context.rstrip()))
        msgs[last] = Message("user", context + msgs[last].content)
        return tuple(msgs)

    def generate(
        self, policy: LoadedLM, requests: Sequence[GenRequest], rm: RewardModel | None, *, max_new_tokens: int
    ) -> list[Generation]:
        reqs = [GenRequest(self.build_prompt(r), r.user_id, r.seed) for r in requests]
        return self.decoder.generate(policy, reqs, None, max_new_tokens=max_new_tokens)


class ICLRAG(ICL):
    name: ClassVar[str] = "icl_rag"
    default_retrieval: ClassVar[str] = "bm25"
