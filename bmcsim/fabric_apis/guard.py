"""What every fabric manager's call meets first: the operator's credential and the fabric's standing faults."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..auth import OPERATOR
from ..fabric_managers import FABRIC_API_DOWN, FABRIC_SLOW, SLOW_S, FabricManagers
from ..sim import SIM


async def guard(request: web.Request, fabric: str) -> FabricManagers:
    """The caller is the operator, the fabric's API is up, and slow if it is: else the answer a
    real manager would give (401, 503). Returns the fleet's managers."""
    sim = request.app[SIM]
    if sim.auth.from_headers(request.headers.get("Authorization"), None) != OPERATOR:
        raise web.HTTPUnauthorized(
            reason="authentication required", headers={"WWW-Authenticate": 'Basic realm="bmcsim"'}
        )
    managers = sim.fleet.fabric
    if managers.fault(fabric, FABRIC_SLOW) is not None:
        await asyncio.sleep(SLOW_S * sim.scale)
    if managers.fault(fabric, FABRIC_API_DOWN) is not None:
        raise web.HTTPServiceUnavailable(reason=f"the {fabric} manager is down")
    return managers
