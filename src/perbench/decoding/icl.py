"""ICL and ICL-RAG: the policy alone, with the user's own context in the prompt (no reward model).

**Equal information by default.** What the prompt shows about a user is what the reward models get:

* the user's **pairs** — an unseen user's first ``shots`` train pairs, exactly ``Benchmark.fewshot(user, shots)``,
  the set every reward model adapts from (the runner binds them with :meth:`ICL.bind_context` and
  :meth:`~perbench.data.records.Benchmark.context_view`); a seen user's train pairs (those the RMs are fit on),
  of which as many as the run's ``shots`` are shown. ``k=None`` (default) shows all of them; an integer ``k``
  shows that many, picked by the retrieval;
* the user's **profile items** — by default (``profile_pool="context"``) the first ``profile_k`` (5) items, the
  same items GenARM and the ICL judge read (:func:`perbench.data.user_context.user_text`); with
  ``profile_pool="all"`` the retrieval picks ``profile_k`` items from the whole profile (LaMP-style RAG, which
  gives the decoder more of the profile than the reward models read — a labelled choice, not the default).

Train data only: a test pair never reaches a prompt. ``format="pairs"`` (default) shows each pair as request +
preferred + dispreferred response (what the reward models learn from); ``format="chosen"`` the request and
the preferred response only. :meth:`ICL.shown` gives the effective count of each (pairs, profile items) for a
user; the runner records it per generation (samples.jsonl) and per decoder (results.json,
``effective_context``).

How the items are picked and ordered, within each kind: ``retrieval="random"`` (seeded by the request's seed
and the user), ``bm25`` (``bm25s``, English stopwords, ties keep the user's order) or ``dense`` (cosine of
the bundled MiniLM encoder's unit-norm embeddings, or any encoder ``load_encoder`` accepts). The query is the
request's text (the last user turn); an item's retrieval key is its text (a pair: request + preferred
response). Retrieved items are listed best first. ``icl`` defaults to random, ``icl_rag`` to BM25.

The decoder needs the users' data: call :meth:`ICL.bind_context` (or :meth:`ICL.bind` with user views, or
:meth:`ICL.bind_benchmark`) before :meth:`generate`. Decoding itself is
:class:`~perbench.decoding.greedy.ZeroShot` on the augmented prompt (greedy by default, or sampled).
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
from perbench.models.generation import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.rewards.base import RewardModel

if TYPE_CHECKING:
    from perbench.data.records import Benchmark

RETRIEVALS = ("random", "bm25", "dense")
FORMATS = ("chosen", "pairs")
PROFILE_POOLS = ("context", "all")
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
    needs_logits: ClassVar[bool] = False  # zero-shot decoding of the augmented prompt
    #: generates per (prompt, user): the prompt depends on the user even though no RM is involved
    per_user: ClassVar[bool] = True
    default_retrieval: ClassVar[str] = "random"

    def __init__(
        self,
        k: int | None = None,
        retrieval: str | None = None,
        format: str = "pairs",
        profile_k: int = 5,
        profile_pool: str = "context",
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
        if profile_pool not in PROFILE_POOLS:
            raise ValueError(f"{self.name}: profile_pool must be one of {PROFILE_POOLS}, got {profile_pool!r}")
        if k is not None and k < 0:
            raise ValueError(f"{self.name}: k must be ≥ 0 (or unset: every pair the reward models get), got {k}")
        if profile_k < 0:
            raise ValueError(f"{self.name}: profile_k must be ≥ 0, got {profile_k}")
        p: dict[str, Any] = {"retrieval": retrieval, "format": format}
        if k is not None:
            p["k"] = k
        if profile_k != 5:
            p["profile_k"] = profile_k
        if profile_pool != "context":
            p["profile_pool"] = profile_pool
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
        self.profile_k, self.profile_pool = profile_k, profile_pool
        self.decoder = ZeroShot(sample=sample, temperature=temperature, top_p=top_p)
        self.users: dict[str, UserView] | None = None
        self.pairs: dict[str, list[PreferencePair]] = {}
        self.shots: int | None = None  # the unseen users' shot count bound by bind_context
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

    def _require_bound(self) -> dict[str, UserView]:
        if self.users is None:
            raise RuntimeError(
                f"{self.name}: call bind_context(view), bind(users, pairs) or bind_benchmark(bench) first"
            )
        return self.users

    def profile_candidates(self, user_id: str) -> list[ContextItem]:
        """The profile items this user's prompt may show, in the user's order: the first ``profile_k`` (the items
        every method reads), or with ``profile_pool="all"`` the whole profile."""
        items = list(context_items(self._require_bound().get(user_id)))
        if self.profile_pool == "context":
            items = items[: self.profile_k]
        n = self.max_item_chars
        return [ContextItem(it.item_id, _clip(it.text, n), it.text, "profile") for it in items]

    def pair_candidates(self, user_id: str) -> list[ContextItem]:
        """The user's bound train pairs as prompt items, in the user's order."""
        self._require_bound()
        n = self.max_item_chars
        out = []
        for p in self.pairs.get(user_id, []):
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

    def candidates(self, user_id: str) -> list[ContextItem]:
        """Every item this user's prompt could show: profile items, then pairs, each in the user's order."""
        return self.profile_candidates(user_id) + self.pair_candidates(user_id)

    def _pair_budget(self, available: int) -> int:
        """How many pairs a prompt shows: ``k``, or (``k=None``) all the user's bound pairs, at most ``shots``
        (a seen user's train pairs are more than the shots an unseen user gets)."""
        if self.k is not None:
            return min(self.k, available)
        return available if self.shots is None else min(self.shots, available)

    def shown(self, user_id: str) -> dict[str, int]:
        """The effective context of this user's prompts: how many pairs and profile items they show (the same for
        every request: the retrieval picks which, not how many)."""
        n_profile = len(self.profile_candidates(user_id))
        if self.profile_pool == "all":
            n_profile = min(self.profile_k, n_profile)
        return {"pairs": self._pair_budget(len(self.pairs.get(user_id, []))), "profile_items": n_profile}

    # ---------------------------------------------------------------- retrieval
    def retrieve(self, request: GenRequest) -> list[ContextItem]:
        """The items shown for this request: profile items, then pairs, each kind picked and ordered by the
        retrieval (best first)."""
        shown = self.shown(request.user_id)
        profile = self._pick(request, self.profile_candidates(request.user_id), shown["profile_items"], "profile")
        pairs = self._pick(request, self.pair_candidates(request.user_id), shown["pairs"], "pairs")
        return profile + pairs

    def _pick(self, request: GenRequest, items: list[ContextItem], k: int, kind: str) -> list[ContextItem]:
        k = min(k, len(items))
        if k == 0:
            return []
        if self.retrieval == "random":
            h = int(hashlib.sha256(f"icl|{request.seed}|{request.user_id}|{kind}".encode()).hexdigest()[:8], 16)
            picks = np.random.default_rng(h).choice(len(items), size=k, replace=False)
            return [items[int(i)] for i in picks]
        query = prompt_text(request.prompt)
        scores = (
            self._bm25_scores(f"{request.user_id}|{kind}", items, query)
            if self.retrieval == "bm25"
            else self._dense_scores(items, query)
        )
        order = sorted(range(len(items)), key=lambda i: (-float(scores[i]), i))[:k]
        return [items[i] for i in order]

    def _bm25_scores(self, pool: str, items: Sequence[ContextItem], query: str) -> np.ndarray:
        import bm25s

        cache_key = f"{pool}|{self.format}|{len(items)}"
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
        blocks = []
        for source in ("profile", self.format):
            mine = [it for it in items if it.source == source]
            if mine:
                listed = "\n\n".join(f"[{i}] {it.text}" for i, it in enumerate(mine, 1))
                blocks.append(f"{HEADERS[source]}\n\n{listed}")
        context = "\n\n".join(blocks) + f"\n\n{INSTRUCTION}\n\n"
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
