"""A value a process keeps while the version it was computed at stands: the per-process caches of
what is costly to read and changes rarely (placement's topology and index of free capacity, the
answer to GET /v1/capacity). Pure: the standard library only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    version: Hashable
    computed_at: float  # time.monotonic() before it was computed
    value: T


class Kept(Generic[T]):
    """One value per process, computed again when its version moves (or it grows too old)."""

    def __init__(self) -> None:
        self._entry: _Entry[T] | None = None
        self._lock = threading.Lock()  # at a new version one thread computes, the others wait for it

    def get(self, version: Hashable, compute: Callable[[], T], *, max_age: float | None = None) -> T:
        """The kept value if it was computed at `version` (and, with `max_age`, at most that many
        seconds ago); otherwise `compute()`'s, kept in its place."""
        if (entry := self._fresh(version, max_age)) is not None:
            return entry.value
        with self._lock:
            if (entry := self._fresh(version, max_age)) is not None:
                return entry.value
            started = time.monotonic()
            value = compute()
            self._entry = _Entry(version, started, value)
            return value

    def _fresh(self, version: Hashable, max_age: float | None) -> _Entry[T] | None:
        entry = self._entry
        if entry is None or entry.version != version:
            return None
        if max_age is not None and time.monotonic() - entry.computed_at >= max_age:
            return None
        return entry
