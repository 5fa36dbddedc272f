"""Where the control plane may send a BMC's credentials: only to hosts on the BMC networks.

A BMC or node-agent address comes from the inventory (enrolment), from an operator (the
admin) and is used by a worker. Each of them calls check_bmc_url, so an address outside
GPUFLEET_BMC_NETWORKS never gets a request, and so never a BMC's password. A host name
passes only if every address it resolves to is inside: a name that resolves to one address
inside and one outside would let the resolver choose where the credentials go.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}


class BMCAddressRefused(ValueError):
    """The URL is not one the control plane may send a BMC's credentials to."""


def bmc_host(url: str) -> tuple[str, int]:
    """The host and port a BMC or agent URL reaches; refuses what is not plain http(s) to a host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BMCAddressRefused(f"not a usable URL: {exc}") from exc
    if parts.scheme not in DEFAULT_PORTS:
        raise BMCAddressRefused(f"scheme {parts.scheme!r} refused: a BMC is reached over http or https")
    if not parts.hostname:
        raise BMCAddressRefused("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise BMCAddressRefused("credentials in the URL refused: they belong in the BMC username and password")
    return parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address `host` resolves to, an IPv4-mapped IPv6 one as the IPv4 address it stands for.
    Raises OSError or UnicodeError when it does not resolve."""
    addresses = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(sockaddr[0])
        addresses.append(address.ipv4_mapped if address.version == 6 and address.ipv4_mapped else address)
    return addresses


def refusal_outside_bmc_networks(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a worker may not call `address` with a BMC's credentials (core.outbound's check), or None."""
    if address.version == 6 and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in network for network in settings.BMC_NETWORKS):
        return None
    return "which is outside the BMC networks (GPUFLEET_BMC_NETWORKS)"


def check_bmc_host(host: str, port: int) -> None:
    """Refuse the host unless every address it resolves to is in GPUFLEET_BMC_NETWORKS."""
    try:
        found = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise BMCAddressRefused(f"{host} does not resolve ({exc}), so it cannot be checked") from exc
    for address in found:
        if not any(address in network for network in settings.BMC_NETWORKS):
            where = str(address) if host == str(address) else f"{host} (resolved to {address})"
            raise BMCAddressRefused(f"{where} is outside the BMC networks (GPUFLEET_BMC_NETWORKS)")


def check_bmc_url(url: str) -> None:
    """Raise BMCAddressRefused unless a BMC's credentials may be sent to this URL."""
    check_bmc_host(*bmc_host(url))
