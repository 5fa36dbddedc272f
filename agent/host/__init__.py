"""The `host` backend: a real Linux GPU server.

GPUs, their readings and resets through NVML (nvml.py); the checksum of the medium it booted
(boot_medium.py, for a tenant image's check); XIDs from the kernel log (kernel_log.py),
or from NVML's events where the kernel log cannot be read (a container without CAP_SYSLOG),
never both, which would count each XID twice; attestation evidence through the TPM 2.0 tools
(tpm.py) and each GPU's own SPDM report through NVML; disks from /sys/block (disks.py);
diagnostics through DCGM's `dcgmi diag` where DCGM is installed (dcgm.py).

Long operations (the GPU memory wipe, a reset, a diagnostics run) run in the background, one at a
time, and are kept in memory: an agent restarted mid-operation answers `idle`, and the control
plane starts it again.
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pynvml

from ..backend import FAILED, GPU, RUNNING, SUCCEEDED, GPUStatus, Operation, Reading, Refused, Unavailable
from . import disks
from .boot_medium import BootMedium
from .dcgm import LEVELS, Diagnostics
from .kernel_log import KmsgFollower, XidCounter
from .nvml import NoAttestation, NoNVML, Nvml, ResetFailed
from .tpm import TPMQuoter

log = logging.getLogger("gpu-agent")
DMI_SERIAL = Path("/sys/class/dmi/id/product_serial")
NET = Path("/sys/class/net")


class HostUnusable(Exception):
    """The server cannot run the host backend (no NVML); the message says why."""


class _Job:
    """One long operation at a time, run in a thread; its progress for the API."""

    def __init__(self, what: str):
        self.what = what
        self.operation = Operation()
        self._lock = threading.Lock()

    def start(self, work: Callable[[], str], on_success: Callable[[], None] = lambda: None, **extra) -> Operation:
        with self._lock:
            if self.operation.state == RUNNING:
                raise Refused(f"{self.what} is already running")
            started = self.operation = Operation(state=RUNNING, started_at=time.time(), **extra)
        threading.Thread(target=self._run, args=(work, on_success), name=self.what, daemon=True).start()
        return started

    def _run(self, work: Callable[[], str], on_success: Callable[[], None]) -> None:
        try:
            detail, state = work(), SUCCEEDED
            on_success()
        except (ResetFailed, NoNVML, Refused) as error:
            detail, state = str(error), FAILED
        except Exception as error:  # a GPU lost from the bus, NVML closed: the job fails, never hangs
            log.exception("%s failed", self.what)
            detail, state = f"{type(error).__name__}: {error}", FAILED
        log.info("%s %s: %s", self.what, state, detail)
        with self._lock:
            self.operation = replace(self.operation, state=state, finished_at=time.time(), detail=detail)


class HostBackend:
    def __init__(
        self, nvml: Nvml, xids: XidCounter, quoter: TPMQuoter, boot_medium: BootMedium, *, dcgmi: str = "dcgmi"
    ):
        self.nvml = nvml
        self.xids = xids
        self.quoter = quoter
        self.boot_medium = boot_medium
        self.identities = nvml.gpus()
        # Health comes back with a reset: XIDs up to it no longer count against the GPU.
        self._xids_at_reset = {gpu.index: 0 for gpu in self.identities}
        self._wipe = _Job("a GPU memory wipe")
        self._reset = _Job("a GPU reset")
        self._diagnostics = Diagnostics(dcgmi, nvml_index_of_serial={g.serial: g.index for g in self.identities})

    @classmethod
    def open(
        cls,
        *,
        tcti: str,
        ak: str,
        ak_cert: str,
        event_log: str,
        kmsg: str,
        boot_medium: str | None = None,
        dcgmi: str = "dcgmi",
    ) -> HostBackend:
        try:
            nvml = Nvml()
        except NoNVML as error:
            raise HostUnusable(str(error)) from None
        xids = XidCounter(nvml.gpus())
        try:
            KmsgFollower(xids, kmsg).start()
        except OSError as error:
            log.warning("cannot read XIDs from %s (%s): reading them from NVML's events", kmsg, error.strerror)
            nvml.start_xid_events(xids.add)
            xids.caught_up.set()  # NVML's events are of XIDs from now on: nothing earlier to read
        medium = BootMedium(boot_medium)
        medium.start()
        quoter = TPMQuoter(Path(ak_cert), tcti=tcti, ak=ak, event_log_path=Path(event_log))
        return cls(nvml, xids, quoter, medium, dcgmi=dcgmi)

    def hostname(self) -> str:
        return socket.gethostname()

    def _xids_seen(self, index: int) -> int:
        return sum(self.xids.counts().get(index, {}).values())

    def gpus(self) -> list[GPUStatus]:
        counts, last = self.xids.counts(), self.xids.last()
        statuses = []
        for gpu in self.identities:
            try:
                reading = self.nvml.reading(gpu.index)
                memory_failing = bool(reading.ecc_dbe_volatile) or bool(reading.row_remap_failure)
            except pynvml.NVMLError:  # a GPU that stopped answering NVML: unhealthy, the others still shown
                reading, memory_failing = Reading(), True
            statuses.append(
                GPUStatus(
                    gpu=gpu,
                    reading=reading,
                    healthy=self._xids_seen(gpu.index) == self._xids_at_reset[gpu.index] and not memory_failing,
                    last_xid=last.get(gpu.index, 0),
                    xid_counts=dict(counts.get(gpu.index, {})),
                )
            )
        return statuses

    def xid_counts(self) -> dict[int, dict[int, int]]:
        if not self.xids.caught_up.is_set():
            raise Unavailable("the agent is still reading the kernel log from the start")
        return self.xids.counts()

    def inventory(self) -> dict:
        return {
            "name": self.hostname(),
            "serial": _read(DMI_SERIAL),
            "boot_source": "unknown",  # a running OS cannot tell which device the firmware booted
            **self.boot_medium.report(),
            "macs": _physical_macs(),
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model, "cc_mode": "unknown"}
                for g in self.identities
            ],
            "drives": [
                {
                    "id": d.id,
                    "capacity_bytes": d.capacity_bytes,
                    "model": d.model,
                    "serial": d.serial,
                    "last_erased_at": None,  # the BMC's secure erase knows; the OS does not
                }
                for d in disks.disks()
            ],
        }

    def evidence(self, nonce: bytes) -> dict:
        return {
            "quote": self.quoter.quote(nonce),
            "event_log": self.quoter.event_log(),
            "gpus": [],  # bmcsim's own report format: a real GPU's evidence is its SPDM report
            "gpu_spdm": [self._gpu_spdm(gpu, nonce) for gpu in self.identities],
        }

    def _gpu_spdm(self, gpu: GPU, nonce: bytes) -> dict:
        """{"index", "uuid", "source": "in_band", "report": base64, "cert_chain": PEM}, the GPU's own
        report over NVML; or {"index", "uuid", "status": "unavailable", "reason"} (NoAttestation's)."""
        which = {"index": gpu.index, "uuid": gpu.uuid}
        try:
            report, cert_chain = self.nvml.attestation(gpu.index, nonce)
        except NoAttestation as why_not:
            return {**which, "status": "unavailable", "reason": why_not.reason}
        return {**which, "source": "in_band", "report": base64.b64encode(report).decode(), "cert_chain": cert_chain}

    def gpu_wipe(self) -> Operation:
        return self._wipe.operation

    def _one_at_a_time(self) -> None:
        # A reset fails on a GPU that DCGM's tests hold, and the tests fail on a GPU being reset.
        for job in (self._wipe, self._reset, self._diagnostics):
            if job.operation.state == RUNNING:
                raise Refused(f"{job.what} is running")

    def start_gpu_wipe(self) -> Operation:
        self._one_at_a_time()
        # A reset clears a GPU's memory only because the driver scrubs it for ECC.
        ecc_off = [g.index for g in self.identities if self.nvml.reading(g.index).ecc_dbe_volatile is None]
        if ecc_off:
            raise Refused(f"ECC is off on GPU {', '.join(map(str, ecc_off))}: a reset would not clear its memory")
        return self._wipe.start(self.nvml.wipe_gpu_memory, self._healed(*self._xids_at_reset))

    def gpu_reset(self) -> Operation:
        return self._reset.operation

    def start_gpu_reset(self, gpu: int) -> Operation:
        if gpu not in self._xids_at_reset:
            raise Refused(f"'gpu' must be one of {', '.join(map(str, self._xids_at_reset))}", status=400)
        self._one_at_a_time()
        return self._reset.start(lambda: self.nvml.reset_gpu(gpu), self._healed(gpu), gpu=gpu)

    def _healed(self, *indexes: int) -> Callable[[], None]:
        def forget_earlier_xids() -> None:
            for index in indexes:
                self._xids_at_reset[index] = self._xids_seen(index)

        return forget_earlier_xids

    def diagnostics(self) -> Operation:
        return self._diagnostics.operation

    def start_diagnostics(self, level: int) -> Operation:
        """`dcgmi diag -r LEVEL -j` in the background (dcgm.py); 501 where DCGM is not installed."""
        if level in LEVELS and self._diagnostics.installed():
            self._one_at_a_time()
        return self._diagnostics.start(level)  # it says why not: a bad level, no DCGM, one running

    def cancel_diagnostics(self) -> Operation:
        return self._diagnostics.cancel()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _physical_macs() -> list[str]:
    """The MAC addresses of the node's network devices (those backed by hardware, not bridges or veths)."""
    if not NET.is_dir():
        return []
    return sorted(_read(link / "address") for link in NET.iterdir() if (link / "device").exists())
