"""Managers, one BMC per node, with VirtualMedia slots (InsertMedia / EjectMedia, or PATCH) and
Manager.Reset.

The BMC fetches an inserted image at once and keeps what it fetched (bmcsim/media.py); a fetch
that fails is recorded in the slot, whose Health turns Warning, and the call still succeeds.
Manager.Reset (GracefulRestart or ForceRestart) reboots the BMC, not the host: for
state.BMC_RESET_S (times the time scale) every resource of that node answers 503 with Retry-After.
"""

from __future__ import annotations

import hashlib
import json

from aiohttp import web

from .. import media, state
from ..sim import Simulator
from ..state import NodeState
from .access import node_members, node_scoped
from .errors import RedfishError, check_writes, no_content, not_found, read_json, reject, reply
from .schema import MANUFACTURER, OK, collection, iso, odata_type, ref, uuid_of

RESET_ACTION = "Manager.Reset"


def manager_body(node: NodeState, now: float) -> dict:
    base = f"/redfish/v1/Managers/{node.name}"
    return {
        "@odata.type": odata_type("Manager"),
        "@odata.id": f"/redfish/v1/Managers/{node.name}",
        "Id": node.name,
        "Name": f"BMC of {node.name}",
        "ManagerType": "BMC",
        "Manufacturer": MANUFACTURER,
        "Model": "bmcsim BMC",
        "FirmwareVersion": node.firmware_shown("BMC", now)[0],
        "UUID": uuid_of("manager", node.name),
        "PowerState": "On",
        "Status": OK,
        **({"LastResetTime": iso(node.bmc_reset_at, "milliseconds")} if node.bmc_reset_at is not None else {}),
        "VirtualMedia": ref(f"{base}/VirtualMedia"),
        "Links": {
            "ManagerForServers": [ref(f"/redfish/v1/Systems/{node.name}")],
            "ManagerForChassis": [ref(f"/redfish/v1/Chassis/{node.name}")],
        },
        "Actions": {
            f"#{RESET_ACTION}": {
                "target": f"{base}/Actions/{RESET_ACTION}",
                "ResetType@Redfish.AllowableValues": list(state.MANAGER_RESET_TYPES),
            }
        },
    }


def media_body(node: NodeState, slot: str) -> dict:
    base = f"/redfish/v1/Managers/{node.name}/VirtualMedia/{slot}"
    medium = node.media.get(slot) or {}
    image = medium.get("image")
    return {
        "@odata.type": odata_type("VirtualMedia"),
        "@odata.id": base,
        "Id": slot,
        "Name": f"Virtual {slot}",
        "MediaTypes": list(state.MEDIA_SLOTS[slot]),
        "Image": image,
        "ImageName": image.rsplit("/", 1)[-1] if image else None,
        "Inserted": bool(medium.get("inserted")),
        "WriteProtected": medium.get("write_protected", True),
        "ConnectedVia": "URI" if image else "NotConnected",
        "TransferMethod": "Stream",
        "TransferProtocolType": medium.get("protocol"),
        "Status": {"State": "Enabled", "Health": "Warning" if "error" in medium else "OK"},
        "Actions": {
            "#VirtualMedia.InsertMedia": {"target": f"{base}/Actions/VirtualMedia.InsertMedia"},
            "#VirtualMedia.EjectMedia": {"target": f"{base}/Actions/VirtualMedia.EjectMedia"},
        },
    }


async def get_managers(request: web.Request) -> web.Response:
    return node_members(request, "Managers", "ManagerCollection", "Manager Collection")


@node_scoped
async def get_manager(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(manager_body(node, sim.now()))


@node_scoped
async def reset_manager(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    if "ResetType" not in body:
        raise RedfishError(
            400,
            "ActionParameterMissing",
            f"The action {RESET_ACTION} requires the parameter ResetType.",
            RESET_ACTION,
            "ResetType",
        )
    reset_type = body["ResetType"]
    if reset_type not in state.MANAGER_RESET_TYPES:
        raise RedfishError(
            400,
            "ActionParameterValueNotInList",
            f"The value {json.dumps(reset_type)} for the parameter ResetType in the action {RESET_ACTION} "
            "is not in the list of acceptable values.",
            json.dumps(reset_type),
            "ResetType",
            RESET_ACTION,
        )
    node.reset_bmc(sim.now(), sim.scale)
    sim.fleet.touch(node)
    return no_content()


@node_scoped
async def get_media_collection(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Managers/{node.name}/VirtualMedia"
    members = [f"{base}/{slot}" for slot in state.MEDIA_SLOTS]
    return reply(collection("VirtualMediaCollection", base, "Virtual Media Collection", members))


def _slot(request: web.Request) -> str:
    slot = request.match_info["slot"]
    if slot not in state.MEDIA_SLOTS:
        raise not_found(request.path)
    return slot


@node_scoped
async def get_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(media_body(node, _slot(request)))


FETCHED = ("sha256", "size", "documents", "error")


async def _insert(
    node: NodeState,
    slot: str,
    image: object,
    inserted: object,
    write_protected: object,
    protocol: object,
    *,
    refetch: bool,
) -> None:
    """Record the medium; an inserted one is fetched now, unless `refetch` is off and the slot
    already holds this image (a PATCH of WriteProtected must not lose what was fetched)."""
    if not isinstance(image, str) or not image:
        raise RedfishError(
            400,
            "ActionParameterMissing",
            "The action VirtualMedia.InsertMedia requires the parameter Image.",
            "VirtualMedia.InsertMedia",
            "Image",
        )
    for name, value in (("Inserted", inserted), ("WriteProtected", write_protected)):
        if not isinstance(value, bool):
            raise RedfishError(
                400,
                "ActionParameterValueTypeError",
                f"The value for the parameter {name} must be a boolean.",
                json.dumps(value),
                name,
                "VirtualMedia.InsertMedia",
            )
    medium: dict = {"image": image, "inserted": inserted, "write_protected": write_protected, "protocol": protocol}
    if inserted:
        previous = node.media.get(slot) or {}
        if not refetch and previous.get("image") == image and previous.get("inserted"):
            medium |= {key: previous[key] for key in FETCHED if key in previous}
        else:
            medium |= await media.fetch(image)
            if node.has_fault("corrupt_media") and "sha256" in medium:
                # The bytes arrived altered: what the node boots is not what the catalogue names.
                medium["sha256"] = hashlib.sha256(bytes.fromhex(medium["sha256"]) + b"corrupted").hexdigest()
    node.media[slot] = medium


@node_scoped
async def insert_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    slot = _slot(request)
    body = await read_json(request)
    await _insert(
        node,
        slot,
        body.get("Image"),
        body.get("Inserted", True),
        body.get("WriteProtected", True),
        body.get("TransferProtocolType"),
        refetch=True,
    )
    sim.fleet.touch(node)
    return no_content()


@node_scoped
async def eject_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    slot = _slot(request)
    await read_json(request, empty_ok=True)
    node.media.pop(slot, None)
    sim.fleet.touch(node)
    return no_content()


MEDIA_WRITABLE = {"Image": None, "Inserted": (True, False), "WriteProtected": (True, False)}


@node_scoped
async def patch_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """Insert or eject by PATCH, which sushy falls back to when a BMC lacks the actions."""
    slot = _slot(request)
    body = await read_json(request)
    reject(check_writes(body, media_body(node, slot), MEDIA_WRITABLE))
    current = node.media.get(slot) or {}
    image = body.get("Image", current.get("image"))
    if image is None:
        node.media.pop(slot, None)
    else:
        await _insert(
            node,
            slot,
            image,
            body.get("Inserted", True),
            body.get("WriteProtected", current.get("write_protected", True)),
            current.get("protocol"),
            refetch=False,
        )
    sim.fleet.touch(node)
    return reply(media_body(node, slot))


ROUTES = [
    ("GET", "/redfish/v1/Managers", get_managers),
    ("GET", "/redfish/v1/Managers/{node}", get_manager),
    ("POST", f"/redfish/v1/Managers/{{node}}/Actions/{RESET_ACTION}", reset_manager),
    ("GET", "/redfish/v1/Managers/{node}/VirtualMedia", get_media_collection),
    ("GET", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}", get_media),
    ("PATCH", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}", patch_media),
    ("POST", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}/Actions/VirtualMedia.InsertMedia", insert_media),
    ("POST", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}/Actions/VirtualMedia.EjectMedia", eject_media),
]
