"""ComputerSystems: power, one-time boot override, reset, processors (CPUs and GPUs), NICs.

The GPUs are Processors of ProcessorType GPU beside the two CPUs. They give TotalCores and
TotalThreads as null (not reported): those count the host's logical processors, which sushy adds
up for its processor summary (it must equal ProcessorSummary's LogicalProcessorCount, the CPUs'),
while the Ironic interoperability profile wants TotalThreads on every Processor.
"""

from __future__ import annotations

import json

from aiohttp import web

from core.parsing import InvalidInput, parse_int

from .. import state
from ..sim import Simulator
from ..state import NodeState
from .access import node_members, node_scoped
from .errors import RedfishError, check_writes, no_content, not_found, read_json, reject, reply
from .schema import (
    CPU_CORES,
    CPU_COUNT,
    CPU_MODEL,
    CPU_THREADS,
    MANUFACTURER,
    MEMORY_GIB,
    OK,
    SYSTEM_MODEL,
    collection,
    iso,
    node_health,
    odata_type,
    ref,
    uuid_of,
)


def _boot_progress(node: NodeState, now: float) -> str:
    if not node.power_on:
        return "None"
    return "OSRunning" if node.is_booted(now) else "OSBootStarted"


def system_body(node: NodeState, now: float) -> dict:
    base = f"/redfish/v1/Systems/{node.name}"
    return {
        "@odata.type": odata_type("ComputerSystem"),
        "@odata.id": base,
        "Id": node.name,
        "Name": node.name,
        "SystemType": "Physical",
        "Manufacturer": MANUFACTURER,
        "Model": SYSTEM_MODEL,
        "SerialNumber": node.spec.serial,
        "UUID": uuid_of("system", node.name),
        "HostName": node.name,
        "Status": {"State": "Enabled", "Health": node_health(node)},
        "PowerState": node.power_state(now),
        "IndicatorLED": node.indicator_led,
        "BiosVersion": node.bios_version_booted,
        "Boot": {
            "BootSourceOverrideEnabled": node.boot_enabled,
            "BootSourceOverrideEnabled@Redfish.AllowableValues": list(state.BOOT_ENABLED),
            "BootSourceOverrideTarget": node.boot_target,
            "BootSourceOverrideTarget@Redfish.AllowableValues": list(state.BOOT_TARGETS),
            "BootSourceOverrideMode": node.boot_mode,
            "BootSourceOverrideMode@Redfish.AllowableValues": list(state.BOOT_MODES),
        },
        "BootProgress": {"LastState": _boot_progress(node, now)},
        # Milliseconds: at SIM_TIME_SCALE=0 a node is reset twice within a second (a reboot, then a
        # power cycle), which whole seconds could not tell apart.
        **({"LastResetTime": iso(node.last_reset_at, "milliseconds")} if node.last_reset_at is not None else {}),
        "ProcessorSummary": {
            "Count": CPU_COUNT,
            "CoreCount": CPU_COUNT * CPU_CORES,
            "LogicalProcessorCount": CPU_COUNT * CPU_THREADS,
            "Model": CPU_MODEL,
        },
        "MemorySummary": {"TotalSystemMemoryGiB": MEMORY_GIB},
        "Bios": ref(f"{base}/Bios"),
        "SecureBoot": ref(f"{base}/SecureBoot"),
        "Processors": ref(f"{base}/Processors"),
        "EthernetInterfaces": ref(f"{base}/EthernetInterfaces"),
        "Storage": ref(f"{base}/Storage"),
        "LogServices": ref(f"{base}/LogServices"),
        "Links": {
            "Chassis": [ref(f"/redfish/v1/Chassis/{node.name}")],
            "ManagedBy": [ref(f"/redfish/v1/Managers/{node.name}")],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{base}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(state.RESET_TYPES),
            }
        },
    }


def processor_ids(node: NodeState) -> list[str]:
    return [f"CPU{i}" for i in range(CPU_COUNT)] + [f"GPU{g.index}" for g in node.spec.gpus]


def processor_body(node: NodeState, processor_id: str, now: float) -> dict | None:
    body = {
        "@odata.type": odata_type("Processor"),
        "@odata.id": f"/redfish/v1/Systems/{node.name}/Processors/{processor_id}",
        "Id": processor_id,
        "Name": processor_id,
        "Status": OK,
    }
    if processor_id in (f"CPU{i}" for i in range(CPU_COUNT)):
        return body | {
            "ProcessorType": "CPU",
            "ProcessorArchitecture": "x86",
            "InstructionSet": "x86-64",
            "Manufacturer": "Intel(R) Corporation",
            "Model": CPU_MODEL,
            "TotalCores": CPU_CORES,
            "TotalThreads": CPU_THREADS,
            "Socket": processor_id,
        }
    gpu = next((g for g in node.spec.gpus if f"GPU{g.index}" == processor_id), None)
    if gpu is None:
        return None
    unhealthy = node.gpu_unhealthy(gpu.index)
    return body | {
        "Status": {"State": "Enabled", "Health": "Critical" if unhealthy else "OK"},
        "ProcessorType": "GPU",
        "ProcessorArchitecture": "OEM",
        "Manufacturer": "NVIDIA",
        "Model": gpu.model,
        "SerialNumber": gpu.serial,
        "UUID": gpu.uuid.removeprefix("GPU-"),
        "FirmwareVersion": node.firmware_shown(processor_id, now)[0],  # its VBIOS
        "TotalCores": None,
        "TotalThreads": None,
        "Socket": f"SXM{gpu.index}",
        "Certificates": ref(f"{body['@odata.id']}/Certificates"),  # its SPDM identity (ComponentIntegrity)
    }


def nic_body(node: NodeState, index: int, mac: str) -> dict:
    return {
        "@odata.type": odata_type("EthernetInterface"),
        "@odata.id": f"/redfish/v1/Systems/{node.name}/EthernetInterfaces/NIC{index}",
        "Id": f"NIC{index}",
        "Name": f"Ethernet interface {index}",
        "MACAddress": mac,
        "PermanentMACAddress": mac,
        "SpeedMbps": 100000,
        "LinkStatus": "LinkUp" if node.power_on else "LinkDown",
        "InterfaceEnabled": True,
        "Status": OK,
    }


async def get_systems(request: web.Request) -> web.Response:
    return node_members(request, "Systems", "ComputerSystemCollection", "Computer System Collection")


@node_scoped
async def get_system(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(system_body(node, sim.now()))


BOOT_WRITABLE = {
    "BootSourceOverrideTarget": state.BOOT_TARGETS,
    "BootSourceOverrideEnabled": state.BOOT_ENABLED,
    "BootSourceOverrideMode": state.BOOT_MODES,
}


@node_scoped
async def patch_system(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    current = system_body(node, sim.now())
    reject(check_writes(body, current, {"Boot": BOOT_WRITABLE, "IndicatorLED": state.INDICATOR_LEDS}))
    boot = body.get("Boot", {})
    node.boot_target = boot.get("BootSourceOverrideTarget", node.boot_target)
    node.boot_enabled = boot.get("BootSourceOverrideEnabled", node.boot_enabled)
    node.boot_mode = boot.get("BootSourceOverrideMode", node.boot_mode)
    node.indicator_led = body.get("IndicatorLED", node.indicator_led)
    sim.fleet.touch(node)
    return reply(system_body(node, sim.now()))


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
    await sim.tenant_ssh.sync(node)
    return no_content()


@node_scoped
async def get_processors(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/Processors"
    members = [f"{base}/{p}" for p in processor_ids(node)]
    return reply(collection("ProcessorCollection", base, "Processor Collection", members))


@node_scoped
async def get_processor(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = processor_body(node, request.match_info["processor"], sim.now())
    if body is None:
        raise not_found(request.path)
    return reply(body)


@node_scoped
async def get_nics(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    base = f"/redfish/v1/Systems/{node.name}/EthernetInterfaces"
    members = [f"{base}/NIC{i}" for i in range(len(state.macs(node.name)))]
    return reply(collection("EthernetInterfaceCollection", base, "Ethernet Interface Collection", members))


@node_scoped
async def get_nic(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    nic = request.match_info["nic"]
    macs = state.macs(node.name)
    try:
        index = parse_int(nic[3:], maximum=len(macs) - 1) if nic.startswith("NIC") else None
    except InvalidInput:
        index = None
    if index is None:
        raise not_found(request.path)
    return reply(nic_body(node, index, macs[index]))


ROUTES = [
    ("GET", "/redfish/v1/Systems", get_systems),
    ("GET", "/redfish/v1/Systems/{node}", get_system),
    ("PATCH", "/redfish/v1/Systems/{node}", patch_system),
    ("POST", "/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset", reset_system),
    ("GET", "/redfish/v1/Systems/{node}/Processors", get_processors),
    ("GET", "/redfish/v1/Systems/{node}/Processors/{processor}", get_processor),
    ("GET", "/redfish/v1/Systems/{node}/EthernetInterfaces", get_nics),
    ("GET", "/redfish/v1/Systems/{node}/EthernetInterfaces/{nic}", get_nic),
]
