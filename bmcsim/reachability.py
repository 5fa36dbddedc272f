"""Who a booted tenant node reaches, computed from the fabric managers' state (fabric_managers/).

This is what a tenant sees from inside its node (the sshd's `ping`, `ibping` and `nvlink-peers`),
so that isolation is checked the way it would be on real nodes:
- Ethernet: the node reaches itself (its own addresses, any loopback one); another booted node's
  private address (its config drive's `private0`) when both nodes have one and their leaf ports
  are access ports of the same VLAN (VLANs are stretched over every leaf), with the same VNI where
  a switch maps the VLAN to one; another booted node's provisioning address (where its agent
  listens) when both ports are on the provisioning VLAN. A BMC's management address is out of band:
  never reached from a node.
- InfiniBand: two HCA ports reach each other when they share a P_Key and one of the two at least is
  a full member of it (two limited members do not talk, as in the default partition).
- NVLink: GPUs reach each other inside one partition of one NVLink domain.
"""

from __future__ import annotations

import ipaddress

from core.topology import PROVISIONING_VLAN

from .state import Fleet


def ping(fleet: Fleet, source: str, address: str, now: float) -> bool:
    """Whether the node `source` reaches `address` (an IP address) over Ethernet at `now`."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip in _own_addresses(fleet, source):
        return True
    here = _segment(fleet, source)
    if here is None:
        return False
    on_private = _private_address(fleet, source) is not None
    on_provisioning = here[0] == PROVISIONING_VLAN
    for name, node in fleet.nodes.items():
        if name == source or not node.is_booted(now):
            continue
        private = _private_address(fleet, name)
        addressed = (on_private and private is not None and ipaddress.ip_address(private) == ip) or (
            on_provisioning and ipaddress.ip_address(fleet.fabric.ports[name].provisioning_address) == ip
        )
        if addressed and _segment(fleet, name) == here:
            return True
    return False


def ib_reaches(fleet: Fleet, source: str, guid: str) -> bool:
    """Whether one of the node's HCA ports reaches the port `guid` (16 hex digits) over InfiniBand."""
    ports = fleet.fabric.ports[source]
    guid = guid.lower()
    if guid in ports.hca_guids:
        return True
    ufm = fleet.fabric.ufm[ports.infiniband_fabric]
    if guid not in ufm.guids:
        return False  # on another fabric, or no port at all
    theirs = ufm.memberships(guid)
    for own in ports.hca_guids:
        for pkey, membership in ufm.memberships(own).items():
            if pkey in theirs and "full" in (membership, theirs[pkey]):
                return True
    return False


def nvlink_peers(fleet: Fleet, source: str) -> list[str]:
    """The UUIDs of other nodes' GPUs that share an NVLink partition with one of the node's GPUs."""
    domain = fleet.fabric.ports[source].nvlink_domain
    nmx = fleet.fabric.nmx[domain]
    partitions = {nmx.partition_of(gpu) for gpu in fleet.fabric.gpus[source]} - {None}
    if not partitions:
        return []
    return [
        gpu
        for name, ports in fleet.fabric.ports.items()
        if name != source and ports.nvlink_domain == domain
        for gpu in fleet.fabric.gpus[name]
        if nmx.partition_of(gpu) in partitions
    ]


def _own_addresses(fleet: Fleet, name: str) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses the node's own interfaces hold: the tenant OS's and the provisioning one."""
    tenant = fleet.nodes[name].guest or {}
    held = [tenant.get("address"), tenant.get("private_address"), fleet.fabric.ports[name].provisioning_address]
    return {ipaddress.ip_address(address) for address in held if address is not None}


def _private_address(fleet: Fleet, name: str) -> str | None:
    return (fleet.nodes[name].guest or {}).get("private_address")


def _segment(fleet: Fleet, name: str) -> tuple[int, int | None] | None:
    """(access VLAN, its VNI or None) of the node's leaf port; None while the port is in no bridge."""
    ports = fleet.fabric.ports[name]
    switch = fleet.fabric.nvue[ports.ethernet_switch]
    vlan = switch.access_vlan(ports.ethernet_port)
    return None if vlan is None else (vlan, switch.vni(vlan))
