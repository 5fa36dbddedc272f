"""NVIDIA Cumulus Linux's NVUE REST API, one per leaf switch under `/switches/{switch}/nvue_v1/`,
on the state of bmcsim/fabric_managers/nvue.py. What a driver uses and what a user pokes at:

- POST /nvue_v1/revision: a new revision, answered {"<id>": {"state": "pending", ...}}; ids are
  NVUE's, `changeset/<user>/<date>_<time>_<suffix>`, so a client must escape the slashes (%2F).
- PATCH /nvue_v1/?rev=<id> (or /interface, /interface/<name>, /bridge/domain/<domain>): stage a
  change (a JSON merge patch) in it; GET of the same paths with ?rev=applied (the default) or
  ?rev=<id> reads the config.
- PATCH /nvue_v1/revision/<id> {"state": "apply", "auto-prompt": {"ays": "ays_yes"}}: apply it,
  answered {"state": "apply", ...}; GET /nvue_v1/revision/<id> then shows "applying" until
  APPLY_S simulated seconds (times the time scale; at 0, the next call) have passed, then
  "applied", or "invalid"/"apply_error" with the issues in "transition". GET /nvue_v1/revision
  lists them all.

Under `fabric_apply_fails` every revision applied ends "apply_error"; staging and reads still work.
Refusals answer as NVUE does, JSON {"status", "title", "detail"}.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from ..fabric_managers import FABRIC_APPLY_FAILS, FabricManagers
from ..fabric_managers.nvue import APPLIED, NvueError, NvueSwitch
from ..sim import SIM
from .guard import guard

APPLY_S = 2.0  # how long a revision takes to apply, in simulated seconds
CONFIG_PATHS = {  # route under /nvue_v1 -> the match_info names it adds to the config tree's path
    "/": (),
    "/interface": ("interface",),
    "/interface/{interface}": ("interface", "{interface}"),
    "/bridge/domain": ("bridge", "domain"),
    "/bridge/domain/{domain}": ("bridge", "domain", "{domain}"),
}
Handler = Callable[[web.Request], Awaitable[web.Response]]


def add_routes(router: web.UrlDispatcher, prefix: str) -> None:
    """Add this manager's routes under `prefix`."""
    api = f"{prefix}/nvue_v1"
    for route, path in CONFIG_PATHS.items():
        router.add_get(api + route, _get_config(path))
        router.add_patch(api + route, _patch_config(path))
    router.add_get(f"{api}/revision", get_revisions)
    router.add_post(f"{api}/revision", post_revision)
    router.add_get(api + "/revision/{revision:.+}", get_revision)
    router.add_patch(api + "/revision/{revision:.+}", patch_revision)


def refusal(status: int, detail: str) -> web.Response:
    return web.json_response({"status": status, "title": HTTPStatus(status).phrase, "detail": detail}, status=status)


async def _switch(request: web.Request) -> tuple[FabricManagers, NvueSwitch]:
    """The fleet's managers and the path's switch, its due revisions settled first."""
    managers = await guard(request, "ethernet")
    switch = managers.nvue.get(request.match_info["switch"])
    if switch is None:
        raise NvueError(404, f"no leaf switch {request.match_info['switch']!r} in this fleet")
    if switch.settle(request.app[SIM].now()):
        managers.touch(f"nvue:{switch.name}")
    return managers, switch


def _refusing(handler: Handler) -> Handler:
    async def answer(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except NvueError as error:
            return refusal(error.status, error.detail)

    return answer


def _subtree(config: dict, path: tuple[str, ...], request: web.Request) -> Any:
    node: Any = config
    for key in (part.format_map(request.match_info) for part in path):
        if not isinstance(node, dict) or key not in node:
            raise NvueError(404, f"nothing at {request.path}")
        node = node[key]
    return node


async def _json(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise NvueError(400, "the body is not JSON") from None


def _get_config(path: tuple[str, ...]) -> Handler:
    @_refusing
    async def get_config(request: web.Request) -> web.Response:
        _, switch = await _switch(request)
        config = switch.config(request.query.get("rev", APPLIED))
        return web.json_response(_subtree(config, path, request))

    return get_config


def _patch_config(path: tuple[str, ...]) -> Handler:
    @_refusing
    async def patch_config(request: web.Request) -> web.Response:
        managers, switch = await _switch(request)
        revision = request.query.get("rev")
        if not revision:
            raise NvueError(400, "a change needs ?rev=<revision> (POST /nvue_v1/revision makes one)")
        patch = await _json(request)
        for part in reversed(path):
            patch = {part.format_map(request.match_info): patch}
        switch.stage(revision, patch)
        managers.touch(f"nvue:{switch.name}")
        return web.json_response(_subtree(switch.config(revision), path, request))

    return patch_config


@_refusing
async def get_revisions(request: web.Request) -> web.Response:
    _, switch = await _switch(request)
    return web.json_response({revision: switch.revision(revision) for revision in switch.revisions})


@_refusing
async def post_revision(request: web.Request) -> web.Response:
    managers, switch = await _switch(request)
    sim = request.app[SIM]
    revision = switch.create_revision(sim.settings.username, sim.now())
    managers.touch(f"nvue:{switch.name}")
    return web.json_response({revision: switch.revision(revision)}, status=201)


@_refusing
async def get_revision(request: web.Request) -> web.Response:
    _, switch = await _switch(request)
    return web.json_response(switch.revision(request.match_info["revision"]))


@_refusing
async def patch_revision(request: web.Request) -> web.Response:
    managers, switch = await _switch(request)
    body = await _json(request)
    state = body.get("state") if isinstance(body, dict) else None
    if state != "apply":
        raise NvueError(400, f"state {state!r}: bmcsim's NVUE takes {{'state': 'apply'}} only")
    sim = request.app[SIM]
    fails = managers.fault("ethernet", FABRIC_APPLY_FAILS) is not None
    answer = switch.apply(request.match_info["revision"], sim.now(), APPLY_S * sim.scale, fails)
    managers.touch(f"nvue:{switch.name}")
    return web.json_response(answer)
