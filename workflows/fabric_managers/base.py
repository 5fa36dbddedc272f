"""What the control plane asks of a fabric's manager, whichever it is: the interface its drivers
implement (NVUE for Ethernet, UFM for InfiniBand, NMX-M for NVLink; a SONiC or OpenConfig
RESTCONF driver for Ethernet would be another), and the two ways a manager can fail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class FabricUnavailable(Exception):
    """The manager did not answer, or answered 5xx or garbage: try again later; nothing is known
    to have changed."""


class FabricRefused(Exception):
    """The manager answered and refused the change (a revision that failed to apply, a 4xx, an
    operation that failed). Its message says what the manager said."""


@dataclass(frozen=True)
class Segment:
    """A tenant network as a driver needs it to put ports on it.

    `membership` is what a member port reads back as (fleet/networks.py): the VLAN `"1001"`, the
    P_Key `"0x1001"`, the NVLink partition's name. `vni` is the VXLAN VNI an EVPN fabric maps the
    VLAN to (Ethernet only; None on a plain VLAN fabric)."""

    membership: str
    vni: int | None = None


# An Ethernet port on no VLAN at all, not even the provisioning one (reads back as "").
ISOLATED = Segment(membership="")


class FabricDriver(Protocol):
    """One fabric kind's manager, addressed per `manager`: a leaf switch's name (Ethernet), an
    InfiniBand fabric's name (its pod), an NVLink domain's name.

    A port is what the manager calls a member: a leaf switch's port (`swp3`), an HCA port GUID
    (16 hex digits), a GPU (its UUID)."""

    fabric: str  # core.topology.ETHERNET, INFINIBAND or NVLINK

    def read(self, manager: str, ports: Sequence[str]) -> dict[str, str]:
        """What the manager holds now for each port, as its membership ('' for none): one or a
        few calls per manager, never one per port."""
        ...

    def apply(self, manager: str, wanted: Mapping[str, Segment | None]) -> None:
        """Put every port of `wanted` on its segment, or (None) on no tenant's (Ethernet: the
        provisioning VLAN), as one batch: one NVUE revision per switch, one UFM call per
        partition, one NMX-M operation per partition. Returns once the manager says it is applied;
        the caller reads back to confirm."""
        ...

    def close(self) -> None: ...
