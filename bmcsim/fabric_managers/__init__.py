"""The managers of the fabrics that keep tenants apart, as bmcsim simulates them.

- Ethernet: a Cumulus Linux leaf switch's NVUE REST API per leaf (`nvue.py`, under
  `/switches/{switch}/nvue_v1/`): each node's port is an access port of one VLAN (the
  provisioning VLAN, core.topology.PROVISIONING_VLAN, until a tenant's is set).
- InfiniBand: a UFM per InfiniBand fabric, one per pod (`ufm.py`, under `/pods/{pod}/ufmRest/`):
  partitions (P_Keys) and the HCA port GUIDs that are their members, full or limited; every GUID
  starts as a limited member of the default partition.
- NVLink: an NMX-M per NVLink domain, one per rack (`nmx.py`, under `/nvlink-domains/{domain}/nmx/v1/`):
  partitions of the domain's GPUs, a GPU in one at most.

Each manager's state is persisted in the store's `fabrics` table, a row per manager
(`nvue:<switch>`, `ufm:<pod>`, `nmx:<domain>`), written by the same debounced flusher as the
nodes. The faults (`fabric_api_down`, `fabric_apply_fails`, `fabric_slow`, `fabric_drift`) are
per fabric kind; `reachability.py` computes who reaches whom from this state.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK, NetworkPorts, NodeSpec, network_ports

from .nmx import NmxManager
from .nvue import NvueSwitch
from .ufm import UfmManager

FABRIC_API_DOWN, FABRIC_APPLY_FAILS, FABRIC_SLOW, FABRIC_DRIFT = (
    "fabric_api_down",
    "fabric_apply_fails",
    "fabric_slow",
    "fabric_drift",
)
FAULT_KINDS = (FABRIC_API_DOWN, FABRIC_APPLY_FAILS, FABRIC_SLOW, FABRIC_DRIFT)
STANDING_KINDS = (FABRIC_API_DOWN, FABRIC_APPLY_FAILS, FABRIC_SLOW)  # held until cleared; drift is an act
SLOW_S = 3.0  # what `fabric_slow` adds to every call, in simulated seconds (times the time scale)

__all__ = ["ETHERNET", "FABRICS", "FAULT_KINDS", "INFINIBAND", "NVLINK", "FabricManagers"]


class FabricManagers:
    """Every fabric manager of the fleet, the fabric faults standing, and each node's ports."""

    def __init__(self, specs: Sequence[NodeSpec]):
        self.ports: dict[str, NetworkPorts] = network_ports(specs)
        by_switch: dict[str, list[str]] = {}
        by_fabric: dict[str, list[str]] = {}
        by_domain: dict[str, list[str]] = {}
        gpus: dict[str, list[str]] = {}
        hosts: dict[str, dict[str, tuple[str, ...]]] = {}  # NVLink domain -> node -> its GPUs, where NMX-M locates them
        for spec in specs:
            ports = self.ports[spec.name]
            by_switch.setdefault(ports.ethernet_switch, []).append(ports.ethernet_port)
            by_fabric.setdefault(ports.infiniband_fabric, []).extend(ports.hca_guids)
            by_domain.setdefault(ports.nvlink_domain, []).extend(gpu.uuid for gpu in spec.gpus)
            gpus[spec.name] = [gpu.uuid for gpu in spec.gpus]
            hosts.setdefault(ports.nvlink_domain, {})[spec.name] = tuple(gpus[spec.name])
        self.gpus = gpus  # node -> its GPUs' UUIDs
        self.nvue = {name: NvueSwitch(name, tuple(ports)) for name, ports in by_switch.items()}
        self.ufm = {name: UfmManager(name, tuple(guids)) for name, guids in by_fabric.items()}
        self.nmx = {name: NmxManager(name, tuple(members), hosts=hosts[name]) for name, members in by_domain.items()}
        self.faults: dict[str, dict[str, dict]] = {fabric: {} for fabric in FABRICS}  # fabric -> kind -> fault
        self._dirty: set[str] = set()

    def managers(self) -> dict[str, NvueSwitch | UfmManager | NmxManager]:
        """Every manager under its row name in the store."""
        return {
            **{f"nvue:{name}": switch for name, switch in self.nvue.items()},
            **{f"ufm:{name}": ufm for name, ufm in self.ufm.items()},
            **{f"nmx:{name}": nmx for name, nmx in self.nmx.items()},
        }

    def touch(self, row: str) -> None:
        """Mark a manager (its row name) or "faults" changed; `dump_dirty` hands it to the store."""
        self._dirty.add(row)

    def fault(self, fabric: str, kind: str) -> dict | None:
        return self.faults[fabric].get(kind)

    def drift(self, fabric: str, node: str, segment: str | None) -> dict:
        """Someone moved the node's port(s) on `fabric` by hand (the fault fabric_drift), into
        `segment` or, if None, one the manager picks: what its manager's `drift` says moved,
        {"port", "from", "to"}; the manager's row is marked changed."""
        ports = self.ports[node]
        if fabric == ETHERNET:
            moved = self.nvue[ports.ethernet_switch].drift(ports.ethernet_port, segment)
            self.touch(f"nvue:{ports.ethernet_switch}")
        elif fabric == INFINIBAND:
            moved = self.ufm[ports.infiniband_fabric].drift(ports.hca_guids, segment)
            self.touch(f"ufm:{ports.infiniband_fabric}")
        else:
            moved = self.nmx[ports.nvlink_domain].drift(tuple(self.gpus[node]), segment)
            self.touch(f"nmx:{ports.nvlink_domain}")
        return moved

    def dump_dirty(self) -> dict[str, dict]:
        rows, self._dirty = self._dirty, set()
        managers = self.managers()
        return {row: (self.faults if row == "faults" else managers[row].dump()) for row in rows}

    def restore(self, rows: dict[str, dict]) -> None:
        managers = self.managers()
        for row, data in rows.items():
            if row == "faults":
                self.faults.update({fabric: data.get(fabric, {}) for fabric in FABRICS})
            elif row in managers:
                managers[row].restore(data)
