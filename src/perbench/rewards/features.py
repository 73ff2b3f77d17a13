"""Frozen features of a backbone, extracted once per (model fingerprint, token ids) and cached on disk.

φ(x, y) = last hidden state (after the final norm) at the last token of ids(x, y) (see
:mod:`perbench.models.chat`). The same forward also yields, for every response token t, the hidden state
h_t (so r(x, y_≤t) for every t without another forward) and the model's own log π(y_t | x, y_<t) — what
policy accuracy needs when the policy is the backbone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perbench.cache import Store, pack_arrays, unpack_arrays
from perbench.data.records import Prompt
from perbench.io import cache_dir
from perbench.models.chat import encode_pair
from perbench.models.loader import LoadedLM
from perbench.progress import progress


@dataclass
class TokenFeatures:
    hidden: np.ndarray  # (T, d) hidden state at each response token
    logprobs: np.ndarray  # (T,) log π(y_t | x, y_<t) under this backbone


@dataclass
class ExtractStats:
    computed: int = 0
    reused: int = 0
    truncated: int = 0


class FeatureExtractor:
    def __init__(
        self, lm: LoadedLM, store: Store | None = None, *, batch_size: int = 16, max_length: int = 1024
    ) -> None:
        self.lm = lm
        self.store = store if store is not None else Store(cache_dir() / "features.sqlite")
        self.batch_size = batch_size
        self.max_length = max_length
        self.stats = ExtractStats()

    @property
    def fingerprint(self) -> str:
        return self.lm.fingerprint

    @property
    def dim(self) -> int:
        return self.lm.hidden_size

    def _key(self, kind: str, ids: Sequence[int], n_resp: int) -> str:
        h = hashlib.sha256(f"{kind}|{self.fingerprint}|{self.max_length}|{n_resp}|".encode())
        h.update(np.asarray(ids, dtype=np.int64).tobytes())
        return h.hexdigest()

    def last(self, items: Sequence[tuple[Prompt, str]], desc: str = "features") -> np.ndarray:
        """(N, d) float32 φ(x, y) for each (prompt, response)."""
        out = self._get(items, "last", desc)
        if not out:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([o["last"] for o in out]).astype(np.float32)

    def prompt_features(self, prompts: Sequence[Prompt], desc: str = "prompt features") -> np.ndarray:
        """(N, d) float32 hidden state at the last token of the templated prompt (the generation prompt
        included, no response token): the prompt-side input of methods such as PAL."""
        out = self._get([(p, "") for p in prompts], "prompt", desc)
        if not out:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([o["last"] for o in out]).astype(np.float32)

    def tokens(self, items: Sequence[tuple[Prompt, str]], desc: str = "token features") -> list[TokenFeatures]:
        """Per-response-token hidden states and log-probs (one forward per response, cached)."""
        return [TokenFeatures(o["hidden"], o["logprobs"]) for o in self._get(items, "tokens", desc)]

    def _get(self, items: Sequence[tuple[Prompt, str]], kind: str, desc: str) -> list[dict[str, np.ndarray]]:
        encoded = [encode_pair(self.lm.tokenizer, p, r, self.max_length) for p, r in items]
        keys = [self._key(kind, ids, n) for ids, n, _ in encoded]
        found = self.store.get_many_bytes(sorted(set(keys)))
        todo = sorted({k: i for i, k in enumerate(keys) if k not in found}.values(), key=lambda i: -len(encoded[i][0]))
        self.stats.reused += len(items) - len(todo)
        self.stats.truncated += sum(t for _, _, t in encoded)
        results: dict[str, dict[str, np.ndarray]] = {k: unpack_arrays(v) for k, v in found.items()}
        bar = progress(total=len(todo), desc=desc, unit="seq")
        for s in range(0, len(todo), self.batch_size):
            batch = todo[s : s + self.batch_size]
            feats = self._forward([encoded[i][0] for i in batch], [encoded[i][1] for i in batch], kind)
            new = {keys[i]: pack_arrays(**f) for i, f in zip(batch, feats, strict=True)}
            if kind == "tokens":  # the same forward gives φ(x, y): never run it twice for one text
                new.update(
                    {
                        self._key("last", encoded[i][0], encoded[i][1]): pack_arrays(last=f["last"])
                        for i, f in zip(batch, feats, strict=True)
                    }
                )
            self.store.put_many_bytes(new)
            results.update({keys[i]: f for i, f in zip(batch, feats, strict=True)})
            self.stats.computed += len(batch)
            bar.update(len(batch))
        bar.close()
        return [results[k] for k in keys]

    def _forward(self, ids: list[list[int]], n_resp: list[int], kind: str) -> list[dict[str, np.ndarray]]:
        import torch

        model, dev = self.lm.model, self.lm.policy.device
        pad = int(self.lm.tokenizer.pad_token_id)
        L = max(len(x) for x in ids)
        inp = torch.full((len(ids), L), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), L), dtype=torch.long)
        for i, x in enumerate(ids):  # right padding: positions stay 0..n-1, causal attention ignores the pad
            inp[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1
        with torch.inference_mode():
            hidden = model.get_decoder()(input_ids=inp.to(dev), attention_mask=mask.to(dev)).last_hidden_state
            out: list[dict[str, np.ndarray]] = []
            head = model.get_output_embeddings()
            for i, x in enumerate(ids):
                n, T = len(x), n_resp[i]
                rec = {"last": hidden[i, n - 1].float().cpu().numpy()}
                if kind == "tokens":
                    h = hidden[i, n - T - 1 : n]  # h[j] predicts token j+1; h[1:] are the response tokens
                    logits = head(h[:-1]).float()
                    tgt = torch.tensor(x[n - T :], device=logits.device)
                    lp = torch.log_softmax(logits, -1).gather(-1, tgt[:, None])[:, 0]
                    rec["hidden"] = h[1:].float().cpu().numpy()
                    rec["logprobs"] = lp.cpu().numpy()
                out.append(rec)
        return out
