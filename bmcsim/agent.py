"""The in-band agent of each node, under /agent/{node}: what runs on the node's OS.

It answers only while its node is powered on and booted, and not while `agent_down` is set;
otherwise 503 with a JSON detail. Errors are JSON {"detail": ...}.
"""

from __future__ import annotations

import json
import re

from aiohttp import web

from . import evidence, metrics, state
from .sim import SIM, Simulator
from .state import NodeState

MAX_NONCE_BYTES = 64  # TPM2B_DATA holds at most one SHA-512 digest
HEX_BYTES = re.compile(r"(?:[0-9a-fA-F]{2})+")


def detail(status: int, message: str) -> web.Response:
    return web.json_response({"detail": message}, status=status)


def _not_answering(node: NodeState, now: float) -> str | None:
    if not node.power_on:
        return f"{node.name} is powered off"
    if not node.is_booted(now):
        return f"{node.name} is still booting"
    if node.has_fault("agent_down"):
        return f"the agent of {node.name} is down"
    return None


def running_agent(handler):
    async def wrapper(request: web.Request) -> web.Response:
        sim = request.app[SIM]
        node = sim.fleet.nodes.get(request.match_info["node"])
        if node is None:
            return detail(404, f"no node named {request.match_info['node']!r}")
        reason = _not_answering(node, sim.now())
        if reason:
            return detail(503, reason)
        return await handler(request, sim, node)

    return wrapper


@running_agent
async def get_metrics(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return web.Response(
        body=metrics.render(node, sim.now()), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


@running_agent
async def post_evidence(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return detail(400, 'body must be JSON: {"nonce": hex}')
    nonce = body.get("nonce") if isinstance(body, dict) else None
    if not isinstance(nonce, str) or not HEX_BYTES.fullmatch(nonce) or len(nonce) > 2 * MAX_NONCE_BYTES:
        return detail(400, f"'nonce' must be 1 to {MAX_NONCE_BYTES} bytes in hex")
    raw = bytes.fromhex(nonce)
    return web.json_response(evidence.collect(node, sim.pki, raw, sim.now()))


@running_agent
async def get_inventory(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """What in-band inspection collects: the node's serial, NICs, GPUs and disks."""
    now = sim.now()
    return web.json_response(
        {
            "name": node.name,
            "serial": node.spec.serial,
            "boot_source": node.boot_source,
            "macs": state.macs(node.name),
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model, "cc_mode": node.cc_mode}
                for g in node.spec.gpus
            ],
            "drives": [
                {
                    "id": d,
                    "capacity_bytes": state.DRIVE_CAPACITY_BYTES,
                    "last_erased_at": node.last_erased(d, now),
                }
                for d in state.DRIVES
            ],
        }
    )


def _wipe_status(node: NodeState, now: float) -> dict:
    wipe = node.gpu_wipe
    status = state.operation_state(wipe, now)
    return {
        "state": status,
        "started_at": wipe["start"] if wipe else None,
        "finished_at": wipe["end"] if status in ("succeeded", "failed") else None,
    }


@running_agent
async def get_gpu_wipe(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return web.json_response(_wipe_status(node, sim.now()))


@running_agent
async def start_gpu_wipe(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    now = sim.now()
    if state.operation_state(node.gpu_wipe, now) == "running":
        return detail(409, f"a GPU memory wipe of {node.name} is already running")
    node.start_gpu_wipe(now, sim.scale)
    sim.fleet.touch(node)
    return web.json_response(_wipe_status(node, now), status=202)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/agent/{node}/metrics", get_metrics, allow_head=False)
    router.add_post("/agent/{node}/evidence", post_evidence)
    router.add_get("/agent/{node}/inventory", get_inventory, allow_head=False)
    router.add_get("/agent/{node}/gpu-wipe", get_gpu_wipe, allow_head=False)
    router.add_post("/agent/{node}/gpu-wipe", start_gpu_wipe)
