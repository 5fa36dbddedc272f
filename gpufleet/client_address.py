"""The address a request came from, for login throttling (django-axes' AXES_CLIENT_IP_CALLABLE).

Behind the TLS proxy that deploy/README.md describes, every connection comes from the proxy: keyed
on REMOTE_ADDR, one attacker's failures would lock a username out for everyone. Each of the
GPUFLEET_TRUSTED_PROXY_COUNT proxies appends the address it was reached from to X-Forwarded-For,
so the client is the entry that many places from its end (as Werkzeug's ProxyFix reads it):
whatever a client wrote into the header itself stands to the left and is never believed.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The address the outermost trusted proxy was reached from; the connection's own when no
    proxy is trusted, or when the header holds fewer entries than proxies (a request that came
    past them) or no address where the client's should be."""
    connection = request.META.get("REMOTE_ADDR")
    proxies: int = settings.TRUSTED_PROXY_COUNT
    if proxies == 0:
        return connection
    forwarded = [entry.strip() for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [entry for entry in forwarded if entry]
    if len(forwarded) < proxies:
        return connection
    try:
        return str(ipaddress.ip_address(forwarded[-proxies]))
    except ValueError:
        return connection
