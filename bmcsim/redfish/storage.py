"""Storage under each System: NVMe drives with Drive.SecureErase (a task), a controller, RAID volumes."""

from __future__ import annotations

import json

from aiohttp import web

from .. import state
from ..sim import Simulator
from ..state import NodeState
from .access import node_scoped
from .errors import RedfishError, no_content, not_found, read_json, reply
from .schema import MANUFACTURER, OK, collection, odata_type, ref
from .tasks import task_body


def storage_body(node: NodeState) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1"
    return {
        "@odata.type": odata_type("Storage"),
        "@odata.id": base,
        "Id": "1",
        "Name": "NVMe storage",
        "Status": OK,
        "Drives@odata.count": len(state.DRIVES),
        "Drives": [ref(f"{base}/Drives/{d}") for d in state.DRIVES],
        "Controllers": ref(f"{base}/Controllers"),
        "Volumes": ref(f"{base}/Volumes"),
    }


def controller_body(node: NodeState) -> dict:
    return {
        "@odata.type": odata_type("StorageController"),
        "@odata.id": f"/redfish/v1/Systems/{node.name}/Storage/1/Controllers/0",
        "Id": "0",
        "Name": "NVMe controller",
        "Status": OK,
        "SupportedControllerProtocols": ["PCIe"],
        "SupportedDeviceProtocols": ["NVMe"],
        "SupportedRAIDTypes": list(state.RAID_TYPES),
    }


def volumes_body(node: NodeState) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Volumes"
    body = collection("VolumeCollection", base, "Volumes", [f"{base}/{v['id']}" for v in node.volumes])
    body["@Redfish.OperationApplyTimeSupport"] = {
        "@odata.type": "#Settings.v1_4_0.OperationApplyTimeSupport",
        "SupportedValues": ["Immediate"],
    }
    return body


def volume_capacity(raid_type: str, drives: list[str]) -> int:
    return state.DRIVE_CAPACITY_BYTES * (len(drives) if raid_type == "RAID0" else 1)


def volume_body(node: NodeState, record: dict) -> dict:
    storage_path = f"/redfish/v1/Systems/{node.name}/Storage/1"
    return {
        "@odata.type": odata_type("Volume"),
        "@odata.id": f"{storage_path}/Volumes/{record['id']}",
        "Id": record["id"],
        "Name": record["name"],
        "RAIDType": record["raid_type"],
        "CapacityBytes": volume_capacity(record["raid_type"], record["drives"]),
        "Status": OK,
        "Links": {"Drives": [ref(f"{storage_path}/Drives/{d}") for d in record["drives"]]},
    }


def drive_body(node: NodeState, drive_id: str, now: float) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Drives/{drive_id}"
    return {
        "@odata.type": odata_type("Drive"),
        "@odata.id": base,
        "Id": drive_id,
        "Name": f"NVMe drive {drive_id}",
        "Manufacturer": MANUFACTURER,
        "Model": "Simulated NVMe 3.84TB",
        "SerialNumber": f"{node.spec.serial}-D{drive_id}",
        "CapacityBytes": state.DRIVE_CAPACITY_BYTES,
        "MediaType": "SSD",
        "Protocol": "NVMe",
        "Status": {"State": "Updating" if node.is_erasing(drive_id, now) else "Enabled", "Health": "OK"},
        "Actions": {"#Drive.SecureErase": {"target": f"{base}/Actions/Drive.SecureErase"}},
    }


@node_scoped
async def get_storage_collection(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Storage"
    return reply(collection("StorageCollection", base, "Storage Collection", [f"{base}/1"]))


@node_scoped
async def get_storage(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(storage_body(node))


@node_scoped
async def get_controllers(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Controllers"
    return reply(collection("StorageControllerCollection", base, "Storage Controller Collection", [f"{base}/0"]))


@node_scoped
async def get_controller(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(controller_body(node))


@node_scoped
async def get_volumes(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(volumes_body(node))


@node_scoped
async def create_volume(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """A RAID volume over the node's drives, as Ironic's RAID configuration creates one."""
    body = await read_json(request)
    raid_type = body.get("RAIDType", "RAID1")
    if raid_type not in state.RAID_TYPES:
        raise RedfishError(
            400,
            "PropertyValueNotInList",
            f"The value {raid_type!r} for RAIDType is not supported.",
            json.dumps(raid_type),
            "RAIDType",
        )
    drives = _volume_drives(node, body.get("Links", {}))
    if drives is None or len(drives) < (2 if raid_type == "RAID1" else 1):
        raise RedfishError(
            400,
            "PropertyValueIncorrect",
            "Links/Drives must list distinct drives of this storage, two for RAID1.",
            json.dumps(body.get("Links")),
            "Links/Drives",
        )
    volume_id = str(max((int(v["id"]) for v in node.volumes), default=0) + 1)
    record = {
        "id": volume_id,
        "name": str(body.get("Name") or f"Volume {volume_id}"),
        "raid_type": raid_type,
        "drives": drives,
    }
    node.volumes.append(record)
    sim.fleet.touch(node)
    body = volume_body(node, record)
    return reply(body, status=201, headers={"Location": body["@odata.id"]})


def _volume_drives(node: NodeState, links: object) -> list[str] | None:
    """The drive ids a volume request links to (all drives if it names none), or None if malformed."""
    if not isinstance(links, dict) or not isinstance(links.get("Drives", []), list):
        return None
    prefix = f"/redfish/v1/Systems/{node.name}/Storage/1/Drives/"
    refs = links.get("Drives") or [ref(prefix + d) for d in state.DRIVES]
    drives = [r.get("@odata.id", "").removeprefix(prefix) if isinstance(r, dict) else "" for r in refs]
    if any(d not in state.DRIVES for d in drives) or len(set(drives)) != len(drives):
        return None
    return drives


def _volume(request: web.Request, node: NodeState) -> dict:
    record = next((v for v in node.volumes if v["id"] == request.match_info["volume"]), None)
    if record is None:
        raise not_found(request.path)
    return record


@node_scoped
async def get_volume(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(volume_body(node, _volume(request, node)))


@node_scoped
async def delete_volume(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    node.volumes.remove(_volume(request, node))
    sim.fleet.touch(node)
    return no_content()


def _drive_id(request: web.Request) -> str:
    drive = request.match_info["drive"]
    if drive not in state.DRIVES:
        raise not_found(request.path)
    return drive


@node_scoped
async def get_drive(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(drive_body(node, _drive_id(request), sim.now()))


@node_scoped
async def secure_erase(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    drive = _drive_id(request)
    await read_json(request, empty_ok=True)
    now = sim.now()
    if node.is_erasing(drive, now):
        raise RedfishError(409, "ResourceInUse", f"Drive {drive} of {node.name} is already being erased.")
    task = node.start_erase(drive, now, sim.scale)
    sim.fleet.touch(node)
    body = task_body(node, task, now)
    return reply(body, status=202, headers={"Location": body["TaskMonitor"]})


ROUTES = [
    ("GET", "/redfish/v1/Systems/{node}/Storage", get_storage_collection),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1", get_storage),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1/Controllers", get_controllers),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1/Controllers/0", get_controller),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1/Volumes", get_volumes),
    ("POST", "/redfish/v1/Systems/{node}/Storage/1/Volumes", create_volume),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1/Volumes/{volume}", get_volume),
    ("DELETE", "/redfish/v1/Systems/{node}/Storage/1/Volumes/{volume}", delete_volume),
    ("GET", "/redfish/v1/Systems/{node}/Storage/1/Drives/{drive}", get_drive),
    ("POST", "/redfish/v1/Systems/{node}/Storage/1/Drives/{drive}/Actions/Drive.SecureErase", secure_erase),
]
