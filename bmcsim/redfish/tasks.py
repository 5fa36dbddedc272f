"""TaskService: a task id is "<node>-<sequence>", so a task belongs to its node's BMC; monitors are polled."""

from __future__ import annotations

from aiohttp import web

from agent.sim import operation_state

from ..sim import SIM
from ..state import NodeState
from .access import check_bmc, visible_nodes
from .errors import REGISTRY, not_found, reply
from .schema import OK, collection, iso, odata_type, ref

# Outcome -> TaskState, TaskStatus (also the message severity), message id, how the message ends.
TASK_STATES = {
    "running": ("Running", "OK", "Success", "is in progress"),
    "succeeded": ("Completed", "OK", "Success", "succeeded"),
    "failed": ("Exception", "Critical", "GeneralError", "failed"),
}


def task_body(node: NodeState, record: dict, now: float) -> dict:
    outcome = operation_state(record, now)
    task_state, status, message_id, progress = TASK_STATES[outcome]
    what = (
        f"Secure erase of {node.name} drive {record['drive']}"
        if "drive" in record
        else f"Firmware update of {node.name} {', '.join(record.get('components', ['BIOS']))} to {record['firmware']}"
    )
    # A hung task (end = inf) stays at 0 %; a running one never shows 100 %.
    done = (now - record["start"]) / (record["end"] - record["start"]) if outcome == "running" else 1.0
    body = {
        "@odata.type": odata_type("Task"),
        "@odata.id": f"/redfish/v1/TaskService/Tasks/{record['id']}",
        "Id": record["id"],
        "Name": what,
        "TaskState": task_state,
        "TaskStatus": status,
        "PercentComplete": min(int(100 * done), 99) if outcome == "running" else 100,
        "StartTime": iso(record["start"]),
        "TaskMonitor": f"/redfish/v1/TaskService/TaskMonitors/{record['id']}",
        "Messages": [
            {
                "MessageId": f"{REGISTRY}.{message_id}",
                "Message": f"{what} {progress}.",
                "Severity": status,
                "MessageSeverity": status,
            }
        ],
    }
    if outcome != "running":
        body["EndTime"] = iso(record["end"])
    return body


def task_service_body(now: float) -> dict:
    return {
        "@odata.type": odata_type("TaskService"),
        "@odata.id": "/redfish/v1/TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": True,
        "DateTime": iso(now),
        "CompletedTaskOverWritePolicy": "Oldest",
        "LifeCycleEventOnTaskStateChange": False,
        "Status": OK,
        "Tasks": ref("/redfish/v1/TaskService/Tasks"),
    }


async def get_task_service(request: web.Request) -> web.Response:
    return reply(task_service_body(request.app[SIM].now()))


async def get_tasks(request: web.Request) -> web.Response:
    fleet = request.app[SIM].fleet
    members = [f"/redfish/v1/TaskService/Tasks/{t['id']}" for n in visible_nodes(request) for t in fleet.nodes[n].tasks]
    return reply(collection("TaskCollection", "/redfish/v1/TaskService/Tasks", "Task Collection", members))


async def _find_task(request: web.Request) -> tuple[NodeState, dict]:
    task_id = request.match_info["task"]
    node = request.app[SIM].fleet.nodes.get(task_id.rpartition("-")[0])
    record = node.find_task(task_id) if node else None
    if node is None or record is None:
        raise not_found(request.path)
    await check_bmc(request, node)
    return node, record


async def get_task(request: web.Request) -> web.Response:
    node, record = await _find_task(request)
    return reply(task_body(node, record, request.app[SIM].now()))


async def get_task_monitor(request: web.Request) -> web.Response:
    """202 with the task while it runs, then 200 with the finished task."""
    node, record = await _find_task(request)
    body = task_body(node, record, request.app[SIM].now())
    if body["TaskState"] == "Running":
        return reply(body, status=202, headers={"Location": body["TaskMonitor"], "Retry-After": "1"})
    return reply(body)


ROUTES = [
    ("GET", "/redfish/v1/TaskService", get_task_service),
    ("GET", "/redfish/v1/TaskService/Tasks", get_tasks),
    ("GET", "/redfish/v1/TaskService/Tasks/{task}", get_task),
    ("GET", "/redfish/v1/TaskService/TaskMonitors/{task}", get_task_monitor),
]
