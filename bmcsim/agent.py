"""Every node's in-band agent under /agent/{node}: the real agent (the `agent` package) on the
simulated hardware of this node, through its `sim` backend.

The agent answers only while its node is powered on and booted, and not while `agent_down` is
set. A GPU reset through the agent that is to succeed clears that GPU's faults whose `clears` is
"gpu_reset" (bmcsim/faults.py); reboots and power cycles clear theirs in bmcsim/state.py.
It needs the node's bearer token (core.topology.agent_token, handed out with the inventory);
Prometheus reads /metrics with the fleet's metrics token instead.

With BMCSIM_CONTROL_PLANE_URL set, every node's agent reports each new XID to the control plane
as the real agent does with --xid-report-url (agent/xid_reports.py), with its own token: one loop
scans every node's counters each 0.2 s, and nothing is read while a node is off or booting.
"""

from __future__ import annotations

import logging

from aiohttp import web

from agent import app as agent_app
from agent.backend import GPU
from agent.sim import SimBackend, pci_bus_id
from agent.xid_reports import XidReporter, reporting
from core.topology import agent_token

from . import evidence, releases, state
from .sim import SIM, Simulator
from .state import NodeState

log = logging.getLogger("bmcsim")


class SimulatedNode:
    """One bmcsim node as the agent's sim backend sees its hardware."""

    def __init__(self, sim: Simulator, node: NodeState):
        self.sim = sim
        self.node = node
        self.name = node.name
        self._gpus = [
            GPU(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                pci_bus_id=pci_bus_id(g.index),
                serial=g.serial,
                driver_version=releases.GPU_RELEASES["driver"][-1],
                vbios_version=releases.GPU_RELEASES["vbios"][-1],
            )
            for g in node.spec.gpus
        ]

    @property
    def operations(self) -> dict[str, dict]:
        return self.node.agent_operations

    def silent_because(self, now: float) -> str | None:
        if not self.node.power_on:
            return f"{self.name} is powered off"
        if not self.node.is_booted(now):
            return f"{self.name} is still booting"
        if self.node.has_fault("agent_down"):
            return f"the agent of {self.name} is down"
        return None

    def gpu_identities(self) -> list[GPU]:
        return self._gpus

    def gpu_faults(self) -> list[dict]:
        return self.node.gpu_faults()

    def reset_gpu(self, gpu: int) -> None:
        if self.node.clear_gpu_faults("gpu_reset", gpu):
            self.changed()

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return {int(g): {int(x): n for x, n in per.items()} for g, per in self.node.xid_counts.items()}

    def inventory(self, now: float) -> dict:
        node = self.node
        tenant = node.guest  # the tenant OS, while it runs
        return {
            "name": node.name,
            "serial": node.spec.serial,
            "boot_source": node.boot_source,
            "boot_image_sha256": tenant["image_sha256"] if tenant else None,
            "ssh_host_keys": (
                [{"type": tenant["host_key_type"], "fingerprint": tenant["host_key_fingerprint"]}] if tenant else []
            ),
            "macs": state.macs(node.name),
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model, "cc_mode": node.cc_mode}
                for g in node.spec.gpus
            ],
            "drives": [
                {"id": d, "capacity_bytes": state.DRIVE_CAPACITY_BYTES, "last_erased_at": node.last_erased(d, now)}
                for d in state.DRIVES
            ],
        }

    def evidence(self, nonce: bytes, now: float) -> dict:
        return evidence.collect(self.node, self.sim.pki, nonce, now, self.sim.settings.quoted_pcrs)

    def outcome(self, now: float, duration: float) -> dict:
        return self.node.outcome(now, duration)

    def changed(self) -> None:
        self.sim.fleet.touch(self.node)


def add_routes(app: web.Application) -> None:
    sim = app[SIM]
    metrics_token = sim.settings.agent_metrics_token
    served = {
        name: agent_app.Served(
            SimBackend(SimulatedNode(sim, node), scale=sim.scale, clock=sim.now), agent_token(name), metrics_token
        )
        for name, node in sim.fleet.nodes.items()
    }
    agent_app.add_routes(app.router, lambda request: served.get(request.match_info["node"]), prefix="/agent/{node}")
    url = sim.settings.control_plane_url
    if url:
        reporters = [XidReporter(s.backend, f"{url}/v1/agents/{name}/xids", s.token) for name, s in served.items()]
        app.cleanup_ctx.append(reporting(reporters))
        log.info("every node's agent reports new XIDs to %s/v1/agents/{node}/xids", url)
