"""Fabrics: the fleet's one InfiniBand fabric, its switches and their ports, for the operator only.

A switch's Status says its own faults (bmcsim/fabric.py): UnavailableOffline and Critical while
down, Warning while one of its ports flaps; the Fabric's HealthRollup is its worst switch's. A
port's LinkStatus and Status follow its cable (down while a switch at either end is down,
flapping while either end flaps). A port is named after what its cable reaches: a leaf's
downlinks after their nodes (PortType UpstreamPort, "connects to a host device"), the
inter-switch ports after the other switch, whose port they link (InterswitchPort,
Links.ConnectedSwitches and ConnectedSwitchPorts). DMTF's Switch has no property for the fabric
domain a switch serves, so `Oem.bmcsim` gives it as the inventory does: {"Kind": "leaf" or
"spine", "Level", "Domain"}.
"""

from __future__ import annotations

from aiohttp import web

from ..auth import OPERATOR
from ..fabric import SwitchState, port_link
from ..sim import SIM, Simulator
from .access import check_fabric_reader
from .errors import not_found, reply
from .schema import MANUFACTURER, collection, odata_type, ref

FABRIC = "InfiniBand"
FABRICS = "/redfish/v1/Fabrics"
SWITCHES = f"{FABRICS}/{FABRIC}/Switches"
HEALTH_ORDER = ("OK", "Warning", "Critical")


def switch_body(switch: SwitchState) -> dict:
    spec = switch.spec
    return {
        "@odata.type": odata_type("Switch"),
        "@odata.id": f"{SWITCHES}/{spec.name}",
        "Id": spec.name,
        "Name": f"{spec.kind.capitalize()} switch {spec.name}",
        "SwitchType": "InfiniBand",
        "Manufacturer": MANUFACTURER,
        "Model": "bmcsim InfiniBand switch",
        "Status": {"State": "UnavailableOffline" if switch.is_down else "Enabled", "Health": switch.health},
        "Ports": ref(f"{SWITCHES}/{spec.name}/Ports"),
        "Oem": {MANUFACTURER: {"Kind": spec.kind, "Level": spec.level, "Domain": spec.domain}},
    }


def port_body(sim: Simulator, switch: SwitchState, port: str) -> dict:
    up, health = port_link(sim.fleet.switches, switch, port, sim.now(), sim.scale)
    body: dict[str, object] = {
        "@odata.type": odata_type("Port"),
        "@odata.id": f"{SWITCHES}/{switch.name}/Ports/{port}",
        "Id": port,
        "Name": f"Port {port} of {switch.name}",
        "PortProtocol": "InfiniBand",
        "LinkNetworkTechnology": "InfiniBand",
        "PortType": "InterswitchPort" if port in sim.fleet.switches else "UpstreamPort",
        "LinkState": "Enabled",
        "LinkStatus": "LinkUp" if up else "LinkDown",
        "Status": {"State": "UnavailableOffline" if switch.is_down else "Enabled", "Health": health},
    }
    if port in sim.fleet.switches:
        body["Links"] = {
            "ConnectedSwitches": [ref(f"{SWITCHES}/{port}")],
            "ConnectedSwitchPorts": [ref(f"{SWITCHES}/{port}/Ports/{switch.name}")],
        }
    return body


async def get_fabrics(request: web.Request) -> web.Response:
    members = [f"{FABRICS}/{FABRIC}"] if request["principal"] == OPERATOR else []
    return reply(collection("FabricCollection", FABRICS, "Fabric Collection", members))


async def get_fabric(request: web.Request) -> web.Response:
    check_fabric_reader(request)
    switches = request.app[SIM].fleet.switches.values()
    rollup = max((s.health for s in switches), key=HEALTH_ORDER.index, default="OK")
    return reply(
        {
            "@odata.type": odata_type("Fabric"),
            "@odata.id": f"{FABRICS}/{FABRIC}",
            "Id": FABRIC,
            "Name": "InfiniBand fabric",
            "FabricType": "InfiniBand",
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": rollup},
            "Switches": ref(SWITCHES),
        }
    )


async def get_switches(request: web.Request) -> web.Response:
    check_fabric_reader(request)
    members = [f"{SWITCHES}/{name}" for name in request.app[SIM].fleet.switches]
    return reply(collection("SwitchCollection", SWITCHES, "Switch Collection", members))


def _switch(request: web.Request) -> SwitchState:
    check_fabric_reader(request)
    switch = request.app[SIM].fleet.switches.get(request.match_info["switch"])
    if switch is None:
        raise not_found(request.path)
    return switch


async def get_switch(request: web.Request) -> web.Response:
    return reply(switch_body(_switch(request)))


async def get_ports(request: web.Request) -> web.Response:
    switch = _switch(request)
    path = f"{SWITCHES}/{switch.name}/Ports"
    members = [f"{path}/{port}" for port in switch.spec.ports]
    return reply(collection("PortCollection", path, "Port Collection", members))


async def get_port(request: web.Request) -> web.Response:
    switch = _switch(request)
    port = request.match_info["port"]
    if port not in switch.spec.ports:
        raise not_found(request.path)
    return reply(port_body(request.app[SIM], switch, port))


ROUTES = [
    ("GET", FABRICS, get_fabrics),
    ("GET", f"{FABRICS}/{FABRIC}", get_fabric),
    ("GET", SWITCHES, get_switches),
    ("GET", SWITCHES + "/{switch}", get_switch),
    ("GET", SWITCHES + "/{switch}/Ports", get_ports),
    ("GET", SWITCHES + "/{switch}/Ports/{port}", get_port),
]
