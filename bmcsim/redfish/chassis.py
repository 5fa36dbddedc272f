"""Chassis of each node, with the power and thermal readings Ironic collects as sensor data."""

from __future__ import annotations

from aiohttp import web

from ..sim import Simulator
from ..state import NodeState
from .access import node_members, node_scoped
from .errors import reply
from .schema import MANUFACTURER, OK, SYSTEM_MODEL, node_health, odata_type, ref, uuid_of


def chassis_body(node: NodeState, now: float) -> dict:
    base = f"/redfish/v1/Chassis/{node.name}"
    return {
        "@odata.type": odata_type("Chassis"),
        "@odata.id": base,
        "Id": node.name,
        "Name": f"Chassis of {node.name}",
        "ChassisType": "RackMount",
        "Manufacturer": MANUFACTURER,
        "Model": SYSTEM_MODEL,
        "SerialNumber": node.spec.serial,
        "UUID": uuid_of("system", node.name),
        "PowerState": node.power_state(now),
        "IndicatorLED": node.indicator_led,
        "Status": {"State": "Enabled", "Health": node_health(node)},
        "Location": {"PartLocation": {"ServiceLabel": f"{node.spec.rack} U{node.spec.position}"}},
        "Power": ref(f"{base}/Power"),
        "Thermal": ref(f"{base}/Thermal"),
        "Links": {
            "ComputerSystems": [ref(f"/redfish/v1/Systems/{node.name}")],
            "ManagedBy": [ref(f"/redfish/v1/Managers/{node.name}")],
        },
    }


def power_body(node: NodeState, now: float) -> dict:
    base = f"/redfish/v1/Chassis/{node.name}/Power"
    on = node.power_on
    consumed = 1180.0 + 72.0 * len(node.spec.gpus) if on else 18.0
    supplies = [
        {
            "@odata.id": f"{base}#/PowerSupplies/{i}",
            "MemberId": str(i),
            "Name": f"Power supply {i}",
            "PowerSupplyType": "AC",
            "LineInputVoltage": 230.0,
            "PowerCapacityWatts": 3300.0,
            "LastPowerOutputWatts": round(consumed / 4, 1),
            "SerialNumber": f"{node.spec.serial}-PSU{i}",
            "Status": OK,
        }
        for i in range(4)
    ]
    return {
        "@odata.type": odata_type("Power"),
        "@odata.id": base,
        "Id": "Power",
        "Name": "Power",
        "PowerControl": [
            {
                "@odata.id": f"{base}#/PowerControl/0",
                "MemberId": "0",
                "Name": "System power control",
                "PowerConsumedWatts": round(consumed, 1),
                "PowerCapacityWatts": 13200.0,
            }
        ],
        "PowerSupplies": supplies,
    }


def thermal_body(node: NodeState, now: float) -> dict:
    base = f"/redfish/v1/Chassis/{node.name}/Thermal"
    on = node.power_on
    readings = [("Inlet", "Intake", 24.0), ("CPU0", "CPU", 48.0 if on else 25.0), ("CPU1", "CPU", 47.0 if on else 25.0)]
    return {
        "@odata.type": odata_type("Thermal"),
        "@odata.id": base,
        "Id": "Thermal",
        "Name": "Thermal",
        "Temperatures": [
            {
                "@odata.id": f"{base}#/Temperatures/{i}",
                "MemberId": str(i),
                "Name": f"{name} temperature",
                "SensorNumber": i + 1,
                "ReadingCelsius": reading,
                "MinReadingRangeTemp": 0,
                "MaxReadingRangeTemp": 120,
                "PhysicalContext": context,
                "Status": OK,
            }
            for i, (name, context, reading) in enumerate(readings)
        ],
        "Fans": [
            {
                "@odata.id": f"{base}#/Fans/{i}",
                "MemberId": str(i),
                "Name": f"Fan {i}",
                "Reading": 9200 if on else 0,
                "ReadingUnits": "RPM",
                "MinReadingRange": 0,
                "MaxReadingRange": 23000,
                "SerialNumber": f"{node.spec.serial}-FAN{i}",
                "Status": OK,
            }
            for i in range(6)
        ],
    }


async def get_chassis_collection(request: web.Request) -> web.Response:
    return node_members(request, "Chassis", "ChassisCollection", "Chassis Collection")


@node_scoped
async def get_chassis(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(chassis_body(node, sim.now()))


@node_scoped
async def get_power(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(power_body(node, sim.now()))


@node_scoped
async def get_thermal(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(thermal_body(node, sim.now()))


ROUTES = [
    ("GET", "/redfish/v1/Chassis", get_chassis_collection),
    ("GET", "/redfish/v1/Chassis/{node}", get_chassis),
    ("GET", "/redfish/v1/Chassis/{node}/Power", get_power),
    ("GET", "/redfish/v1/Chassis/{node}/Thermal", get_thermal),
]
