"""Per-tenant request rates: core.throttles' fixed window, keyed by tenant. Requests that are not
a tenant's (anonymous reads, the webhook) are not counted here."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS
from rest_framework.settings import api_settings

from core.throttles import FixedWindowThrottle
from reservations.services.api_keys import Caller


class _TenantThrottle(FixedWindowThrottle):
    reads: bool  # counts safe methods (True) or writes (False)

    def get_rate(self):
        # Read at every request, not once at import as DRF does: override_settings then applies.
        # The stubs type the rates as numbers; they are DRF's "100/min" strings.
        self.THROTTLE_RATES = api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[assignment]
        return super().get_rate()

    def get_cache_key(self, request, view):
        caller = request.auth
        if not isinstance(caller, Caller) or (request.method in SAFE_METHODS) != self.reads:
            return None
        return self.cache_format % {"scope": self.scope, "ident": caller.tenant.pk}


class TenantReadThrottle(_TenantThrottle):
    scope = "tenant_reads"
    reads = True


class TenantWriteThrottle(_TenantThrottle):
    scope = "tenant_writes"
    reads = False
