"""The simulated hardware of every node, and the fleet that holds it.

Timed behaviour (power transitions, boot, secure erase, firmware update, GPU wipe) is kept as
timestamps and derived when read, so nothing runs in the background, a restart resumes
mid-transition, and `SIM_TIME_SCALE=0` makes every transition instant.
"""

from __future__ import annotations

import hashlib
import math

from agent.sim import kill_running, operation_state
from core.topology import NodeSpec

from . import releases
from .store import Store

# Durations in seconds at SIM_TIME_SCALE=1.
POWER_ON_S = 2.0
GRACEFUL_OFF_S = 3.0
BOOT_S = 8.0
SECURE_ERASE_S = 20.0
FIRMWARE_UPDATE_S = 30.0

DRIVES = ("0", "1")
DRIVE_CAPACITY_BYTES = 3_840_755_982_336
MEDIA_SLOTS = {"Cd": ("CD", "DVD"), "Floppy": ("Floppy", "USBStick")}
BOOT_TARGETS = ("None", "Pxe", "Hdd", "Cd", "Usb", "UefiHttp", "BiosSetup")
BOOT_ENABLED = ("Disabled", "Once", "Continuous")
BOOT_MODES = ("UEFI", "Legacy")
RAID_TYPES = ("RAID0", "RAID1")
RESET_TYPES = ("On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle", "Nmi")
INDICATOR_LEDS = ("Lit", "Blinking", "Off")
TASKS_KEPT = 16


def macs(node: str, count: int = 2) -> list[str]:
    """Stable, locally administered MAC addresses for a node's NICs."""
    raw = hashlib.sha256(f"bmcsim/mac/{node}".encode()).digest()
    return [":".join(f"{b:02x}" for b in (0x02, raw[0], raw[1], raw[2], raw[3], i + 1)) for i in range(count)]


class NodeState:
    """One node's hardware. Everything but `spec` is persisted."""

    __slots__ = (
        "agent_operations",
        "boot_count",
        "boot_enabled",
        "boot_firmware",
        "boot_implanted",
        "boot_mode",
        "boot_source",
        "boot_target",
        "booted_at",
        "faults",
        "firmware",
        "indicator_led",
        "media",
        "power_on",
        "spec",
        "task_seq",
        "tasks",
        "transition_end",
        "volumes",
        "xid_counts",
    )
    PERSISTED = tuple(name for name in __slots__ if name != "spec")

    def __init__(self, spec: NodeSpec):
        self.spec = spec
        # A data-center node starts powered on and long booted, from its disk.
        self.power_on = True
        self.transition_end = 0.0
        self.booted_at = 0.0
        self.boot_count = 1
        self.boot_source = "Hdd"
        self.boot_implanted = False
        self.firmware = self.boot_firmware = releases.BOOT_RELEASES["firmware"][-1]
        self.boot_target = "None"
        self.boot_enabled = "Disabled"
        self.boot_mode = "UEFI"
        self.indicator_led = "Off"
        self.media: dict[str, dict] = {}
        self.faults: list[dict] = []
        self.xid_counts: dict[str, dict[str, int]] = {}
        self.tasks: list[dict] = []
        self.task_seq = 0
        self.agent_operations: dict[str, dict] = {}  # the agent's GPU wipe, reset and diagnostics
        self.volumes: list[dict] = []

    @property
    def name(self) -> str:
        return self.spec.name

    def dump(self) -> dict:
        return {field: getattr(self, field) for field in self.PERSISTED}

    def restore(self, data: dict) -> None:
        for field in self.PERSISTED:
            if field in data:
                setattr(self, field, data[field])

    # Power and boot.

    def power_state(self, now: float) -> str:
        if now < self.transition_end:
            return "PoweringOn" if self.power_on else "PoweringOff"
        return "On" if self.power_on else "Off"

    def is_booted(self, now: float) -> bool:
        return self.power_on and now >= self.booted_at

    def reset(self, reset_type: str, now: float, scale: float) -> None:
        if reset_type in ("On", "ForceOn"):
            if not self.power_on:
                self._boot(now, scale)
        elif reset_type == "ForceOff":
            self.power_on, self.transition_end = False, now
        elif reset_type == "GracefulShutdown":
            if self.power_on:
                self.power_on, self.transition_end = False, now + GRACEFUL_OFF_S * scale
        elif reset_type in ("GracefulRestart", "ForceRestart", "PowerCycle"):
            self._boot(now, scale)
        elif reset_type != "Nmi":
            raise ValueError(reset_type)

    def _boot(self, now: float, scale: float) -> None:
        """Power on and boot: honour the override as written, and measure what is on the node."""
        overridden = self.boot_enabled in ("Once", "Continuous") and self.boot_target != "None"
        self.boot_source = self.boot_target if overridden else "Hdd"
        if self.boot_enabled == "Once":
            self.boot_enabled, self.boot_target = "Disabled", "None"
        self.power_on = True
        self.transition_end = now + POWER_ON_S * scale
        self.booted_at = self.transition_end + BOOT_S * scale
        self.boot_count += 1
        self.boot_implanted = self.has_fault("implant")
        self.boot_firmware = self.firmware
        kill_running(self.agent_operations, now)

    def measured_boot(self) -> list[tuple[str, str]]:
        """(component, digest) in boot order, as measured by the last boot."""
        images = releases.factory_boot_images()
        images["firmware"] = releases.boot_digest("firmware", self.boot_firmware)
        if self.boot_implanted:
            images["kernel"] = releases.implant_kernel_digest(self.name)
        return [(c, images[c]) for c in releases.BOOT_COMPONENTS]

    # Faults.

    def has_fault(self, kind: str) -> bool:
        return any(f["kind"] == kind for f in self.faults)

    @property
    def cc_mode(self) -> str:
        """The GPUs' confidential-computing mode: "on" unless a `cc_mode` fault says otherwise."""
        modes = [f["mode"] for f in self.faults if f["kind"] == "cc_mode"]
        return modes[-1] if modes else "on"

    def gpu_faults(self) -> list[dict]:
        return [f for f in self.faults if "gpu" in f]

    def gpu_unhealthy(self, gpu: int) -> bool:
        return any(f["gpu"] == gpu for f in self.gpu_faults())

    # Long operations: secure erase and firmware update (Redfish tasks), and the agent's.

    def outcome(self, now: float, duration: float) -> dict:
        """Decide at start how an erase or GPU wipe ends: a hang never ends, a failure ends in error."""
        hang = self.has_fault("erase_hang")
        return {"start": now, "end": math.inf if hang else now + duration, "ok": not self.has_fault("erase_fail")}

    def _task(self, record: dict) -> dict:
        self.task_seq += 1
        task = {"id": f"{self.name}-{self.task_seq}", **record}
        self.tasks = [*self.tasks[-(TASKS_KEPT - 1) :], task]
        return task

    def start_erase(self, drive: str, now: float, scale: float) -> dict:
        return self._task({"drive": drive, **self.outcome(now, SECURE_ERASE_S * scale)})

    def start_update(self, release: str, now: float, scale: float) -> dict:
        """Flash a firmware release: the next boot runs, and measures, it."""
        self.firmware = release
        return self._task({"firmware": release, "start": now, "end": now + FIRMWARE_UPDATE_S * scale, "ok": True})

    def is_erasing(self, drive: str, now: float) -> bool:
        return any(t.get("drive") == drive and operation_state(t, now) == "running" for t in self.tasks)

    def last_erased(self, drive: str, now: float) -> float | None:
        """When the drive's last successful secure erase finished, if it ever had one."""
        done = [t["end"] for t in self.tasks if t.get("drive") == drive and operation_state(t, now) == "succeeded"]
        return max(done, default=None)

    def find_task(self, task_id: str) -> dict | None:
        return next((t for t in self.tasks if t["id"] == task_id), None)


class Fleet:
    """Every node, its persistence, and the lookups the HTTP layer needs."""

    def __init__(self, specs: list[NodeSpec], store: Store):
        self.store = store
        self.nodes: dict[str, NodeState] = {spec.name: NodeState(spec) for spec in specs}
        self.by_password = {spec.bmc_password: spec.name for spec in specs}
        self._dirty: set[str] = set()
        for name, data in store.load_nodes().items():
            if name in self.nodes:
                self.nodes[name].restore(data)

    def touch(self, node: NodeState) -> None:
        """Mark a node changed; `flush` writes it."""
        self._dirty.add(node.name)

    def flush(self) -> None:
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            self.store.save_nodes({name: self.nodes[name].dump() for name in dirty})
