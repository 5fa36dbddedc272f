"""The Redfish service: routes, access control per BMC credential, actions and Redfish errors."""

from __future__ import annotations

import functools
import json
import logging

from aiohttp import web

from . import resources, state
from .auth import OPERATOR
from .faults import HANG_S
from .sim import Simulator
from .state import NodeState

SIM = web.AppKey("sim", Simulator)
REGISTRY = "Base.1.18"
ODATA_HEADERS = {"OData-Version": "4.0"}
# Reachable without credentials, as the Redfish specification allows.
PUBLIC = {"/redfish", "/redfish/", "/redfish/v1", "/redfish/v1/", "/redfish/v1/odata", "/redfish/v1/$metadata"}
log = logging.getLogger(__name__)


class RedfishError(Exception):
    """A Redfish error: one status, one or more Base registry messages (MessageId, Message, MessageArgs)."""

    def __init__(self, status: int, message_id: str, message: str, *args: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.messages = [(message_id, message, args)]
        self.headers = headers or {}


def error_response(err: RedfishError) -> web.Response:
    severity = "Critical" if err.status >= 500 or err.status in (401, 403) else "Warning"
    resolution = "Correct the request and resubmit it." if err.status < 500 else "Retry the operation."
    body = {
        "error": {
            "code": f"{REGISTRY}.GeneralError",
            "message": "A general error has occurred. See ExtendedInfo for more information.",
            "@Message.ExtendedInfo": [
                {
                    "@odata.type": "#Message.v1_2_0.Message",
                    "MessageId": f"{REGISTRY}.{message_id}",
                    "Message": message,
                    "MessageArgs": list(args),
                    "Severity": severity,
                    "MessageSeverity": severity,
                    "Resolution": resolution,
                }
                for message_id, message, args in err.messages
            ],
        }
    }
    return web.json_response(body, status=err.status, headers={**ODATA_HEADERS, **err.headers})


def reply(body: dict, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.json_response(body, status=status, headers={**ODATA_HEADERS, **(headers or {})})


def no_content() -> web.Response:
    return web.Response(status=204, headers=ODATA_HEADERS)


def not_found(path: str) -> RedfishError:
    return RedfishError(404, "ResourceNotFound", f"The resource at {path} was not found.", path)


@web.middleware
async def redfish_middleware(request: web.Request, handler):
    """Authenticate, and turn every failure under /redfish into a Redfish error body."""
    try:
        if request.path not in PUBLIC and not (request.method == "POST" and _is_sessions(request.path)):
            principal = request.app[SIM].auth.from_headers(
                request.headers.get("Authorization"), request.headers.get("X-Auth-Token")
            )
            if principal is None:
                raise RedfishError(
                    401,
                    "NoValidSession",
                    "There is no valid session established with the implementation.",
                    headers={"WWW-Authenticate": 'Basic realm="bmcsim"'},
                )
            request["principal"] = principal
        response = await handler(request)
        if request.method == "GET" and response.status == 200:
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
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(
            RedfishError(500, "InternalError", "The request failed due to an internal service error.")
        )


@functools.cache
def _allowed(resource: web.AbstractResource) -> str:
    return ", ".join(sorted({route.method for route in resource}))


def _is_sessions(path: str) -> bool:
    return path.rstrip("/") == "/redfish/v1/SessionService/Sessions"


async def read_json(request: web.Request, *, empty_ok: bool = False) -> dict:
    raw = await request.read()
    if not raw.strip() and empty_ok:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise RedfishError(400, "MalformedJSON", "The request body submitted was malformed JSON.") from None
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "The request body must be a JSON object.")
    return body


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
    if node.has_fault("bmc_timeout"):
        # The BMC stops answering until the fault is cleared, whatever the time scale.
        deadline = sim.now() + HANG_S
        while node.has_fault("bmc_timeout") and sim.now() < deadline:
            await sim.wait_for_clear(deadline - sim.now())
        if node.has_fault("bmc_timeout"):
            raise RedfishError(503, "ServiceTemporarilyUnavailable", f"The BMC of {node.name} is not responding.")
    if node.has_fault("bmc_error"):
        raise RedfishError(500, "InternalError", f"The BMC of {node.name} encountered an internal error.")


def visible_nodes(request: web.Request) -> list[str]:
    principal = request["principal"]
    return list(request.app[SIM].fleet.nodes) if principal == OPERATOR else [principal]


# Service level.


async def get_versions(request: web.Request) -> web.Response:
    return reply({"v1": "/redfish/v1/"})


async def get_root(request: web.Request) -> web.Response:
    return reply(resources.service_root())


async def get_metadata(request: web.Request) -> web.Response:
    return web.Response(text=resources.metadata_xml(), content_type="application/xml", headers=ODATA_HEADERS)


async def get_odata(request: web.Request) -> web.Response:
    return reply(resources.odata_document())


def _members(request: web.Request, prefix: str, kind: str, name: str) -> web.Response:
    members = [f"/redfish/v1/{prefix}/{n}" for n in visible_nodes(request)]
    return reply(resources.collection(kind, f"/redfish/v1/{prefix}", name, members))


async def get_systems(request: web.Request) -> web.Response:
    return _members(request, "Systems", "ComputerSystemCollection", "Computer System Collection")


async def get_managers(request: web.Request) -> web.Response:
    return _members(request, "Managers", "ManagerCollection", "Manager Collection")


async def get_chassis_collection(request: web.Request) -> web.Response:
    return _members(request, "Chassis", "ChassisCollection", "Chassis Collection")


# Systems.


@node_scoped
async def get_system(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.system(node, sim.now()))


BOOT_WRITABLE = {
    "BootSourceOverrideTarget": state.BOOT_TARGETS,
    "BootSourceOverrideEnabled": state.BOOT_ENABLED,
    "BootSourceOverrideMode": state.BOOT_MODES,
}


def _check_writes(body: dict, current: dict, writable: dict, prefix: str = "") -> list[RedfishError]:
    """Every problem with a PATCH body: read-only or unknown properties, values not allowed.

    `writable` maps a property to its allowed values, to a nested mapping, or to None (checked later).
    """
    errors = []
    for key, value in body.items():
        if key.startswith("@odata."):
            continue
        name = f"{prefix}{key}"
        if key not in writable:
            if key in current:
                errors.append(
                    RedfishError(400, "PropertyNotWritable", f"The property {name} is a read only property.", name)
                )
            else:
                errors.append(
                    RedfishError(
                        400, "PropertyUnknown", f"The property {name} is not in the list of valid properties.", name
                    )
                )
        elif isinstance(writable[key], dict):
            if isinstance(value, dict):
                errors += _check_writes(value, current.get(key) or {}, writable[key], f"{name}/")
            else:
                errors.append(
                    RedfishError(400, "PropertyValueTypeError", f"The value for {name} must be an object.", name)
                )
        elif writable[key] is not None and value not in writable[key]:
            errors.append(
                RedfishError(
                    400,
                    "PropertyValueNotInList",
                    f"The value {value!r} for {name} is not in the list of acceptable values.",
                    json.dumps(value),
                    name,
                )
            )
    return errors


def _reject(errors: list[RedfishError]) -> None:
    """Reject a PATCH whole, with one ExtendedInfo message per problem."""
    if errors:
        first, *rest = errors
        for err in rest:
            first.messages += err.messages
        raise first


@node_scoped
async def patch_system(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    current = resources.system(node, sim.now())
    _reject(_check_writes(body, current, {"Boot": BOOT_WRITABLE, "IndicatorLED": state.INDICATOR_LEDS}))
    boot = body.get("Boot", {})
    node.boot_target = boot.get("BootSourceOverrideTarget", node.boot_target)
    node.boot_enabled = boot.get("BootSourceOverrideEnabled", node.boot_enabled)
    node.boot_mode = boot.get("BootSourceOverrideMode", node.boot_mode)
    node.indicator_led = body.get("IndicatorLED", node.indicator_led)
    sim.fleet.touch(node)
    return reply(resources.system(node, sim.now()))


@node_scoped
async def reset_system(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    reset_type = body.get("ResetType")
    if reset_type is None:
        raise RedfishError(
            400,
            "ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType.",
            "ComputerSystem.Reset",
            "ResetType",
        )
    if reset_type not in state.RESET_TYPES:
        raise RedfishError(
            400,
            "ActionParameterValueNotInList",
            f"The value {reset_type!r} for the parameter ResetType in the action ComputerSystem.Reset "
            "is not in the list of acceptable values.",
            json.dumps(reset_type),
            "ResetType",
            "ComputerSystem.Reset",
        )
    node.reset(reset_type, sim.now(), sim.scale)
    sim.fleet.touch(node)
    return no_content()


@node_scoped
async def get_processors(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Processors"
    members = [f"{base}/{p}" for p in resources.processor_ids(node)]
    return reply(resources.collection("ProcessorCollection", base, "Processor Collection", members))


@node_scoped
async def get_processor(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = resources.processor(node, request.match_info["processor"])
    if body is None:
        raise not_found(request.path)
    return reply(body)


@node_scoped
async def get_nics(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/EthernetInterfaces"
    members = [f"{base}/NIC{i}" for i in range(len(state.macs(node.name)))]
    return reply(resources.collection("EthernetInterfaceCollection", base, "Ethernet Interface Collection", members))


@node_scoped
async def get_nic(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    nic = request.match_info["nic"]
    macs = state.macs(node.name)
    index = int(nic[3:]) if nic.startswith("NIC") and nic[3:].isdigit() else -1
    if not 0 <= index < len(macs):
        raise not_found(request.path)
    return reply(resources.ethernet_interface(node, index, macs[index]))


# Storage.


@node_scoped
async def get_storage_collection(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Storage"
    return reply(resources.collection("StorageCollection", base, "Storage Collection", [f"{base}/1"]))


@node_scoped
async def get_storage(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.storage(node))


@node_scoped
async def get_controllers(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Controllers"
    return reply(
        resources.collection("StorageControllerCollection", base, "Storage Controller Collection", [f"{base}/0"])
    )


@node_scoped
async def get_controller(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.storage_controller(node))


@node_scoped
async def get_volumes(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.volumes(node))


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
    storage_path = f"/redfish/v1/Systems/{node.name}/Storage/1"
    links = (body.get("Links") or {}).get("Drives") or [
        resources.ref(f"{storage_path}/Drives/{d}") for d in state.DRIVES
    ]
    drives = [link.get("@odata.id", "").rpartition("/")[2] if isinstance(link, dict) else "" for link in links]
    if any(d not in state.DRIVES for d in drives) or len(set(drives)) != len(drives):
        raise RedfishError(
            400,
            "PropertyValueIncorrect",
            "Links/Drives must name distinct drives of this storage.",
            json.dumps(links),
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
    body = resources.volume(node, record)
    return reply(body, status=201, headers={"Location": body["@odata.id"]})


def _volume(request: web.Request, node: NodeState) -> dict:
    record = next((v for v in node.volumes if v["id"] == request.match_info["volume"]), None)
    if record is None:
        raise not_found(request.path)
    return record


@node_scoped
async def get_volume(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.volume(node, _volume(request, node)))


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
    return reply(resources.drive(node, _drive_id(request), sim.now()))


@node_scoped
async def secure_erase(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    drive = _drive_id(request)
    await read_json(request, empty_ok=True)
    now = sim.now()
    if any(t["drive"] == drive and now < t["end"] for t in node.tasks):
        raise RedfishError(409, "ResourceInUse", f"Drive {drive} of {node.name} is already being erased.")
    task = node.start_erase(drive, now, sim.scale)
    sim.fleet.touch(node)
    body = resources.task(node, task, now)
    return reply(body, status=202, headers={"Location": body["TaskMonitor"]})


# Managers and virtual media.


@node_scoped
async def get_manager(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.manager(node))


@node_scoped
async def get_media_collection(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Managers/{node.name}/VirtualMedia"
    members = [f"{base}/{slot}" for slot in state.MEDIA_SLOTS]
    return reply(resources.collection("VirtualMediaCollection", base, "Virtual Media Collection", members))


def _slot(request: web.Request) -> str:
    slot = request.match_info["slot"]
    if slot not in state.MEDIA_SLOTS:
        raise not_found(request.path)
    return slot


@node_scoped
async def get_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.virtual_media(node, _slot(request)))


def _insert(
    node: NodeState, slot: str, image: object, inserted: object, write_protected: object, protocol: object
) -> None:
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
    node.media[slot] = {"image": image, "inserted": inserted, "write_protected": write_protected, "protocol": protocol}


@node_scoped
async def insert_media(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    slot = _slot(request)
    body = await read_json(request)
    _insert(
        node,
        slot,
        body.get("Image"),
        body.get("Inserted", True),
        body.get("WriteProtected", True),
        body.get("TransferProtocolType"),
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
    _reject(_check_writes(body, resources.virtual_media(node, slot), MEDIA_WRITABLE))
    media = node.media.get(slot) or {}
    image = body.get("Image", media.get("image"))
    if image is None:
        node.media.pop(slot, None)
    else:
        _insert(
            node,
            slot,
            image,
            body.get("Inserted", True),
            body.get("WriteProtected", media.get("write_protected", True)),
            media.get("protocol"),
        )
    sim.fleet.touch(node)
    return reply(resources.virtual_media(node, slot))


# Chassis.


@node_scoped
async def get_chassis(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.chassis(node, sim.now()))


@node_scoped
async def get_power(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.power(node, sim.now()))


@node_scoped
async def get_thermal(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(resources.thermal(node, sim.now()))


# Tasks: a task id is "<node>-<sequence>", so a task belongs to its node's BMC.


async def get_task_service(request: web.Request) -> web.Response:
    return reply(resources.task_service(request.app[SIM].now()))


async def get_tasks(request: web.Request) -> web.Response:
    fleet = request.app[SIM].fleet
    members = [f"/redfish/v1/TaskService/Tasks/{t['id']}" for n in visible_nodes(request) for t in fleet.nodes[n].tasks]
    return reply(resources.collection("TaskCollection", "/redfish/v1/TaskService/Tasks", "Task Collection", members))


async def _find_task(request: web.Request) -> tuple[NodeState, dict]:
    task_id = request.match_info["task"]
    node = request.app[SIM].fleet.nodes.get(task_id.rpartition("-")[0])
    record = node.find_task(task_id) if node else None
    if record is None:
        raise not_found(request.path)
    await check_bmc(request, node)
    return node, record


async def get_task(request: web.Request) -> web.Response:
    node, record = await _find_task(request)
    return reply(resources.task(node, record, request.app[SIM].now()))


async def get_task_monitor(request: web.Request) -> web.Response:
    """202 with the task while it runs, then 200 with the finished task."""
    node, record = await _find_task(request)
    body = resources.task(node, record, request.app[SIM].now())
    if body["TaskState"] == "Running":
        return reply(body, status=202, headers={"Location": body["TaskMonitor"], "Retry-After": "1"})
    return reply(body)


# Sessions and accounts.


async def get_session_service(request: web.Request) -> web.Response:
    return reply(resources.session_service(60 * 30))


async def get_sessions(request: web.Request) -> web.Response:
    principal = request["principal"]
    members = [
        f"/redfish/v1/SessionService/Sessions/{s.id}"
        for s in request.app[SIM].auth.sessions.values()
        if principal in (OPERATOR, s.principal)
    ]
    return reply(
        resources.collection("SessionCollection", "/redfish/v1/SessionService/Sessions", "Session Collection", members)
    )


async def create_session(request: web.Request) -> web.Response:
    body = await read_json(request)
    username, password = body.get("UserName"), body.get("Password")
    if not isinstance(username, str) or not isinstance(password, str):
        raise RedfishError(400, "PropertyMissing", "UserName and Password are required strings.", "UserName")
    session = request.app[SIM].auth.login(username, password)
    if session is None:
        raise RedfishError(401, "NoValidSession", "The user name or password is not valid.")
    path = f"/redfish/v1/SessionService/Sessions/{session.id}"
    return reply(
        resources.session(session.id, username), status=201, headers={"X-Auth-Token": session.token, "Location": path}
    )


def _session(request: web.Request):
    session = request.app[SIM].auth.sessions.get(request.match_info["session"])
    if session is None or request["principal"] not in (OPERATOR, session.principal):
        raise not_found(request.path)
    return session


async def get_session(request: web.Request) -> web.Response:
    session = _session(request)
    return reply(resources.session(session.id, session.username))


async def delete_session(request: web.Request) -> web.Response:
    request.app[SIM].auth.logout(_session(request).id)
    return no_content()


async def get_account_service(request: web.Request) -> web.Response:
    return reply(resources.account_service())


def _accounts(request: web.Request) -> dict[str, str]:
    """The operator account and the per-BMC `admin` account."""
    return {"1": request.app[SIM].settings.username, "2": "admin"}


async def get_accounts(request: web.Request) -> web.Response:
    members = [f"/redfish/v1/AccountService/Accounts/{i}" for i in _accounts(request)]
    return reply(
        resources.collection("ManagerAccountCollection", "/redfish/v1/AccountService/Accounts", "Accounts", members)
    )


async def get_account(request: web.Request) -> web.Response:
    account_id = request.match_info["account"]
    username = _accounts(request).get(account_id)
    if username is None:
        raise not_found(request.path)
    return reply(resources.account(account_id, username))


async def get_roles(request: web.Request) -> web.Response:
    members = ["/redfish/v1/AccountService/Roles/Administrator"]
    return reply(resources.collection("RoleCollection", "/redfish/v1/AccountService/Roles", "Roles", members))


async def get_role(request: web.Request) -> web.Response:
    return reply(resources.administrator_role())


ROUTES = [
    ("GET", "/redfish", get_versions),
    ("GET", "/redfish/v1", get_root),
    ("GET", "/redfish/v1/$metadata", get_metadata),
    ("GET", "/redfish/v1/odata", get_odata),
    ("GET", "/redfish/v1/Systems", get_systems),
    ("GET", "/redfish/v1/Systems/{node}", get_system),
    ("PATCH", "/redfish/v1/Systems/{node}", patch_system),
    ("POST", "/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset", reset_system),
    ("GET", "/redfish/v1/Systems/{node}/Processors", get_processors),
    ("GET", "/redfish/v1/Systems/{node}/Processors/{processor}", get_processor),
    ("GET", "/redfish/v1/Systems/{node}/EthernetInterfaces", get_nics),
    ("GET", "/redfish/v1/Systems/{node}/EthernetInterfaces/{nic}", get_nic),
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
    ("GET", "/redfish/v1/Managers", get_managers),
    ("GET", "/redfish/v1/Managers/{node}", get_manager),
    ("GET", "/redfish/v1/Managers/{node}/VirtualMedia", get_media_collection),
    ("GET", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}", get_media),
    ("PATCH", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}", patch_media),
    ("POST", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}/Actions/VirtualMedia.InsertMedia", insert_media),
    ("POST", "/redfish/v1/Managers/{node}/VirtualMedia/{slot}/Actions/VirtualMedia.EjectMedia", eject_media),
    ("GET", "/redfish/v1/Chassis", get_chassis_collection),
    ("GET", "/redfish/v1/Chassis/{node}", get_chassis),
    ("GET", "/redfish/v1/Chassis/{node}/Power", get_power),
    ("GET", "/redfish/v1/Chassis/{node}/Thermal", get_thermal),
    ("GET", "/redfish/v1/TaskService", get_task_service),
    ("GET", "/redfish/v1/TaskService/Tasks", get_tasks),
    ("GET", "/redfish/v1/TaskService/Tasks/{task}", get_task),
    ("GET", "/redfish/v1/TaskService/TaskMonitors/{task}", get_task_monitor),
    ("GET", "/redfish/v1/SessionService", get_session_service),
    ("GET", "/redfish/v1/SessionService/Sessions", get_sessions),
    ("POST", "/redfish/v1/SessionService/Sessions", create_session),
    ("GET", "/redfish/v1/SessionService/Sessions/{session}", get_session),
    ("DELETE", "/redfish/v1/SessionService/Sessions/{session}", delete_session),
    ("GET", "/redfish/v1/AccountService", get_account_service),
    ("GET", "/redfish/v1/AccountService/Accounts", get_accounts),
    ("GET", "/redfish/v1/AccountService/Accounts/{account}", get_account),
    ("GET", "/redfish/v1/AccountService/Roles", get_roles),
    ("GET", "/redfish/v1/AccountService/Roles/Administrator", get_role),
]


def add_routes(router: web.UrlDispatcher) -> None:
    """One resource per path, so that its Allow header lists every method; each path also answers
    with a trailing slash, as Redfish clients use both."""
    by_path: dict[str, list] = {}
    for method, path, handler in ROUTES:
        by_path.setdefault(path, []).append((method, handler))
    for path, routes in by_path.items():
        for variant in (path, path + "/"):
            resource = router.add_resource(variant)
            for method, handler in routes:
                resource.add_route(method, handler)
