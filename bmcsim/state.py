"""The simulated hardware of every node, and the fleet that holds it and the fabric's switches
(fabric.py).

Timed behaviour (power transitions, boot, secure erase, firmware update, GPU wipe, the console's
lines, a BMC's own reset) is kept as timestamps and derived when read, so nothing runs in the
background (tenant nodes' sshd, in sshd.py, aside), a restart resumes mid-transition, and
`SIM_TIME_SCALE=0` makes every transition instant.

What a boot takes up (`_boot`): the BIOS flashed (and a `firmware_tamper` of it), the pending BIOS
settings, and SecureBootEnable; until the next boot the System shows, and the TPM has measured,
what the last boot ran with.
"""

from __future__ import annotations

import hashlib
import math

from agent.sim import GPU_FAULTS, kill_running, operation_state
from core.topology import NodeSpec, fabric_switches

from . import bios, guest, releases, sel
from .fabric import SwitchState
from .fabric_managers import FabricManagers
from .persisted import PersistedState
from .store import Store

# Durations in seconds at SIM_TIME_SCALE=1.
POWER_ON_S = 2.0
GRACEFUL_OFF_S = 3.0
BOOT_S = 8.0
SECURE_ERASE_S = 20.0
FIRMWARE_UPDATE_S = 30.0
BMC_RESET_S = 30.0  # the BMC's own reboot (Manager.Reset): its Redfish answers 503 meanwhile

DRIVES = ("0", "1")
DRIVE_CAPACITY_BYTES = 3_840_755_982_336
MEDIA_SLOTS = {"Cd": ("CD", "DVD"), "Floppy": ("Floppy", "USBStick")}
BOOT_TARGETS = ("None", "Pxe", "Hdd", "Cd", "Usb", "UefiHttp", "BiosSetup")
BOOT_ENABLED = ("Disabled", "Once", "Continuous")
BOOT_MODES = ("UEFI", "Legacy")
RAID_TYPES = ("RAID0", "RAID1")
RESET_TYPES = ("On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle", "Nmi")
INDICATOR_LEDS = ("Lit", "Blinking", "Off")
# What ends a GPU fault (its "clears"), weakest first; each also ends what a weaker one does:
# a reboot resets the GPUs too, and a power cycle reboots. A fault without "clears" is "never".
CLEARS = ("gpu_reset", "reboot", "power_cycle", "never")
MANAGER_RESET_TYPES = ("GracefulRestart", "ForceRestart")
TASKS_KEPT = 16
CONSOLE_LINES_KEPT = 500


def macs(node: str, count: int = 2) -> list[str]:
    """Stable, locally administered MAC addresses for a node's NICs."""
    raw = hashlib.sha256(f"bmcsim/mac/{node}".encode()).digest()
    return [":".join(f"{b:02x}" for b in (0x02, raw[0], raw[1], raw[2], raw[3], i + 1)) for i in range(count)]


class NodeState(PersistedState[NodeSpec]):
    """One node's hardware. Everything but `spec` is persisted."""

    __slots__ = (
        "agent_credentials",
        "agent_operations",
        "bios",
        "bios_pending",
        "bmc_ready_at",
        "bmc_reset_at",
        "boot_bios_tamper",
        "boot_count",
        "boot_enabled",
        "boot_firmware",
        "boot_implanted",
        "boot_mode",
        "boot_secure_boot",
        "boot_source",
        "boot_target",
        "booted_at",
        "components",
        "console",
        "console_seq",
        "faults",
        "firmware",
        "flash_pending",
        "guest",
        "indicator_led",
        "last_reset_at",
        "media",
        "power_on",
        "secure_boot_enable",
        "secure_boot_mode",
        "sel",
        "sel_seq",
        "spec",
        "ssh_host_key",
        "ssh_host_key_instance",
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
        # What the agent read from the config drive at the last boot (guest.agent_credentials): none
        # from the factory; replaced at every boot (a node that is off answers 503 to the right token).
        self.agent_credentials: dict[str, str] | None = None
        self.volumes: list[dict] = []
        self.console: list[list] = []  # [id, timestamp, text]: the serial console, the last CONSOLE_LINES_KEPT lines
        self.console_seq = 0
        self.guest: dict | None = None  # the tenant OS while it runs (see guest.py)
        self.ssh_host_key: str | None = None  # made at a tenant boot, kept while the instance id is the same
        self.ssh_host_key_instance = ""
        self.last_reset_at: float | None = None  # Redfish's LastResetTime
        # Firmware: the BIOS flashed is `firmware` (above); every other component's release, when it
        # is not the factory one, in `components` ({"BMC", "NIC0", "GPU<i>"} -> release). While a
        # flash runs, FirmwareInventory still shows what was there: `flash_pending` {component:
        # {"end", "version", "digest"}}. A tampered BIOS the last boot ran: its version, else None.
        # Dicts here are replaced, never changed in place, so that nodes may share the defaults.
        self.components: dict[str, str] = {}
        self.flash_pending: dict[str, dict] = {}
        self.boot_bios_tamper: str | None = None
        # BIOS settings: the current attributes and those pending for the next boot (Bios/Settings).
        self.bios: dict[str, str] = bios.DEFAULTS
        self.bios_pending: dict[str, str] = {}
        # UEFI Secure Boot: off from the factory, so the control plane has something to turn on.
        self.secure_boot_enable = False
        self.secure_boot_mode = "UserMode"  # keys enrolled: Secure Boot runs once enabled
        self.boot_secure_boot = False  # what the last boot ran with (SecureBootCurrentBoot)
        # The BMC's system event log: sel.entry lists, the last sel.KEPT; ids never repeat.
        self.sel: list[list] = []
        self.sel_seq = 0
        # The BMC's own reset (Manager.Reset): when it answers again, and when it was last reset.
        self.bmc_ready_at = 0.0
        self.bmc_reset_at: float | None = None

    # Power and boot.

    def power_state(self, now: float) -> str:
        if now < self.transition_end:
            return "PoweringOn" if self.power_on else "PoweringOff"
        return "On" if self.power_on else "Off"

    def is_booted(self, now: float) -> bool:
        return self.power_on and now >= self.booted_at

    def reset(self, reset_type: str, now: float, scale: float) -> None:
        os_running = self.is_booted(now)
        if reset_type.startswith("Graceful") and os_running and self.has_fault("os_hang"):
            return  # a hung OS never acts on the BMC's request to shut down
        if reset_type in ("On", "ForceOn"):
            if not self.power_on:
                self._boot(reset_type, now, scale, os_running)
        elif reset_type == "ForceOff":
            if self.power_on or now < self.transition_end:
                self._halt(reset_type, now, scale, os_running)
            self.power_on, self.transition_end = False, now
        elif reset_type == "GracefulShutdown":
            if self.power_on:
                self._halt(reset_type, now, scale, os_running)
                self.power_on, self.transition_end = False, now + GRACEFUL_OFF_S * scale
        elif reset_type in ("GracefulRestart", "ForceRestart", "PowerCycle"):
            self.clear_gpu_faults("power_cycle" if reset_type == "PowerCycle" else "reboot")
            self._boot(reset_type, now, scale, os_running)
        elif reset_type == "Nmi":
            if self.power_on:
                self.console_write(self._timeline(now, scale).dated(guest.reset_script(reset_type, os_running, 0)))
        else:
            raise ValueError(reset_type)

    def _timeline(self, now: float, scale: float) -> guest.Timeline:
        return guest.Timeline(now, scale, POWER_ON_S, POWER_ON_S + BOOT_S)

    def _halt(self, reset_type: str, now: float, scale: float, os_running: bool) -> None:
        """Power off: the tenant OS, if it ran, is gone; what the console was still to print never is.
        The GPUs lose power, so the faults a power cycle clears go."""
        self.last_reset_at = now
        self.clear_gpu_faults("power_cycle")
        self._cut_console(now)
        self.guest = None
        self.console_write(self._timeline(now, scale).dated(guest.reset_script(reset_type, os_running, GRACEFUL_OFF_S)))

    def _boot(self, reset_type: str, now: float, scale: float, os_running: bool) -> None:
        """Power on and boot: honour the override as written, and measure what is on the node.

        A fetched image in the virtual CD boots the tenant OS, which cloud-init configures from a
        config drive among the inserted media; anything else runs the node agent only."""
        self.last_reset_at = now
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
        tamper = self.firmware_tamper("BIOS")
        self.boot_bios_tamper = tamper["version"] if tamper else None
        self.boot_secure_boot = self.secure_boot_enable and self.secure_boot_mode in ("UserMode", "DeployedMode")
        self._apply_bios_settings()
        kill_running(self.agent_operations, now)

        cd = self.media.get("Cd") if self.boot_source == "Cd" else None
        warnings: list[str] = []
        documents = guest.config_drive(self.media)
        self.agent_credentials = guest.agent_credentials(documents)
        if cd and cd.get("inserted") and "sha256" in cd:
            self.guest, warnings = guest.tenant_os(cd, documents, self.ssh_host_key or guest.new_host_key())
            # cloud-init makes new host keys for each new instance, so the next tenant's differ.
            if self.ssh_host_key is None or self.guest["instance_id"] != self.ssh_host_key_instance:
                self.ssh_host_key, self.ssh_host_key_instance = guest.new_host_key(), self.guest["instance_id"]
                self.guest, warnings = guest.tenant_os(cd, documents, self.ssh_host_key)
        else:
            self.guest = None
        timeline = self._timeline(now, scale)
        self._cut_console(now)
        self.console_write(
            timeline.dated(
                guest.reset_script(reset_type, os_running, GRACEFUL_OFF_S)
                + guest.boot_script(
                    self.name, self.bios_version_booted, self.boot_source, cd, self.guest, warnings, timeline
                )
            )
        )

    # The serial console: lines are written when a transition starts, dated when the simulated
    # hardware prints them, and shown once that time has come.

    def console_write(self, lines: list[tuple[float, str]]) -> None:
        for timestamp, text in lines:
            self.console_seq += 1
            self.console.append([self.console_seq, timestamp, text])
        del self.console[:-CONSOLE_LINES_KEPT]

    def console_lines(self, now: float) -> list[list]:
        return [line for line in self.console if line[1] <= now]

    def clear_console(self, now: float) -> None:
        """LogService.ClearLog: what was printed goes; what a transition under way prints later stays."""
        self.console = [line for line in self.console if line[1] > now]

    def _cut_console(self, now: float) -> None:
        self.console = self.console_lines(now)

    def measured_boot(self) -> list[tuple[str, str]]:
        """(component, digest) of the boot chain in boot order, as measured by the last boot."""
        images = releases.factory_boot_images()
        images["firmware"] = self.bios_digest_booted()
        if self.boot_implanted:
            images["kernel"] = releases.implant_kernel_digest(self.name)
        return [(c, images[c]) for c in releases.BOOT_COMPONENTS]

    def bios_digest_booted(self) -> str:
        if self.boot_bios_tamper is not None:
            return releases.tampered_digest(self.name, "BIOS", self.boot_bios_tamper)
        return releases.boot_digest("firmware", self.boot_firmware)

    @property
    def bios_version_booted(self) -> str:
        """What the running BIOS reports (ComputerSystem's BiosVersion)."""
        return self.boot_bios_tamper if self.boot_bios_tamper is not None else self.boot_firmware

    # BIOS settings: PATCHed into Bios/Settings, taken up by the next boot.

    def _apply_bios_settings(self) -> None:
        if self.bios_pending:
            self.bios, self.bios_pending = {**self.bios, **self.bios_pending}, {}
        # A bios_tamper ends once a boot has set its attribute to something else.
        self.faults = [
            f for f in self.faults if f["kind"] != "bios_tamper" or self.bios.get(f["attribute"]) == f["value"]
        ]

    # Firmware: FirmwareInventory's components, what each shows, flashing and tampering.

    def firmware_components(self) -> list[str]:
        return ["BIOS", "BMC", *(f"GPU{g.index}" for g in self.spec.gpus), "NIC0"]

    @staticmethod
    def firmware_kind(component: str) -> str:
        return "VBIOS" if component.startswith("GPU") else "NIC" if component.startswith("NIC") else component

    def installed(self, component: str) -> str:
        """The release flashed on a component."""
        if component == "BIOS":
            return self.firmware
        return self.components.get(component) or releases.FIRMWARE_RELEASES[self.firmware_kind(component)][-1]

    def firmware_tamper(self, component: str) -> dict | None:
        return next((f for f in self.faults if f["kind"] == "firmware_tamper" and f["component"] == component), None)

    def firmware_shown(self, component: str, now: float) -> tuple[str, str]:
        """(Version, SHA-256 digest) the component reports: what was there while a flash runs, a
        tampered image's while tampered, else the release flashed."""
        pending = self.flash_pending.get(component)
        if pending is not None and now < pending["end"]:
            return pending["version"], pending["digest"]
        tamper = self.firmware_tamper(component)
        if tamper is not None:
            return tamper["version"], releases.tampered_digest(self.name, component, tamper["version"])
        release = self.installed(component)
        return release, releases.firmware_digest(self.firmware_kind(component), release)

    def gpu_measurements(self, gpu: int, now: float) -> dict[str, str]:
        """What a GPU's attestation report measures: the VBIOS it has (as FirmwareInventory shows
        it, tampered or not) and the factory driver."""
        measured = releases.factory_gpu_measurements()
        measured["vbios"] = releases.gpu_digest("vbios", self.firmware_shown(f"GPU{gpu}", now)[0])
        return measured

    def secure_boot_digest_booted(self) -> str:
        return releases.secure_boot_digest(self.boot_secure_boot)

    # The BMC's system event log.

    def sel_append(
        self,
        now: float,
        severity: str,
        message_id: str,
        message: str,
        args: list[str],
        sensor_type: str,
        origin: str,
    ) -> list:
        self.sel_seq += 1
        record = sel.entry(
            self.sel_seq, now, severity, message_id, message, args, sensor_type, origin.format(node=self.name)
        )
        self.sel = [*self.sel[-(sel.KEPT - 1) :], record]
        return record

    # The BMC's own reset.

    def reset_bmc(self, now: float, scale: float) -> None:
        self.bmc_reset_at = now
        self.bmc_ready_at = now + BMC_RESET_S * scale

    def bmc_unavailable_for(self, now: float) -> float:
        """Seconds until the BMC answers again after its own reset; 0 if it answers now."""
        return max(0.0, self.bmc_ready_at - now)

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
        return any(f["gpu"] == gpu and f["kind"] in GPU_FAULTS for f in self.gpu_faults())

    def clear_faults(self) -> int:
        """DELETE /bmcsim/v1/faults for this node: every fault goes; a BIOS attribute a bios_tamper
        still holds returns to what it was (a firmware_tamper goes with its fault; a tampered BIOS
        is measured until the next boot, as the implant is). Returns how many went."""
        for fault in reversed(self.faults):
            if fault["kind"] == "bios_tamper" and self.bios.get(fault["attribute"]) == fault["value"]:
                self.bios = {**self.bios, fault["attribute"]: fault["was"]}
        cleared, self.faults = len(self.faults), []
        return cleared

    def clear_gpu_faults(self, action: str, gpu: int | None = None) -> int:
        """`action` (one of CLEARS but "never") happened to `gpu`, or to every GPU: the GPU faults
        it clears go. Returns how many went."""
        strength = CLEARS.index(action)
        kept = [
            f
            for f in self.faults
            if "gpu" not in f
            or (gpu is not None and f["gpu"] != gpu)
            or CLEARS.index(f.get("clears", "never")) > strength
        ]
        cleared, self.faults = len(self.faults) - len(kept), kept
        return cleared

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

    def start_update(self, kind: str, release: str, components: list[str], now: float, scale: float) -> dict:
        """Flash a firmware release onto components of this node. FirmwareInventory shows it once the
        task has finished; a BIOS is run, and measured, by the next boot. The flash ends a
        firmware_tamper of each component, unless it was injected to survive a reflash."""
        end = now + FIRMWARE_UPDATE_S * scale
        pending = {c: p for c, p in self.flash_pending.items() if p["end"] > now}
        for component in components:
            version, digest = self.firmware_shown(component, now)
            if end > now:
                pending[component] = {"end": end, "version": version, "digest": digest}
            else:
                pending.pop(component, None)
            if component == "BIOS":
                self.firmware = release
            else:
                self.components = {**self.components, component: release}
        self.flash_pending = pending
        self.faults = [
            f
            for f in self.faults
            if not (f["kind"] == "firmware_tamper" and f["component"] in components and not f.get("survives_reflash"))
        ]
        record = {"firmware": release, "kind": kind, "components": list(components)}
        return self._task({**record, "start": now, "end": end, "ok": True})

    def is_erasing(self, drive: str, now: float) -> bool:
        return any(t.get("drive") == drive and operation_state(t, now) == "running" for t in self.tasks)

    def last_erased(self, drive: str, now: float) -> float | None:
        """When the drive's last successful secure erase finished, if it ever had one."""
        done = [t["end"] for t in self.tasks if t.get("drive") == drive and operation_state(t, now) == "succeeded"]
        return max(done, default=None)

    def find_task(self, task_id: str) -> dict | None:
        return next((t for t in self.tasks if t["id"] == task_id), None)


class Fleet:
    """Every node and fabric switch, their persistence, and the lookups the HTTP layer needs."""

    def __init__(self, specs: list[NodeSpec], store: Store):
        self.store = store
        self.nodes: dict[str, NodeState] = {spec.name: NodeState(spec) for spec in specs}
        self.switches: dict[str, SwitchState] = {spec.name: SwitchState(spec) for spec in fabric_switches(specs)}
        self.fabric = FabricManagers(specs)
        self.by_password = {spec.bmc_password: spec.name for spec in specs}
        self._dirty: set[str] = set()
        self._dirty_switches: set[str] = set()
        for table, held in (("nodes", self.nodes), ("switches", self.switches)):
            for name, data in store.load(table).items():
                if name in held:
                    held[name].restore(data)
        self.fabric.restore(store.load("fabrics"))

    def touch(self, node: NodeState) -> None:
        """Mark a node changed; `flush` writes it."""
        self._dirty.add(node.name)

    def touch_switch(self, switch: SwitchState) -> None:
        self._dirty_switches.add(switch.name)

    def flush(self) -> None:
        fabrics = self.fabric.dump_dirty()
        if self._dirty or self._dirty_switches or fabrics:
            nodes, self._dirty = self._dirty, set()
            switches, self._dirty_switches = self._dirty_switches, set()
            self.store.save(
                {
                    "nodes": {name: self.nodes[name].dump() for name in nodes},
                    "switches": {name: self.switches[name].dump() for name in switches},
                    "fabrics": fabrics,
                }
            )
