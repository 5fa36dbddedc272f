"""The agent's /metrics: dcgm-exporter's series, names, types and labels, plus the agent's own.

dcgm-exporter (releases 4.5.3-4.8.2) is the reference: every field of its default counters file
that the backend can read, labelled `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
`Hostname` and `DCGM_FI_DRIVER_VERSION`; `DCGM_FI_DEV_XID_ERRORS` also carries `err_code` and
`err_msg`. The ECC and retired-page fields, off in upstream's default file, are exported here
whenever the GPU has ECC enabled, since the alert rules read them. Nothing reads the `Hostname`
label: upstream renames it to `hostname` after 4.8.2.

The agent's own series are what the alert rules act on: `gpu_agent_xid_errors_total{gpu,xid}`,
a counter that only rises (dcgm-exporter's XID gauge keeps the last XID for ever), and
`gpu_agent_gpu_healthy{gpu}`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import xid_messages
from .backend import GPUStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")

# (Reading field, dcgm-exporter field, type, help), in the order of upstream's counters file.
DCGM_FIELDS = (
    ("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("memory_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("memory_temperature_c", "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("gpu_temperature_c", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("power_w", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("energy_mj", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("pcie_replays", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("gpu_utilization", "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("memory_copy_utilization", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("encoder_utilization", "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("decoder_utilization", "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("fb_free_mib", "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("fb_used_mib", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("fb_reserved_mib", "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("ecc_sbe_volatile", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("ecc_dbe_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    (
        "ecc_sbe_aggregate",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
    ),
    (
        "ecc_dbe_aggregate",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
    ),
    (
        "retired_pages_sbe",
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
    ),
    (
        "retired_pages_dbe",
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
    ),
    ("retired_pages_pending", "DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
    (
        "nvlink_bandwidth_total",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    (
        "remapped_rows_uncorrectable",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "remapped_rows_correctable",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("row_remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
DCGM_COUNTERS = frozenset(name for _, name, kind, _ in DCGM_FIELDS if kind == "counter")
# prometheus_client names every counter *_total; dcgm-exporter's have no suffix, so they are
# built as gauges and their TYPE line is set back to counter.
_GAUGE_TYPE_LINE = re.compile(rb"^# TYPE (\w+) gauge$", re.MULTILINE)


def _dcgm_labels(hostname: str, status: GPUStatus) -> tuple[str, ...]:
    gpu = status.gpu
    return (str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.model, hostname, gpu.driver_version)


class _Collector:
    def __init__(self, hostname: str, statuses: Iterable[GPUStatus]):
        self.hostname = hostname
        self.statuses = list(statuses)

    def collect(self):
        families = []
        for field, name, _, documentation in DCGM_FIELDS:
            family = GaugeMetricFamily(name, documentation, labels=DCGM_LABELS)
            for status in self.statuses:
                value = getattr(status.reading, field)
                if value is not None:
                    family.add_metric(_dcgm_labels(self.hostname, status), float(value))
            if family.samples:
                families.append(family)
        xid = GaugeMetricFamily(
            XID_FIELD, "Value of the last XID error encountered.", labels=(*DCGM_LABELS, "err_code", "err_msg")
        )
        healthy = GaugeMetricFamily(
            "gpu_agent_gpu_healthy", "1 if the GPU is healthy, 0 if it reported a fault.", labels=("gpu",)
        )
        xid_total = CounterMetricFamily(
            "gpu_agent_xid_errors", "XID errors the GPU reported since the agent started.", labels=("gpu", "xid")
        )
        for status in self.statuses:
            index = str(status.gpu.index)
            code = status.last_xid
            xid.add_metric((*_dcgm_labels(self.hostname, status), str(code), xid_messages.message(code)), float(code))
            healthy.add_metric((index,), 1.0 if status.healthy else 0.0)
            for number, count in sorted(status.xid_counts.items()):
                xid_total.add_metric((index, str(number)), float(count))
        yield from families
        yield from (xid, healthy, xid_total)


def render(hostname: str, statuses: Iterable[GPUStatus]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(hostname, statuses))
    text = generate_latest(registry)
    return _GAUGE_TYPE_LINE.sub(
        lambda m: b"# TYPE %s counter" % m[1] if m[1].decode() in DCGM_COUNTERS else m[0],
        text,
    )
