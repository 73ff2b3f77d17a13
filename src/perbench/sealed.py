"""A checksum with every stored value: a store keeps ``MAGIC + digest + payload`` and checks the digest on read.

A value whose bytes were altered but still decode (a float flipped inside an array bundle, a number edited in a
JSON unit) would otherwise be reused by every later run. :func:`unseal` says why a stored value cannot be trusted:
its digest does not match, or it carries none (written before stores kept checksums); the store then sets it
aside and the unit is recomputed (:meth:`perbench.cache.Store.get_many_bytes`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: the first bytes of a sealed value (the format's version is its last byte)
MAGIC = b"PBS\x01"
DIGEST_SIZE = 16
HEAD = len(MAGIC) + DIGEST_SIZE


def digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest()


def seal(payload: bytes) -> bytes:
    """``payload`` with its checksum in front, as a store keeps it."""
    return MAGIC + digest(payload) + payload


@dataclass(frozen=True)
class Unsealed:
    """The payload of a stored value, or (``payload`` None) why it cannot be trusted."""

    payload: bytes | None
    problem: str | None = None


#: the problem of a value written before stores kept checksums
UNSEALED = "it carries no checksum (written by an older version), so it cannot be checked"


def unseal(raw: bytes) -> Unsealed:
    """The payload of a sealed value after checking its digest."""
    if not raw.startswith(MAGIC) or len(raw) < HEAD:
        return Unsealed(None, UNSEALED)
    payload = raw[HEAD:]
    if digest(payload) != raw[len(MAGIC) : HEAD]:
        return Unsealed(None, "its checksum does not match its bytes: the stored value was altered or damaged")
    return Unsealed(payload)
