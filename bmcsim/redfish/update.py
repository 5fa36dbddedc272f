"""UpdateService: every node's firmware inventory, and SimpleUpdate flashing a release through a task.

FirmwareInventory lists one SoftwareInventory per component of each node, as that node's own BMC
would: `{node}-BIOS`, `{node}-BMC`, `{node}-GPU{i}-VBIOS`, `{node}-NIC0` (a node's BMC credential
sees its own node's only). Each gives its Version (the release, releases.FIRMWARE_RELEASES), its
SoftwareId (BIOS, BMC, VBIOS, NIC) and the SHA-256 of its image as a Measurement block.

SimpleUpdate knows an image by its file name (`releases.firmware_image`), e.g.
`http://images.example/GF-BIOS-2.3.1.bin`, `.../GF-VBIOS-96.00.74.00.01.bin`. Targets name
FirmwareInventory items, or a System (its BIOS, its BMC, every GPU's VBIOS or its NIC, by the
image's kind) or a Manager (its BMC), all of one node; a node's BMC credential may leave Targets
out to update its own node, the operator must give them. The answer is 202 with the task; the
inventory shows the new release once the task has finished, and the BIOS runs (and is measured)
from the next boot.
"""

from __future__ import annotations

import json
import re

from aiohttp import web

from .. import releases
from ..auth import OPERATOR
from ..sim import SIM
from ..state import NodeState
from .access import check_bmc, visible_nodes
from .errors import RedfishError, not_found, read_json, reply
from .schema import OK, collection, odata_type, ref
from .tasks import task_body

ACTION = "UpdateService.SimpleUpdate"
TRANSFER_PROTOCOLS = ("HTTP", "HTTPS")
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
# An inventory item's id: the node's name, then the component (GPU<i> with -VBIOS).
ITEM_ID = re.compile(r"(?P<node>.+)-(?P<component>BIOS|BMC|NIC0|GPU\d+-VBIOS)")
NAMES = {"BIOS": "BIOS", "BMC": "BMC firmware", "VBIOS": "VBIOS", "NIC": "NIC firmware"}


def item_id(node: NodeState, component: str) -> str:
    return f"{node.name}-{component}-VBIOS" if component.startswith("GPU") else f"{node.name}-{component}"


def update_service_body() -> dict:
    return {
        "@odata.type": odata_type("UpdateService"),
        "@odata.id": "/redfish/v1/UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": True,
        "Status": OK,
        "FirmwareInventory": ref(INVENTORY),
        "Actions": {
            f"#{ACTION}": {
                "target": f"/redfish/v1/UpdateService/Actions/{ACTION}",
                "TransferProtocol@Redfish.AllowableValues": list(TRANSFER_PROTOCOLS),
            }
        },
    }


def _related(node: NodeState, component: str) -> list[dict]:
    system = f"/redfish/v1/Systems/{node.name}"
    if component.startswith("GPU"):
        return [ref(f"{system}/Processors/{component}")]
    if component == "BMC":
        return [ref(system), ref(f"/redfish/v1/Managers/{node.name}")]
    return [ref(system)]


def inventory_body(node: NodeState, component: str, now: float) -> dict:
    kind = node.firmware_kind(component)
    version, digest = node.firmware_shown(component, now)
    identity = item_id(node, component)
    return {
        "@odata.type": odata_type("SoftwareInventory"),
        "@odata.id": f"{INVENTORY}/{identity}",
        "Id": identity,
        "Name": f"{node.name} {component} {NAMES[kind]}" if kind == "VBIOS" else f"{node.name} {NAMES[kind]}",
        "Version": version,
        "SoftwareId": kind,
        "Updateable": True,
        "Manufacturer": "NVIDIA" if kind == "VBIOS" else "bmcsim",
        "RelatedItem": _related(node, component),
        "Status": OK,
        # A DSP0274 measurement block of the image: deprecated since SoftwareInventory v1_6_0 in favour
        # of ComponentIntegrity, but the one property of the schema a firmware digest fits.
        "Measurement": {
            "Measurement": digest,
            "MeasurementSize": 32,
            "MeasurementIndex": 0,
            "MeasurementSpecification": 0,
        },
    }


async def get_update_service(request: web.Request) -> web.Response:
    return reply(update_service_body())


async def get_inventory(request: web.Request) -> web.Response:
    fleet = request.app[SIM].fleet
    members = [
        f"{INVENTORY}/{item_id(fleet.nodes[name], c)}"
        for name in visible_nodes(request)
        for c in fleet.nodes[name].firmware_components()
    ]
    return reply(collection("SoftwareInventoryCollection", INVENTORY, "Firmware Inventory", members))


def _find_item(request: web.Request, identity: str) -> tuple[NodeState, str] | None:
    match = ITEM_ID.fullmatch(identity)
    node = request.app[SIM].fleet.nodes.get(match["node"]) if match else None
    component = match["component"].removesuffix("-VBIOS") if match else ""
    if node is None or component not in node.firmware_components():
        return None
    return node, component


async def get_inventory_item(request: web.Request) -> web.Response:
    found = _find_item(request, request.match_info["item"])
    if found is None:
        raise not_found(request.path)
    node, component = found
    await check_bmc(request, node)
    return reply(inventory_body(node, component, request.app[SIM].now()))


def _bad(parameter: str, value: object, why: str) -> RedfishError:
    return RedfishError(
        400,
        "ActionParameterValueNotInList",
        f"The value {json.dumps(value)} for the parameter {parameter} in the action {ACTION} {why}.",
        json.dumps(value),
        parameter,
        ACTION,
    )


def _components(request: web.Request, target: object, kind: str) -> tuple[NodeState, list[str]]:
    """The node and its components a target names, for an image of `kind`."""
    if not isinstance(target, str):
        raise _bad("Targets", target, "names no System, Manager or FirmwareInventory item of this service")
    path = target.rstrip("/")
    fleet = request.app[SIM].fleet
    for prefix in ("/redfish/v1/Systems/", "/redfish/v1/Managers/"):
        node = fleet.nodes.get(path.removeprefix(prefix)) if path.startswith(prefix) else None
        if node is None:
            continue
        components = [c for c in node.firmware_components() if node.firmware_kind(c) == kind]
        if prefix.endswith("Managers/") and kind != "BMC":
            raise _bad("Targets", target, f"is a Manager, which takes BMC images only, not {kind}")
        return node, components
    found = _find_item(request, path.removeprefix(f"{INVENTORY}/")) if path.startswith(f"{INVENTORY}/") else None
    if found is None:
        raise _bad("Targets", target, "names no System, Manager or FirmwareInventory item of this service")
    node, component = found
    if node.firmware_kind(component) != kind:
        raise _bad("Targets", target, f"is {node.firmware_kind(component)} firmware, not {kind}")
    return node, [component]


async def simple_update(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    body = await read_json(request)
    image = body.get("ImageURI")
    if not isinstance(image, str) or not image:
        raise RedfishError(
            400, "ActionParameterMissing", f"The action {ACTION} requires the parameter ImageURI.", ACTION, "ImageURI"
        )
    found = releases.firmware_release(image)
    if found is None:
        raise _bad("ImageURI", image, f"names no known firmware image ({', '.join(releases.firmware_images())})")
    kind, release = found
    protocol = body.get("TransferProtocol", "HTTP")
    if protocol not in TRANSFER_PROTOCOLS:
        raise _bad("TransferProtocol", protocol, "is not in the list of acceptable values")
    principal = request["principal"]
    targets = body.get("Targets", [] if principal == OPERATOR else [f"/redfish/v1/Systems/{principal}"])
    if not isinstance(targets, list) or not targets:
        raise _bad("Targets", targets, "must name a System, Manager or FirmwareInventory items")
    found_targets = [_components(request, target, kind) for target in targets]
    node = found_targets[0][0]
    if any(other is not node for other, _ in found_targets):
        raise _bad("Targets", targets, "must all be of one node (its BMC updates its own components)")
    components = [c for c in node.firmware_components() if any(c in named for _, named in found_targets)]
    await check_bmc(request, node)
    now = sim.now()
    task = node.start_update(kind, release, components, now, sim.scale)
    sim.fleet.touch(node)
    body = task_body(node, task, now)
    return reply(body, status=202, headers={"Location": body["TaskMonitor"]})


ROUTES = [
    ("GET", "/redfish/v1/UpdateService", get_update_service),
    ("GET", INVENTORY, get_inventory),
    ("GET", f"{INVENTORY}/{{item}}", get_inventory_item),
    ("POST", f"/redfish/v1/UpdateService/Actions/{ACTION}", simple_update),
]
