"""UpdateService: SimpleUpdate flashes a firmware release onto one System; the next boot runs it.

The image is known by its file name (`releases.firmware_image`), e.g.
`http://images.example/GF-BIOS-2.3.1.bin`. A node's BMC credential updates its own node when no
Targets are given; the operator credential names the System in Targets.
"""

from __future__ import annotations

import json

from aiohttp import web

from .. import releases
from ..auth import OPERATOR
from ..sim import SIM
from .access import check_bmc
from .errors import RedfishError, read_json, reply
from .schema import OK, odata_type
from .tasks import task_body

ACTION = "UpdateService.SimpleUpdate"
TRANSFER_PROTOCOLS = ("HTTP", "HTTPS")


def update_service_body() -> dict:
    return {
        "@odata.type": odata_type("UpdateService"),
        "@odata.id": "/redfish/v1/UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": True,
        "Status": OK,
        "Actions": {
            f"#{ACTION}": {
                "target": f"/redfish/v1/UpdateService/Actions/{ACTION}",
                "TransferProtocol@Redfish.AllowableValues": list(TRANSFER_PROTOCOLS),
            }
        },
    }


async def get_update_service(request: web.Request) -> web.Response:
    return reply(update_service_body())


def _bad(parameter: str, value: object, why: str) -> RedfishError:
    return RedfishError(
        400,
        "ActionParameterValueNotInList",
        f"The value {value!r} for the parameter {parameter} in the action {ACTION} {why}.",
        json.dumps(value),
        parameter,
        ACTION,
    )


async def simple_update(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    body = await read_json(request)
    image = body.get("ImageURI")
    if not isinstance(image, str) or not image:
        raise RedfishError(
            400, "ActionParameterMissing", f"The action {ACTION} requires the parameter ImageURI.", ACTION, "ImageURI"
        )
    release = releases.firmware_release(image)
    if release is None:
        known = ", ".join(releases.firmware_image(r) for r in releases.BOOT_RELEASES["firmware"])
        raise _bad("ImageURI", image, f"names no known firmware image ({known})")
    protocol = body.get("TransferProtocol", "HTTP")
    if protocol not in TRANSFER_PROTOCOLS:
        raise _bad("TransferProtocol", protocol, "is not in the list of acceptable values")
    principal = request["principal"]
    targets = body.get("Targets", [] if principal == OPERATOR else [f"/redfish/v1/Systems/{principal}"])
    if not isinstance(targets, list) or len(targets) != 1 or not isinstance(targets[0], str):
        raise _bad("Targets", targets, "must name exactly one System")
    node = sim.fleet.nodes.get(targets[0].rstrip("/").removeprefix("/redfish/v1/Systems/"))
    if node is None:
        raise _bad("Targets", targets, "names no System of this service")
    await check_bmc(request, node)
    now = sim.now()
    task = node.start_update(release, now, sim.scale)
    sim.fleet.touch(node)
    body = task_body(node, task, now)
    return reply(body, status=202, headers={"Location": body["TaskMonitor"]})


ROUTES = [
    ("GET", "/redfish/v1/UpdateService", get_update_service),
    ("POST", f"/redfish/v1/UpdateService/Actions/{ACTION}", simple_update),
]
