"""The HTTP side of the fabric managers bmcsim simulates (bmcsim/fabric_managers/): NVUE per leaf
switch, UFM per InfiniBand fabric, NMX-M per NVLink domain, each under the prefix the inventory's
`fabric_managers` names. Every call needs the operator's credential (HTTP basic auth), and meets
the fabric's standing faults first (guard.py)."""

from __future__ import annotations

from aiohttp import web

from . import nmx, nvue, ufm

PREFIXES = {"ethernet": "/switches/{switch}", "infiniband": "/pods/{fabric}", "nvlink": "/nvlink-domains/{domain}"}


def add_routes(router: web.UrlDispatcher) -> None:
    nvue.add_routes(router, PREFIXES["ethernet"])
    ufm.add_routes(router, PREFIXES["infiniband"])
    nmx.add_routes(router, PREFIXES["nvlink"])
