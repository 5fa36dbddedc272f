"""The NVML source. This machine has no GPU and no libnvidia-ml: opening NVML here must fail with
the agent's clear message. Everything else runs against a fake libnvidia-ml put in place of
pynvml's functions (pynvml's own constants, structures and errors stay), and a fake nvidia-smi."""

from __future__ import annotations

import queue
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from agent.backend import GPU, Reading, Refused, Unavailable
from agent.host import nvml
from agent.host.kernel_log import XidCounter
from agent.host.nvml import NoNVML, Nvml, ResetFailed

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


@pytest.fixture
def library(monkeypatch, tmp_path) -> FakeLibrary:
    fake = FakeLibrary([h100(), v100(), geforce()], tmp_path / "calls")
    for name in dir(FakeLibrary):
        if name.startswith("nvml"):
            monkeypatch.setattr(pynvml, name, getattr(fake, name))
    monkeypatch.setattr(nvml, "XID_EVENT_WAIT_MS", 20)
    return fake


@pytest.fixture
def opened():
    handles = []

    def open_nvml(**options) -> Nvml:
        handles.append(Nvml(**options))
        return handles[-1]

    yield open_nvml
    for handle in handles:
        handle.close()


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


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_without_the_nvml_library_opening_nvml_says_so():
    with pytest.raises(NoNVML) as raised:
        Nvml()
    assert str(raised.value) == "no NVML: libnvidia-ml.so.1 is not installed (no NVIDIA driver on this machine)"
    assert isinstance(raised.value.__cause__, pynvml.NVMLError_LibraryNotFound)
    assert not isinstance(raised.value, pynvml.NVMLError)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVML: the NVIDIA kernel driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no NVML: no permission to open the NVIDIA device files"),
        (
            pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            "no NVML: libnvidia-ml.so.1 is not the loaded kernel driver's version",
        ),
        (pynvml.NVML_ERROR_UNKNOWN, "no NVML: Unknown Error"),
    ],
)
def test_opening_nvml_without_a_working_driver_says_why(library, error, message):
    library.init_error = error
    with pytest.raises(NoNVML) as raised:
        Nvml()
    assert str(raised.value) == message


def test_opening_nvml_on_a_machine_without_gpus_says_so_and_shuts_nvml(library):
    library.gpus = []
    with pytest.raises(NoNVML, match=r"^no NVML: the NVIDIA driver sees no GPU$"):
        Nvml()
    assert library.logged() == ["nvmlInit", "nvmlShutdown"]


def test_the_gpus_are_named_as_nvml_names_them(library, opened):
    assert opened().gpus() == [
        GPU(
            0, h100().uuid, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", "1652223012345", "570.158.01", "96.00.89.00.01"
        ),
        GPU(
            1, v100().uuid, "Tesla V100-SXM2-16GB", "00000000:3B:00.0", "0323617004711", "570.158.01", "88.00.4F.00.09"
        ),
        GPU(2, geforce().uuid, "NVIDIA GeForce RTX 3090", "00000001:65:00.0", "", "570.158.01", "94.02.42.00.A9"),
    ]


def test_an_h100_reads_in_dcgm_exporter_units(library, opened):
    assert opened().reading(0) == Reading(
        sm_clock_mhz=1980.0,
        memory_clock_mhz=2619.0,
        gpu_temperature_c=41.0,
        memory_temperature_c=52.0,
        power_w=312.5,
        energy_mj=987_654_321.0,
        pcie_replays=3.0,
        gpu_utilization=87.0,
        memory_copy_utilization=40.0,
        encoder_utilization=0.0,
        decoder_utilization=5.0,
        fb_free_mib=80_000.0,
        fb_used_mib=1_536.0,
        fb_reserved_mib=522.0,
        ecc_sbe_volatile=2.0,
        ecc_dbe_volatile=0.0,
        ecc_sbe_aggregate=17.0,
        ecc_dbe_aggregate=1.0,
        retired_pages_sbe=None,
        retired_pages_dbe=None,
        retired_pages_pending=None,
        nvlink_bandwidth_total=1_250_000.0,
        remapped_rows_correctable=4.0,
        remapped_rows_uncorrectable=1.0,
        row_remap_failure=0.0,
    )


def test_a_v100_counts_retired_pages_and_has_no_remapped_rows(library, opened):
    reading = opened().reading(1)
    assert (reading.retired_pages_sbe, reading.retired_pages_dbe, reading.retired_pages_pending) == (2.0, 1.0, 1.0)
    assert (reading.ecc_sbe_aggregate, reading.ecc_dbe_aggregate) == (40.0, 2.0)
    assert reading.remapped_rows_correctable is None
    assert reading.remapped_rows_uncorrectable is None
    assert reading.row_remap_failure is None
    assert reading.memory_temperature_c == 35.0
    assert reading.nvlink_bandwidth_total is None


def test_what_a_geforce_cannot_read_is_none_and_the_rest_is_read(library, opened):
    assert opened().reading(2) == Reading(
        sm_clock_mhz=210.0,
        memory_clock_mhz=405.0,
        gpu_temperature_c=30.0,
        power_w=21.0,
        pcie_replays=0.0,
        gpu_utilization=1.0,
        memory_copy_utilization=2.0,
        fb_free_mib=23_000.0,
        fb_used_mib=700.0,
        fb_reserved_mib=300.0,
    )


def test_ecc_counters_are_none_while_ecc_is_off(library, opened):
    library.gpus[0].ecc_mode = [pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_ENABLED]
    reading = opened().reading(0)
    assert (reading.ecc_sbe_volatile, reading.ecc_dbe_volatile) == (None, None)
    assert (reading.ecc_sbe_aggregate, reading.ecc_dbe_aggregate) == (None, None)


def test_a_driver_without_the_v2_memory_call_reports_no_reserved_memory(library, opened):
    library.memory_v2 = False
    reading = opened().reading(0)
    assert (reading.fb_free_mib, reading.fb_used_mib, reading.fb_reserved_mib) == (80_000.0, 2_058.0, None)


def test_a_lost_gpu_raises_rather_than_reading_as_unsupported(library, opened):
    gpus = opened()
    library.gpus[1].lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        gpus.reading(1)
    assert gpus.reading(0).power_w == 312.5


def test_a_gpu_the_node_does_not_have_is_refused(library, opened):
    gpus = opened()
    for ask in (lambda: gpus.reading(3), lambda: gpus.reading(-1), lambda: gpus.reset_gpu(3)):
        with pytest.raises(Refused, match="this node has no GPU") as raised:
            ask()
        assert raised.value.status == 400


def test_a_closed_nvml_is_unavailable(library, opened):
    gpus = opened()
    gpus.close()
    with pytest.raises(Unavailable, match="NVML was closed"):
        gpus.reading(0)
    assert library.logged() == ["nvmlInit", "nvmlShutdown"]


def test_xid_events_of_every_gpu_reach_the_counter(library, opened):
    gpus = opened()
    counter = XidCounter(gpus.gpus())
    gpus.start_xid_events(counter.add)
    assert library.registered == [(index, pynvml.nvmlEventTypeXidCriticalError) for index in range(3)]
    library.events.put((0, 79))
    library.events.put(nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST))
    library.events.put((2, 13))
    library.events.put((2, 13))
    wait_for(lambda: counter.counts() == {0: {79: 1}, 2: {13: 2}})
    assert counter.last() == {0: 79, 2: 13}
    gpus.close()
    assert library.logged() == ["nvmlInit", "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlShutdown"]
    assert not any(thread.name == "nvml-xid-events" for thread in threading.enumerate())


def test_a_reset_frees_the_gpu_of_nvml_and_persistence_mode_for_nvidia_smi(library, opened, tmp_path):
    reset = 'echo "GPU 00000000:18:00.0 was successfully reset."'
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, reset))
    assert gpus.reset_gpu(0) == "GPU 00000000:18:00.0 was successfully reset."
    assert library.logged() == [
        "nvmlInit",
        "nvmlShutdown",
        "nvidia-smi -i 0 -pm 0",
        "nvidia-smi --gpu-reset -i 0",
        "nvidia-smi -i 0 -pm 1",
        "nvmlInit",
    ]
    assert gpus.reading(0).power_w == 312.5


def test_a_gpu_without_persistence_mode_is_reset_directly(library, opened, tmp_path):
    gpus = opened(
        nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, 'echo "GPU 00000000:3B:00.0 was successfully reset."')
    )
    gpus.reset_gpu(1)
    assert library.logged() == ["nvmlInit", "nvmlShutdown", "nvidia-smi --gpu-reset -i 1", "nvmlInit"]


def test_the_memory_wipe_resets_every_gpu_in_one_go(library, opened, tmp_path):
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, 'echo "All GPUs were successfully reset."'))
    assert gpus.wipe_gpu_memory() == "All GPUs were successfully reset."
    assert library.logged() == [
        "nvmlInit",
        "nvmlShutdown",
        "nvidia-smi -i 0 -pm 0",
        "nvidia-smi -i 2 -pm 0",
        "nvidia-smi --gpu-reset",
        "nvidia-smi -i 0 -pm 1",
        "nvidia-smi -i 2 -pm 1",
        "nvmlInit",
    ]


def test_a_refused_reset_says_what_nvidia_smi_said_and_restores_the_node(library, opened, tmp_path):
    # What nvidia-smi said to NVIDIA's NVSentinel (github.com/NVIDIA/NVSentinel/issues/1690).
    refusal = (
        'echo "The following GPUs could not be reset:"; '
        'echo "  GPU 00000000:18:00.0: In use by another client"; exit 255'
    )
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, refusal))
    with pytest.raises(ResetFailed) as raised:
        gpus.reset_gpu(0)
    assert str(raised.value) == (
        f"{tmp_path}/nvidia-smi --gpu-reset -i 0 exited with 255: The following GPUs could not be reset:\n"
        "  GPU 00000000:18:00.0: In use by another client"
    )
    assert library.logged()[-2:] == ["nvidia-smi -i 0 -pm 1", "nvmlInit"]
    assert gpus.reading(0).power_w == 312.5


def test_readings_during_a_reset_are_unavailable(library, opened, tmp_path):
    go = tmp_path / "go"
    reset = f'while [ ! -e {go} ]; do sleep 0.01; done; echo "GPU 00000000:3B:00.0 was successfully reset."'
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, reset))
    outcome = []
    resetting = threading.Thread(target=lambda: outcome.append(gpus.reset_gpu(1)))
    resetting.start()
    wait_for(lambda: "nvidia-smi --gpu-reset -i 1" in library.logged())
    for ask in (lambda: gpus.reading(0), gpus.gpus, lambda: gpus.reset_gpu(0)):
        with pytest.raises(Unavailable, match="a GPU reset is under way"):
            ask()
    go.touch()
    resetting.join()
    assert outcome == ["GPU 00000000:3B:00.0 was successfully reset."]
    assert gpus.reading(0).power_w == 312.5


def test_xid_events_stop_for_a_reset_and_resume_after_it(library, opened, tmp_path):
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, "true"))
    seen = []
    gpus.start_xid_events(lambda index, xid: seen.append((index, xid)))
    gpus.reset_gpu(1)
    assert library.logged() == [
        "nvmlInit",
        "nvmlEventSetCreate",
        "nvmlEventSetFree",
        "nvmlShutdown",
        "nvidia-smi --gpu-reset -i 1",
        "nvmlInit",
        "nvmlEventSetCreate",
    ]
    library.events.put((1, 48))
    wait_for(lambda: seen == [(1, 48)])


def test_a_missing_nvidia_smi_is_reported(library, opened, tmp_path):
    gpus = opened(nvidia_smi=str(tmp_path / "nowhere" / "nvidia-smi"))
    with pytest.raises(ResetFailed, match=r"^cannot run .*/nowhere/nvidia-smi: No such file or directory$"):
        gpus.reset_gpu(1)
    assert gpus.reading(1).power_w == 56.0


def test_a_reset_that_hangs_is_given_up(library, opened, tmp_path, monkeypatch):
    monkeypatch.setattr(nvml, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    gpus = opened(nvidia_smi=fake_nvidia_smi(tmp_path, library.calls, "exec sleep 30"))
    with pytest.raises(ResetFailed, match=r"nvidia-smi --gpu-reset -i 1 did not finish within 0.5 s$"):
        gpus.reset_gpu(1)
    assert library.logged()[-1] == "nvmlInit"
