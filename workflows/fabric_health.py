"""Reading the health of the fabric's switches from the Redfish service that manages them, so that
placement keeps off the nodes an unhealthy switch cuts off (fleet/fabric_health.py says which).

The beat sends the sweep every FABRIC_POLL_SECONDS to the workers' queue: a switch manager that
hangs must not hold the reconcilers. A sweep lists the Fabrics and their Switches, then reads, for
each switch the fleet enrolled, its Status and each port's LinkStatus: SWITCHES_AT_ONCE switches
at a time, each in a thread with a client of its own that touches no database, one attempt a
request (the next sweep is the retry). A switch is known by its Id, the last segment of its path,
as Redfish has it. Back in the sweep's thread every enrolled switch's row is written at once: what
was read, or why it was not, the last reading standing meanwhile. Then the nodes a switch now cuts
off are taken from the reservations they serve, which heal elsewhere in their domain.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from django.conf import settings

from core import clock
from fleet import fabric_health
from fleet.models import FabricSwitch
from reservations.services import let_go_of_cut_off_nodes
from workflows.redfish import BMCAccess, RedfishClient, RedfishError, read_each

SWITCHES_AT_ONCE = 8
READ_HEALTHS = (fabric_health.OK, fabric_health.WARNING, fabric_health.CRITICAL)  # Redfish's Status.Health
SWITCH_MANAGER = "switch manager"  # how errors name it


@dataclass(frozen=True)
class Reading:
    health: str  # one of fleet.fabric_health.HEALTHS
    state: str
    links_down: list[str]


def read_switches() -> dict:
    """Read every enrolled switch's health and record it, or record why it could not be read."""
    names = set(FabricSwitch.objects.values_list("name", flat=True))
    if not names:
        return {"read": 0, "failed": 0, "nodes let go": 0}
    try:
        with closing(switch_manager()) as manager:
            paths = {_id_of(path): path for path in manager.fabric_switches()}
    except RedfishError as error:
        outcome: dict[str, Reading | str] = dict.fromkeys(names, str(error))
    else:
        outcome = {name: f"{SWITCH_MANAGER}: lists no switch {name}" for name in names - paths.keys()}
        for name, read in read_each(
            names & paths.keys(), lambda name: _read_switch(paths[name]), at_once=SWITCHES_AT_ONCE
        ):
            outcome[name] = str(read) if isinstance(read, RedfishError) else read
    _record(outcome)
    readings = sum(isinstance(result, Reading) for result in outcome.values())
    return {"read": readings, "failed": len(outcome) - readings, "nodes let go": let_go_of_cut_off_nodes()}


def switch_manager() -> RedfishClient:
    access = BMCAccess(
        SWITCH_MANAGER,
        settings.FABRIC_REDFISH_URL,
        system_id="",
        username=settings.FABRIC_REDFISH_USERNAME,
        password=settings.FABRIC_REDFISH_PASSWORD,
    )
    return RedfishClient(access, timeout=settings.BMC_TIMEOUT, attempts=1, expand=settings.BMC_EXPAND)


def _read_switch(path: str) -> Reading:
    """One switch's Status and the ports whose link is down, in a reader thread: no database."""
    with closing(switch_manager()) as manager:
        switch, ports = manager.switch_with_ports(path)
    status = switch.get("Status")
    if not isinstance(status, dict):
        status = {}
    health = status.get("Health")
    return Reading(
        health=health if health in READ_HEALTHS else fabric_health.UNKNOWN,
        state=str(status.get("State") or "")[:32],
        links_down=sorted(str(port.get("Id")) for port in ports if port.get("LinkStatus") in fabric_health.LINK_DOWN),
    )


def _id_of(path: str) -> str:
    return path.rstrip("/").rpartition("/")[2]


def _record(outcome: dict[str, Reading | str]) -> None:
    """Write what the sweep found, in one statement: a reading, or the failure beside the last reading."""
    now = clock.now()  # the clock that later reads of troubled_since compare with
    rows = list(FabricSwitch.objects.filter(name__in=outcome))
    for row in rows:
        result = outcome[row.name]
        if isinstance(result, Reading):
            row.health, row.state, row.links_down = result.health, result.state, result.links_down
            row.read_at, row.failure = now, ""
            troubled = fabric_health.in_trouble(result.health, result.state, result.links_down)
            row.troubled_since = (row.troubled_since or now) if troubled else None
        else:
            row.failure = result
    FabricSwitch.objects.bulk_update(rows, ["health", "state", "links_down", "read_at", "troubled_since", "failure"])
