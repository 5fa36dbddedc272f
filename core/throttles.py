"""A request rate per caller, counted in a fixed window in Django's cache (Redis, settings.CACHES):
every gunicorn worker and web replica counts the same requests. A request over the rate is 429
`{"detail": ...}` with Retry-After.

DRF's own SimpleRateThrottle keeps a list of request times that each request reads and writes back
whole: requests in flight together overwrite each other's, and a caller with N connections would
get about N times its rate. Here the count is incremented atomically, in a window of the rate's
period that starts at an offset of the caller's own (so that not every count resets at once). A
fixed window lets up to twice the rate through across a window's end; the rate holds over any two
windows. With the cache unreachable a request is let through and logged: the API stays up.
"""

from __future__ import annotations

import logging
import zlib
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

if TYPE_CHECKING:  # DRF's views import the throttle classes its settings name: no cycle at run time
    from rest_framework.request import Request
    from rest_framework.views import APIView

log = logging.getLogger(__name__)


class FixedWindowThrottle(SimpleRateThrottle):
    """A subclass names its `scope`, reads its rate (`get_rate`) and keys its callers (`get_cache_key`)."""

    # Parsed from the rate by SimpleRateThrottle.__init__ (the stubs leave them out); read only with a rate.
    num_requests: int
    duration: int
    window_ends: float

    def allow_request(self, request: Request, view: APIView) -> bool:
        key = self.get_cache_key(request, view) if self.rate is not None else None
        if key is None:
            return True
        try:
            count = self._count(key)
        except RedisError as error:
            log.warning("throttle %s not counted, the cache is unreachable: %s", self.scope, error)
            return True
        return count <= self.num_requests

    def _count(self, key: str) -> int:
        """This request's number in its caller's current window; sets when the window ends."""
        now = self.timer()
        offset = zlib.crc32(key.encode()) % self.duration
        window = int((now - offset) // self.duration)
        self.window_ends = (window + 1) * self.duration + offset
        counter = f"{key}_{window}"
        if self.cache.add(counter, 1, self.duration):
            return 1
        try:
            return self.cache.incr(counter)
        except ValueError:  # it outlives its window, so Redis lost it (a restart): count afresh
            return 1

    def wait(self) -> float:
        return self.window_ends - self.timer()
