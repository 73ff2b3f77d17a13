"""Synthetic preference problems on preset feature vectors, and a FeatureExtractor stand-in.

Responses are named ``"<prompt>/a"``, ``"<prompt>/b"``; each text maps to a fixed random vector. A user
prefers the response with the larger ``w_u · φ`` (noise-free), so the right answer is known exactly.

- ``lowrank``: user directions are convex mixtures of two basis directions (what LoRe/PAL/PReF assume).
- ``conflict``: half the users prefer ``+a``, the other half ``-a``; the unseen users' test pairs are the
  *same* pairs for every unseen user, so a user-agnostic scorer gets exactly one of each mirrored pair
  right (macro accuracy ≤ 0.5).

:func:`make_mirrored` builds the stricter fixture: *every* pair (x, a, b) — train, test, shots — appears
exactly once per direction, for two users who disagree on it, so any scorer that ignores the user scores
exactly 0.5 (pair-weighted, ties ½) on every split, and only personalization can do better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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


def _mirrored(
    ext: FakeExtractor, users: tuple[str, str], ws: tuple[np.ndarray, np.ndarray], prompt: str, split: str
) -> list[PreferencePair]:
    """The pair of ``prompt``'s two responses for two users who disagree on it (redrawn until both prefer
    opposite responses with margin ½‖w‖): ``users[0]`` gets a ≻ b, ``users[1]`` gets b ≻ a."""
    a, b = f"{prompt}/a", f"{prompt}/b"
    while True:
        d = ext.vec(a) - ext.vec(b)
        s0, s1 = (float(w @ d) / float(np.linalg.norm(w)) for w in ws)
        if s0 * s1 < 0 and min(abs(s0), abs(s1)) >= 0.5:
            break
        del ext.table[a], ext.table[b]
    if s0 < 0:
        a, b = b, a
    u, v = users
    return [
        PreferencePair(f"{u}:{prompt}", u, prompt, a, b, split),  # type: ignore[arg-type]
        PreferencePair(f"{v}:{prompt}", v, prompt, b, a, split),  # type: ignore[arg-type]
    ]


def make_mirrored(
    *,
    dim: int = 16,
    n_seen: int = 12,
    n_unseen: int = 4,
    n_train: int = 40,
    n_test: int = 30,
    n_shots: int = 20,
    seed: int = 0,
) -> Problem:
    """Two groups of users on a rank-2 structure, every pair mirrored across the groups.

    A user's direction is c·b₀ + (1 − c)·b₁ (b₀ ⟂ b₁ in the signal dimensions) with c ∈ [0, 0.2] in group A
    and c ∈ [0.8, 1] in group B; users alternate A, B. Each user draws ``n_train`` (seen) or ``n_shots``
    (unseen) train pairs and ``n_test`` test pairs with a partner from the other group of the same kind
    (seen / unseen, round robin): the user prefers one response, the partner the other. So every user has
    about twice as many pairs as drawn, and a user-agnostic scorer is right on exactly one pair per draw.
    """
    if n_seen < 2 or n_unseen < 2:
        raise ValueError("make_mirrored needs at least two seen and two unseen users (one per group)")
    rng = np.random.default_rng(seed + 2000)
    ext = FakeExtractor(dim, seed)
    s = ext.signal_dims
    basis = np.zeros((2, dim))
    q, _ = np.linalg.qr(rng.standard_normal((s, 2)))
    basis[:, :s] = q.T
    seen = [f"s{i:02d}" for i in range(n_seen)]
    unseen = [f"n{i:02d}" for i in range(n_unseen)]
    directions: dict[str, np.ndarray] = {}
    for group in (seen, unseen):
        for i, u in enumerate(group):
            c = rng.uniform(0.0, 0.2) if i % 2 == 0 else rng.uniform(0.8, 1.0)
            directions[u] = c * basis[0] + (1 - c) * basis[1]
    prob = Problem(ext, directions)
    prob.shots = {u: [] for u in unseen}
    for group, n_fit in ((seen, n_train), (unseen, n_shots)):
        other = {u: [v for j, v in enumerate(group) if j % 2 != i % 2] for i, u in enumerate(group)}
        for u in group:
            for j in range(n_fit + n_test):
                v = other[u][j % len(other[u])]
                split = "train" if j < n_fit else "test"
                pu, pv = _mirrored(ext, (u, v), (directions[u], directions[v]), f"{u}-{v}-{j}", split)
                if split == "test":
                    (prob.test_seen if group is seen else prob.test_unseen).extend((pu, pv))
                elif group is seen:
                    prob.train.extend((pu, pv))
                else:
                    prob.shots[u].append(pu)
                    prob.shots[v].append(pv)
    return prob


def pair_accuracy(rm: object, pairs: Sequence[PreferencePair]) -> float:
    """Pair-weighted pairwise accuracy, a tie counted ½ (so a constant scorer gets exactly 0.5)."""
    c, r = rm.score_pairs(pairs)  # type: ignore[attr-defined]
    c, r = np.asarray(c, np.float64), np.asarray(r, np.float64)
    return float(np.mean((c > r) + 0.5 * (c == r)))


def reference_anchor(prob: Problem, directory: Path, n: int = 40) -> str:
    """lore_reg's reference RM for ``prob``: a ``global_bt`` fit on ``n`` fresh pairs of each seen user (prompts
    no split of ``prob`` holds, on the same features), saved as an ``anchor_state`` file — a reference RM
    of the same population that was not fit on the problem's pairs."""
    from perbench.rewards.base import RMContext
    from perbench.rewards.global_bt import GlobalBT
    from perbench.rewards.lore import save_anchor

    held_out = [_pair(prob.ext, u, prob.directions[u], f"{u}-ref{j}", "train") for u in prob.seen for j in range(n)]
    rm = GlobalBT()
    rm.fit(held_out, RMContext(features=prob.ext))  # type: ignore[arg-type]
    return str(save_anchor(rm, directory / f"anchor-{prob.ext.fingerprint.replace(':', '-')}-{id(prob)}.npz"))


def anchor_state(directory: Path, dim: int, seed: int = 7) -> str:
    """A ``global_bt`` state with a random head on ``dim`` features, fit on none of a test's pairs: a reference
    RM for ``lore_reg`` (``anchor_state``) where only the plumbing matters."""
    from perbench.cache import pack_arrays

    rng = np.random.default_rng(seed)
    path = directory / f"anchor-{dim}-{seed}.npz"
    state = {"w": rng.standard_normal(dim), "mu": np.zeros(dim), "sd": np.ones(dim)}
    path.write_bytes(pack_arrays(**{k: v.astype(np.float32) for k, v in state.items()}))
    return str(path)
