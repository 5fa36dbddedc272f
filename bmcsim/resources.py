"""Redfish resource bodies, built from node state when read.

The shape follows what OpenStack's sushy-tools gives Ironic and DMTF's public-rackmount1
mockup: every node is a System with a Manager (its BMC) and a Chassis of the same id.
"""

from __future__ import annotations

import datetime
import uuid

from . import releases, state
from .state import NodeState

REDFISH_VERSION = "1.20.0"
SERVICE_UUID = "5f8c2d4e-6a1b-4f3e-9c7d-0b1a2c3d4e5f"
_NS = uuid.UUID(SERVICE_UUID)
MANUFACTURER = "bmcsim"
SYSTEM_MODEL = "GF-8H100 (simulated)"
CPU_MODEL = "Simulated Xeon 8480+"
CPU_COUNT, CPU_CORES, CPU_THREADS = 2, 56, 112
MEMORY_GIB = 2048

# The schema version of every type served: the @odata.type values and $metadata come from here.
TYPES = {
    "ServiceRoot": "v1_20_0",
    "ComputerSystem": "v1_27_0",
    "Manager": "v1_24_0",
    "Chassis": "v1_28_0",
    "Power": "v1_7_3",
    "Thermal": "v1_7_3",
    "Processor": "v1_22_0",
    "EthernetInterface": "v1_12_4",
    "Storage": "v1_21_0",
    "StorageController": "v1_11_0",
    "Volume": "v1_10_2",
    "Drive": "v1_22_0",
    "VirtualMedia": "v1_6_5",
    "TaskService": "v1_3_0",
    "Task": "v1_7_4",
    "SessionService": "v1_2_0",
    "Session": "v1_8_0",
    "AccountService": "v1_18_1",
    "ManagerAccount": "v1_14_1",
    "Role": "v1_3_3",
}
COLLECTIONS = (
    "ComputerSystemCollection",
    "ManagerCollection",
    "ChassisCollection",
    "ProcessorCollection",
    "EthernetInterfaceCollection",
    "StorageCollection",
    "StorageControllerCollection",
    "VolumeCollection",
    "VirtualMediaCollection",
    "TaskCollection",
    "SessionCollection",
    "ManagerAccountCollection",
    "RoleCollection",
)
EXTRA_NAMESPACES = {"Resource": "v1_22_0", "Settings": "v1_4_0", "Message": "v1_2_0"}


def odata_type(name: str) -> str:
    return f"#{name}.{TYPES[name]}.{name}"


def ref(path: str) -> dict:
    return {"@odata.id": path}


def iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="seconds")


def uuid_of(*parts: str) -> str:
    return str(uuid.uuid5(_NS, "/".join(parts)))


OK = {"State": "Enabled", "Health": "OK"}


def metadata_xml() -> str:
    """$metadata: the schema namespaces this service uses."""
    refs = [
        f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">\n'
        f'    <edmx:Include Namespace="{name}"/>\n'
        f'    <edmx:Include Namespace="{name}.{version}"/>\n'
        "  </edmx:Reference>"
        for name, version in {**TYPES, **EXTRA_NAMESPACES}.items()
    ]
    refs += [
        f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">\n'
        f'    <edmx:Include Namespace="{name}"/>\n'
        "  </edmx:Reference>"
        for name in COLLECTIONS
    ]
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        + "\n".join(refs)
        + '\n  <edmx:DataServices>\n    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>\n'
        "    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n"
    )


def odata_document() -> dict:
    singletons = {
        "Service": "/redfish/v1/",
        "Systems": "/redfish/v1/Systems",
        "Chassis": "/redfish/v1/Chassis",
        "Managers": "/redfish/v1/Managers",
        "Tasks": "/redfish/v1/TaskService",
        "SessionService": "/redfish/v1/SessionService",
        "AccountService": "/redfish/v1/AccountService",
    }
    return {
        "@odata.context": "/redfish/v1/$metadata",
        "value": [{"name": n, "kind": "Singleton", "url": u} for n, u in singletons.items()],
    }


def service_root() -> dict:
    return {
        "@odata.type": odata_type("ServiceRoot"),
        "@odata.id": "/redfish/v1/",
        "Id": "RootService",
        "Name": "bmcsim Root Service",
        "RedfishVersion": REDFISH_VERSION,
        "UUID": SERVICE_UUID,
        "Vendor": MANUFACTURER,
        "Product": "bmcsim simulated GPU fleet",
        "ProtocolFeaturesSupported": {
            "ExpandQuery": {"ExpandAll": False, "Levels": False, "Links": False, "NoLinks": False},
            "SelectQuery": False,
            "FilterQuery": False,
            "OnlyMemberQuery": False,
            "ExcerptQuery": False,
        },
        "Systems": ref("/redfish/v1/Systems"),
        "Chassis": ref("/redfish/v1/Chassis"),
        "Managers": ref("/redfish/v1/Managers"),
        "Tasks": ref("/redfish/v1/TaskService"),
        "SessionService": ref("/redfish/v1/SessionService"),
        "AccountService": ref("/redfish/v1/AccountService"),
        "Links": {"Sessions": ref("/redfish/v1/SessionService/Sessions")},
    }


def collection(kind: str, path: str, name: str, members: list[str]) -> dict:
    return {
        "@odata.type": f"#{kind}.{kind}",
        "@odata.id": path,
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [ref(m) for m in members],
    }


# Systems.


def _node_health(node: NodeState) -> str:
    return "Warning" if any(f["kind"] == "xid" for f in node.faults) else "OK"


def _boot_progress(node: NodeState, now: float) -> str:
    if not node.power_on:
        return "None"
    return "OSRunning" if node.is_booted(now) else "OSBootStarted"


def system(node: NodeState, now: float) -> dict:
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
        "Status": {"State": "Enabled", "Health": _node_health(node)},
        "PowerState": node.power_state(now),
        "IndicatorLED": node.indicator_led,
        "BiosVersion": releases.BOOT_RELEASES["firmware"][-1],
        "Boot": {
            "BootSourceOverrideEnabled": node.boot_enabled,
            "BootSourceOverrideEnabled@Redfish.AllowableValues": list(state.BOOT_ENABLED),
            "BootSourceOverrideTarget": node.boot_target,
            "BootSourceOverrideTarget@Redfish.AllowableValues": list(state.BOOT_TARGETS),
            "BootSourceOverrideMode": node.boot_mode,
            "BootSourceOverrideMode@Redfish.AllowableValues": list(state.BOOT_MODES),
        },
        "BootProgress": {"LastState": _boot_progress(node, now)},
        "ProcessorSummary": {
            "Count": CPU_COUNT,
            "CoreCount": CPU_COUNT * CPU_CORES,
            "LogicalProcessorCount": CPU_COUNT * CPU_THREADS,
            "Model": CPU_MODEL,
        },
        "MemorySummary": {"TotalSystemMemoryGiB": MEMORY_GIB},
        "Processors": ref(f"{base}/Processors"),
        "EthernetInterfaces": ref(f"{base}/EthernetInterfaces"),
        "Storage": ref(f"{base}/Storage"),
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


def processor(node: NodeState, processor_id: str) -> dict | None:
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
    unhealthy = node.last_xid(gpu.index) != 0
    return body | {
        "Status": {"State": "Enabled", "Health": "Critical" if unhealthy else "OK"},
        "ProcessorType": "GPU",
        "ProcessorArchitecture": "OEM",
        "Manufacturer": "NVIDIA",
        "Model": gpu.model,
        "SerialNumber": gpu.serial,
        "UUID": gpu.uuid.removeprefix("GPU-"),
        "TotalCores": 132,
        "TotalThreads": 16896,
        "Socket": f"SXM{gpu.index}",
    }


def ethernet_interface(node: NodeState, index: int, mac: str) -> dict:
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


# Storage.


def storage(node: NodeState) -> dict:
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


def storage_controller(node: NodeState) -> dict:
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


def volumes(node: NodeState) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Volumes"
    body = collection("VolumeCollection", base, "Volumes", [f"{base}/{v['id']}" for v in node.volumes])
    body["@Redfish.OperationApplyTimeSupport"] = {
        "@odata.type": "#Settings.v1_4_0.OperationApplyTimeSupport",
        "SupportedValues": ["Immediate"],
    }
    return body


def volume_capacity(raid_type: str, drives: list[str]) -> int:
    return state.DRIVE_CAPACITY_BYTES * (len(drives) if raid_type == "RAID0" else 1)


def volume(node: NodeState, record: dict) -> dict:
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


def drive(node: NodeState, drive_id: str, now: float) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/Storage/1/Drives/{drive_id}"
    erasing = any(t["drive"] == drive_id and now < t["end"] for t in node.tasks)
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
        "Status": {"State": "Updating" if erasing else "Enabled", "Health": "OK"},
        "Actions": {"#Drive.SecureErase": {"target": f"{base}/Actions/Drive.SecureErase"}},
    }


# Managers and virtual media.


def manager(node: NodeState) -> dict:
    return {
        "@odata.type": odata_type("Manager"),
        "@odata.id": f"/redfish/v1/Managers/{node.name}",
        "Id": node.name,
        "Name": f"BMC of {node.name}",
        "ManagerType": "BMC",
        "Manufacturer": MANUFACTURER,
        "Model": "bmcsim BMC",
        "FirmwareVersion": releases.BMC_FIRMWARE_VERSION,
        "UUID": uuid_of("manager", node.name),
        "PowerState": "On",
        "Status": OK,
        "VirtualMedia": ref(f"/redfish/v1/Managers/{node.name}/VirtualMedia"),
        "Links": {
            "ManagerForServers": [ref(f"/redfish/v1/Systems/{node.name}")],
            "ManagerForChassis": [ref(f"/redfish/v1/Chassis/{node.name}")],
        },
    }


def virtual_media(node: NodeState, slot: str) -> dict:
    base = f"/redfish/v1/Managers/{node.name}/VirtualMedia/{slot}"
    media = node.media.get(slot) or {}
    image = media.get("image")
    return {
        "@odata.type": odata_type("VirtualMedia"),
        "@odata.id": base,
        "Id": slot,
        "Name": f"Virtual {slot}",
        "MediaTypes": list(state.MEDIA_SLOTS[slot]),
        "Image": image,
        "ImageName": image.rsplit("/", 1)[-1] if image else None,
        "Inserted": bool(media.get("inserted")),
        "WriteProtected": media.get("write_protected", True),
        "ConnectedVia": "URI" if image else "NotConnected",
        "TransferMethod": "Stream",
        "TransferProtocolType": media.get("protocol"),
        "Actions": {
            "#VirtualMedia.InsertMedia": {"target": f"{base}/Actions/VirtualMedia.InsertMedia"},
            "#VirtualMedia.EjectMedia": {"target": f"{base}/Actions/VirtualMedia.EjectMedia"},
        },
    }


# Chassis, with the power and thermal readings Ironic collects as sensor data.


def chassis(node: NodeState, now: float) -> dict:
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
        "Status": {"State": "Enabled", "Health": _node_health(node)},
        "Location": {"PartLocation": {"ServiceLabel": f"{node.spec.rack} U{node.spec.position}"}},
        "Power": ref(f"{base}/Power"),
        "Thermal": ref(f"{base}/Thermal"),
        "Links": {
            "ComputerSystems": [ref(f"/redfish/v1/Systems/{node.name}")],
            "ManagedBy": [ref(f"/redfish/v1/Managers/{node.name}")],
        },
    }


def power(node: NodeState, now: float) -> dict:
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


def thermal(node: NodeState, now: float) -> dict:
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


# Tasks.

TASK_STATES = {"running": ("Running", "OK"), "succeeded": ("Completed", "OK"), "failed": ("Exception", "Critical")}


def task(node: NodeState, record: dict, now: float) -> dict:
    outcome = state.operation_state(record, now)
    task_state, status = TASK_STATES[outcome]
    # A hung task (end = inf) stays at 0 %; a running one never shows 100 %.
    done = (now - record["start"]) / (record["end"] - record["start"]) if outcome == "running" else 1.0
    body = {
        "@odata.type": odata_type("Task"),
        "@odata.id": f"/redfish/v1/TaskService/Tasks/{record['id']}",
        "Id": record["id"],
        "Name": f"Secure erase of {node.name} drive {record['drive']}",
        "TaskState": task_state,
        "TaskStatus": status,
        "PercentComplete": min(int(100 * done), 99) if outcome == "running" else 100,
        "StartTime": iso(record["start"]),
        "TaskMonitor": f"/redfish/v1/TaskService/TaskMonitors/{record['id']}",
        "Messages": [
            {
                "MessageId": "Base.1.18.Success" if outcome != "failed" else "Base.1.18.GeneralError",
                "Message": {
                    "running": "The secure erase is in progress.",
                    "succeeded": "The drive was securely erased.",
                    "failed": "The secure erase failed.",
                }[outcome],
                "Severity": "OK" if outcome != "failed" else "Critical",
                "MessageSeverity": "OK" if outcome != "failed" else "Critical",
            }
        ],
    }
    if outcome != "running":
        body["EndTime"] = iso(record["end"])
    return body


def task_service(now: float) -> dict:
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


# Sessions and accounts.


def session_service(timeout_s: int) -> dict:
    return {
        "@odata.type": odata_type("SessionService"),
        "@odata.id": "/redfish/v1/SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": timeout_s,
        "Status": OK,
        "Sessions": ref("/redfish/v1/SessionService/Sessions"),
    }


def session(session_id: str, username: str) -> dict:
    return {
        "@odata.type": odata_type("Session"),
        "@odata.id": f"/redfish/v1/SessionService/Sessions/{session_id}",
        "Id": session_id,
        "Name": f"Session of {username}",
        "UserName": username,
        "Password": None,
    }


def account_service() -> dict:
    return {
        "@odata.type": odata_type("AccountService"),
        "@odata.id": "/redfish/v1/AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": True,
        "MinPasswordLength": 6,
        "Status": OK,
        "Accounts": ref("/redfish/v1/AccountService/Accounts"),
        "Roles": ref("/redfish/v1/AccountService/Roles"),
    }


def account(account_id: str, username: str) -> dict:
    return {
        "@odata.type": odata_type("ManagerAccount"),
        "@odata.id": f"/redfish/v1/AccountService/Accounts/{account_id}",
        "Id": account_id,
        "Name": f"Account {username}",
        "UserName": username,
        "Password": None,
        "RoleId": "Administrator",
        "Enabled": True,
        "Locked": False,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": ref("/redfish/v1/AccountService/Roles/Administrator")},
    }


def administrator_role() -> dict:
    return {
        "@odata.type": odata_type("Role"),
        "@odata.id": "/redfish/v1/AccountService/Roles/Administrator",
        "Id": "Administrator",
        "Name": "Administrator",
        "RoleId": "Administrator",
        "IsPredefined": True,
        "AssignedPrivileges": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"],
    }
