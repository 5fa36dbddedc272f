"""The numbers and addresses tenants' networks are given: pure, no Django.

A reservation's Ethernet segment (a VLAN, or a VXLAN VNI with a VLAN on the leaf ports) and its
InfiniBand P_Key are the lowest free numbers of their fabric's pool; its subnet is the lowest free
block of the tenant address space big enough for it; each node's private address the lowest free
host of that subnet. The caller says what is taken (the live networks), under a lock that keeps
two callers from choosing at once; the database's constraints are the last word.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from ipaddress import IPv4Address, IPv4Network

VLANS = (2, 4094)  # 1 is the switches' default, 4095 reserved
VNIS = (1, 16_777_215)  # 24 bits
PKEYS = (0x0001, 0x7FFE)  # 0x7fff is the default partition; the top bit is the membership bit
RANGES = {"vlan": VLANS, "vxlan": VNIS, "pkey": PKEYS}
MIN_PREFIX_LENGTH = 24  # the smallest subnet a reservation is given, whatever its size: a /24


def parse_range(text: str, kind: str) -> tuple[int, int]:
    """`"1000-3999"` or `"0x1000-0x7ffe"` (decimal or 0x-hexadecimal): the first and last number of
    a pool of `kind` (vlan, vxlan or pkey), in order and inside what that kind allows. ValueError
    otherwise, saying what is expected."""
    low, high = RANGES[kind]
    expected = f"a range FIRST-LAST of {kind} numbers from {low:#x} to {high:#x}" if kind == "pkey" else None
    expected = expected or f"a range FIRST-LAST of {kind} numbers from {low} to {high}"
    first, dash, last = text.strip().partition("-")
    try:
        numbers = int(first.strip(), 0), int(last.strip(), 0)
    except ValueError:
        raise ValueError(expected) from None
    if not dash or not low <= numbers[0] <= numbers[1] <= high:
        raise ValueError(expected)
    return numbers


def parse_ethernet_segments(text: str) -> tuple[str, int, int]:
    """`"vlan:1000-3999"` or `"vxlan:10000-19999"`: the kind and its range. ValueError otherwise."""
    kind, colon, numbers = text.strip().partition(":")
    if not colon or kind not in ("vlan", "vxlan"):
        raise ValueError("vlan:FIRST-LAST or vxlan:FIRST-LAST")
    return (kind, *parse_range(numbers, kind))


def lowest_free(first: int, last: int, taken: Collection[int]) -> int | None:
    """The lowest number from `first` to `last` not in `taken`; None if every one is."""
    return next((number for number in range(first, last + 1) if number not in taken), None)


def subnet_prefix_length(node_count: int) -> int:
    """The prefix length of a reservation's subnet: room for twice its nodes (it may grow, and a
    node replaced keeps its address until it leaves) and the gateway, and at least a /24."""
    addresses = 2 * node_count + 1 + 2  # its hosts, the gateway, the network and broadcast addresses
    return min(MIN_PREFIX_LENGTH, 32 - (addresses - 1).bit_length())


def free_subnet(within: Iterable[IPv4Network], prefix_length: int, taken: Iterable[IPv4Network]) -> IPv4Network | None:
    """The lowest subnet of `prefix_length` inside one of `within` (in their order) that overlaps
    none of `taken`; None if there is none. Jumps over taken subnets rather than trying each block."""
    taken = sorted(taken, key=lambda network: int(network.network_address))
    for network in within:
        if network.prefixlen > prefix_length:
            continue
        size = 1 << (32 - prefix_length)
        candidate, end = int(network.network_address), int(network.broadcast_address)
        for held in taken:
            held_first, held_last = int(held.network_address), int(held.broadcast_address)
            if held_last < candidate:
                continue
            if held_first > candidate + size - 1:
                break
            candidate = (held_last // size + 1) * size  # the next block after the held one
        if candidate + size - 1 <= end:
            return IPv4Network((candidate, prefix_length))
    return None


def gateway_of(subnet: IPv4Network) -> IPv4Address:
    """A tenant subnet's gateway: its first host."""
    return subnet.network_address + 1


def lowest_free_host(subnet: IPv4Network, taken: Collection[IPv4Address]) -> IPv4Address | None:
    """The lowest host of `subnet` that is neither its gateway nor in `taken`; None if none is left."""
    # In integers: a subnet's hosts as IPv4Address objects cost a reservation of n nodes n^2 of them.
    numbers = {int(address) for address in taken}
    numbers.add(int(gateway_of(subnet)))
    first, last = _hosts(subnet)
    free = next((number for number in range(first, last + 1) if number not in numbers), None)
    return None if free is None else IPv4Address(free)


def next_host_if_packed(subnet: IPv4Network, count: int, highest: IPv4Address | None) -> IPv4Address | None:
    """The lowest free host of `subnet` from a summary of the hosts taken above its gateway (how
    many, the highest), where they leave no gap: the host after the highest. None where they may
    leave one, or none is left after it: then only every taken host tells (`lowest_free_host`)."""
    gateway = int(gateway_of(subnet))
    if highest is None:
        following = gateway + 1
    elif int(highest) - gateway == count:  # distinct hosts, as many as there are up to the highest
        following = int(highest) + 1
    else:
        return None
    return IPv4Address(following) if following <= _hosts(subnet)[1] else None


def _hosts(subnet: IPv4Network) -> tuple[int, int]:
    """The first and last host of `subnet` as integers, as `IPv4Network.hosts` counts them (a /31's
    two addresses and a /32's one are hosts, RFC 3021)."""
    if subnet.prefixlen >= 31:
        return int(subnet.network_address), int(subnet.broadcast_address)
    return int(subnet.network_address) + 1, int(subnet.broadcast_address) - 1


def partition_name(reservation_id: int) -> str:
    """A reservation's NVLink partition, the same name in every domain it spans."""
    return f"gpufleet-r{reservation_id}"
