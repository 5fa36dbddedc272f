"""Who may reach what: authentication, per-BMC scoping of node resources, BMC faults, error bodies.

The fabric (Fabrics/...) is fleet-wide: the operator credential reads it; a node's BMC
credential sees an empty Fabrics collection and is refused (403) below it.
"""

from __future__ import annotations

import functools
import logging
import math

from aiohttp import web

from ..auth import OPERATOR
from ..faults import HANG_S
from ..settings import MAX_BODY_BYTES
from ..sim import SIM
from ..state import NodeState
from .errors import RedfishError, error_response, not_found, reply
from .schema import collection

log = logging.getLogger(__name__)
# Reachable without credentials, as the Redfish specification allows.
PUBLIC = {"/redfish", "/redfish/", "/redfish/v1", "/redfish/v1/", "/redfish/v1/odata", "/redfish/v1/$metadata"}


@web.middleware
async def redfish_middleware(request: web.Request, handler):
    """Authenticate, and turn every failure under /redfish into a Redfish error body."""
    try:
        # Public resources are read with the caller's credentials where given: $expand then shows
        # what those credentials reach.
        principal = request.app[SIM].auth.from_headers(
            request.headers.get("Authorization"), request.headers.get("X-Auth-Token")
        )
        if principal is not None:
            request["principal"] = principal
        elif needs_credentials(request.method, request.path):
            raise RedfishError(
                401,
                "NoValidSession",
                "There is no valid session established with the implementation.",
                headers={"WWW-Authenticate": 'Basic realm="bmcsim"'},
            )
        response = await handler(request)
        if request.method in ("GET", "HEAD") and response.status == 200:
            response.headers["Allow"] = _allowed(request.match_info.route.resource)
        return response
    except RedfishError as err:
        return error_response(err)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(
            RedfishError(
                405,
                "OperationNotAllowed",
                f"The {request.method} method is not allowed on {request.path}.",
                headers={"Allow": ", ".join(sorted(exc.allowed_methods))},
            )
        )
    except web.HTTPNotFound:
        return error_response(not_found(request.path))
    except web.HTTPRequestEntityTooLarge:
        message = f"The request body is larger than the limit of {MAX_BODY_BYTES} bytes."
        return error_response(RedfishError(413, "GeneralError", message))
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(
            RedfishError(500, "InternalError", "The request failed due to an internal service error.")
        )


@functools.cache
def _allowed(resource: web.AbstractResource) -> str:
    return ", ".join(sorted({route.method for route in resource}))


def needs_credentials(method: str, path: str) -> bool:
    return path not in PUBLIC and not (method == "POST" and _is_sessions(path))


def _is_sessions(path: str) -> bool:
    return path.rstrip("/") == "/redfish/v1/SessionService/Sessions"


def node_scoped(handler):
    """Find the node of the URL, check the caller may reach its BMC, and play its BMC faults."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.Response:
        sim = request.app[SIM]
        node = sim.fleet.nodes.get(request.match_info["node"])
        if node is None:
            raise not_found(request.path)
        await check_bmc(request, node)
        return await handler(request, sim, node)

    return wrapper


async def check_bmc(request: web.Request, node: NodeState) -> None:
    if request["principal"] not in (OPERATOR, node.name):
        raise RedfishError(403, "InsufficientPrivilege", f"The credentials of this BMC do not reach {node.name}.")
    sim = request.app[SIM]
    restarting = node.bmc_unavailable_for(sim.now())
    if restarting > 0:
        # Its own reset (Manager.Reset): a real BMC does not answer until it is back; this one says so.
        seconds = str(math.ceil(restarting))
        raise RedfishError(
            503,
            "ServiceTemporarilyUnavailable",
            f"The BMC of {node.name} is restarting. Retry in {seconds} seconds.",
            seconds,
            headers={"Retry-After": seconds},
        )
    if node.has_fault("bmc_timeout"):
        # The BMC stops answering until the fault is cleared, whatever the time scale.
        deadline = sim.now() + HANG_S
        while node.has_fault("bmc_timeout") and sim.now() < deadline:
            await sim.wait_for_clear(deadline - sim.now())
        if node.has_fault("bmc_timeout"):
            raise RedfishError(503, "ServiceTemporarilyUnavailable", f"The BMC of {node.name} is not responding.")
    if node.has_fault("bmc_error"):
        raise RedfishError(500, "InternalError", f"The BMC of {node.name} encountered an internal error.")


def check_fabric_reader(request: web.Request) -> None:
    if request["principal"] != OPERATOR:
        raise RedfishError(403, "InsufficientPrivilege", "The credentials of a BMC do not reach the fabric.")


def visible_nodes(request: web.Request) -> list[str]:
    principal = request["principal"]
    return list(request.app[SIM].fleet.nodes) if principal == OPERATOR else [principal]


def node_members(request: web.Request, prefix: str, kind: str, name: str) -> web.Response:
    members = [f"/redfish/v1/{prefix}/{n}" for n in visible_nodes(request)]
    return reply(collection(kind, f"/redfish/v1/{prefix}", name, members))
