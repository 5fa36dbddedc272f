"""Tenants' networks: what a reservation's networks are given as its nodes come to serve it (a
segment, a subnet, a P_Key, a partition, each node's private address), and their release once
the reservation has ended and no node is left on them.

Only rows are written here; the fabric syncer puts ports on these networks and reads them back
(NetworkAttachment). The numbers come from the lowest free of each pool (fleet/segments.py),
chosen under the reservation's row lock and then the pool's, always in that order; the database's
constraints (one live network per segment, VLAN and partition, live subnets apart, addresses
unique in their network) are the last word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, ip_network

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db import models, transaction
from django.db.models import Count, Exists, Max, OuterRef, Q
from django.db.models.functions import Now

from core.errors import Conflict
from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
from fleet import segments
from fleet.models import NetworkAttachment, Node, PrivateAddress, SegmentKind, SegmentPool, TenantNetwork

# reservations.models.ReservationState's ends (fleet does not import reservations): a reservation
# in one of them holds no node, nor will again.
RESERVATION_ENDED = ("released", "failed")


class NetworkPoolExhausted(Conflict):
    """A pool (segments, P_Keys, subnets, a subnet's addresses) has nothing free."""


class NetworksReleased(Conflict):
    """The reservation has ended: its networks are given back, or about to be."""


@dataclass(frozen=True)
class NodeNetworks:
    """The networks a node serving a reservation should be on, by fabric (only the fabrics it is
    on), and its address on the Ethernet one with that network's gateway (None without Ethernet)."""

    networks: Mapping[str, TenantNetwork]
    private_interface: IPv4Interface | None
    gateway: IPv4Address | None


def ensure_segment_pools() -> None:
    """A fabric with no pool gets one for every fabric of its kind (blank scope), from the settings
    (GPUFLEET_ETHERNET_SEGMENTS, GPUFLEET_INFINIBAND_PKEYS). Operators edit them from then on."""
    kind, first, last = settings.ETHERNET_SEGMENTS
    defaults = {
        ETHERNET: {"kind": kind, "first": first, "last": last},
        INFINIBAND: {
            "kind": SegmentKind.PKEY,
            "first": settings.INFINIBAND_PKEYS[0],
            "last": settings.INFINIBAND_PKEYS[1],
        },
    }
    for fabric, pool in defaults.items():
        if not SegmentPool.objects.filter(fabric=fabric).exists():
            SegmentPool.objects.get_or_create(fabric=fabric, scope="", defaults=pool)


def ensure_tenant_networks(*, reservation_id: int, node_id: int) -> NodeNetworks:
    """The reservation's networks on every fabric the node is on, created where missing (one per
    fabric, and per InfiniBand fabric or NVLink domain), and the node's private address.

    Idempotent: a second call answers the same. Does not put the node on them (its attachments'
    `wanted` is the syncer's to set). Raises NetworkPoolExhausted when a pool, the tenant address
    space or the subnet has nothing free, and NetworksReleased once the reservation has ended.
    """
    with transaction.atomic():
        state, node_count = (
            _reservations().select_for_update().values_list("state", "node_count").get(pk=reservation_id)
        )
        if state in RESERVATION_ENDED:
            raise NetworksReleased(f"reservation {reservation_id} has ended: its networks are given back")
        pod, rack, on = (
            Node.objects.filter(pk=node_id)
            .annotate(on=ArrayAgg("network_attachments__fabric", default=[]))
            .values_list("rack__pod__name", "rack__name", "on")
            .get()
        )
        scopes = {ETHERNET: "", INFINIBAND: pod, NVLINK: rack}
        wanted = [(fabric, scopes[fabric]) for fabric in FABRICS if fabric in on]
        mine = Q()  # this node's scopes only: a reservation spanning many racks has a network in each
        for fabric, scope in wanted:
            mine |= Q(fabric=fabric, scope=scope)
        found = TenantNetwork.objects.filter(mine, reservation_id=reservation_id) if wanted else []
        held = {(n.fabric, n.scope): n for n in found}
        networks = {}
        for fabric, scope in wanted:
            network = held.get((fabric, scope)) or _create_network(reservation_id, node_count, fabric, scope)
            if network.released_at is not None:
                raise NetworksReleased(f"reservation {reservation_id}'s {fabric} network was given back")
            networks[fabric] = network
        if (ethernet := networks.get(ETHERNET)) is None:
            return NodeNetworks(networks=networks, private_interface=None, gateway=None)
        subnet = ip_network(ethernet.subnet)
        assert isinstance(subnet, IPv4Network)  # GPUFLEET_TENANT_SUBNETS are
        address = _private_address(ethernet, subnet, node_id)
        return NodeNetworks(
            networks=networks,
            private_interface=IPv4Interface((address, subnet.prefixlen)),
            gateway=IPv4Address(ethernet.gateway),
        )


def _reservations() -> models.QuerySet:
    """reservations.Reservation's rows, reached through the node's reference to it: fleet does not
    import reservations."""
    model = Node._meta.get_field("reservation").related_model
    assert model is not None and not isinstance(model, str)  # a resolved foreign key
    return model._default_manager.all()


def _create_network(reservation_id: int, node_count: int, fabric: str, scope: str) -> TenantNetwork:
    if fabric == NVLINK:
        partition = segments.partition_name(reservation_id)
        return TenantNetwork.objects.create(
            reservation_id=reservation_id, fabric=fabric, scope=scope, partition=partition
        )
    pool = _pool(fabric, scope)
    live = TenantNetwork.objects.filter(fabric=fabric, scope=scope, released_at__isnull=True)
    taken = {segment for segment in live.values_list("segment", flat=True) if segment is not None}
    if fabric == INFINIBAND:
        pkey = _lowest_free(pool, taken)
        return TenantNetwork.objects.create(
            reservation_id=reservation_id, fabric=fabric, scope=scope, kind=SegmentKind.PKEY, segment=pkey
        )
    vlans_taken = {vlan for vlan in live.values_list("vlan", flat=True) if vlan is not None}
    vlans_taken.add(settings.PROVISIONING_VLAN)
    if pool.kind == SegmentKind.VLAN:
        segment = vlan = _lowest_free(pool, taken | vlans_taken)
    else:  # a VNI, carried on the leaf ports in a VLAN of its own
        segment = _lowest_free(pool, taken)
        if (free_vlan := segments.lowest_free(*segments.VLANS, vlans_taken)) is None:
            raise NetworkPoolExhausted("every VLAN carries a live network's VNI")
        vlan = free_vlan
    subnet = _free_subnet(node_count, live.exclude(subnet="").values_list("subnet", flat=True))
    return TenantNetwork.objects.create(
        reservation_id=reservation_id,
        fabric=fabric,
        scope=scope,
        kind=pool.kind,
        segment=segment,
        vlan=vlan,
        subnet=str(subnet),
        gateway=str(segments.gateway_of(subnet)),
    )


def _pool(fabric: str, scope: str) -> SegmentPool:
    """The fabric's pool for `scope` (its own, else the fabric's blank-scoped one), locked."""
    ensure_segment_pools()
    pools = SegmentPool.objects.select_for_update().filter(fabric=fabric, scope__in={scope, ""}).order_by("-scope")
    if (pool := pools.first()) is None:
        raise NetworkPoolExhausted(f"no {fabric} pool serves {scope or 'the fleet'}: add one in the admin")
    return pool


def _lowest_free(pool: SegmentPool, taken: set[int]) -> int:
    if (number := segments.lowest_free(pool.first, pool.last, taken)) is None:
        raise NetworkPoolExhausted(f"every number of the pool {pool} is held by a live network")
    return number


def _free_subnet(node_count: int, held: models.QuerySet) -> IPv4Network:
    length = segments.subnet_prefix_length(node_count)
    taken = [network for network in map(ip_network, held) if isinstance(network, IPv4Network)]
    spaces = [network for network in settings.TENANT_SUBNETS if isinstance(network, IPv4Network)]
    if (subnet := segments.free_subnet(spaces, length, taken)) is None:
        named = ", ".join(map(str, settings.TENANT_SUBNETS))
        raise NetworkPoolExhausted(f"no /{length} is free in the tenant subnets ({named})")
    return subnet


def _private_address(network: TenantNetwork, subnet: IPv4Network, node_id: int) -> IPv4Address:
    """The node's address on the network: the one it holds, else the lowest free host.

    Read as one summary row, not every address held (a reservation of n nodes would read n^2/2):
    hosts are given lowest first and never given back, so those held are every one from the first
    up to the highest, and the next is the one after it. Only where they are not is every one read."""
    gateway = str(segments.gateway_of(subnet))
    held = PrivateAddress.objects.filter(network=network).aggregate(
        mine=Max("address", filter=Q(node_id=node_id)),
        count=Count("pk", filter=Q(address__gt=gateway)),
        highest=Max("address", filter=Q(address__gt=gateway)),
    )
    if held["mine"] is not None:
        return IPv4Address(held["mine"])
    highest = None if held["highest"] is None else IPv4Address(held["highest"])
    address = segments.next_host_if_packed(subnet, held["count"], highest)
    if address is None:
        taken = PrivateAddress.objects.filter(network=network).values_list("address", flat=True)
        address = segments.lowest_free_host(subnet, set(map(IPv4Address, taken)))
    if address is None:
        raise NetworkPoolExhausted(f"reservation {network.reservation_id}'s subnet {subnet} has no address left")
    PrivateAddress.objects.create(network=network, node_id=node_id, address=str(address))
    return address


def release_finished_networks() -> int:
    """Give back every live network whose reservation has ended, that no node should be on and no
    node was last read back on (its removal unconfirmed); how many. Until then its segment stays
    its own, so that no other tenant is put where a node of this one may still be."""
    wanted = NetworkAttachment.objects.filter(wanted=OuterRef("pk"))
    ended = TenantNetwork.objects.filter(released_at__isnull=True, reservation__state__in=RESERVATION_ENDED)
    candidates = list(ended.exclude(Exists(wanted)))
    if not candidates:
        return 0
    unsure = NetworkAttachment.objects.filter(confirmed=False).exclude(found="").values_list("fabric", "found")
    still_on = {(fabric, member) for fabric, found in unsure for member in found.split(",")}
    free = [n.pk for n in candidates if (n.fabric, n.value) not in still_on]
    # Checked again as it is written: a node put on one since is one that wants it.
    return ended.filter(pk__in=free).exclude(Exists(wanted)).update(released_at=Now())
