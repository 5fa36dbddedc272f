"""The BMC's system event log (SEL): the events it records, and the entries it keeps.

Each entry's MessageId is a message of a DMTF message registry, with the registry's own text and
default severity (DMTF's Power, Environmental, ResourceEvent and Platform registries, at the
versions named). A `sel` fault may give any other MessageId with its own message.

(The LogEntry schema says an entry of EntryType `SEL` "should" carry IPMI event data in MessageId,
`0xNNaabbcc`; bmcsim, as OpenBMC-based BMCs do for their event logs, gives the registry MessageId,
which is what a reader can act on.)
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("OK", "Warning", "Critical")
KEPT = 1000  # MaxNumberOfRecords; older entries go first (WrapsWhenFull)


@dataclass(frozen=True)
class Event:
    severity: str  # the registry's default
    sensor_type: str  # LogEntry.SensorType, from IPMI's sensor types
    message: str  # the registry's message, {0}, {1}... for its arguments
    args: tuple[str, ...]  # example arguments, used when a fault gives none
    origin: str  # what the event is about, under the node ("" for the System itself)


POWER_SUPPLY_FAILED = "Power.1.0.1.PowerSupplyFailed"
FAN_FAILED = "Environmental.1.1.0.FanFailed"
THERMAL_TRIP = "Environmental.1.1.0.TemperatureAboveUpperFatalThreshold"
MEMORY_ECC = "ResourceEvent.1.0.3.ResourceErrorsDetected"
GPU_OFF_THE_BUS = "Platform.1.0.1.PlatformErrorAtLocation"

EVENTS: dict[str, Event] = {
    POWER_SUPPLY_FAILED: Event(
        "Warning", "Power Supply / Converter", "Power supply '{0}' has failed.", ("PSU1",), "Chassis/{node}/Power"
    ),
    FAN_FAILED: Event("Warning", "Fan", "Fan '{0}' has failed.", ("Fan 3",), "Chassis/{node}/Thermal"),
    THERMAL_TRIP: Event(
        "Critical",
        "Temperature",
        "Temperature '{0}' reading of {1} degrees (C) is above the {2} upper fatal threshold.",
        ("CPU0 temperature", "105", "100"),
        "Chassis/{node}/Thermal",
    ),
    MEMORY_ECC: Event(
        "Critical",
        "Memory",
        "The resource property {0} has detected errors of type '{1}'.",
        ("DIMM A3", "Uncorrectable ECC"),
        "Systems/{node}",
    ),
    GPU_OFF_THE_BUS: Event(
        "Critical",
        "Critical Interrupt",
        "A platform error occurred at location '{0}'.",
        ("GPU0 (SXM0)",),
        "Systems/{node}/Processors/GPU0",
    ),
}


def gpu_off_the_bus(gpu: int) -> tuple[str, str, str, list[str], str, str]:
    """The entry a BMC logs when a GPU's PCIe link drops (NVIDIA XID 79, "GPU has fallen off the bus")."""
    location = f"GPU{gpu} (SXM{gpu})"
    message = f"A platform error occurred at location '{location}': PCIe link lost, the GPU fell off the bus."
    return (
        "Critical",
        GPU_OFF_THE_BUS,
        message,
        [location],
        "Critical Interrupt",
        f"Systems/{{node}}/Processors/GPU{gpu}",
    )


def entry(
    seq: int, now: float, severity: str, message_id: str, message: str, args: list[str], sensor: str, origin: str
):
    """One kept entry: [id, created, severity, message_id, message, args, sensor_type, origin]."""
    return [seq, now, severity, message_id, message, args, sensor, origin]
