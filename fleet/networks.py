"""Tenants' networks on the three fabrics, as the control plane reasons about them: pure, no Django.

A node's place on a fabric is written as one string, its *membership*, the same whether wanted or
read back from the fabric's manager, so that the two compare as strings:

- Ethernet: the access VLAN of the node's leaf port, `"1001"` (the provisioning VLAN when the
  node serves no tenant);
- InfiniBand: the P_Keys its HCA ports are full members of, `"0x1001"` (none: `""`; every port
  stays a limited member of the default partition, which is not written);
- NVLink: the name of the partition that holds its GPUs (none: `""`).

A node with several ports (HCA GUIDs, GPUs) whose ports disagree reads back as their values
joined by commas, in order, which matches no wanted membership.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.topology import ETHERNET, INFINIBAND, NVLINK


def membership_value(fabric: str, *, vlan: int | None = None, pkey: int | None = None, partition: str = "") -> str:
    """The membership a port on `fabric` reads back as on the network given."""
    if fabric == ETHERNET:
        assert vlan is not None
        return str(vlan)
    if fabric == INFINIBAND:
        assert pkey is not None
        return pkey_text(pkey)
    if fabric == NVLINK:
        return partition
    raise ValueError(f"unknown fabric {fabric!r}")


def idle_membership(fabric: str, *, provisioning_vlan: int) -> str:
    """The membership of a node that serves no tenant."""
    return str(provisioning_vlan) if fabric == ETHERNET else ""


def pkey_text(pkey: int) -> str:
    """A P_Key as UFM writes it: `0x` and four hex digits, the membership bit off."""
    return f"0x{pkey & 0x7FFF:04x}"


# -- syncing ------------------------------------------------------------------------------------
# What one sync does with one manager: the ports to change, and after the read-back, each node's
# verdict. A node is known by a key of the caller's (its attachment's id).


@dataclass(frozen=True)
class NodeOnManager:
    """One node's ports on one manager, the membership it should read back as (None: no tenant's),
    and whether its last read-back had confirmed that very membership."""

    key: int
    ports: tuple[str, ...]
    wanted: str | None
    was_confirmed: bool


@dataclass(frozen=True)
class Verdict:
    """A node after the read-back: what its ports read as, whether that is what it should be, and
    the ports a read found off a membership that had been confirmed (port, what it was found on):
    drift, someone's hand outside our change path."""

    key: int
    found: str
    confirmed: bool
    drifted: tuple[tuple[str, str], ...] = ()


def read_as(ports: Sequence[str], read: Mapping[str, str]) -> str:
    """A node's membership from its ports' (a port the manager did not list holds none): their
    value if they agree, else every port's value comma-joined, in order, which matches nothing wanted."""
    values = [read.get(port, "") for port in ports]
    return values[0] if values and all(value == values[0] for value in values) else ",".join(values)


def ports_to_change(nodes: Iterable[NodeOnManager], read: Mapping[str, str], *, idle: str) -> dict[str, str | None]:
    """Each port whose read value differs from what its node should be on: the membership to put
    it on, None for no tenant's (idle: what a port on no tenant's network reads as)."""
    return {
        port: node.wanted
        for node in nodes
        for port in node.ports
        if read.get(port, "") != (node.wanted if node.wanted is not None else idle)
    }


def verdicts(
    nodes: Iterable[NodeOnManager], before: Mapping[str, str], after: Mapping[str, str], *, idle: str
) -> list[Verdict]:
    """Each node's verdict from the read before the change and the read-back after it (the same
    read where nothing was changed)."""
    found = []
    for node in nodes:
        wanted = node.wanted if node.wanted is not None else idle
        drifted = (
            tuple((port, before.get(port, "")) for port in node.ports if before.get(port, "") != wanted)
            if node.was_confirmed
            else ()
        )
        now = read_as(node.ports, after)
        found.append(Verdict(key=node.key, found=now, confirmed=now == wanted, drifted=drifted))
    return found
