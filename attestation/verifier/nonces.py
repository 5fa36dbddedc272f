"""Nonces that carry their issue time, which is how `verify` knows the evidence's age."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

# A nonce from `new_nonce`: its issue time in milliseconds since the epoch, then random bytes.
NONCE_TIME_BYTES = 8
NONCE_RANDOM_BYTES = 24
NONCE_BYTES = NONCE_TIME_BYTES + NONCE_RANDOM_BYTES
CLOCK_SKEW = timedelta(seconds=5)


def new_nonce(now: datetime) -> bytes:
    """A fresh nonce that carries its issue time, so `verify` can tell how old the evidence is."""
    millis = int(now.timestamp() * 1000)
    return millis.to_bytes(NONCE_TIME_BYTES, "big") + os.urandom(NONCE_RANDOM_BYTES)


def nonce_issued_at(nonce: bytes) -> datetime | None:
    if len(nonce) != NONCE_BYTES:
        return None
    millis = int.from_bytes(nonce[:NONCE_TIME_BYTES], "big")
    try:
        return datetime.fromtimestamp(millis / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return None
