"""The aiohttp application: routes, JSON errors outside Redfish (the agent's), the state flusher, start-up."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

from aiohttp import web

from agent.app import json_errors

from . import admin, agent, redfish
from .settings import MAX_BODY_BYTES, Settings
from .sim import SIM, Simulator

FLUSH_INTERVAL_S = 0.2
log = logging.getLogger("bmcsim")


@web.middleware
async def route_redfish(request: web.Request, handler):
    if request.path == "/redfish" or request.path.startswith("/redfish/"):
        return await redfish.redfish_middleware(request, handler)
    return await handler(request)


async def _flusher(app: web.Application):
    """Write changed nodes every FLUSH_INTERVAL_S: one SQLite commit per burst, and a last one at exit."""
    sim = app[SIM]

    async def loop():
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            sim.fleet.flush()

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    sim.close()


async def _tenant_sshd(app: web.Application):
    """Tenant nodes' sshd run on this loop: started again from persisted state, stopped before the last write."""
    await app[SIM].tenant_ssh.start()
    yield
    await app[SIM].tenant_ssh.close()


def make_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[json_errors, route_redfish], client_max_size=MAX_BODY_BYTES)
    app[SIM] = Simulator(settings)
    redfish.add_routes(app.router)
    agent.add_routes(app)
    admin.add_routes(app.router)
    app.cleanup_ctx.append(_flusher)
    app.cleanup_ctx.append(_tenant_sshd)  # after the flusher, so cleaned up before it
    return app


def run(settings: Settings) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # a line per SSH login would drown the rest
    try:
        app = make_app(settings)
    except (OSError, ValueError, sqlite3.Error) as err:  # a bad data dir or topology file: say so, no traceback
        raise SystemExit(f"bmcsim: {err}") from None
    log.info(
        "%d nodes on %s, data in %s, time scale %s, tenant nodes' sshd on port %d",
        len(app[SIM].fleet.nodes),
        settings.base_url,
        settings.data_dir,
        settings.scale,
        settings.ssh_port,
    )
    web.run_app(app, host=settings.host, port=settings.port, access_log=None, print=None)
