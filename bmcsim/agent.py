"""Every node's in-band agent under /agent/{node}: the real agent (the `agent` package) on the
simulated hardware of this node, through its `sim` backend.

The agent answers only while its node is powered on and booted, and not while `agent_down` is
set. A GPU reset through the agent that is to succeed clears that GPU's faults whose `clears` is
"gpu_reset" (bmcsim/faults.py); reboots and power cycles clear theirs in bmcsim/state.py.
It needs the agent token its node's OS read at boot from its config drive (gpu-agent.json, which
the control plane mints for each boot of its service image and each tenancy): with no drive, every
call is refused (401), as bmcsim derives no credential of its own;
Prometheus reads /metrics on bmcsim's TLS listener instead (server.py), with a client certificate
of the fleet's metrics CA (core/metrics_ca.py): no node holds anything that opens another's metrics.

With BMCSIM_CONTROL_PLANE_URL set, every node's agent reports each new XID to the control plane
as the real agent does with --xid-report-url (agent/xid_reports.py), with the report token of its
boot's drive (none without one): one loop scans every node's counters each 0.2 s, and nothing is
read while a node is off or booting.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import overload

from aiohttp import web

from agent import app as agent_app
from agent.backend import GPU
from agent.sim import SimBackend, pci_bus_id
from agent.xid_reports import XidReporter, reporting

from . import evidence, releases, state
from .sim import SIM, Simulator
from .state import NodeState

log = logging.getLogger("bmcsim")
AGENTS = web.AppKey("agents", dict[str, agent_app.Served])  # every node's agent, by node name


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


class ReportersOfThisBoot(Sequence[XidReporter]):
    """Each node's XID reporter as its OS runs now: made anew when the node boots with other
    credentials (a new agent, as on a real node), with the report token of its drive; a node whose
    boot had no drive has none, and reports nothing."""

    def __init__(self, served: dict[str, agent_app.Served], nodes: dict[str, NodeState], url: str):
        self.served, self.nodes, self.url = served, nodes, url
        self._kept: dict[str, tuple[str, XidReporter]] = {}  # node -> (its report token, its reporter)

    def _current(self) -> list[XidReporter]:
        current = []
        for name, node in self.nodes.items():
            token = (node.agent_credentials or {}).get("report_token")
            kept = self._kept.get(name)
            if token is None:
                self._kept.pop(name, None)
                continue
            if kept is None or kept[0] != token:
                url = f"{self.url}/v1/agents/{name}/xids"
                kept = self._kept[name] = (token, XidReporter(self.served[name].backend, url, token))
            current.append(kept[1])
        return current

    def __iter__(self) -> Iterator[XidReporter]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    @overload
    def __getitem__(self, index: int) -> XidReporter: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[XidReporter]: ...
    def __getitem__(self, index: int | slice) -> XidReporter | Sequence[XidReporter]:
        return self._current()[index]


def add_routes(app: web.Application) -> None:
    sim = app[SIM]
    served = {
        name: agent_app.Served(SimBackend(SimulatedNode(sim, node), scale=sim.scale, clock=sim.now), token="")
        for name, node in sim.fleet.nodes.items()
    }
    app[AGENTS] = served

    def this_boots_agent(request: web.Request) -> agent_app.Served | None:
        """The node's agent with the agent token its OS read at boot; "" (refusing all) without one."""
        name = request.match_info["node"]
        if name not in served:
            return None
        credentials = sim.fleet.nodes[name].agent_credentials or {}
        return dataclasses.replace(served[name], token=credentials.get("agent_token", ""))

    agent_app.add_routes(app.router, this_boots_agent, prefix="/agent/{node}")
    url = sim.settings.control_plane_url
    if url:
        app.cleanup_ctx.append(reporting(ReportersOfThisBoot(served, sim.fleet.nodes, url)))
        log.info("every node's agent reports new XIDs to %s/v1/agents/{node}/xids", url)


def metrics_app(agents: dict[str, agent_app.Served]) -> web.Application:
    """Every node agent's GET /agent/{node}/metrics and nothing else: what the TLS listener serves."""
    app = web.Application(middlewares=[agent_app.json_errors])
    agent_app.add_metrics_route(app.router, lambda request: agents.get(request.match_info["node"]), "/agent/{node}")
    return app
