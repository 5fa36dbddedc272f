"""The Redfish service: one service with every node as a System, Manager and Chassis, and the
fabric's switches under Fabrics.

The shape follows what OpenStack's sushy-tools gives Ironic and DMTF's public-rackmount1 mockup.
Each module holds one area's resource bodies (built from node state when read) and handlers.
"""

from __future__ import annotations

from aiohttp import web

from . import (
    accounts,
    bios_settings,
    chassis,
    component_integrity,
    fabrics,
    logs,
    managers,
    service,
    storage,
    systems,
    tasks,
    update,
)
from .access import redfish_middleware
from .expand import expandable

__all__ = ["add_routes", "redfish_middleware"]


def add_routes(router: web.UrlDispatcher) -> None:
    """One resource per path, so that its Allow header lists every method; each path also answers
    with a trailing slash, as Redfish clients use both. Every GET answers $expand."""
    by_path: dict[str, list] = {}
    for module in (
        service,
        systems,
        bios_settings,
        storage,
        logs,
        managers,
        chassis,
        tasks,
        update,
        accounts,
        fabrics,
        component_integrity,
    ):
        for method, path, handler in module.ROUTES:
            by_path.setdefault(path, []).append((method, handler))
    for path, routes in by_path.items():
        for variant in (path, path + "/"):
            resource = router.add_resource(variant)
            for method, handler in routes:
                served = expandable(handler) if method == "GET" else handler
                resource.add_route(method, served)
                if method == "GET":
                    resource.add_route("HEAD", served)  # the Redfish specification asks HEAD wherever GET works
