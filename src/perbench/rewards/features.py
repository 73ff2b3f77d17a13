"""Frozen features of a backbone, extracted once per (model fingerprint, token ids) and cached on disk.

φ(x, y) = last hidden state (after the final norm) at the last token of ids(x, y) (see
:mod:`perbench.models.chat`). The same forward also yields, for every response token t, the hidden state
h_t (so r(x, y_≤t) for every t without another forward) and the model's own log π(y_t | x, y_<t) — what
policy accuracy needs when the policy is the backbone.

Texts that share their prompt (a pair's chosen and rejected, a prompt's Best-of-N samples) share one
forward of that prompt: they are packed into one row, prompt first, then each response at the positions it
would have alone, attending to the prompt and to itself only (a 4-D mask). Features equal those of
separate forwards up to float rounding; the prompt's tokens are computed once per row instead of once per
text. A row holds at most ``batch_size`` texts and ``max_length`` tokens; a forward holds rows of at most
``batch_size`` texts in all, longest first (so little padding). On a CPU a forward is one row of at most
:data:`CPU_ROW_TOKENS` tokens instead: there, padding and the masks it brings cost more than batching rows
saves (``docs/benchmarks.md``, RM pair scoring: 1.16× a classifier at batch 1, whose own padded batches
reach 0.75× of it). On a CPU the shared prompt measured neutral (a packed row's 4-D mask costs about what
the prompt's second pass saves); ``bench/gpu.sh`` measures it on a GPU. ``share_prompt=False`` gives one
text per row.

``batch_size="auto"``: :data:`CPU_TEXTS` on a CPU; on a GPU the rows of the call's longest row that its free memory
holds (:mod:`perbench.models.memory`, kind ``score``). A forward that runs out of memory is split in two and retried,
and later forwards stay at or below the size that fit.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perbench.cache import Store, pack_arrays, unpack_arrays
from perbench.calls import note
from perbench.data.records import Prompt, prompt_key
from perbench.io import cache_dir
from perbench.models.chat import encode_pair
from perbench.models.loader import LoadedLM
from perbench.progress import progress

#: the longest packed row a CPU forward holds (a single longer text still gets its own row)
CPU_ROW_TOKENS = 512
#: texts per forward of ``batch_size="auto"`` on a CPU (the measured fastest; ``docs/benchmarks.md``)
CPU_TEXTS = 16
#: decoded features kept in memory per extractor (least recently used first out): a run reads the same texts'
#: features for every system, metric and pair set, and decoding them from the store each time cost more than
#: the systems' own arithmetic
MEMO_BYTES = 256 << 20


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
        self,
        lm: LoadedLM,
        store: Store | None = None,
        *,
        batch_size: int | str = "auto",
        max_length: int = 1024,
        share_prompt: bool = True,
    ) -> None:
        self.lm = lm
        self.store = store if store is not None else Store(cache_dir() / "features.sqlite")
        self.requested = batch_size
        self.batch_size = CPU_TEXTS if batch_size == "auto" else int(batch_size)
        self.halvings = 0
        self._ceiling: int | None = None
        self.estimate: dict[str, int | str] | None = None
        self.max_length = max_length
        self.share_prompt = share_prompt
        self.stats = ExtractStats()
        self._memo: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()
        self._memo_bytes = 0

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

    def logprob_sums(self, items: Sequence[tuple[Prompt, str]], desc: str = "log-probs") -> list[float]:
        """log p(y | x) of each (prompt, response), summed over the response's tokens (:meth:`tokens`); memoized by
        the texts (:mod:`perbench.memo`), so a rerun tokenizes nothing (the feature store is keyed by token ids)."""
        from perbench.data.pairs import content_hash
        from perbench.memo import memo_json

        def compute() -> list[float]:
            return [float(np.sum(f.logprobs)) for f in self.tokens(items, desc)]

        digest = content_hash(*(f"{prompt_key(x)}\x00{y}" for x, y in items))
        return memo_json("logprob_sums", [self.fingerprint, self.max_length, digest], compute)

    def _get(self, items: Sequence[tuple[Prompt, str]], kind: str, desc: str) -> list[dict[str, np.ndarray]]:
        encoded = [encode_pair(self.lm.tokenizer, p, r, self.max_length) for p, r in items]
        keys = [self._key(kind, ids, n) for ids, n, _ in encoded]
        results = {k: self._memo[k] for k in keys if k in self._memo}
        stored = self.store.get_many_bytes(sorted({k for k in keys if k not in results}))
        results.update({k: unpack_arrays(v) for k, v in stored.items()})
        first = {k: i for i, k in enumerate(keys) if k not in results}
        todo = sorted(first.values(), key=lambda i: -len(encoded[i][0]))
        self.stats.reused += len(items) - len(todo)
        self.stats.truncated += sum(t for _, _, t in encoded)
        bar = progress(total=len(todo), desc=desc, unit="seq")
        if todo:
            self._size_for(len(encoded[todo[0]][0]))
        for rows in self._batches([encoded[i] for i in todo], todo):
            batch = [i for row in rows for i in row]
            feats = self._forward_fitting([[(encoded[i][0], encoded[i][1]) for i in row] for row in rows], kind)
            new = {keys[i]: pack_arrays(**f) for i, f in zip(batch, feats, strict=True)}
            if kind == "tokens":  # the same forward gives φ(x, y): never run it twice for one text
                last = {
                    self._key("last", encoded[i][0], encoded[i][1]): pack_arrays(last=f["last"])
                    for i, f in zip(batch, feats, strict=True)
                }
                # ... but a φ already stored stays: another forward (other batch-mates) can differ in the last float
                # bits, and whoever read the stored φ (a fit, a score) must find it again, bit for bit
                have = self.store.get_many_bytes(sorted(last))
                new.update({k: v for k, v in last.items() if k not in have and k not in self._memo})
            self.store.put_many_bytes(new)
            results.update({keys[i]: f for i, f in zip(batch, feats, strict=True)})
            self.stats.computed += len(batch)
            note(f"features.{kind}", len(batch))
            bar.update(len(batch))
        bar.close()
        self._remember(results)
        return [results[k] for k in keys]

    def record(self) -> dict[str, object]:
        """The texts per forward asked for and used (results.json ``batching``)."""
        rec: dict[str, object] = {"requested": self.requested, "used": self.batch_size, "halvings": self.halvings}
        if self.estimate is not None:
            rec["estimate"] = self.estimate
        return rec

    def _size_for(self, longest: int) -> None:
        """``auto`` off a CPU: the rows of ``longest`` tokens the device's free memory holds."""
        if self.requested != "auto" or str(self.lm.policy.device) == "cpu":
            return
        from perbench.models.memory import estimate_rows

        est = estimate_rows(self.lm, min(longest, self.max_length), "score")
        if est is not None:
            self.estimate = est.record()
            self.batch_size = min(est.rows, self._ceiling or est.rows)

    def _forward_fitting(self, rows: list[list[tuple[list[int], int]]], kind: str) -> list[dict[str, np.ndarray]]:
        """:meth:`_forward`, split in two and retried on out-of-memory (a single row that does not fit re-raises)."""
        from perbench.models.batching import AdaptiveBatcher, is_oom

        try:
            return self._forward(rows, kind)
        except (RuntimeError, MemoryError) as e:
            if not is_oom(e) or len(rows) == 1:
                raise
        AdaptiveBatcher._free()
        self.halvings += 1
        self.batch_size = self._ceiling = max(1, min(self.batch_size, sum(len(r) for r in rows)) // 2)
        out: list[dict[str, np.ndarray]] = []
        i = 0
        while i < len(rows):  # the rest in forwards of the (possibly lowered again) size
            part, texts = [rows[i]], len(rows[i])
            while i + len(part) < len(rows) and texts + len(rows[i + len(part)]) <= self.batch_size:
                texts += len(rows[i + len(part)])
                part.append(rows[i + len(part)])
            out += self._forward_fitting(part, kind)
            i += len(part)
        return out

    def _remember(self, results: dict[str, dict[str, np.ndarray]]) -> None:
        """Keep decoded features in memory, read-only (callers share them), within :data:`MEMO_BYTES`."""
        for k, v in results.items():
            if k in self._memo:
                self._memo.move_to_end(k)
                continue
            for a in v.values():
                a.flags.writeable = False
            self._memo[k] = v
            self._memo_bytes += sum(a.nbytes for a in v.values())
        while self._memo_bytes > MEMO_BYTES and self._memo:
            _, old = self._memo.popitem(last=False)
            self._memo_bytes -= sum(a.nbytes for a in old.values())

    def _batches(self, encoded: Sequence[tuple[list[int], int, bool]], index: Sequence[int]) -> list[list[list[int]]]:
        """Group ``index`` (parallel to ``encoded``) into forwards of rows: a row is texts with the same prompt
        ids (≤ ``batch_size`` texts, ≤ ``max_length`` tokens); a forward is rows of ≤ ``batch_size`` texts."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for j, (ids, n_resp, _) in enumerate(encoded):
            key = tuple(ids[: len(ids) - n_resp]) if self.share_prompt else (j,)
            groups.setdefault(key, []).append(j)
        cpu = str(self.lm.policy.device) == "cpu"
        row_tokens = min(self.max_length, CPU_ROW_TOKENS) if cpu else self.max_length
        rows: list[tuple[int, list[int]]] = []  # (row length, positions in ``encoded``)
        for members in groups.values():
            row: list[int] = []
            length = 0
            for j in members:
                ids, n_resp, _ = encoded[j]
                if row and (len(row) >= self.batch_size or length + n_resp > row_tokens):
                    rows.append((length, row))
                    row, length = [], 0
                length += n_resp if row else len(ids)
                row.append(j)
            rows.append((length, row))
        rows.sort(key=lambda r: -r[0])
        out: list[list[list[int]]] = []
        texts = 0
        for _, row in rows:
            if not out or cpu or texts + len(row) > self.batch_size:
                out.append([])
                texts = 0
            out[-1].append([index[j] for j in row])
            texts += len(row)
        return out

    def _forward(self, rows: list[list[tuple[list[int], int]]], kind: str) -> list[dict[str, np.ndarray]]:
        """One forward over packed rows; each row is [(ids, n_resp), ...] sharing the prompt ids. -> one
        feature dict per text, in row order."""
        import torch

        model, dev = self.lm.model, self.lm.policy.device
        pad = int(self.lm.tokenizer.pad_token_id)
        layout = []  # per row: prompt length, then (start, n_resp) of each response in the row
        for row in rows:
            ids0, n0 = row[0]
            p = len(ids0) - n0
            spans, at = [], p
            for _, n in row:
                spans.append((at, n))
                at += n
            layout.append((p, spans, at))
        L = max(at for _, _, at in layout)
        inp = torch.full((len(rows), L), pad, dtype=torch.long)
        packed = any(len(row) > 1 for row in rows)
        if packed:
            seg = torch.full((len(rows), L), -1, dtype=torch.long)  # -1 padding, 0 prompt, s + 1 response s
            pos = torch.zeros((len(rows), L), dtype=torch.long)
        mask = torch.zeros((len(rows), L), dtype=torch.long)
        for b, (row, (p, spans, at)) in enumerate(zip(rows, layout, strict=True)):
            ids0 = row[0][0]
            inp[b, :p] = torch.tensor(ids0[:p], dtype=torch.long)
            mask[b, :at] = 1
            if packed:
                seg[b, :p] = 0
                pos[b, :p] = torch.arange(p)
            for s, ((ids, n), (start, _)) in enumerate(zip(row, spans, strict=True)):
                inp[b, start : start + n] = torch.tensor(ids[len(ids) - n :], dtype=torch.long)
                if packed:
                    seg[b, start : start + n] = s + 1
                    pos[b, start : start + n] = torch.arange(p, p + n)
        kw: dict[str, torch.Tensor] = {"attention_mask": mask.to(dev)}
        if packed:  # causal, and a response sees the prompt and itself only; padding sees itself (no NaN rows)
            same = seg[:, :, None] == seg[:, None, :]
            allow = torch.ones(L, L, dtype=torch.bool).tril()[None] & (same | (seg[:, None, :] == 0))
            allow |= torch.eye(L, dtype=torch.bool)[None]
            dtype = self.lm.policy.torch_dtype()
            neg = torch.finfo(dtype).min
            kw = {
                "attention_mask": torch.where(allow, 0.0, neg).to(dtype)[:, None].to(dev),
                "position_ids": pos.to(dev),
            }
        # right padding: positions stay 0..n-1 and causal attention never reaches the padding
        with torch.inference_mode():
            hidden = model.get_decoder()(input_ids=inp.to(dev), **kw).last_hidden_state
            out: list[dict[str, np.ndarray]] = []
            head = model.get_output_embeddings()
            for b, (row, (p, spans, _)) in enumerate(zip(rows, layout, strict=True)):
                for (ids, T), (start, _) in zip(row, spans, strict=True):
                    end = start + T  # the text's last token is at end - 1 (the prompt's last when T = 0)
                    rec = {"last": hidden[b, end - 1 if T else p - 1].float().cpu().numpy()}
                    if kind == "tokens":
                        # the state that predicts response token j: the prompt's last, then the response's own
                        h = torch.cat([hidden[b, p - 1 : p], hidden[b, start:end]])
                        logits = head(h[:-1]).float()
                        tgt = torch.tensor(ids[len(ids) - T :], device=logits.device)
                        lp = logits.gather(-1, tgt[:, None])[:, 0] - torch.logsumexp(logits, -1)  # one (T, V)
                        rec["hidden"] = h[1:].float().cpu().numpy()
                        rec["logprobs"] = lp.cpu().numpy()
                    out.append(rec)
        return out
