"""bmcsim's own API under /bmcsim/v1: inventory, trust roots, reference values, faults.

This is the data-center side of the simulation (what an inventory system and a lab bench
give), so it needs no credentials. Errors are JSON {"detail": ...}.
"""

from __future__ import annotations

import functools
import json

from aiohttp import web

from core.topology import agent_token

from . import faults, releases, state
from .agent import detail
from .sim import SIM, Simulator


@functools.cache
def inventory(sim: Simulator) -> bytes:
    """The fleet as a data-center inventory hands it over; it never changes, so it is built once."""
    base = sim.settings.base_url
    nodes = [
        {
            "name": spec.name,
            "pod": spec.pod,
            "rack": spec.rack,
            "position": spec.position,
            "serial": spec.serial,
            "redfish_url": base,
            "system_id": spec.name,
            "credentials": {"username": spec.bmc_username, "password": spec.bmc_password},
            "agent_url": f"{base}/agent/{spec.name}",
            "agent_token": agent_token(spec.name),
            "macs": state.macs(spec.name),
            "gpus": [{"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model} for g in spec.gpus],
        }
        for spec in (node.spec for node in sim.fleet.nodes.values())
    ]
    return json.dumps({"nodes": nodes}).encode()


async def get_inventory(request: web.Request) -> web.Response:
    return web.Response(body=inventory(request.app[SIM]), content_type="application/json")


async def get_roots(request: web.Request) -> web.Response:
    return web.json_response(request.app[SIM].pki.roots())


async def get_reference_values(request: web.Request) -> web.Response:
    return web.json_response(releases.reference_values())


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response({"faults": faults.listing(request.app[SIM].fleet)})


async def post_fault(request: web.Request) -> web.Response:
    try:
        payload = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return detail(400, "body must be a JSON object")
    try:
        node, fault = faults.inject(request.app[SIM].fleet, payload)
    except faults.FaultError as err:
        return detail(err.status, err.detail)
    return web.json_response({"node": node.name, **fault}, status=201)


async def delete_faults(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    try:
        cleared = faults.clear(sim.fleet, request.query.get("node"))
    except faults.FaultError as err:
        return detail(err.status, err.detail)
    sim.faults_cleared()
    return web.json_response({"cleared": cleared})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/bmcsim/v1/inventory", get_inventory, allow_head=False)
    router.add_get("/bmcsim/v1/roots", get_roots, allow_head=False)
    router.add_get("/bmcsim/v1/reference-values", get_reference_values, allow_head=False)
    router.add_get("/bmcsim/v1/faults", get_faults, allow_head=False)
    router.add_post("/bmcsim/v1/faults", post_fault)
    router.add_delete("/bmcsim/v1/faults", delete_faults)
