"""A System's LogServices: its serial console and its BMC's system event log (SEL).

Console: one LogEntry per line (firmware, kernel, cloud-init, login prompt, and the BMC's power and
reset lines), the last state.CONSOLE_LINES_KEPT of them. LogService.ClearLog clears what has been
printed (a wipe clears it, so the next tenant never reads its predecessor's boot); the lines of a
power transition still under way come after it, and ids go on from the last one.

SEL: the events the BMC logged (bmcsim/sel.py), the last sel.KEPT of them: EntryType SEL, Id an
increasing integer that is never reused (not even after LogService.ClearLog, so a reader may keep
a cursor on it), Created, Severity, MessageId (a DMTF registry's), Message, MessageArgs,
SensorType and Links.OriginOfCondition. Injected by the `sel` fault, and by an XID 79 fault.

Both Entries collections have their members expanded, as the schema's AutoExpand asks of a log,
take `$skip` and `$top` (Members@odata.count is the whole log's; `@odata.nextLink` follows while
entries remain), and carry an ETag (header and `@odata.etag`) that changes whenever the log does:
a GET with If-None-Match of the current ETag answers 304.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from .. import sel, state
from ..sim import Simulator
from ..state import NodeState
from .access import node_scoped
from .errors import ODATA_HEADERS, RedfishError, no_content, not_found, read_json, reply
from .schema import OK, collection, iso, odata_type, ref

CONSOLE = "Console"
SEL = "SEL"
SERVICES = (CONSOLE, SEL)
CLEAR_ACTION = "LogService.ClearLog"


def _service_path(node: NodeState, service: str) -> str:
    return f"/redfish/v1/Systems/{node.name}/LogServices/{service}"


def log_service_body(node: NodeState, service: str, now: float) -> dict:
    base = _service_path(node, service)
    common = {
        "@odata.type": odata_type("LogService"),
        "@odata.id": base,
        "Id": service,
        "ServiceEnabled": True,
        "OverWritePolicy": "WrapsWhenFull",
        "DateTime": iso(now),
        "DateTimeLocalOffset": "+00:00",
        "Status": OK,
        "Entries": ref(f"{base}/Entries"),
        "Actions": {f"#{CLEAR_ACTION}": {"target": f"{base}/Actions/{CLEAR_ACTION}"}},
    }
    if service == CONSOLE:
        return common | {
            "Name": f"Serial console of {node.name}",
            "Description": "What the node printed on its serial console, and the BMC's power and reset events.",
            "MaxNumberOfRecords": state.CONSOLE_LINES_KEPT,
            "LogEntryType": "OEM",
        }
    return common | {
        "Name": f"System event log of {node.name}",
        "Description": "The events the BMC logged: power supplies, fans, temperatures, memory and PCIe devices.",
        "MaxNumberOfRecords": sel.KEPT,
        "LogEntryType": "SEL",
    }


def console_entry_body(node: NodeState, line: list) -> dict:
    number, timestamp, text = line
    return {
        "@odata.type": odata_type("LogEntry"),
        "@odata.id": f"{_service_path(node, CONSOLE)}/Entries/{number}",
        "Id": str(number),
        "Name": f"Console line {number}",
        "EntryType": "Oem",
        "OemRecordFormat": "bmcsim console",
        "Created": iso(timestamp, "milliseconds"),
        "Message": text,
        "Severity": "OK",
    }


def sel_entry_body(node: NodeState, record: list) -> dict:
    number, timestamp, severity, message_id, message, args, sensor_type, origin = record
    body = {
        "@odata.type": odata_type("LogEntry"),
        "@odata.id": f"{_service_path(node, SEL)}/Entries/{number}",
        "Id": str(number),
        "Name": f"SEL entry {number}",
        "EntryType": "SEL",
        "Created": iso(timestamp, "milliseconds"),
        "Severity": severity,
        "MessageId": message_id,
        "Message": message,
        "MessageArgs": list(args),
    }
    if sensor_type:
        body["SensorType"] = sensor_type
    if origin:
        body["Links"] = {"OriginOfCondition": ref(f"/redfish/v1/{origin}")}
    return body


def _entries(node: NodeState, service: str, now: float) -> tuple[list[list], Callable[[NodeState, list], dict]]:
    if service == CONSOLE:
        return node.console_lines(now), console_entry_body
    return node.sel, sel_entry_body


def _service(request: web.Request) -> str:
    service = request.match_info["service"]
    if service not in SERVICES:
        raise not_found(request.path)
    return service


def _etag(records: list[list]) -> str:
    """Ids only grow and only the oldest go (or all, at a clear), so the last id and the count name the content."""
    return f'W/"{records[-1][0] if records else 0}-{len(records)}"'


def _page(request: web.Request, name: str, total: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise RedfishError(
            400,
            "QueryParameterValueFormatError",
            f"The value {raw!r} for the parameter {name} is of a different format than the parameter can accept: "
            "a non-negative integer.",
            raw,
            name,
        )
    return min(int(raw), total)


@node_scoped
async def get_log_services(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/LogServices"
    members = [_service_path(node, s) for s in SERVICES]
    return reply(collection("LogServiceCollection", base, "Log Service Collection", members))


@node_scoped
async def get_log_service(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(log_service_body(node, _service(request), sim.now()))


@node_scoped
async def get_entries(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    service = _service(request)
    records, body_of = _entries(node, service, sim.now())
    etag = _etag(records)
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={**ODATA_HEADERS, "ETag": etag})
    skip = _page(request, "$skip", len(records)) or 0
    top = _page(request, "$top", len(records))
    end = len(records) if top is None else min(len(records), skip + top)
    path = f"{_service_path(node, service)}/Entries"
    body = {
        "@odata.type": "#LogEntryCollection.LogEntryCollection",
        "@odata.id": path,
        "@odata.etag": etag,
        "Name": f"{'Console' if service == CONSOLE else 'System event log'} of {node.name}",
        "Members@odata.count": len(records),
        "Members": [body_of(node, record) for record in records[skip:end]],
    }
    if top is not None and end < len(records):
        body["@odata.nextLink"] = f"{path}?$skip={end}&$top={top}"
    return reply(body, headers={"ETag": etag})


@node_scoped
async def get_entry(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    records, body_of = _entries(node, _service(request), sim.now())
    wanted = request.match_info["entry"]
    record = next((r for r in records if str(r[0]) == wanted), None)
    if record is None:
        raise not_found(request.path)
    return reply(body_of(node, record))


@node_scoped
async def clear_log(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """LogService.ClearLog: every entry of the SEL goes, and every console line printed so far;
    ids go on from the last one."""
    service = _service(request)
    await read_json(request, empty_ok=True)
    if service == CONSOLE:
        node.clear_console(sim.now())
    else:
        node.sel = []
    sim.fleet.touch(node)
    return no_content()


ROUTES = [
    ("GET", "/redfish/v1/Systems/{node}/LogServices", get_log_services),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}", get_log_service),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}/Entries", get_entries),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}/Entries/{entry}", get_entry),
    ("POST", f"/redfish/v1/Systems/{{node}}/LogServices/{{service}}/Actions/{CLEAR_ACTION}", clear_log),
]
