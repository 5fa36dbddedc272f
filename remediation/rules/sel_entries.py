"""Entries of a BMC's system event log (SEL), read as alerts by their severity; a GPU lost to the
host (PlatformErrorAtLocation at a GPU) takes XID 79's ladder. Each says who wrote it: the BMC from
its own sensors, or software on the host (its `source` label).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType

from core import validation
from core.parsing import check_text
from remediation.rules.alerts import MAX_ANNOTATION_VALUE, MAX_LABEL_VALUE, Alert, timestamp

# A BMC's SEL entries, by severity (Redfish's LogEntry.Severity); OK entries call for nothing.
BMC_CRITICAL_EVENT = "BMCCriticalEvent"


BMC_WARNING_EVENT = "BMCWarningEvent"


SEL_ALERTS: Mapping[str, str] = MappingProxyType({"Critical": BMC_CRITICAL_EVENT, "Warning": BMC_WARNING_EVENT})


# (registry, message key) of the MessageIds (Registry.Major.Minor[.Errata].Key, any version) that,
# at a GPU, mean the GPU is lost to the host.
GPU_LOST_MESSAGES = frozenset({("Platform", "PlatformErrorAtLocation")})


# A GPU as a Processor of the System (bmcsim's Id: GPU and its index).
GPU_PROCESSOR = re.compile(r"/Processors/GPU([0-9]{1,3})$")


# Who wrote an entry, its `source` label: the BMC from its own sensors (out of band), or software on
# the host (in band). The host's BIOS and OS add SEL entries through the BMC's in-band interface
# (IPMI's Add SEL Entry and Platform Event commands), and nothing stops the tenant's OS from writing
# any such record: while a tenant holds the node, a host entry is the tenant's word.
BMC_SENSORS = "bmc"


HOST_SOFTWARE = "host_sel"


# LogEntry.SensorType (IPMI's sensor types) of the sensors a BMC reads itself. The others are raised
# by software on the host (Memory and Critical Interrupt by the BIOS's error handlers, OS Stop /
# Shutdown, System Event, OEM...), or have no sensor at all.
BMC_SENSOR_TYPES = frozenset(
    {
        "Temperature",
        "Voltage",
        "Current",
        "Fan",
        "Physical Chassis Security",
        "Power Supply / Converter",
        "PowerUnit",
        "CoolingDevice",
        "Other Units-based Sensor",
        "Drive Slot/Bay",
        "Entity Presence",
        "Battery",
        "Management Subsystem Health",
    }
)


# The DMTF registries of a BMC's own sensors, for entries that name no SensorType.
BMC_SENSOR_REGISTRIES = frozenset({"Power", "Environmental", "Sensor"})


# LogEntry.GeneratorId, the IPMI record's Generator ID with its first byte last ("0x0020": the BMC).
GENERATOR_ID = re.compile(r"0[xX]([0-9a-fA-F]{2})([0-9a-fA-F]{2})")


def sel_entry(node: str, entry: object) -> Alert | None:
    """A SEL entry (a Redfish LogEntry) as an alert, or None for one of severity OK (or none).

    Its key (fingerprint, startsAt) is the node, the entry's Id and its Created: an entry read twice
    is recorded once, and a log whose Ids started again is told apart. An entry with no readable
    Created is keyed by its Id alone. Raises InvalidInput for an entry that cannot be read or stored."""
    entry = validation.mapping(entry, "entry")
    name = SEL_ALERTS.get(entry.get("Severity", ""))
    if name is None:
        return None
    entry_id = validation.text(entry.get("Id"), "entry.Id", max_length=128)
    message_id = validation.text(
        entry.get("MessageId", ""), "entry.MessageId", min_length=0, max_length=MAX_LABEL_VALUE
    )
    message = validation.text(entry.get("Message", ""), "entry.Message", min_length=0, max_length=MAX_ANNOTATION_VALUE)
    check_text([entry_id, message_id, message], "entry")
    try:
        starts_at = timestamp(entry.get("Created"), "entry.Created")
    except validation.Invalid:
        starts_at = ""
    labels = {
        "alertname": name,
        "node": node,
        "entry": entry_id,
        "message_id": message_id,
        "source": _writer(entry, message_id),
    }
    if (gpu := _gpu_of_origin(entry.get("Links"))) is not None:
        labels["gpu"] = str(gpu)
    return Alert(
        name=name,
        status="firing",
        labels=MappingProxyType(labels),
        annotations=MappingProxyType({"message": message}),
        fingerprint=hashlib.sha256(f"{node}/sel/{entry_id}".encode()).hexdigest()[:16],
        starts_at=starts_at,
    )


def _writer(entry: Mapping[str, object], message_id: str) -> str:
    """BMC_SENSORS or HOST_SOFTWARE. The Generator ID decides where the BMC gives one: its first byte
    is a controller's IPMB address (bit 0 clear) or a system software ID (bit 0 set: BIOS, SMI
    handler, OS, ...). An OEM record carries none, and anyone may write one. Otherwise what the entry
    is about: a sensor the BMC reads itself (by its SensorType, or its MessageId's registry when it
    names no SensorType), or not. A BMC that lets the host add entries under its own Generator ID
    must have the host's IPMI restricted (no Add SEL Entry from the host): else no entry is out of band."""
    generator_id = entry.get("GeneratorId")
    generator = GENERATOR_ID.fullmatch(generator_id) if isinstance(generator_id, str) else None
    if generator is not None:
        return HOST_SOFTWARE if int(generator.group(2), 16) & 1 else BMC_SENSORS
    if entry.get("EntryType") == "Oem":
        return HOST_SOFTWARE
    sensor_type = entry.get("SensorType")
    if sensor_type is not None:
        return BMC_SENSORS if sensor_type in BMC_SENSOR_TYPES else HOST_SOFTWARE
    registry = message_id.split(".")[0]
    return BMC_SENSORS if registry in BMC_SENSOR_REGISTRIES else HOST_SOFTWARE


def _gpu_of_origin(links: object) -> int | None:
    """The index of the GPU Processor an entry's Links.OriginOfCondition names, if it names one."""
    origin = links.get("OriginOfCondition") if isinstance(links, dict) else None
    path = origin.get("@odata.id") if isinstance(origin, dict) else None
    found = GPU_PROCESSOR.search(path) if isinstance(path, str) else None
    return int(found.group(1)) if found else None


def sel_rule(alert: Alert, gpu: int | None) -> tuple[str, str]:
    """The ladder and the reason of a SEL entry's alert (see the module's docstring)."""
    message_id = alert.labels.get("message_id", "")
    reason = ": ".join(part for part in ("sel", message_id, alert.annotations.get("message", "")) if part)
    if alert.name == BMC_WARNING_EVENT:
        return "none", reason
    parts = message_id.split(".")
    if gpu is not None and (parts[0], parts[-1]) in GPU_LOST_MESSAGES:
        return "gpu_lost", reason
    return "hardware_failed", reason
