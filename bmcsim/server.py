"""The aiohttp application: routes, JSON errors outside Redfish (the agent's), the state flusher, start-up,
and the TLS listener that serves Prometheus every agent's /metrics."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import ssl

from aiohttp import web

from agent.app import json_errors

from . import admin, agent, fabric_apis, redfish
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


def _metrics_tls(settings: Settings) -> ssl.SSLContext | None:
    """TLS for the agents' /metrics: bmcsim's server certificate, and a client certificate of the
    metrics CA required of every caller. None: no listener (port 0, or the CA's files missing)."""
    folder = settings.metrics_ca_dir  # as core/metrics_ca.py lays it out
    ca, cert, key = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    if not settings.agent_tls_port:
        return None
    if not all(path.exists() for path in (ca, cert, key)):
        log.warning(
            "no TLS listener for Prometheus: %s lacks ca.pem, server.pem or server.key "
            "(manage.py ensure_metrics_ca %s makes them)",
            folder,
            folder,
        )
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _agents_over_tls(context: ssl.SSLContext):
    """Every agent's /metrics, and nothing else, on settings.agent_tls_port, for the app's lifetime."""

    async def listener(app: web.Application):
        settings = app[SIM].settings
        runner = web.AppRunner(agent.metrics_app(app[agent.AGENTS]), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.host, settings.agent_tls_port, ssl_context=context).start()
        log.info(
            "every agent's /metrics over TLS on port %d, to the metrics CA's certificates", settings.agent_tls_port
        )
        yield
        await runner.cleanup()

    return listener


def make_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[json_errors, route_redfish], client_max_size=MAX_BODY_BYTES)
    app[SIM] = Simulator(settings)
    redfish.add_routes(app.router)
    agent.add_routes(app)
    admin.add_routes(app.router)
    fabric_apis.add_routes(app.router)
    app.cleanup_ctx.append(_flusher)
    app.cleanup_ctx.append(_tenant_sshd)  # after the flusher, so cleaned up before it
    tls = _metrics_tls(settings)
    if tls is not None:
        app.cleanup_ctx.append(_agents_over_tls(tls))  # last: closed first, before the state is
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
