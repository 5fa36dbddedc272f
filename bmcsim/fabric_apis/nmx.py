"""NMX-M's REST API for one NVLink domain, under `/nvlink-domains/{domain}`: what the control
plane's driver calls and what an operator looks at, with NMX-M's paths, methods and bodies.

- GET /nmx/v1/gpus, /nmx/v1/gpus/{id}: the domain's GPUs (ID, DomainUUID, PartitionID, ...).
- GET /nmx/v1/partitions, /nmx/v1/partitions/{id}: partitions (ID, PartitionID, Name, Members).
- POST /nmx/v1/partitions {"Name", "Members": [GPU IDs]}, PUT /nmx/v1/partitions/{id}
  {"Members": [every member]}, DELETE /nmx/v1/partitions/{id}: 202 {"operationId"} with a
  Location header naming the operation; refused at once (400, 404, 409) when they cannot be.
- GET /nmx/v1/operations, /nmx/v1/operations/{id}: an operation's Status (pending, completed,
  failed) and Result. An operation takes APPLY_S simulated seconds: at time scale 0 it is done
  by the next call.

Under the fault fabric_apply_fails every change is accepted and its operation ends `failed`, as
NMX-M reports a change the NMX-Controller did not carry out; reads still work.
"""

from __future__ import annotations

import json

from aiohttp import web

from ..fabric_managers import FABRIC_APPLY_FAILS, NVLINK, FabricManagers
from ..fabric_managers.nmx import APPLY_S, NmxManager, NmxRefused
from ..sim import SIM
from .guard import guard

APPLY_FAILURE = "the NMX-Controller did not apply the partition change (fabric_apply_fails)"


def _error(status: int, detail: str) -> web.Response:
    return web.json_response({"detail": detail}, status=status)


async def _manager(request: web.Request) -> tuple[FabricManagers, NmxManager]:
    """The fleet's managers and this domain's NMX-M, its due operations applied; 404 if none."""
    managers = await guard(request, NVLINK)
    domain = request.match_info["domain"]
    nmx = managers.nmx.get(domain)
    if nmx is None:
        raise web.HTTPNotFound(
            text=json.dumps({"detail": f"no NVLink domain named {domain!r}"}), content_type="application/json"
        )
    if nmx.settle(request.app[SIM].now()):
        managers.touch(f"nmx:{domain}")
    return managers, nmx


async def get_gpus(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    return web.json_response(nmx.gpu_listing())


async def get_gpu(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    gpu = nmx.gpu(request.match_info["id"])
    return _error(404, f"no GPU {request.match_info['id']}") if gpu is None else web.json_response(gpu)


async def get_partitions(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    return web.json_response(list(nmx.partitions.values()))


async def get_partition(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    return _one(nmx.partitions, "partition", request.match_info["id"])


async def get_operations(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    return web.json_response(list(nmx.operations.values()))


async def get_operation(request: web.Request) -> web.Response:
    _, nmx = await _manager(request)
    return _one(nmx.operations, "operation", request.match_info["id"])


def _one(held: dict, kind: str, key: str) -> web.Response:
    """One item of a collection by its id, or NMX-M's 404 naming what is missing."""
    item = held.get(key)
    return _error(404, f"no {kind} {key}") if item is None else web.json_response(item)


async def post_partition(request: web.Request) -> web.Response:
    return await _change(request, "create")


async def put_partition(request: web.Request) -> web.Response:
    return await _change(request, "update")


async def delete_partition(request: web.Request) -> web.Response:
    return await _change(request, "delete")


async def _change(request: web.Request, action: str) -> web.Response:
    """Queue the change as an operation: 202 with its ID and where to poll it, or the refusal."""
    managers, nmx = await _manager(request)
    sim = request.app[SIM]
    now, delay = sim.now(), APPLY_S * sim.scale
    failure = APPLY_FAILURE if managers.fault(NVLINK, FABRIC_APPLY_FAILS) is not None else None
    try:
        if action == "delete":
            operation = nmx.delete(request.match_info["id"], now, delay, failure)
        else:
            try:
                body = await request.json()
            except ValueError:
                return _error(400, "the body must be JSON")
            if action == "create":
                operation = nmx.create(body, now, delay, failure)
            else:
                operation = nmx.update(request.match_info["id"], body, now, delay, failure)
    except NmxRefused as refused:
        return _error(refused.status, refused.detail)
    managers.touch(f"nmx:{nmx.name}")
    if nmx.settle(now):  # at time scale 0 the change is done at once
        managers.touch(f"nmx:{nmx.name}")
    location = f"/nvlink-domains/{nmx.name}/nmx/v1/operations/{operation['ID']}"
    return web.json_response({"operationId": operation["ID"]}, status=202, headers={"Location": location})


def add_routes(router: web.UrlDispatcher, prefix: str) -> None:
    """NMX-M's routes under `prefix` (`/nvlink-domains/{domain}`)."""
    api = f"{prefix}/nmx/v1"
    router.add_get(f"{api}/gpus", get_gpus)
    router.add_get(f"{api}/gpus/{{id}}", get_gpu)
    router.add_get(f"{api}/partitions", get_partitions)
    router.add_post(f"{api}/partitions", post_partition)
    router.add_get(f"{api}/partitions/{{id}}", get_partition)
    router.add_put(f"{api}/partitions/{{id}}", put_partition)
    router.add_delete(f"{api}/partitions/{{id}}", delete_partition)
    router.add_get(f"{api}/operations", get_operations)
    router.add_get(f"{api}/operations/{{id}}", get_operation)
