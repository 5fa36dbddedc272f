"""Drivers of the fabrics' managers, through the project's outbound helper (core/outbound.py).

`base` is the interface and its errors; `nvue` (Cumulus Linux's NVUE REST API, per leaf switch),
`ufm` (NVIDIA UFM's REST API, per InfiniBand fabric) and `nmx` (NVIDIA NMX-M's partition API, per
NVLink domain) implement it.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings

from core.topology import ETHERNET, INFINIBAND, NVLINK
from workflows.fabric_managers.base import FabricDriver, FabricRefused, FabricUnavailable, Segment
from workflows.fabric_managers.nmx import NmxDriver
from workflows.fabric_managers.nvue import NvueDriver
from workflows.fabric_managers.ufm import UfmDriver

__all__ = ["FabricDriver", "FabricRefused", "FabricUnavailable", "Segment", "drivers_from_settings"]


def _refusal_outside_manager_networks(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a driver may not call `address` with a manager's credential (core.outbound's check), or None."""
    if address.version == 6 and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in network for network in settings.FABRIC_MANAGER_NETWORKS):
        return None
    return "which is outside the fabric managers' networks (GPUFLEET_FABRIC_MANAGER_NETWORKS)"


def drivers_from_settings() -> dict[str, FabricDriver]:
    """A driver per fabric, each at its manager's URL template with its credential, every call
    inside GPUFLEET_FABRIC_MANAGER_NETWORKS and the outbound deadline and body cap."""
    check, deadline_s, max_body_bytes = (
        _refusal_outside_manager_networks,
        settings.OUTBOUND_DEADLINE_SECONDS,
        settings.OUTBOUND_MAX_BODY_BYTES,
    )
    return {
        ETHERNET: NvueDriver(
            url=settings.ETHERNET_MANAGER_URL,
            username=settings.ETHERNET_MANAGER_USERNAME,
            password=settings.ETHERNET_MANAGER_PASSWORD,
            check=check,
            deadline_s=deadline_s,
            max_body_bytes=max_body_bytes,
        ),
        INFINIBAND: UfmDriver(
            url=settings.INFINIBAND_MANAGER_URL,
            username=settings.INFINIBAND_MANAGER_USERNAME,
            password=settings.INFINIBAND_MANAGER_PASSWORD,
            check=check,
            deadline_s=deadline_s,
            max_body_bytes=max_body_bytes,
        ),
        NVLINK: NmxDriver(
            url=settings.NVLINK_MANAGER_URL,
            username=settings.NVLINK_MANAGER_USERNAME,
            password=settings.NVLINK_MANAGER_PASSWORD,
            check=check,
            deadline_s=deadline_s,
            max_body_bytes=max_body_bytes,
        ),
    }
