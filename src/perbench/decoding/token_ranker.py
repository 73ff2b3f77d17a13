"""A token-level ranker on the policy's own hidden states: candidate rewards with **no extra forward**.

Per-token reward of appending token v after the policy's hidden state h (the state that predicts v):

    r_u(h, v) = (g(z(h)) + A e_u) · E[v] / √d,      g(z) = W₂ GELU(W₁ z + b₁) + b₂

with z(h) the standardised hidden state, E the policy's (frozen) input-embedding matrix, e_u ∈ R^m a
per-user embedding and A ∈ R^{d×m}. The response reward is token-factorised,
R_u(x, y) = Σ_t r_u(h_{t−1}, y_t) (like GenARM, no length normalisation), trained with −log σ(R_w − R_l)
(mini-batch Adam, L2 on the net and the embeddings). A new user gets only e_u, fit on their shots with the
net frozen: R is linear in e_u, so that is an L2-regularised logistic regression centred on the mean seen
embedding (unknown users: the mean embedding).

In ARGS (:class:`~perbench.decoding.args.ARGS`) the k candidates' rewards come from the hidden state the
policy has just computed and k embedding rows: one (B, d)·(B, k, d) product per step. Because the
reward is token-factorised, R(y_<t ⊕ v) = R(y_<t) + r(h_t, v) and the common R(y_<t) does not change
which candidate wins (nor the top-k softmax of the RGD-induced policy).

It binds to a feature extractor of the **policy** (set ``rm_backbone`` = ``policy``); ARGS checks it.
Our construction, in the spirit of the factorized ranker (Ma, Zhang, Zhao 2026); not from a paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import PreferencePair, Prompt
from perbench.models.chat import encode_response
from perbench.rewards.base import FeatureRM, RMContext, ScoreItem
from perbench.rewards.features import FeatureExtractor


class _Net(torch.nn.Module):
    def __init__(self, d: int, hidden: int, emb: int) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(d, hidden)
        self.l2 = torch.nn.Linear(hidden, d)
        self.A = torch.nn.Linear(emb, d, bias=False)
        torch.nn.init.zeros_(self.l2.weight)
        torch.nn.init.zeros_(self.l2.bias)

    def query(self, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """(N, d) standardised states, (N, m) user embeddings -> (N, d) query vectors."""
        out: torch.Tensor = self.l2(torch.nn.functional.gelu(self.l1(z))) + self.A(e)
        return out


class TokenRanker(FeatureRM):
    name: ClassVar[str] = "token_ranker"

    def __init__(
        self,
        hidden: int = 32,
        emb: int = 8,
        steps: int = 200,
        batch_pairs: int = 64,
        lr: float = 3e-3,
        weight_decay: float = 1e-2,
        emb_l2: float = 1e-3,
        adapt_l2: float = 0.05,
        **params: Any,
    ) -> None:
        super().__init__(
            hidden=hidden,
            emb=emb,
            steps=steps,
            batch_pairs=batch_pairs,
            lr=lr,
            weight_decay=weight_decay,
            emb_l2=emb_l2,
            adapt_l2=adapt_l2,
            **params,
        )
        self.hidden, self.emb, self.steps, self.batch_pairs, self.lr = hidden, emb, steps, batch_pairs, lr
        self.weight_decay, self.emb_l2, self.adapt_l2 = weight_decay, emb_l2, adapt_l2
        self.net: _Net | None = None
        self.mu: torch.Tensor | None = None
        self.sd: torch.Tensor | None = None
        self.users: dict[str, int] = {}
        self.E_users: torch.Tensor | None = None  # (U, m) seen users
        self.adapted: dict[str, torch.Tensor] = {}
        self.losses: list[float] = []

    # ---------------------------------------------------------------- pieces
    def _emb(self, tokens: torch.Tensor) -> torch.Tensor:
        """E[v] / √d for a tensor of token ids (gathered first: never touches the whole matrix)."""
        E = self._require_extractor().lm.model.get_input_embeddings().weight.detach()
        out: torch.Tensor = E[tokens.to(E.device)].float().cpu() / float(np.sqrt(E.shape[1]))
        return out

    def _user_emb(self, user_ids: Sequence[str]) -> torch.Tensor:
        if self.net is None or self.E_users is None:
            raise RuntimeError(f"{self.name} used before fit")
        mean = self.E_users.mean(0)
        rows = []
        for u in user_ids:
            if u in self.adapted:
                rows.append(self.adapted[u])
            elif u in self.users:
                rows.append(self.E_users[self.users[u]])
            else:
                rows.append(mean)
        return torch.stack(rows) if rows else torch.zeros(0, self.emb)

    def _z(self, h: torch.Tensor) -> torch.Tensor:
        assert self.mu is not None and self.sd is not None
        return (h.float() - self.mu) / self.sd

    def init_random(
        self, extractor: FeatureExtractor, users: Sequence[str] = ("u",), seed: int = 0, scale: float = 1.0
    ) -> TokenRanker:
        """An untrained ranker with random weights (benchmarks of decoding cost; tests)."""
        self.bind(extractor)
        d = extractor.dim
        g = torch.Generator().manual_seed(seed)
        self.net = _Net(d, self.hidden, self.emb)
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(scale * torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
        self.mu, self.sd = torch.zeros(d), torch.ones(d)
        self.users = {u: i for i, u in enumerate(users)}
        self.E_users = torch.randn(len(users), self.emb, generator=g)
        self.net.eval()
        return self

    # ---------------------------------------------------------------- rewards
    def candidate_rewards(self, user_ids: Sequence[str], hidden: torch.Tensor, cands: torch.Tensor) -> torch.Tensor:
        """(B, d) policy hidden states, (B, k) candidate token ids -> (B, k) token rewards r_u(h, v)."""
        assert self.net is not None
        with torch.inference_mode():
            q = self.net.query(self._z(hidden.cpu()), self._user_emb(user_ids))  # (B, d)
            ev = self._emb(cands)  # (B, k, d)
            return torch.einsum("bd,bkd->bk", q, ev)

    def _token_inputs(self, items: Sequence[tuple[Prompt, str]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per response: (T, d) hidden states before each token, (T,) the tokens."""
        ex = self._require_extractor()
        toks = ex.tokens(items, desc=f"{self.name} token features")
        pf = ex.prompt_features([p for p, _ in items], desc=f"{self.name} prompt features")
        out = []
        for (_, resp), tf, h0 in zip(items, toks, pf, strict=True):
            ids = encode_response(ex.lm.tokenizer, resp)
            T = len(tf.hidden)
            assert len(ids) == T, "token features and response tokens disagree"
            prev = np.concatenate([h0[None], tf.hidden[:-1]]) if T else np.zeros((0, len(h0)), np.float32)
            out.append((torch.from_numpy(prev), torch.tensor(ids, dtype=torch.long)))
        return out

    def _token_rewards(self, data: Sequence[tuple[torch.Tensor, torch.Tensor]], e: torch.Tensor) -> list[torch.Tensor]:
        """Per-token rewards of each response (differentiable when the net / ``e`` require grad)."""
        assert self.net is not None
        if not data:
            return []
        Z = torch.cat([self._z(h) for h, _ in data])
        V = torch.cat([v for _, v in data])
        lens = [len(v) for _, v in data]
        eu = torch.repeat_interleave(e, torch.tensor(lens), dim=0)
        r = (self.net.query(Z, eu) * self._emb(V)).sum(-1)
        return list(torch.split(r, lens))

    def token_rewards(self, items: Sequence[ScoreItem]) -> list[np.ndarray]:
        """r(x, y_≤t) = Σ_{s≤t} r_u(h_{s−1}, y_s) for every response token t."""
        data = self._token_inputs([(it.prompt, it.response) for it in items])
        with torch.no_grad():
            per = self._token_rewards(data, self._user_emb([it.user_id for it in items]))
        return [p.cumsum(0).double().numpy() for p in per]

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        data = self._token_inputs([(it.prompt, it.response) for it in items])
        with torch.no_grad():
            per = self._token_rewards(data, self._user_emb([it.user_id for it in items]))
        return np.array([float(p.sum()) for p in per], dtype=np.float64)

    def reward_from_features(self, user_ids: Sequence[str], feats: torch.Tensor) -> torch.Tensor:
        raise TypeError(f"{self.name} scores (hidden state, next token) pairs: use candidate_rewards / score")

    # ---------------------------------------------------------------- training
    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        if ctx.features is None:
            raise ValueError(f"{self.name} needs the policy's feature extractor")
        self.bind(ctx.features)
        d = ctx.features.dim
        users = sorted({p.user_id for p in pairs})
        self.users = {u: i for i, u in enumerate(users)}
        self.adapted = {}
        dw = self._token_inputs([(p.prompt, p.chosen) for p in pairs])
        dl = self._token_inputs([(p.prompt, p.rejected) for p in pairs])
        allh = torch.cat([h for h, _ in dw + dl]) if pairs else torch.zeros(1, d)
        self.mu, self.sd = allh.mean(0), allh.std(0) + 1e-4 if len(allh) > 1 else torch.ones(d)
        uidx = torch.tensor([self.users[p.user_id] for p in pairs], dtype=torch.long)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seed)
            self.net = net = _Net(d, self.hidden, self.emb)
            E = (0.1 * torch.randn(len(users), self.emb)).requires_grad_(True)
            opt = torch.optim.Adam(
                [
                    {"params": list(net.parameters()), "weight_decay": self.weight_decay},
                    {"params": [E], "weight_decay": 0.0},
                ],
                lr=self.lr,
            )
            gen = torch.Generator().manual_seed(ctx.seed)
            self.losses = []
            for _ in range(self.steps if pairs else 0):
                batch = torch.randperm(len(pairs), generator=gen)[: self.batch_pairs].tolist()
                e = E[uidx[batch]]
                rw = torch.stack([r.sum() for r in self._token_rewards([dw[i] for i in batch], e)])
                rl = torch.stack([r.sum() for r in self._token_rewards([dl[i] for i in batch], e)])
                loss = torch.nn.functional.softplus(-(rw - rl)).mean() + self.emb_l2 * (E**2).sum(-1).mean()
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                self.losses.append(float(loss.detach()))
        net.eval()
        self.E_users = E.detach() if len(users) else torch.zeros(1, self.emb)

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        """Fit only e_u on the shots (net frozen): L2-regularised logistic regression around the mean."""
        if self.net is None or self.E_users is None:
            raise RuntimeError(f"{self.name}: adapt before fit")
        center = self.E_users.mean(0)
        if not shots:
            self.adapted.pop(user_id, None)
            return
        dw = self._token_inputs([(p.prompt, p.chosen) for p in shots])
        dl = self._token_inputs([(p.prompt, p.rejected) for p in shots])

        def parts(data: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
            """R = base + e·S: (n,) base reward with e = 0 and (n, m) S = Σ_t Aᵀ E[y_t]."""
            zero = torch.zeros(len(data), self.emb)
            base = torch.stack([r.sum() for r in self._token_rewards(data, zero)])
            assert self.net is not None
            S = torch.stack([(self._emb(v) @ self.net.A.weight).sum(0) for _, v in data])
            return base, S

        with torch.no_grad():
            bw, Sw = parts(dw)
            bl, Sl = parts(dl)
        X, off = Sw - Sl, bw - bl
        w = center.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([w], lr=1.0, max_iter=100, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            prior = self.adapt_l2 * ((w - center) ** 2).sum()
            loss = torch.nn.functional.softplus(-(off + X @ w)).mean() + prior
            loss.backward()  # type: ignore[no-untyped-call]
            return loss

        opt.step(closure)  # type: ignore[no-untyped-call]
        self.adapted[user_id] = w.detach()

    # ---------------------------------------------------------------- state
    def state(self) -> dict[str, np.ndarray]:
        if self.net is None or self.E_users is None or self.mu is None or self.sd is None:
            raise RuntimeError(f"{self.name}: state() before fit")
        out = {f"net.{k}": v.detach().numpy() for k, v in self.net.state_dict().items()}
        users = sorted(self.users, key=self.users.__getitem__)
        out.update(
            mu=self.mu.numpy(),
            sd=self.sd.numpy(),
            E_users=self.E_users.numpy(),
            users=np.asarray(users, dtype=str) if users else np.zeros(0, dtype="<U1"),
        )
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        d = int(state["mu"].shape[0])
        self.net = _Net(d, self.hidden, self.emb)
        self.net.load_state_dict(
            {k[4:]: torch.from_numpy(np.array(v)) for k, v in state.items() if k.startswith("net.")}
        )
        self.net.eval()
        self.mu, self.sd = torch.from_numpy(np.array(state["mu"])), torch.from_numpy(np.array(state["sd"]))
        self.E_users = torch.from_numpy(np.array(state["E_users"]))
        self.users = {str(u): i for i, u in enumerate(np.asarray(state["users"]).tolist())}
        self.adapted = {}
