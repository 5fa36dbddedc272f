"""Schema versions, $metadata's namespaces, the simulated hardware's fixed facts and the helpers every body uses."""

from __future__ import annotations

import datetime
import uuid

from ..state import NodeState

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
    "UpdateService": "v1_17_0",
    "Task": "v1_7_4",
    "SessionService": "v1_2_0",
    "Session": "v1_8_0",
    "AccountService": "v1_18_1",
    "ManagerAccount": "v1_14_1",
    "Role": "v1_3_3",
    "LogService": "v1_9_0",
    "LogEntry": "v1_21_0",
    "Bios": "v1_2_0",
    "SecureBoot": "v1_1_2",
    # Measurement (the one place for an image's digest) is deprecated from v1_6_0 in favour of
    # ComponentIntegrity, but still defined: bmcsim serves it.
    "SoftwareInventory": "v1_13_0",
    "Fabric": "v1_4_0",
    "Switch": "v1_11_0",
    "Port": "v1_18_0",
    "ComponentIntegrity": "v1_3_2",
    "Certificate": "v1_11_0",
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
    "LogServiceCollection",
    "LogEntryCollection",
    "SoftwareInventoryCollection",
    "FabricCollection",
    "SwitchCollection",
    "PortCollection",
    "ComponentIntegrityCollection",
    "CertificateCollection",
)

# Namespaces of types used inside resources: Settings.v1_4_0's OperationApplyTimeSupport (Volumes),
# Settings.v1_3_5's Settings (Bios's @Redfish.Settings).
EXTRA_NAMESPACES = {"Resource": ("v1_22_0",), "Settings": ("v1_4_0", "v1_3_5"), "Message": ("v1_2_0",)}
SETTINGS_TYPE = "#Settings.v1_3_5.Settings"


def odata_type(name: str) -> str:
    return f"#{name}.{TYPES[name]}.{name}"


def ref(path: str) -> dict:
    return {"@odata.id": path}


def iso(ts: float, timespec: str = "seconds") -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec=timespec)


def uuid_of(*parts: str) -> str:
    return str(uuid.uuid5(_NS, "/".join(parts)))


OK = {"State": "Enabled", "Health": "OK"}


def collection(kind: str, path: str, name: str, members: list[str]) -> dict:
    return {
        "@odata.type": f"#{kind}.{kind}",
        "@odata.id": path,
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [ref(m) for m in members],
    }


def node_health(node: NodeState) -> str:
    return "Warning" if any(f["kind"] == "xid" for f in node.faults) else "OK"
