"""Synthetic preference problems on preset feature vectors, and a FeatureExtractor stand-in.

Responses are named ``"<prompt>/a"``, ``"<prompt>/b"``; each text maps to a fixed random vector. A user
prefers the response with the larger ``w_u · φ`` (noise-free), so the right answer is known exactly.

- ``lowrank``: user directions are convex mixtures of two basis directions (what LoRe/PAL/PReF assume).
- ``conflict``: half the users prefer ``+a``, the other half ``-a``; the unseen users' test pairs are the
  *same* pairs for every unseen user, so a user-agnostic scorer gets exactly one of each mirrored pair
  right (macro accuracy ≤ 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perbench.data.records import PreferencePair, Prompt


class FakeExtractor:
    """Maps texts to preset vectors: ``last`` = response vector + 0.3·prompt vector (the prompt part cancels
    in every pairwise difference); ``prompt_features`` = the prompt vector."""

    def __init__(self, dim: int, seed: int = 0, signal_dims: int = 4, noise: float = 0.3) -> None:
        self.dim = dim
        self.fingerprint = f"fake:{dim}:{seed}"
        self.lm = None
        self.rng = np.random.default_rng(seed)
        self.signal_dims, self.noise = signal_dims, noise
        self.table: dict[str, np.ndarray] = {}
        self.calls = 0

    def vec(self, text: str) -> np.ndarray:
        if text not in self.table:
            v = self.rng.standard_normal(self.dim) * self.noise
            v[: self.signal_dims] = self.rng.standard_normal(self.signal_dims)
            self.table[text] = v.astype(np.float32)
        return self.table[text]

    def last(self, items: Sequence[tuple[Prompt, str]], desc: str = "") -> np.ndarray:
        self.calls += 1
        if not items:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.vec(r) + 0.3 * self.vec(str(p)) for p, r in items]).astype(np.float32)

    def prompt_features(self, prompts: Sequence[Prompt], desc: str = "") -> np.ndarray:
        if not prompts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.vec(str(p)) for p in prompts]).astype(np.float32)


@dataclass
class Problem:
    ext: FakeExtractor
    directions: dict[str, np.ndarray]
    train: list[PreferencePair] = field(default_factory=list)  # seen users
    test_seen: list[PreferencePair] = field(default_factory=list)
    shots: dict[str, list[PreferencePair]] = field(default_factory=dict)  # unseen users' few-shot sets
    test_unseen: list[PreferencePair] = field(default_factory=list)

    @property
    def seen(self) -> list[str]:
        return sorted({p.user_id for p in self.train})

    @property
    def unseen(self) -> list[str]:
        return sorted(self.shots)


def _pair(ext: FakeExtractor, user: str, w: np.ndarray, prompt: str, split: str, margin: float = 0.5) -> PreferencePair:
    """The pair of ``prompt``'s two responses, labelled by ``w``; near-ties (|w·Δ| < margin·‖w‖) are redrawn
    so that the known answer is learnable from a few dozen pairs."""
    a, b = f"{prompt}/a", f"{prompt}/b"
    while abs(float(w @ (ext.vec(a) - ext.vec(b)))) < margin * float(np.linalg.norm(w)):
        del ext.table[a], ext.table[b]
    sa, sb = float(w @ ext.vec(a)), float(w @ ext.vec(b))
    chosen, rejected = (a, b) if sa > sb else (b, a)
    return PreferencePair(f"{user}:{prompt}", user, prompt, chosen, rejected, split)  # type: ignore[arg-type]


def make_problem(
    kind: str = "lowrank",
    *,
    dim: int = 16,
    n_seen: int = 12,
    n_unseen: int = 4,
    n_train: int = 40,
    n_test: int = 30,
    n_shots: int = 20,
    seed: int = 0,
    signal_dims: int = 4,
    noise: float = 0.3,
) -> Problem:
    rng = np.random.default_rng(seed + 1000)
    ext = FakeExtractor(dim, seed, signal_dims, noise)
    s = ext.signal_dims
    basis = np.zeros((2, dim))
    basis[:, :s] = rng.standard_normal((2, s))
    basis /= np.linalg.norm(basis, axis=1, keepdims=True)
    users = [f"s{i:02d}" for i in range(n_seen)] + [f"n{i:02d}" for i in range(n_unseen)]
    directions: dict[str, np.ndarray] = {}
    for i, u in enumerate(users):
        if kind == "lowrank":
            c = rng.uniform(0.0, 1.0)
            directions[u] = c * basis[0] + (1 - c) * basis[1]
        elif kind == "conflict":
            directions[u] = basis[0] if i % 2 == 0 else -basis[0]
        else:
            raise ValueError(kind)
    prob = Problem(ext, directions)
    for u in users[:n_seen]:
        prob.train += [_pair(ext, u, directions[u], f"{u}-tr{j}", "train") for j in range(n_train)]
        prob.test_seen += [_pair(ext, u, directions[u], f"{u}-te{j}", "test") for j in range(n_test)]
    for u in users[n_seen:]:
        prob.shots[u] = [_pair(ext, u, directions[u], f"{u}-shot{j}", "train") for j in range(n_shots)]
        # conflict: the same test pairs for every unseen user (mirrored across the two groups)
        stem = "shared" if kind == "conflict" else u
        prob.test_unseen += [_pair(ext, u, directions[u], f"{stem}-te{j}", "test") for j in range(n_test)]
    return prob


def accuracy(rm: object, pairs: Sequence[PreferencePair]) -> float:
    """Macro (per-user mean) strict pairwise accuracy."""
    c, r = rm.score_pairs(pairs)  # type: ignore[attr-defined]
    per_user: dict[str, list[bool]] = {}
    for p, a, b in zip(pairs, c, r, strict=True):
        per_user.setdefault(p.user_id, []).append(bool(a > b))
    return float(np.mean([np.mean(v) for v in per_user.values()]))
