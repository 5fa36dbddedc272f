"""A System's LogServices: its serial console, one LogEntry per line (firmware, kernel, cloud-init, login
prompt, and the BMC's power and reset lines), the last state.CONSOLE_LINES_KEPT of them."""

from __future__ import annotations

from aiohttp import web

from .. import state
from ..sim import Simulator
from ..state import NodeState
from .access import node_scoped
from .errors import not_found, reply
from .schema import OK, collection, iso, odata_type, ref

CONSOLE = "Console"


def _console_path(node: NodeState) -> str:
    return f"/redfish/v1/Systems/{node.name}/LogServices/{CONSOLE}"


def log_service_body(node: NodeState, now: float) -> dict:
    base = _console_path(node)
    return {
        "@odata.type": odata_type("LogService"),
        "@odata.id": base,
        "Id": CONSOLE,
        "Name": f"Serial console of {node.name}",
        "Description": "What the node printed on its serial console, and the BMC's power and reset events.",
        "ServiceEnabled": True,
        "MaxNumberOfRecords": state.CONSOLE_LINES_KEPT,
        "OverWritePolicy": "WrapsWhenFull",
        "LogEntryType": "OEM",
        "DateTime": iso(now),
        "DateTimeLocalOffset": "+00:00",
        "Status": OK,
        "Entries": ref(f"{base}/Entries"),
    }


def log_entry_body(node: NodeState, line: list) -> dict:
    number, timestamp, text = line
    return {
        "@odata.type": odata_type("LogEntry"),
        "@odata.id": f"{_console_path(node)}/Entries/{number}",
        "Id": str(number),
        "Name": f"Console line {number}",
        "EntryType": "Oem",
        "OemRecordFormat": "bmcsim console",
        "Created": iso(timestamp, "milliseconds"),
        "Message": text,
        "Severity": "OK",
    }


def _console(request: web.Request) -> None:
    if request.match_info["service"] != CONSOLE:
        raise not_found(request.path)


@node_scoped
async def get_log_services(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/LogServices"
    return reply(collection("LogServiceCollection", base, "Log Service Collection", [_console_path(node)]))


@node_scoped
async def get_log_service(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    _console(request)
    return reply(log_service_body(node, sim.now()))


@node_scoped
async def get_entries(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """Members expanded, as the schema's AutoExpand asks of a log."""
    _console(request)
    entries = [log_entry_body(node, line) for line in node.console_lines(sim.now())]
    return reply(
        {
            "@odata.type": "#LogEntryCollection.LogEntryCollection",
            "@odata.id": f"{_console_path(node)}/Entries",
            "Name": f"Console of {node.name}",
            "Members@odata.count": len(entries),
            "Members": entries,
        }
    )


@node_scoped
async def get_entry(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    _console(request)
    wanted = request.match_info["entry"]
    line = next((line for line in node.console_lines(sim.now()) if str(line[0]) == wanted), None)
    if line is None:
        raise not_found(request.path)
    return reply(log_entry_body(node, line))


ROUTES = [
    ("GET", "/redfish/v1/Systems/{node}/LogServices", get_log_services),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}", get_log_service),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}/Entries", get_entries),
    ("GET", "/redfish/v1/Systems/{node}/LogServices/{service}/Entries/{entry}", get_entry),
]
