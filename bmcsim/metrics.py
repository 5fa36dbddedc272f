"""A node agent's metrics: dcgm-exporter's names and labels per GPU, plus the agent's own health.

Rendered with prometheus-client from a collector built per request, so a scrape reads the
node's current state and nothing is registered globally.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .state import NodeState

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


class NodeCollector:
    def __init__(self, node: NodeState, now: float):
        self.node = node
        self.now = now

    def collect(self):
        node, now = self.node, self.now
        gauges = {
            "temp": GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels=DCGM_LABELS),
            "power": GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=DCGM_LABELS),
            "util": GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=DCGM_LABELS),
            "fb": GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=DCGM_LABELS),
            "xid": GaugeMetricFamily(
                "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=DCGM_LABELS
            ),
        }
        xid_count = GaugeMetricFamily(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "Count of XID Errors within user-specified time window.",
            labels=(*DCGM_LABELS, "xid"),
        )
        healthy = GaugeMetricFamily(
            "gpu_agent_gpu_healthy", "1 if the GPU is healthy, 0 if it reported an XID.", labels=("gpu",)
        )
        xid_total = CounterMetricFamily(
            "gpu_agent_xid_errors", "XID errors reported by the GPU.", labels=("gpu", "xid")
        )
        for gpu in node.spec.gpus:
            index = str(gpu.index)
            labels = (
                index,
                gpu.uuid,
                f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0",
                f"nvidia{index}",
                gpu.model,
                node.name,
            )
            # Idle readings that drift slowly and differ a little per GPU, as a real idle fleet does.
            wave = math.sin(now / 60.0 + gpu.index)
            gauges["temp"].add_metric(labels, round(34.0 + gpu.index % 3 + 2.0 * wave, 1))
            gauges["power"].add_metric(labels, round(71.5 + 4.0 * wave, 3))
            gauges["util"].add_metric(labels, 0.0)
            gauges["fb"].add_metric(labels, 0.0)
            last_xid = node.last_xid(gpu.index)
            gauges["xid"].add_metric(labels, float(last_xid))
            counts = node.xid_counts.get(index, {})
            for xid, count in counts.items():
                xid_count.add_metric((*labels, xid), float(count))
                xid_total.add_metric((index, xid), float(count))
            healthy.add_metric((index,), 0.0 if last_xid else 1.0)
        yield from gauges.values()
        yield from (xid_count, healthy, xid_total)


def render(node: NodeState, now: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, now))
    return generate_latest(registry)
