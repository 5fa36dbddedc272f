"""The node's GPUs through NVML (nvidia-ml-py's pynvml): identity, readings, XID events, resets and
attestation (each GPU's SPDM report, signed over the verifier's nonce, and its certificate chain).

Every reading is taken on its own: one a GPU or driver does not have (NVML's NotSupported, or
FunctionNotFound from a libnvidia-ml older than the call) is None, the others are still read.
Other NVML errors (a GPU lost from the bus) are raised: they say the GPU is unwell.

Resets run `nvidia-smi --gpu-reset`, which refuses GPUs that any other client holds open: this
process's own NVML, and persistence mode. So NVML is shut down and persistence mode turned off
for the reset, then both restored; meanwhile readings raise Unavailable.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pynvml

from ..backend import GPU, Reading, Refused, Unavailable

MIB = 1024 * 1024
NVIDIA_SMI_TIMEOUT_S = 300
XID_EVENT_WAIT_MS = 1000
GPU_NONCE_BYTES = pynvml.NVML_CC_GPU_CEC_NONCE_SIZE  # SPDM's: NVML hands the GPU exactly 32 bytes

_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
_WHY_NO_NVML = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 is not installed (no NVIDIA driver on this machine)",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA device files",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "libnvidia-ml.so.1 is not the loaded kernel driver's version",
}
_FIELD_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
_RETIRED_FOR_SBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
_RETIRED_FOR_DBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
_MEMORY_TEMPERATURE = pynvml.NVML_FI_DEV_MEMORY_TEMP
# KiB sent and received over every NVLink since the driver loaded.
_NVLINK_DATA_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
_NVLINK_DATA_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX


class NoNVML(Exception):
    """NVML cannot be used on this machine; the message says why, for the agent to print at start."""


class ResetFailed(Exception):
    """nvidia-smi did not reset the GPUs; the message says what it said."""


class NoAttestation(Exception):
    """A GPU cannot give an attestation report. `reason`: "unsupported" (the GPU or its driver has no
    confidential computing), "confidential_computing_off", "nonce_not_32_bytes", or the name of the
    NVML error that stopped it ("NVMLError_GpuIsLost")."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Nvml:
    """NVML, open from construction until close(); thread-safe.

    `nvidia_smi` is the command that resets GPUs: on a node whose driver runs in a container it
    lives elsewhere than on the PATH (the GPU operator's /run/nvidia/driver/usr/bin/nvidia-smi).
    A reset returns what nvidia-smi said, raises ResetFailed with what it said, or NoNVML if
    NVML cannot be opened again afterwards.
    """

    def __init__(self, nvidia_smi: str = "nvidia-smi"):
        self.nvidia_smi = nvidia_smi
        self._lock = threading.Lock()
        self._handles: list[Any] | None = None
        self._why_closed = ""
        self._on_xid: Callable[[int, int], None] | None = None
        self._xid_events: _XidEvents | None = None
        self._open()

    def gpus(self) -> list[GPU]:
        with self._lock:
            handles = self._open_handles()
            driver_version = pynvml.nvmlSystemGetDriverVersion()
            return [_identity(index, handle, driver_version) for index, handle in enumerate(handles)]

    def reading(self, index: int) -> Reading:
        with self._lock:
            return _reading(self._handle(index))

    def attestation(self, index: int, nonce: bytes) -> tuple[bytes, str]:
        """The GPU's SPDM attestation report (its GET_MEASUREMENTS request, carrying `nonce`, and its
        signed MEASUREMENTS response) and its attestation certificate chain (PEM, leaf first), or
        NoAttestation saying why not."""
        if len(nonce) != GPU_NONCE_BYTES:
            raise NoAttestation(f"nonce_not_{GPU_NONCE_BYTES}_bytes")
        with self._lock:
            handle = self._handle(index)
            try:
                # Confidential computing is on or off for the whole system, every GPU at once.
                if pynvml.nvmlSystemGetConfComputeState().ccFeature != pynvml.NVML_CC_SYSTEM_FEATURE_ENABLED:
                    raise NoAttestation("confidential_computing_off")
                report = pynvml.nvmlDeviceGetConfComputeGpuAttestationReport(handle, nonce)
                certificate = pynvml.nvmlDeviceGetConfComputeGpuCertificate(handle)
            except _UNSUPPORTED:
                raise NoAttestation("unsupported") from None
            except pynvml.NVMLError as error:
                raise NoAttestation(type(error).__name__) from None
        chain = bytes(certificate.attestationCertChain[: certificate.attestationCertChainSize])
        return bytes(report.attestationReport[: report.attestationReportSize]), chain.decode("ascii")

    def start_xid_events(self, on_xid: Callable[[int, int], None]) -> None:
        """Hands every XID NVML reports to on_xid(gpu index, xid), from a daemon thread, until close()."""
        with self._lock:
            self._on_xid = on_xid
            self._xid_events = _XidEvents(self._open_handles(), on_xid)

    def reset_gpu(self, index: int) -> str:
        return self._reset(["-i", str(index)], [index])

    def wipe_gpu_memory(self) -> str:
        """Resets every GPU of the node, which clears the memory of those with ECC on: the driver
        scrubs a GPU's memory for ECC as it initialises the GPU again."""
        with self._lock:
            every_index = list(range(len(self._open_handles())))
        # Without -i, nvidia-smi resets all GPUs in one go, as NVLink peers may need to be.
        return self._reset([], every_index)

    def close(self) -> None:
        with self._lock:
            self._close("NVML was closed")

    def _reset(self, gpu_selection: list[str], indices: list[int]) -> str:
        with self._lock:
            handles = [self._handle(index) for index in indices]
            persistent = [
                index
                for index, handle in zip(indices, handles, strict=True)
                if _or_none(pynvml.nvmlDeviceGetPersistenceMode, handle) == pynvml.NVML_FEATURE_ENABLED
            ]
            self._close("a GPU reset is under way")
        try:
            return self._reset_without_persistence(gpu_selection, persistent)
        finally:
            with self._lock:
                self._open()

    def _reset_without_persistence(self, gpu_selection: list[str], persistent: list[int]) -> str:
        turned_off = []
        try:
            for index in persistent:
                self._run_nvidia_smi("-i", str(index), "-pm", "0")
                turned_off.append(index)
            return self._run_nvidia_smi("--gpu-reset", *gpu_selection)
        finally:
            for index in turned_off:
                self._run_nvidia_smi("-i", str(index), "-pm", "1")

    def _run_nvidia_smi(self, *arguments: str) -> str:
        command = [self.nvidia_smi, *arguments]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
        except OSError as error:
            raise ResetFailed(f"cannot run {self.nvidia_smi}: {error.strerror}") from error
        except subprocess.TimeoutExpired as error:
            raise ResetFailed(f"{shlex.join(command)} did not finish within {NVIDIA_SMI_TIMEOUT_S} s") from error
        output = f"{done.stdout}{done.stderr}".strip()
        if done.returncode != 0:
            raise ResetFailed(f"{shlex.join(command)} exited with {done.returncode}: {output}")
        return output

    def _open(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            self._why_closed = f"no NVML: {_WHY_NO_NVML.get(error.value, str(error))}"
            raise NoNVML(self._why_closed) from error
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError as error:
            pynvml.nvmlShutdown()
            self._why_closed = f"no NVML: {error}"
            raise NoNVML(self._why_closed) from error
        if not handles:
            pynvml.nvmlShutdown()
            self._why_closed = "no NVML: the NVIDIA driver sees no GPU"
            raise NoNVML(self._why_closed)
        self._handles = handles
        if self._on_xid is not None:
            self._xid_events = _XidEvents(handles, self._on_xid)

    def _close(self, why: str) -> None:
        if self._handles is None:
            return
        if self._xid_events is not None:
            self._xid_events.stop()
            self._xid_events = None
        pynvml.nvmlShutdown()
        self._handles = None
        self._why_closed = why

    def _open_handles(self) -> list[Any]:
        if self._handles is None:
            raise Unavailable(self._why_closed)
        return self._handles

    def _handle(self, index: int) -> Any:
        handles = self._open_handles()
        if not 0 <= index < len(handles):
            raise Refused(f"this node has no GPU {index}", status=400)
        return handles[index]


class _XidEvents:
    """NVML's XID events of the given GPUs, handed to on_xid(gpu index, xid) from a daemon thread."""

    def __init__(self, handles: list[Any], on_xid: Callable[[int, int], None]):
        self._event_set = pynvml.nvmlEventSetCreate()
        try:
            for handle in handles:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set)
        except pynvml.NVMLError:
            pynvml.nvmlEventSetFree(self._event_set)
            raise
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._deliver, args=(on_xid,), name="nvml-xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        pynvml.nvmlEventSetFree(self._event_set)

    def _deliver(self, on_xid: Callable[[int, int], None]) -> None:
        while not self._stopping.is_set():
            try:
                event = pynvml.nvmlEventSetWait(self._event_set, XID_EVENT_WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError_GpuIsLost:
                # NVML does not say which GPU; that GPU's own readings fail from now on.
                self._stopping.wait(XID_EVENT_WAIT_MS / 1000)
                continue
            on_xid(pynvml.nvmlDeviceGetIndex(event.device), int(event.eventData))


def _or_none(read: Callable[..., Any], *arguments: Any) -> Any:
    """read(*arguments), or None where this GPU or its driver does not have it."""
    try:
        return read(*arguments)
    except _UNSUPPORTED:
        return None


def _number(read: Callable[..., Any], *arguments: Any) -> float | None:
    value = _or_none(read, *arguments)
    return None if value is None else float(value)


def _identity(index: int, handle: Any, driver_version: str) -> GPU:
    return GPU(
        index=index,
        uuid=pynvml.nvmlDeviceGetUUID(handle),
        model=pynvml.nvmlDeviceGetName(handle),
        pci_bus_id=pynvml.nvmlDeviceGetPciInfo(handle).busId,
        # GeForce boards have no serial number.
        serial=_or_none(pynvml.nvmlDeviceGetSerial, handle) or "",
        driver_version=driver_version,
        vbios_version=_or_none(pynvml.nvmlDeviceGetVbiosVersion, handle) or "",
    )


def _reading(handle: Any) -> Reading:
    power_mw = _number(pynvml.nvmlDeviceGetPowerUsage, handle)
    utilization = _or_none(pynvml.nvmlDeviceGetUtilizationRates, handle)
    encoder = _or_none(pynvml.nvmlDeviceGetEncoderUtilization, handle)
    decoder = _or_none(pynvml.nvmlDeviceGetDecoderUtilization, handle)
    fb_free, fb_used, fb_reserved = _framebuffer_mib(handle)
    sbe_volatile, dbe_volatile, sbe_aggregate, dbe_aggregate = _ecc_errors(handle)
    sbe_pages = _or_none(pynvml.nvmlDeviceGetRetiredPages, handle, _RETIRED_FOR_SBE)
    dbe_pages = _or_none(pynvml.nvmlDeviceGetRetiredPages, handle, _RETIRED_FOR_DBE)
    remapped_rows = _or_none(pynvml.nvmlDeviceGetRemappedRows, handle)
    fields = _field_values(handle, (_MEMORY_TEMPERATURE, _NVLINK_DATA_TX, _NVLINK_DATA_RX))
    nvlink_tx, nvlink_rx = fields[_NVLINK_DATA_TX], fields[_NVLINK_DATA_RX]
    return Reading(
        sm_clock_mhz=_number(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        memory_clock_mhz=_number(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
        gpu_temperature_c=_number(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        memory_temperature_c=fields[_MEMORY_TEMPERATURE],
        power_w=None if power_mw is None else power_mw / 1000,
        energy_mj=_number(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle),
        pcie_replays=_number(pynvml.nvmlDeviceGetPcieReplayCounter, handle),
        gpu_utilization=None if utilization is None else float(utilization.gpu),
        memory_copy_utilization=None if utilization is None else float(utilization.memory),
        encoder_utilization=None if encoder is None else float(encoder[0]),
        decoder_utilization=None if decoder is None else float(decoder[0]),
        fb_free_mib=fb_free,
        fb_used_mib=fb_used,
        fb_reserved_mib=fb_reserved,
        ecc_sbe_volatile=sbe_volatile,
        ecc_dbe_volatile=dbe_volatile,
        ecc_sbe_aggregate=sbe_aggregate,
        ecc_dbe_aggregate=dbe_aggregate,
        retired_pages_sbe=None if sbe_pages is None else float(len(sbe_pages)),
        retired_pages_dbe=None if dbe_pages is None else float(len(dbe_pages)),
        retired_pages_pending=_number(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle),
        nvlink_bandwidth_total=None if nvlink_tx is None or nvlink_rx is None else nvlink_tx + nvlink_rx,
        remapped_rows_correctable=None if remapped_rows is None else float(remapped_rows[0]),
        remapped_rows_uncorrectable=None if remapped_rows is None else float(remapped_rows[1]),
        row_remap_failure=None if remapped_rows is None else float(remapped_rows[3]),
    )


def _framebuffer_mib(handle: Any) -> tuple[float | None, float | None, float | None]:
    """(free, used, reserved) MiB of the GPU's memory."""
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except (*_UNSUPPORTED, pynvml.NVMLError_ArgumentVersionMismatch):
        # Drivers without the v2 call count the reserved memory as used and do not report it.
        legacy = _or_none(pynvml.nvmlDeviceGetMemoryInfo, handle)
        if legacy is None:
            return None, None, None
        return legacy.free / MIB, legacy.used / MIB, None
    return memory.free / MIB, memory.used / MIB, memory.reserved / MIB


def _ecc_errors(handle: Any) -> tuple[float | None, float | None, float | None, float | None]:
    """(single-bit volatile, double-bit volatile, single-bit aggregate, double-bit aggregate) ECC errors,
    all None while ECC is off, as its counters then mean nothing."""
    mode = _or_none(pynvml.nvmlDeviceGetEccMode, handle)
    if mode is None or mode[0] != pynvml.NVML_FEATURE_ENABLED:
        return None, None, None, None
    single_bit, double_bit = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED

    def count(error_type: int, counter_type: int) -> float | None:
        return _number(pynvml.nvmlDeviceGetTotalEccErrors, handle, error_type, counter_type)

    return (
        count(single_bit, pynvml.NVML_VOLATILE_ECC),
        count(double_bit, pynvml.NVML_VOLATILE_ECC),
        count(single_bit, pynvml.NVML_AGGREGATE_ECC),
        count(double_bit, pynvml.NVML_AGGREGATE_ECC),
    )


def _field_values(handle: Any, field_ids: tuple[int, ...]) -> dict[int, float | None]:
    """NVML field values by id; each field carries its own status, so one missing leaves the others."""
    values = _or_none(pynvml.nvmlDeviceGetFieldValues, handle, list(field_ids))
    if values is None:
        return dict.fromkeys(field_ids)
    return {
        value.fieldId: (
            float(getattr(value.value, _FIELD_VALUE_MEMBER[value.valueType]))
            if value.nvmlReturn == pynvml.NVML_SUCCESS
            else None
        )
        for value in values
    }
