"""Per-tenant request rates: DRF's throttles, keyed by tenant and counted in Django's cache.

The cache is Redis (settings.CACHES), so every gunicorn worker and web replica counts the same
requests. A request over the rate is 429 `{"detail": ...}` with Retry-After. Requests that are
not a tenant's (anonymous reads, the webhook) are not counted here.

The count is a fixed window per tenant (the rate's period, starting at an offset of the
tenant's own so that not every count resets at once), incremented atomically in Redis. DRF's
own SimpleRateThrottle keeps a list of request times that each request reads and writes back
whole: requests in flight together overwrite each other's, and a tenant with N connections
would get about N times its rate. A fixed window lets up to twice the rate through across a
window's end; the cap holds over any two windows.
"""

from __future__ import annotations

import logging
import zlib

from redis.exceptions import RedisError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)


class _TenantThrottle(SimpleRateThrottle):
    reads: bool  # counts safe methods (True) or writes (False)
    # Parsed from the rate by SimpleRateThrottle.__init__ (the stubs leave them out); read only with a rate.
    num_requests: int
    duration: int

    def get_rate(self):
        # Read at every request, not once at import as DRF does: override_settings then applies.
        # The stubs type the rates as numbers; they are DRF's "100/min" strings.
        self.THROTTLE_RATES = api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[assignment]
        return super().get_rate()

    def get_cache_key(self, request, view):
        tenant = getattr(request.user, "tenant", None)
        if tenant is None or (request.method in SAFE_METHODS) != self.reads:
            return None
        return self.cache_format % {"scope": self.scope, "ident": tenant.pk}

    def allow_request(self, request, view):
        key = self.get_cache_key(request, view) if self.rate is not None else None
        if key is None:
            return True
        try:
            count = self._count(key)
        except RedisError as error:
            # The API stays up with Redis down (the reconcilers re-send what its outage lost).
            log.warning("throttle %s not counted, the cache is unreachable: %s", self.scope, error)
            return True
        return count <= self.num_requests

    def _count(self, key: str) -> int:
        """This request's number in its tenant's current window; sets when the window ends."""
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

    def wait(self):
        return self.window_ends - self.timer()


class TenantReadThrottle(_TenantThrottle):
    scope = "tenant_reads"
    reads = True


class TenantWriteThrottle(_TenantThrottle):
    scope = "tenant_writes"
    reads = False
