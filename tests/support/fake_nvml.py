"""A fake libnvidia-ml for tests, on a machine without GPUs: FakeLibrary answers as NVML would for
the FakeGpus it is given, put in place of pynvml's functions (pynvml's own constants, structures
and errors stay) by the `library` fixture; FakeConfidentialComputing adds the confidential-computing
calls for a test to put in place beside it; fake_nvidia_smi writes an nvidia-smi that logs its calls."""

from __future__ import annotations

import ctypes
import queue
import stat
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from agent.host import nvml

MIB = 1024 * 1024
SM, MEM = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
SBE, DBE = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
SBE_PAGES = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
DBE_PAGES = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
NVLINK_TX, NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX


def uint(number: int) -> tuple[int, str, int]:
    return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", number


def ulonglong(number: int) -> tuple[int, str, int]:
    return pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", number


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    """What one GPU answers; None where NVML says NotSupported."""

    name: str
    uuid: str
    bus_id: str
    serial: str | None
    vbios: str
    persistence: int
    ecc_mode: list[int] | None
    clocks: dict[int, int]
    temperature: int
    power_mw: int
    energy_mj: int | None
    pcie_replays: int
    utilization: tuple[int, int]  # gpu, memory
    encoder: int | None
    decoder: int | None
    memory: tuple[int, int, int]  # free, used, reserved bytes
    ecc_errors: dict[tuple[int, int], int]  # (error type, counter type) -> count
    retired_pages: dict[int, list[int]] | None
    retired_pending: int | None
    remapped_rows: tuple[int, int, int, int] | None  # correctable, uncorrectable, pending, failure
    fields: dict[int, tuple[int, str, float]] = field(default_factory=dict)  # field id -> (type, member, value)
    lost: bool = False


def h100() -> FakeGpu:
    return FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-5a2d0bd6-4c6a-4b1e-9f3c-0d3e2f1a7b11",
        bus_id="00000000:18:00.0",
        serial="1652223012345",
        vbios="96.00.89.00.01",
        persistence=pynvml.NVML_FEATURE_ENABLED,
        ecc_mode=[pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED],
        clocks={SM: 1980, MEM: 2619},
        temperature=41,
        power_mw=312_500,
        energy_mj=987_654_321,
        pcie_replays=3,
        utilization=(87, 40),
        encoder=0,
        decoder=5,
        memory=(80_000 * MIB, 1_536 * MIB, 522 * MIB),
        ecc_errors={(SBE, VOLATILE): 2, (DBE, VOLATILE): 0, (SBE, AGGREGATE): 17, (DBE, AGGREGATE): 1},
        retired_pages=None,  # Hopper remaps rows instead
        retired_pending=None,
        remapped_rows=(4, 1, 1, 0),  # a remapping pending until the next reset
        fields={MEMORY_TEMP: uint(52), NVLINK_TX: ulonglong(1_000_000), NVLINK_RX: ulonglong(250_000)},
    )


def v100() -> FakeGpu:
    return FakeGpu(
        name="Tesla V100-SXM2-16GB",
        uuid="GPU-0b6c2d4e-1111-2222-3333-444455556666",
        bus_id="00000000:3B:00.0",
        serial="0323617004711",
        vbios="88.00.4F.00.09",
        persistence=pynvml.NVML_FEATURE_DISABLED,
        ecc_mode=[pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED],
        clocks={SM: 1530, MEM: 877},
        temperature=38,
        power_mw=56_000,
        energy_mj=123_000,
        pcie_replays=0,
        utilization=(0, 0),
        encoder=0,
        decoder=0,
        memory=(15_000 * MIB, 0, 160 * MIB),
        ecc_errors={(SBE, VOLATILE): 0, (DBE, VOLATILE): 0, (SBE, AGGREGATE): 40, (DBE, AGGREGATE): 2},
        retired_pages={SBE_PAGES: [0x1A000, 0x2B000], DBE_PAGES: [0x3C000]},
        retired_pending=pynvml.NVML_FEATURE_ENABLED,
        remapped_rows=None,  # Volta retires pages instead
        fields={MEMORY_TEMP: uint(35)},
    )


def geforce() -> FakeGpu:
    return FakeGpu(
        name="NVIDIA GeForce RTX 3090",
        uuid="GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff",
        bus_id="00000001:65:00.0",
        serial=None,
        vbios="94.02.42.00.A9",
        persistence=pynvml.NVML_FEATURE_ENABLED,
        ecc_mode=None,
        clocks={SM: 210, MEM: 405},
        temperature=30,
        power_mw=21_000,
        energy_mj=None,
        pcie_replays=0,
        utilization=(1, 2),
        encoder=None,
        decoder=None,
        memory=(23_000 * MIB, 700 * MIB, 300 * MIB),
        ecc_errors={},
        retired_pages=None,
        retired_pending=None,
        remapped_rows=None,
    )


@dataclass(frozen=True)
class FakeHandle:
    index: int


class FakeLibrary:
    """libnvidia-ml on a node with the given GPUs, as pynvml's functions return it.

    Calls that open and close NVML, and event sets, are written to `calls`, which a fake
    nvidia-smi writes to as well, so the order of the two shows."""

    def __init__(self, gpus: list[FakeGpu], calls: Path):
        self.gpus = gpus
        self.calls = calls
        self.calls.touch()
        self.open = False
        self.init_error: int | None = None
        self.memory_v2 = True
        self.registered: list[tuple[int, int]] = []
        self.events: queue.Queue = queue.Queue()

    def log(self, line: str) -> None:
        with self.calls.open("a") as calls:
            calls.write(line + "\n")

    def logged(self) -> list[str]:
        return self.calls.read_text().splitlines()

    def gpu(self, handle: FakeHandle) -> FakeGpu:
        if not self.open:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    @staticmethod
    def supported(value):
        if value is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self):
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.open = True
        self.log("nvmlInit")

    def nvmlShutdown(self):
        self.open = False
        self.log("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return FakeHandle(index)

    def nvmlSystemGetDriverVersion(self):
        return "570.158.01"

    def nvmlDeviceGetUUID(self, handle):
        return self.gpu(handle).uuid

    def nvmlDeviceGetName(self, handle):
        return self.gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle):
        info = pynvml.nvmlPciInfo_t()
        info.busId = self.gpu(handle).bus_id.encode()
        return info

    def nvmlDeviceGetSerial(self, handle):
        return self.supported(self.gpu(handle).serial)

    def nvmlDeviceGetVbiosVersion(self, handle):
        return self.gpu(handle).vbios

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self.gpu(handle).persistence

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return self.gpu(handle).clocks[clock]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self.gpu(handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.gpu(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.supported(self.gpu(handle).energy_mj)

    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return self.gpu(handle).pcie_replays

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu, memory = self.gpu(handle).utilization
        return pynvml.c_nvmlUtilization_t(gpu=gpu, memory=memory)

    def nvmlDeviceGetEncoderUtilization(self, handle):
        return [self.supported(self.gpu(handle).encoder), 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle):
        return [self.supported(self.gpu(handle).decoder), 167_000]

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        free, used, reserved = self.gpu(handle).memory
        total = free + used + reserved
        if version is None:
            return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)
        if not self.memory_v2:
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        assert version == pynvml.nvmlMemory_v2
        return pynvml.c_nvmlMemory_v2_t(version=version, total=total, reserved=reserved, free=free, used=used)

    def nvmlDeviceGetEccMode(self, handle):
        return self.supported(self.gpu(handle).ecc_mode)

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        return self.gpu(handle).ecc_errors[(error_type, counter_type)]

    def nvmlDeviceGetRetiredPages(self, handle, cause):
        return self.supported(self.gpu(handle).retired_pages)[cause]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self.supported(self.gpu(handle).retired_pending)

    def nvmlDeviceGetRemappedRows(self, handle):
        return self.supported(self.gpu(handle).remapped_rows)

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        gpu = self.gpu(handle)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for value, field_id in zip(values, field_ids, strict=True):
            value.fieldId = field_id
            if field_id in gpu.fields:
                value.valueType, member, number = gpu.fields[field_id]
                setattr(value.value, member, number)
                value.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlEventSetCreate(self):
        self.log("nvmlEventSetCreate")
        return "event set"

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        self.gpu(handle)
        self.registered.append((handle.index, event_types))

    def nvmlEventSetWait(self, event_set, timeout_ms):
        try:
            event = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT) from None
        if isinstance(event, pynvml.NVMLError):
            raise event
        index, xid = event
        return SimpleNamespace(device=FakeHandle(index), eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, event_set):
        self.log("nvmlEventSetFree")

    def nvmlDeviceGetIndex(self, handle):
        return handle.index


class FakeConfidentialComputing:
    """libnvidia-ml's confidential-computing calls, as pynvml's functions return them: the system's
    state, and the report and chain of each GPU given one, which that GPU signed over one nonce alone
    (a real GPU signs any). The other GPUs answer NotSupported, as a V100 does."""

    def __init__(self, library: FakeLibrary):
        self.library = library
        self.feature = pynvml.NVML_CC_SYSTEM_FEATURE_ENABLED
        self.captured: dict[int, tuple[bytes, bytes, str]] = {}  # GPU index -> (nonce, report, PEM chain)

    def evidence(self, handle: FakeHandle) -> tuple[bytes, bytes, str]:
        self.library.gpu(handle)  # NVML open, the GPU on the bus
        return self.library.supported(self.captured.get(handle.index))

    def nvmlSystemGetConfComputeState(self):
        state = pynvml.c_nvmlConfComputeSystemState_t()
        state.environment = pynvml.NVML_CC_SYSTEM_ENVIRONMENT_PROD
        state.ccFeature = self.feature
        state.devToolsMode = pynvml.NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF
        return state

    def nvmlDeviceGetConfComputeGpuAttestationReport(self, handle, nonce):
        signed_over, report, _ = self.evidence(handle)
        assert bytes(nonce) == signed_over, "the captured report is signed over another nonce"
        answer = pynvml.c_nvmlConfComputeGpuAttestationReport_t()
        answer.nonce = (ctypes.c_uint8 * len(nonce))(*nonce)
        answer.attestationReportSize = len(report)
        ctypes.memmove(answer.attestationReport, report, len(report))
        return answer

    def nvmlDeviceGetConfComputeGpuCertificate(self, handle):
        chain = self.evidence(handle)[2].encode()
        answer = pynvml.c_nvmlConfComputeGpuCertificate_t()
        answer.attestationCertChainSize = len(chain)
        ctypes.memmove(answer.attestationCertChain, chain, len(chain))
        return answer


def put_in_place_of_pynvml(monkeypatch: pytest.MonkeyPatch, fake: FakeLibrary | FakeConfidentialComputing) -> None:
    """Puts the fake's NVML calls in place of pynvml's, for the test."""
    for name in dir(fake):
        if name.startswith("nvml"):
            monkeypatch.setattr(pynvml, name, getattr(fake, name))


@pytest.fixture
def library(monkeypatch, tmp_path) -> FakeLibrary:
    fake = FakeLibrary([h100(), v100(), geforce()], tmp_path / "calls")
    put_in_place_of_pynvml(monkeypatch, fake)
    monkeypatch.setattr(nvml, "XID_EVENT_WAIT_MS", 20)
    return fake


def fake_nvidia_smi(tmp_path: Path, calls: Path, reset: str) -> str:
    """An nvidia-smi that writes its arguments to `calls`, then runs `reset` for --gpu-reset."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "nvidia-smi $*" >> {calls}\n'
        'case "$*" in\n'
        f"  *--gpu-reset*) {reset} ;;\n"
        '  *) echo "All done." ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)
