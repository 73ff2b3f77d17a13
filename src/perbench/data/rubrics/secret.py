"""The rubric benchmark under a private secret: an answer key that cannot be rebuilt from the package.

By default the rubric benchmark is public: the users' rubrics (:data:`~perbench.data.rubrics.users.RUBRIC_USERS`),
the train / test split of the prompts and the pairs drawn from the pool all follow from perbench's own code and a
seed, so anyone can rebuild it, and with it the grader's key of its opaque ids (docs/methods.md, "What a method can
and cannot reach"). A secret (at least 16 bytes, from the file ``secret_file`` names or the environment variable
:data:`SECRET_ENV`, never from the config itself, which the run writes to its folder) draws:

- which user wants which rubric: the rubrics (and their answer-key sentences) are dealt out to the user ids at
  random, among the seen users and among the unseen users apart (each group keeps its own set of rubrics, so every
  pole still has its opposite within the group and the unseen users still want combinations no seen user has);
- which prompts are held out: two of the eight prompts of each topic are the test prompts (as in the public split,
  which takes the 4th and 8th);
- which candidate of the pool each pair takes.

What the secret does not hide: the pool and its checker annotations, the rubric checkers, the set of rubrics and
the prompts are in the package. A method may learn a user's wants from their train pairs with the checkers as
features: that is learning, not a leak, and it is why a benchmark whose answer key is private is still one whose
key is *learnable*.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from perbench.data.rubrics.prompts import PROMPT_TOPICS, RubricPrompt
from perbench.data.rubrics.users import RubricUser

#: the environment variable a secret may come from (the isolated child never inherits ``PERBENCH_*`` variables)
SECRET_ENV = "PERBENCH_RUBRICS_SECRET"
MIN_BYTES = 16
#: test prompts per topic (of eight), as in the public split
TEST_PER_TOPIC = 2


def read_secret(secret_file: str | Path | None) -> bytes | None:
    """The secret from ``secret_file`` (its bytes, surrounding whitespace stripped), else from :data:`SECRET_ENV`;
    None when neither is given. Too short a secret is an error: it could be guessed."""
    if secret_file is not None:
        path = Path(secret_file).expanduser()
        try:
            raw = path.read_bytes().strip()
        except OSError as e:
            raise ValueError(f"secret_file: cannot read {path}: {e.strerror or e}") from None
        where = str(path)
    else:
        env = os.environ.get(SECRET_ENV)
        if env is None:
            return None
        raw, where = env.strip().encode(), f"${SECRET_ENV}"
    if len(raw) < MIN_BYTES:
        raise ValueError(
            f"secret_file: the secret in {where} has {len(raw)} bytes; give at least {MIN_BYTES} "
            f"(e.g. `python -c 'import secrets; print(secrets.token_hex(32))' > FILE`)"
        )
    return raw


def _rng(secret: bytes, what: str) -> random.Random:
    return random.Random(hmac.new(secret, what.encode(), hashlib.sha256).digest())


def secret_users(users: Sequence[RubricUser], secret: bytes) -> tuple[RubricUser, ...]:
    """``users`` with their rubrics and answer-key sentences dealt out at random (by ``secret``) to the same ids,
    within the seen and within the unseen group."""
    out = list(users)
    for seen in (True, False):
        idx = [i for i, u in enumerate(users) if u.seen == seen]
        dealt = list(idx)
        _rng(secret, f"users:{seen}").shuffle(dealt)
        for i, j in zip(idx, dealt, strict=True):
            out[i] = replace(users[i], rubric=users[j].rubric, description=users[j].description)
    return tuple(out)


def secret_split(prompts: Sequence[RubricPrompt], secret: bytes) -> tuple[RubricPrompt, ...]:
    """``prompts`` with :data:`TEST_PER_TOPIC` test prompts per topic drawn by ``secret`` (the rest train), in
    their order."""
    by_topic: dict[str, list[str]] = {}
    for p in prompts:
        by_topic.setdefault(PROMPT_TOPICS[p.prompt_id], []).append(p.prompt_id)
    test: set[str] = set()
    for topic, ids in sorted(by_topic.items()):
        test |= set(_rng(secret, f"split:{topic}").sample(ids, min(TEST_PER_TOPIC, len(ids))))
    return tuple(replace(p, split="test" if p.prompt_id in test else "train") for p in prompts)


def pair_seed(seed: int, secret: bytes | None) -> str:
    """What seeds a pair's choice of candidates: the public seed, and under a secret a digest of it too."""
    return str(seed) if secret is None else f"{seed}:{hashlib.sha256(b'pairs' + secret).hexdigest()}"
