"""What a backend gives the agent: the interface `host` and `sim` both implement.

A backend reads hardware and starts long operations; the HTTP layer (agent/app.py) turns
what it returns into the agent's JSON and metrics. Readings a backend cannot take are None
and are left out of /metrics, as dcgm-exporter leaves out fields a GPU does not support.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

IDLE, RUNNING, SUCCEEDED, FAILED = "idle", "running", "succeeded", "failed"
CANCELLED = "cancelled"  # a diagnostics run stopped on request (DELETE /diagnostics)


class Unavailable(Exception):
    """The node cannot answer now (powered off, booting, agent stopped): HTTP 503."""


class Refused(Exception):
    """The request does not fit what the node is doing or has: HTTP 409 (or 400 for bad input)."""

    def __init__(self, detail: str, status: int = 409):
        super().__init__(detail)
        self.status = status


@dataclass(frozen=True)
class GPU:
    """A GPU's identity, the labels dcgm-exporter puts on every one of its series."""

    index: int
    uuid: str
    model: str
    pci_bus_id: str  # "00000000:18:00.0", as NVML writes it
    serial: str = ""
    driver_version: str = ""
    vbios_version: str = ""


@dataclass(frozen=True)
class Reading:
    """One GPU's values at one scrape, in dcgm-exporter's units; None: cannot be read here."""

    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    gpu_temperature_c: float | None = None
    memory_temperature_c: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None  # since the driver loaded
    pcie_replays: float | None = None
    gpu_utilization: float | None = None  # percent
    memory_copy_utilization: float | None = None
    encoder_utilization: float | None = None
    decoder_utilization: float | None = None
    fb_free_mib: float | None = None
    fb_used_mib: float | None = None
    fb_reserved_mib: float | None = None
    ecc_sbe_volatile: float | None = None  # None while ECC is disabled
    ecc_dbe_volatile: float | None = None
    ecc_sbe_aggregate: float | None = None
    ecc_dbe_aggregate: float | None = None
    retired_pages_sbe: float | None = None
    retired_pages_dbe: float | None = None
    retired_pages_pending: float | None = None
    nvlink_bandwidth_total: float | None = None
    remapped_rows_correctable: float | None = None
    remapped_rows_uncorrectable: float | None = None
    row_remap_failure: float | None = None  # 1 if remapping a row has failed


@dataclass(frozen=True)
class GPUStatus:
    gpu: GPU
    reading: Reading
    healthy: bool
    last_xid: int = 0  # 0: none since the driver loaded
    xid_counts: dict[int, int] = field(default_factory=dict)  # XID -> times seen; only ever rises


@dataclass(frozen=True)
class Operation:
    """A long operation's progress: a GPU memory wipe, a GPU reset or a diagnostics run."""

    state: str = IDLE  # idle, running, succeeded, failed or (diagnostics) cancelled
    started_at: float | None = None  # Unix time
    finished_at: float | None = None
    detail: str = ""
    gpu: int | None = None  # a reset's GPU
    level: int | None = None  # a diagnostics run's level
    results: tuple[dict, ...] = ()  # a diagnostics run's {"test", "gpu", "passed", "detail"}


class Backend(Protocol):
    """Every method may raise Unavailable; the start_* methods raise Refused while one runs."""

    def hostname(self) -> str: ...

    def gpus(self) -> list[GPUStatus]: ...

    def xid_counts(self) -> dict[int, dict[int, int]]:
        """GPU index -> XID -> times seen, the counts of gpus() alone. It must be quick (no device
        I/O): agent/xid_reports.py reads it on the event loop five times a second."""
        ...

    def inventory(self) -> dict:
        """{"name", "serial", "boot_source", "macs", "gpus": [{"index", "uuid", "serial",
        "model", "cc_mode"}], "drives": [{"id", "capacity_bytes", "last_erased_at"}]}"""
        ...

    def evidence(self, nonce: bytes) -> dict:
        """{"quote": {"attest", "signature", "ak_cert"}, "event_log": [...], "gpus": [...]}"""
        ...

    def gpu_wipe(self) -> Operation: ...

    def start_gpu_wipe(self) -> Operation: ...

    def gpu_reset(self) -> Operation: ...

    def start_gpu_reset(self, gpu: int) -> Operation: ...

    def diagnostics(self) -> Operation: ...

    def start_diagnostics(self, level: int) -> Operation: ...

    # Optional: `cancel_diagnostics() -> Operation` stops a running diagnostics run (its state turns
    # "cancelled") and gives the run as it then stands; a backend without it answers DELETE
    # /diagnostics with 501.
