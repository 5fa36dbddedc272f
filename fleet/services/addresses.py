"""Tenant-network addresses: a pod's pools, and a node's address while it serves a tenant."""

from __future__ import annotations

import ipaddress

from django.db import IntegrityError, transaction

from core.errors import Conflict
from fleet.models import AddressPool, Node, NodeAddress, Pod

ADDRESS_ATTEMPTS = 8


class NoAddressFree(Conflict):
    pass


def assign_address(*, node_id: int) -> NodeAddress | None:
    """The serving node's tenant-network address, from its pod's pools, lowest free first.

    None if its pod has no pool (the tenant network is then the site's DHCP). Raises
    NoAddressFree if every pool of the pod is full. Two nodes taking the same address at
    once are told apart by the unique address: the loser takes the next one.
    """
    node = Node.objects.select_related("rack").get(pk=node_id)
    if (held := NodeAddress.objects.filter(node_id=node_id).select_related("pool").first()) is not None:
        return held
    pools = list(AddressPool.objects.filter(pod_id=node.rack.pod_id).order_by("id"))
    if not pools:
        return None
    for _ in range(ADDRESS_ATTEMPTS):
        free = _first_free(pools)
        if free is None:
            raise NoAddressFree(f"every address of pod {node.rack.pod.name}'s pools is taken")
        pool, address = free
        try:
            with transaction.atomic():
                return NodeAddress.objects.create(node_id=node_id, pool=pool, address=address)
        except IntegrityError:
            continue
    raise NoAddressFree(f"lost {ADDRESS_ATTEMPTS} races for an address in pod {node.rack.pod.name}")


def _first_free(pools: list[AddressPool]) -> tuple[AddressPool, str] | None:
    for pool in pools:
        network = ipaddress.ip_network(pool.network)
        taken = {
            ipaddress.ip_address(a) for a in NodeAddress.objects.filter(pool=pool).values_list("address", flat=True)
        }
        if pool.gateway:
            taken.add(ipaddress.ip_address(pool.gateway))
        for address in network.hosts():
            if address not in taken:
                return pool, str(address)
    return None


def add_address_pool(*, pod: str, network: str, gateway: str | None = None, ssh_port: int = 22) -> bool:
    """Give the pod a pool of tenant-network addresses; False if it has that pool already.
    Raises django's ValidationError for a network that is not one, or a gateway outside it."""
    pool = AddressPool(pod=Pod.objects.get(name=pod), network=network, gateway=gateway, ssh_port=ssh_port)
    if AddressPool.objects.filter(network=network, pod=pool.pod).exists():
        return False
    pool.full_clean()
    pool.save()
    return True
