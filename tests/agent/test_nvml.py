"""The NVML source. This machine has no GPU and no libnvidia-ml: opening NVML here must fail with
the agent's clear message. Everything else runs against a fake libnvidia-ml put in place of
pynvml's functions (pynvml's own constants, structures and errors stay), and a fake nvidia-smi, both
in tests/support/fake_nvml.py."""

from __future__ import annotations

import threading
import time

import pynvml
import pytest

from agent.backend import GPU, Reading, Refused, Unavailable
from agent.host import nvml
from agent.host.kernel_log import XidCounter
from agent.host.nvml import NoNVML, Nvml, ResetFailed
from tests.support import fake_nvml
from tests.support.fake_nvml import fake_nvidia_smi, geforce, h100, nvml_error, v100

library = fake_nvml.library  # the fixture, by assignment: an imported name that arguments shadow is a lint error


@pytest.fixture
def opened():
    handles = []

    def open_nvml(**options) -> Nvml:
        handles.append(Nvml(**options))
        return handles[-1]

    yield open_nvml
    for handle in handles:
        handle.close()


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
