"""The `sim` backend: the agent on simulated hardware.

bmcsim serves every simulated node's agent through this backend and the agent's own HTTP layer,
so the simulated fleet exercises the real agent. The machine underneath (power, boot, measured
boot, keys, injected faults, disks) is the simulator's and reaches the backend through
`SimulatedHardware`; what happens in-band (GPU readings, health, XID counts, the GPU memory
wipe, GPU resets, diagnostics) is decided here.

Long operations are kept as timestamps on the hardware ({"start", "end", "ok", ...}) and their
state derived when read, as bmcsim keeps its own, so a restarted simulator resumes them and a
time scale of 0 makes them instant.

A GPU reset that is to succeed clears, when it starts, the faults the hardware says a GPU reset
clears (`SimulatedHardware.reset_gpu`); while it runs the GPU reports unhealthy, as a GPU off the
bus does, so the GPU reads healthy again only once the reset has finished. A diagnostics run's
results are decided when it starts: tests fail on a GPU with a fault, and a `diag_fail` fault
fails its one test on its GPU. A running diagnostics run can be cancelled: it ends at once,
"cancelled", without results.
"""

from __future__ import annotations

import math
import socket
import time
import uuid
from typing import Protocol

from .backend import (
    CANCELLED,
    FAILED,
    GPU,
    IDLE,
    RUNNING,
    SUCCEEDED,
    GPUStatus,
    Operation,
    Reading,
    Refused,
    Unavailable,
)

# Durations in seconds at time scale 1.
GPU_WIPE_S = 10.0
GPU_RESET_S = 5.0
# DCGM's diagnostic levels take seconds, about 2 minutes, about 15 minutes and 1 to 2 hours.
DIAGNOSTICS_S = {1: 10.0, 2: 120.0, 3: 900.0, 4: 5400.0}
# The tests each DCGM level adds to the one below it.
DIAGNOSTIC_TESTS = {
    1: ("software",),
    2: ("pcie", "memory"),
    3: ("targeted_stress", "targeted_power", "diagnostic"),
    4: ("memory_bandwidth", "memtest", "pulse_test"),
}
# Faults that make a GPU unhealthy (and fail its diagnostics but `software`).
GPU_FAULTS = ("xid", "ecc_dbe", "row_remap_failure")
# A fault that fails one diagnostic test on one GPU and leaves its health alone: {"kind", "gpu", "test"}.
DIAG_FAIL = "diag_fail"
FB_TOTAL_MIB = 81559.0
FB_RESERVED_MIB = 522.0


def pci_bus_id(index: int) -> str:
    """Where a simulated GPU sits on the PCI bus, in NVML's form: one per 0x10 buses from 0x18."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


class SimulatedHardware(Protocol):
    """The simulated machine under the agent: one of bmcsim's nodes, or a stand-alone one."""

    name: str

    @property
    def operations(self) -> dict[str, dict]:
        """The agent's long operations as timestamp records, persisted by the hardware's owner."""

    def silent_because(self, now: float) -> str | None:
        """Why the agent cannot answer now (powered off, booting, stopped); None if it can."""

    def gpu_identities(self) -> list[GPU]: ...

    def gpu_faults(self) -> list[dict]:
        """Injected GPU faults: {"kind": "xid", "gpu", "xid"}, {"kind": "ecc_dbe" or "row_remap_failure",
        "gpu"}, {"kind": "diag_fail", "gpu", "test"}; others are ignored."""

    def reset_gpu(self, gpu: int) -> None:
        """A reset of `gpu` has started and is to succeed: the faults a GPU reset clears go now."""

    def xid_counts(self) -> dict[int, dict[int, int]]:
        """GPU -> XID -> times reported since the node came up."""

    def inventory(self, now: float) -> dict: ...

    def evidence(self, nonce: bytes, now: float) -> dict: ...

    def outcome(self, now: float, duration: float) -> dict:
        """How a long operation started now ends: {"start", "end", "ok"} (a hang never ends)."""

    def changed(self) -> None:
        """Something in `operations` changed: persist it."""


def operation_state(record: dict | None, now: float) -> str:
    if record is None:
        return IDLE
    if now < record["end"]:
        return RUNNING
    if record.get("cancelled"):
        return CANCELLED
    return SUCCEEDED if record["ok"] else FAILED


def kill_running(operations: dict[str, dict], now: float) -> None:
    """A reboot ends every running operation, failed; a new one may start after."""
    for name, record in operations.items():
        if operation_state(record, now) == RUNNING:
            operations[name] = {**record, "end": now, "ok": False}


class SimBackend:
    def __init__(self, hardware: SimulatedHardware, *, scale: float = 1.0, clock=time.time):
        self.hardware = hardware
        self.scale = scale
        self.clock = clock

    def _now(self) -> float:
        now = self.clock()
        reason = self.hardware.silent_because(now)
        if reason:
            raise Unavailable(reason)
        return now

    def hostname(self) -> str:
        return self.hardware.name

    def gpus(self) -> list[GPUStatus]:
        now = self._now()
        faults = self.hardware.gpu_faults()
        counts = self.hardware.xid_counts()
        reset = self.hardware.operations.get("gpu_reset")
        resetting = reset["gpu"] if reset is not None and operation_state(reset, now) == RUNNING else None
        statuses = []
        for gpu in self.hardware.gpu_identities():
            own = [f for f in faults if f["gpu"] == gpu.index]
            xids = [f["xid"] for f in own if f["kind"] == "xid"]
            statuses.append(
                GPUStatus(
                    gpu=gpu,
                    reading=_idle_reading(gpu.index, now, own),
                    healthy=gpu.index != resetting and not any(f["kind"] in GPU_FAULTS for f in own),
                    last_xid=xids[-1] if xids else 0,
                    xid_counts=dict(counts.get(gpu.index, {})),
                )
            )
        return statuses

    def xid_counts(self) -> dict[int, dict[int, int]]:
        self._now()
        return self.hardware.xid_counts()

    def inventory(self) -> dict:
        return self.hardware.inventory(self._now())

    def evidence(self, nonce: bytes) -> dict:
        return self.hardware.evidence(nonce, self._now())

    def _operation(self, name: str, now: float) -> Operation:
        record = self.hardware.operations.get(name)
        status = operation_state(record, now)
        if record is None:
            return Operation()
        return Operation(
            state=status,
            started_at=record["start"],
            finished_at=record["end"] if status in (SUCCEEDED, FAILED, CANCELLED) else None,
            gpu=record.get("gpu"),
            level=record.get("level"),
            results=tuple(record.get("results", ())) if status == SUCCEEDED else (),
        )

    def _start(self, name: str, duration: float, what: str, **extra) -> Operation:
        now = self._now()
        if operation_state(self.hardware.operations.get(name), now) == RUNNING:
            raise Refused(f"{what} of {self.hardware.name} is already running")
        self.hardware.operations[name] = {**self.hardware.outcome(now, duration * self.scale), **extra}
        self.hardware.changed()
        return self._operation(name, now)

    def gpu_wipe(self) -> Operation:
        return self._operation("gpu_wipe", self._now())

    def start_gpu_wipe(self) -> Operation:
        return self._start("gpu_wipe", GPU_WIPE_S, "a GPU memory wipe")

    def gpu_reset(self) -> Operation:
        return self._operation("gpu_reset", self._now())

    def start_gpu_reset(self, gpu: int) -> Operation:
        indexes = [g.index for g in self.hardware.gpu_identities()]
        if gpu not in indexes:
            raise Refused(f"'gpu' must be one of {', '.join(map(str, indexes))}", status=400)
        operation = self._start("gpu_reset", GPU_RESET_S, "a GPU reset", gpu=gpu)
        record = self.hardware.operations["gpu_reset"]
        if record["ok"] and math.isfinite(record["end"]):  # a reset that fails or hangs clears nothing
            self.hardware.reset_gpu(gpu)
        return operation

    def diagnostics(self) -> Operation:
        return self._operation("diagnostics", self._now())

    def start_diagnostics(self, level: int) -> Operation:
        if level not in DIAGNOSTICS_S:
            raise Refused("'level' must be 1, 2, 3 or 4", status=400)
        # The GPUs' faults at the start decide the results, so they read the same however late.
        faults = self.hardware.gpu_faults()
        faulty = {f["gpu"] for f in faults if f["kind"] in GPU_FAULTS}
        failing = {(f["gpu"], f["test"]) for f in faults if f["kind"] == DIAG_FAIL}
        results = [
            _result(test, gpu.index, gpu.index in faulty and test != "software", (gpu.index, test) in failing)
            for tier in range(1, level + 1)
            for test in DIAGNOSTIC_TESTS[tier]
            for gpu in self.hardware.gpu_identities()
        ]
        return self._start("diagnostics", DIAGNOSTICS_S[level], "a diagnostics run", level=level, results=results)

    def cancel_diagnostics(self) -> Operation:
        """Stop a running diagnostics run now ("cancelled"); any other run is given as it stands."""
        now = self._now()
        record = self.hardware.operations.get("diagnostics")
        if record is not None and operation_state(record, now) == RUNNING:
            self.hardware.operations["diagnostics"] = {**record, "end": now, "ok": False, "cancelled": True}
            self.hardware.changed()
        return self._operation("diagnostics", now)


def _result(test: str, gpu: int, faulty: bool, injected: bool) -> dict:
    if injected:
        detail = f"{test} failed on GPU {gpu}"
    elif faulty:
        detail = f"GPU {gpu} has a fault"
    else:
        detail = ""
    return {"test": test, "gpu": gpu, "passed": not detail, "detail": detail}


def _idle_reading(index: int, now: float, faults: list[dict]) -> Reading:
    """Readings of an idle GPU that drift slowly and differ a little per GPU, as a real idle fleet's do."""
    wave = math.sin(now / 60.0 + index)
    ecc_dbe = sum(1 for f in faults if f["kind"] == "ecc_dbe")
    remap_failed = any(f["kind"] == "row_remap_failure" for f in faults)
    return Reading(
        sm_clock_mhz=1980.0,
        memory_clock_mhz=2619.0,
        gpu_temperature_c=round(34.0 + index % 3 + 2.0 * wave, 1),
        memory_temperature_c=round(40.0 + index % 3 + 2.0 * wave, 1),
        power_w=round(71.5 + 4.0 * wave, 3),
        energy_mj=float(int(now) * 71_500),  # rises as a counter does, at 71.5 W
        pcie_replays=0.0,
        gpu_utilization=0.0,
        memory_copy_utilization=0.0,
        encoder_utilization=0.0,
        decoder_utilization=0.0,
        fb_free_mib=FB_TOTAL_MIB - FB_RESERVED_MIB,
        fb_used_mib=0.0,
        fb_reserved_mib=FB_RESERVED_MIB,
        ecc_sbe_volatile=0.0,
        ecc_dbe_volatile=float(ecc_dbe),
        ecc_sbe_aggregate=0.0,
        ecc_dbe_aggregate=float(ecc_dbe),
        retired_pages_sbe=0.0,
        retired_pages_dbe=0.0,
        retired_pages_pending=0.0,
        nvlink_bandwidth_total=0.0,
        remapped_rows_correctable=0.0,
        remapped_rows_uncorrectable=float(ecc_dbe),
        row_remap_failure=1.0 if remap_failed else 0.0,
    )


class StandaloneNode:
    """A simulated node on its own, for trying the agent without GPUs: healthy, never silent,
    and without a TPM, so it cannot give attestation evidence (bmcsim's nodes can)."""

    GPU_MODEL = "NVIDIA H100 80GB HBM3"

    def __init__(self, name: str | None = None, gpu_count: int = 8):
        self.name = name or socket.gethostname()
        self.operations: dict[str, dict] = {}
        self._gpus = [
            GPU(
                index=i,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.name}/gpu/{i}')}",
                model=self.GPU_MODEL,
                pci_bus_id=pci_bus_id(i),
                driver_version="560.35.03",
            )
            for i in range(gpu_count)
        ]

    def silent_because(self, now: float) -> str | None:
        return None

    def gpu_identities(self) -> list[GPU]:
        return self._gpus

    def gpu_faults(self) -> list[dict]:
        return []

    def reset_gpu(self, gpu: int) -> None:
        pass

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return {}

    def inventory(self, now: float) -> dict:
        return {
            "name": self.name,
            "serial": "",
            "boot_source": "Hdd",
            "macs": [],
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model, "cc_mode": "off"}
                for g in self._gpus
            ],
            "drives": [],
        }

    def evidence(self, nonce: bytes, now: float) -> dict:
        raise Refused("a stand-alone simulated node has no TPM: bmcsim's nodes and the host backend attest", 501)

    def outcome(self, now: float, duration: float) -> dict:
        return {"start": now, "end": now + duration, "ok": True}

    def changed(self) -> None:
        pass
