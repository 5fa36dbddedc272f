"""The agent's /metrics against dcgm-exporter 4.5.3-4.8.2: the same names, types and labels for
every field of its default counters file that NVML can give, and promtool's lint."""

from __future__ import annotations

import re
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from agent import metrics
from agent.backend import GPUStatus
from agent.sim import SimBackend, StandaloneNode

# dcgm-exporter's etc/default-counters.csv (4.5.3-4.8.2): every line that is not commented out.
UPSTREAM_DEFAULTS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}
# What no backend reads: vGPU licensing (bare metal has no vGPU), and the profiling (DCP) fields,
# which only DCGM's profiling module measures, not NVML.
NOT_READ = {
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
}
LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
# The upstream fields that are off in its default file but on here: the alert rules read ECC.
OFF_UPSTREAM_ON_HERE = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_RETIRED_SBE": "counter",
    "DCGM_FI_DEV_RETIRED_DBE": "counter",
    "DCGM_FI_DEV_RETIRED_PENDING": "counter",
}


def scrape(statuses: list[GPUStatus] | None = None) -> str:
    backend = SimBackend(StandaloneNode("gpu-host-7", gpu_count=2))
    return metrics.render("gpu-host-7", statuses if statuses is not None else backend.gpus()).decode()


def declared_types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def test_every_default_field_nvml_can_give_has_upstreams_name_type_and_labels():
    text = scrape()
    types = declared_types(text)
    for name, kind in {**UPSTREAM_DEFAULTS, **OFF_UPSTREAM_ON_HERE}.items():
        if name in NOT_READ:
            assert name not in types, name
            continue
        assert types.get(name) == kind, name
        lines = [line for line in text.splitlines() if line.startswith(name + "{")]
        assert len(lines) == 2, name  # one per GPU, under upstream's own name (no _total added)
    for family in text_string_to_metric_families(text):
        if family.name.startswith("DCGM_"):
            for sample in family.samples:
                extra = {"err_code", "err_msg"} if family.name == "DCGM_FI_DEV_XID_ERRORS" else set()
                assert set(sample.labels) == LABELS | extra, family.name
                assert sample.labels["Hostname"] == "gpu-host-7"
                assert sample.labels["device"] == f"nvidia{sample.labels['gpu']}"


def test_the_xid_gauge_says_what_the_last_xid_means_as_upstream_does():
    healthy = SimBackend(StandaloneNode("gpu-host-7", gpu_count=3)).gpus()
    statuses = [
        healthy[0],
        GPUStatus(healthy[1].gpu, healthy[1].reading, healthy=False, last_xid=79, xid_counts={79: 2, 13: 1}),
        GPUStatus(healthy[2].gpu, healthy[2].reading, healthy=False, last_xid=999, xid_counts={999: 1}),
    ]
    text = scrape(statuses)
    assert re.search(r'DCGM_FI_DEV_XID_ERRORS\{.*err_code="0",err_msg="No Error",gpu="0".*\} 0\.0', text)
    assert re.search(r'err_code="79",err_msg="GPU has fallen off the bus",gpu="1".*\} 79\.0', text)
    assert re.search(r'err_code="999",err_msg="Unknown Error",gpu="2".*\} 999\.0', text)
    assert 'gpu_agent_xid_errors_total{gpu="1",xid="13"} 1.0' in text
    assert 'gpu_agent_xid_errors_total{gpu="1",xid="79"} 2.0' in text
    assert 'gpu_agent_gpu_healthy{gpu="0"} 1.0' in text and 'gpu_agent_gpu_healthy{gpu="1"} 0.0' in text


# What promtool says of dcgm-exporter's own names and labels, which are kept for parity.
UPSTREAM_NAMING = {
    "label names should be written in 'snake_case' not 'camelCase'",  # modelName
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
}


def test_promtool_finds_nothing_but_dcgm_exporters_own_names():
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=scrape(), capture_output=True, text=True, timeout=60, check=False
    )
    problems = (result.stdout + result.stderr).strip().splitlines()
    assert problems, "promtool said nothing: it should name dcgm-exporter's camelCase label"
    for problem in problems:
        name, _, complaint = problem.partition(" ")
        assert name in {*UPSTREAM_DEFAULTS, *OFF_UPSTREAM_ON_HERE} and complaint in UPSTREAM_NAMING, problem
