"""The agent's HTTP API, relative to its URL; every route needs the node's bearer token.

    GET  /metrics                   Prometheus text (agent/metrics.py); a client certificate of the
                                    metrics CA (gpu-agent --client-ca: Prometheus') may read it too
    POST /evidence  {"nonce": hex}  attestation evidence bound to the nonce
    GET  /inventory                 what in-band inspection collects
    GET|POST /gpu-wipe              the GPU memory wipe: its state / start it (202)
    GET|POST /gpu-reset {"gpu": n}  a GPU reset: its state / start it (202)
    GET|POST /diagnostics {"level": 1..4}  a diagnostics run: its state and results / start it (202)
    DELETE   /diagnostics           cancel a running diagnostics run (202, state "cancelled"); a run
                                    not running is given as it stands (202 too); 501 if the backend cannot

Errors are JSON {"detail": ...}: 401 without the token, 503 while the node cannot answer
(powered off, booting), 409 while the operation asked for is already running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from . import metrics
from .backend import Backend, Operation, Refused, Unavailable

MAX_NONCE_BYTES = 64  # TPM2B_DATA holds at most one SHA-512 digest
MAX_BODY_BYTES = 4096
HEX_BYTES = re.compile(r"(?:[0-9a-fA-F]{2})+")
log = logging.getLogger("gpu-agent")


@dataclass(frozen=True)
class Served:
    """One node's agent: its backend and who may call it."""

    backend: Backend
    token: str
    blocking: bool = False  # the backend waits on devices and tools: call it off the event loop


Find = Callable[[web.Request], "Served | None"]


def detail(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"detail": message}, status=status, headers=headers)


def _certified(request: web.Request) -> bool:
    """The caller presented a client certificate that the listener's CA verified (Prometheus',
    from the metrics CA): a certificate the CA did not issue ends the TLS handshake before this."""
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


def _authorized(request: web.Request, served: Served, metrics_only: bool) -> bool:
    if metrics_only and _certified(request):
        return True
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credential:
        return False
    return bool(served.token) and secrets.compare_digest(credential.encode(), served.token.encode())


async def _body(request: web.Request) -> dict:
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise Refused(f"the body is over {MAX_BODY_BYTES} bytes", 413)
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Refused("the body must be a JSON object", 400) from None
    if not isinstance(body, dict):
        raise Refused("the body must be a JSON object", 400)
    return body


def _whole_number(body: dict, key: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise Refused(f"{key!r} must be an integer", 400)
    return value


def _operation(operation: Operation) -> dict:
    answer = {"state": operation.state, "started_at": operation.started_at, "finished_at": operation.finished_at}
    if operation.detail:
        answer["detail"] = operation.detail
    return answer


def _reset(operation: Operation) -> dict:
    return {**_operation(operation), "gpu": operation.gpu}


def _diagnostics(operation: Operation) -> dict:
    return {**_operation(operation), "level": operation.level, "results": list(operation.results)}


Handler = Callable[[web.Request, Served], Awaitable[web.StreamResponse]]


def _route(find: Find, handler: Handler, *, metrics_only: bool = False):
    async def serve(request: web.Request) -> web.StreamResponse:
        served = find(request)
        if served is None:
            return detail(404, "no such node")
        if not _authorized(request, served, metrics_only):
            return detail(401, "this agent needs the node's bearer token", **{"WWW-Authenticate": "Bearer"})
        try:
            return await handler(request, served)
        except Unavailable as error:
            return detail(503, str(error))
        except Refused as error:
            return detail(error.status, str(error))

    return serve


async def _call(served: Served, method, *args):
    if served.blocking:
        return await asyncio.to_thread(method, *args)
    return method(*args)


async def get_metrics(request: web.Request, served: Served) -> web.Response:
    statuses = await _call(served, served.backend.gpus)
    body = metrics.render(served.backend.hostname(), statuses)
    return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})


async def post_evidence(request: web.Request, served: Served) -> web.Response:
    nonce = (await _body(request)).get("nonce")
    if not isinstance(nonce, str) or not HEX_BYTES.fullmatch(nonce) or len(nonce) > 2 * MAX_NONCE_BYTES:
        raise Refused(f"'nonce' must be 1 to {MAX_NONCE_BYTES} bytes in hex", 400)
    return web.json_response(await _call(served, served.backend.evidence, bytes.fromhex(nonce)))


async def get_inventory(request: web.Request, served: Served) -> web.Response:
    return web.json_response(await _call(served, served.backend.inventory))


async def get_gpu_wipe(request: web.Request, served: Served) -> web.Response:
    return web.json_response(_operation(await _call(served, served.backend.gpu_wipe)))


async def start_gpu_wipe(request: web.Request, served: Served) -> web.Response:
    return web.json_response(_operation(await _call(served, served.backend.start_gpu_wipe)), status=202)


async def get_gpu_reset(request: web.Request, served: Served) -> web.Response:
    return web.json_response(_reset(await _call(served, served.backend.gpu_reset)))


async def start_gpu_reset(request: web.Request, served: Served) -> web.Response:
    gpu = _whole_number(await _body(request), "gpu")
    return web.json_response(_reset(await _call(served, served.backend.start_gpu_reset, gpu)), status=202)


async def get_diagnostics(request: web.Request, served: Served) -> web.Response:
    return web.json_response(_diagnostics(await _call(served, served.backend.diagnostics)))


async def start_diagnostics(request: web.Request, served: Served) -> web.Response:
    level = _whole_number(await _body(request), "level")
    return web.json_response(_diagnostics(await _call(served, served.backend.start_diagnostics, level)), status=202)


async def cancel_diagnostics(request: web.Request, served: Served) -> web.Response:
    cancel = getattr(served.backend, "cancel_diagnostics", None)
    if cancel is None:
        raise Refused("this agent's backend cannot cancel diagnostics", 501)
    return web.json_response(_diagnostics(await _call(served, cancel)), status=202)


def add_metrics_route(router: web.UrlDispatcher, find: Find, prefix: str = "") -> None:
    """GET /metrics alone under `prefix`: for a listener that serves Prometheus and nothing else."""
    router.add_get(f"{prefix}/metrics", _route(find, get_metrics, metrics_only=True), allow_head=False)


def add_routes(router: web.UrlDispatcher, find: Find, prefix: str = "") -> None:
    """The agent's routes under `prefix`; `find` names the node a request is for (None: 404)."""
    add_metrics_route(router, find, prefix)
    router.add_post(f"{prefix}/evidence", _route(find, post_evidence))
    router.add_get(f"{prefix}/inventory", _route(find, get_inventory), allow_head=False)
    router.add_get(f"{prefix}/gpu-wipe", _route(find, get_gpu_wipe), allow_head=False)
    router.add_post(f"{prefix}/gpu-wipe", _route(find, start_gpu_wipe))
    router.add_get(f"{prefix}/gpu-reset", _route(find, get_gpu_reset), allow_head=False)
    router.add_post(f"{prefix}/gpu-reset", _route(find, start_gpu_reset))
    router.add_get(f"{prefix}/diagnostics", _route(find, get_diagnostics), allow_head=False)
    router.add_post(f"{prefix}/diagnostics", _route(find, start_diagnostics))
    router.add_delete(f"{prefix}/diagnostics", _route(find, cancel_diagnostics))


@web.middleware
async def json_errors(request: web.Request, handler):
    """Unknown paths, wrong methods (with their Allow header), refusals (their reason the detail, a
    401 keeping its WWW-Authenticate) and crashes answer JSON {"detail": ...}, never a traceback.
    bmcsim puts it in front of its own routes too."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return detail(
            exc.status, exc.reason, **{k: v for k, v in exc.headers.items() if k in ("Allow", "WWW-Authenticate")}
        )
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return detail(500, "internal error")


def make_app(served: Served) -> web.Application:
    """The agent of one node, as `python -m agent` serves it."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)
    add_routes(app.router, lambda request: served)
    return app
