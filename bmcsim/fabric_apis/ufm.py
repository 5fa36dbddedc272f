"""UFM Enterprise's partition (P_Key) REST API, one UFM per InfiniBand fabric (a pod), under
/pods/{fabric}/ufmRest/:

- GET  resources/pkeys[?guids_data=true]: every partition by P_Key ("0x7fff": {"partition",
  "ip_over_ib"[, "guids": [{"guid", "membership", "index0"}]]});
- GET  resources/pkeys/<pkey>[?guids_data=true]: one partition, {} if there is none;
- POST resources/pkeys {"pkey", "guids", "membership", "index0", "ip_over_ib"}: GUIDs join the
  partition, which is created if new;
- POST actions/remove_guids_from_pkey {"pkey", "guids"}: GUIDs leave it;
- DELETE resources/pkeys/<pkey>: the partition goes.

A refusal answers {"error": ...} with a 4xx status; under `fabric_apply_fails` every change is
refused so (the subnet manager would not take the new partitions), while reads still work. UFM
applies a change before it answers, so nothing here is asynchronous.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web

from ..fabric_managers import FABRIC_APPLY_FAILS, FabricManagers
from ..fabric_managers.ufm import UfmError, UfmManager
from .guard import guard

FABRIC = "infiniband"


async def _ufm(request: web.Request) -> tuple[FabricManagers, UfmManager] | web.Response:
    managers = await guard(request, FABRIC)
    name = request.match_info["fabric"]
    ufm = managers.ufm.get(name)
    if ufm is None:
        return web.json_response({"detail": f"no InfiniBand fabric named {name!r}"}, status=404)
    return managers, ufm


def _guids_data(request: web.Request) -> bool:
    return request.query.get("guids_data", "").lower() == "true"


async def list_pkeys(request: web.Request) -> web.Response:
    found = await _ufm(request)
    if isinstance(found, web.Response):
        return found
    return web.json_response(found[1].list_view(_guids_data(request)))


async def get_pkey(request: web.Request) -> web.Response:
    found = await _ufm(request)
    if isinstance(found, web.Response):
        return found
    try:
        return web.json_response(found[1].item_view(request.match_info["pkey"], _guids_data(request)))
    except UfmError as error:
        return web.json_response({"error": error.message}, status=error.status)


async def _change(request: web.Request, change: Callable[[UfmManager, object], None], body: bool) -> web.Response:
    """Apply one change to the fabric's UFM and persist it, or answer why not."""
    found = await _ufm(request)
    if isinstance(found, web.Response):
        return found
    managers, ufm = found
    if managers.fault(FABRIC, FABRIC_APPLY_FAILS) is not None:
        message = "Failed to update partitions: the subnet manager rejected the new partitions.conf"
        return web.json_response({"error": message}, status=400)
    argument: object = request.match_info.get("pkey")
    if body:
        try:
            argument = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": "the request body must be JSON"}, status=400)
    try:
        change(ufm, argument)
    except UfmError as error:
        return web.json_response({"error": error.message}, status=error.status)
    managers.touch(f"ufm:{ufm.name}")
    return web.json_response({})


async def add_guids(request: web.Request) -> web.Response:
    return await _change(request, UfmManager.add_guids, body=True)


async def remove_guids(request: web.Request) -> web.Response:
    return await _change(request, UfmManager.remove_guids, body=True)


async def delete_pkey(request: web.Request) -> web.Response:
    return await _change(request, lambda ufm, pkey: ufm.delete(str(pkey)), body=False)


def add_routes(router: web.UrlDispatcher, prefix: str) -> None:
    """UFM's partition routes under `prefix` (/pods/{fabric})."""
    pkeys = f"{prefix}/ufmRest/resources/pkeys"
    router.add_get(pkeys, list_pkeys)
    router.add_post(pkeys, add_guids)
    router.add_post(f"{pkeys}/", add_guids)  # as UFM's guide writes it
    router.add_get(f"{pkeys}/{{pkey}}", get_pkey)
    router.add_delete(f"{pkeys}/{{pkey}}", delete_pkey)
    router.add_post(f"{prefix}/ufmRest/actions/remove_guids_from_pkey", remove_guids)
