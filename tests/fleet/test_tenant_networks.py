"""Tenants' networks: each reservation its own segment, subnet, P_Key and partition, the lowest free
of each pool, unique while live and given again once released; each node an address of its own."""

from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.topology import ETHERNET, INFINIBAND, NVLINK
from fleet import segments
from fleet.models import NetworkAttachment, PrivateAddress, SegmentPool, TenantNetwork
from fleet.services.tenant_networks import (
    RESERVATION_ENDED,
    NetworkPoolExhausted,
    NetworksReleased,
    ensure_tenant_networks,
    release_finished_networks,
)
from reservations.models import LIVE_STATES, Reservation, ReservationState
from tests.support.concurrency import at_once

# -- the pure choices ------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "length"), [(1, 24), (126, 24), (127, 23), (512, 21), (10_000, 17)])
def test_a_subnet_holds_twice_the_nodes_and_a_gateway_and_is_at_least_a_slash_24(nodes, length):
    assert segments.subnet_prefix_length(nodes) == length
    assert IPv4Network(f"10.0.0.0/{length}").num_addresses - 3 >= 2 * nodes


def test_the_lowest_free_subnet_jumps_over_those_taken():
    space = [IPv4Network("10.128.0.0/16")]
    taken = [IPv4Network("10.128.0.0/24"), IPv4Network("10.128.1.0/25"), IPv4Network("10.128.4.0/22")]
    assert segments.free_subnet(space, 24, taken) == IPv4Network("10.128.2.0/24")
    assert segments.free_subnet(space, 22, taken) == IPv4Network("10.128.8.0/22")
    assert segments.free_subnet(space, 16, taken) is None
    assert segments.free_subnet([IPv4Network("10.0.0.0/25"), *space], 24, taken) == IPv4Network("10.128.2.0/24")


def test_the_lowest_free_number_and_host():
    assert segments.lowest_free(1000, 1003, {1000, 1001}) == 1002
    assert segments.lowest_free(1000, 1001, {1000, 1001}) is None
    subnet = IPv4Network("10.128.0.0/30")  # hosts .1 (the gateway) and .2
    assert segments.lowest_free_host(subnet, set()) == IPv4Address("10.128.0.2")
    assert segments.lowest_free_host(subnet, {IPv4Address("10.128.0.2")}) is None


@pytest.mark.parametrize(
    ("text", "kind", "refused"),
    [("vlan:1000-3999", None, False), ("vxlan:10000-19999", None, False), ("vlan:1-10", None, True),
     ("vlan:20-10", None, True), ("mpls:1-2", None, True), ("vlan:x-y", None, True), ("0x1000-0x7ffe", "pkey", False),
     ("0x1000-0x7fff", "pkey", True)],
)  # fmt: skip
def test_pool_ranges_from_the_settings(text, kind, refused):
    parse = (lambda t: segments.parse_range(t, kind)) if kind else segments.parse_ethernet_segments
    if refused:
        with pytest.raises(ValueError, match="FIRST-LAST"):
            parse(text)
    else:
        parse(text)


def test_the_ended_states_are_the_reservations_that_hold_no_node_nor_will():
    assert set(RESERVATION_ENDED) == set(ReservationState.values) - set(LIVE_STATES) - {ReservationState.RELEASING}


# -- on the database ------------------------------------------------------------------------------


def reservation(tenant, node_count=2) -> Reservation:
    return Reservation.objects.create(tenant=tenant, node_count=node_count)


def end(reserved: Reservation) -> None:
    Reservation.objects.filter(pk=reserved.pk).update(state=ReservationState.RELEASED)


def test_a_reservation_gets_one_network_per_fabric_and_each_node_an_address(fleet, alice):
    reserved = reservation(alice)
    first = ensure_tenant_networks(reservation_id=reserved.pk, node_id=fleet[0].pk)
    second = ensure_tenant_networks(reservation_id=reserved.pk, node_id=fleet[1].pk)

    ethernet = first.networks[ETHERNET]
    assert (ethernet.kind, ethernet.segment, ethernet.vlan) == ("vlan", 1000, 1000)
    assert (ethernet.subnet, ethernet.gateway) == ("10.128.0.0/24", "10.128.0.1")
    infiniband, nvlink = first.networks[INFINIBAND], first.networks[NVLINK]
    assert (infiniband.scope, infiniband.segment, infiniband.value) == ("p1", 0x1000, "0x1000")
    assert (nvlink.scope, nvlink.partition) == ("r01", f"gpufleet-r{reserved.pk}")
    assert second.networks == first.networks  # the same rows: one network per fabric
    assert TenantNetwork.objects.filter(reservation=reserved).count() == 3
    assert (first.private_interface, second.private_interface) == (
        IPv4Interface("10.128.0.2/24"),
        IPv4Interface("10.128.0.3/24"),
    )
    assert first.gateway == IPv4Address("10.128.0.1")
    # Nobody is put on them here: that is the syncer's, as the node joins.
    assert not NetworkAttachment.objects.filter(wanted__isnull=False).exists()


def test_ensuring_again_answers_the_same(fleet, alice):
    reserved = reservation(alice)
    once = ensure_tenant_networks(reservation_id=reserved.pk, node_id=fleet[0].pk)
    assert ensure_tenant_networks(reservation_id=reserved.pk, node_id=fleet[0].pk) == once
    assert PrivateAddress.objects.count() == 1


def test_reservations_get_segments_subnets_and_pkeys_of_their_own(fleet, alice, bob):
    a = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    b = ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[1].pk)
    c = ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[8].pk)  # in p2, rack r02
    assert [n.networks[ETHERNET].segment for n in (a, b, c)] == [1000, 1001, 1002]
    assert [n.networks[ETHERNET].subnet for n in (a, b, c)] == ["10.128.0.0/24", "10.128.1.0/24", "10.128.2.0/24"]
    # P_Keys are per InfiniBand fabric: p2's first is free.
    assert [(n.networks[INFINIBAND].scope, n.networks[INFINIBAND].segment) for n in (a, b, c)] == [
        ("p1", 0x1000),
        ("p1", 0x1001),
        ("p2", 0x1000),
    ]
    assert c.networks[NVLINK].scope == "r02"


def test_a_big_reservation_gets_a_subnet_to_match(fleet, alice):
    given = ensure_tenant_networks(reservation_id=reservation(alice, node_count=300).pk, node_id=fleet[0].pk)
    assert given.networks[ETHERNET].subnet == "10.128.0.0/22"


def test_segments_come_back_once_the_reservation_has_ended_and_no_node_is_on_them(fleet, alice, bob):
    first = reservation(alice)
    given = ensure_tenant_networks(reservation_id=first.pk, node_id=fleet[0].pk)
    attachment = NetworkAttachment.objects.get(node=fleet[0], fabric=ETHERNET)
    NetworkAttachment.objects.filter(pk=attachment.pk).update(wanted=given.networks[ETHERNET])

    assert release_finished_networks() == 0  # live
    end(first)
    assert release_finished_networks() == 2  # the InfiniBand and NVLink ones; a node still wants the Ethernet one
    # Taken off, but not read back yet: its port may still be on the segment.
    NetworkAttachment.objects.filter(pk=attachment.pk).update(wanted=None, found="1000", confirmed=False)
    assert release_finished_networks() == 0
    NetworkAttachment.objects.filter(pk=attachment.pk).update(found="10", confirmed=True, checked_at=timezone.now())
    assert release_finished_networks() == 1
    assert not TenantNetwork.objects.filter(released_at__isnull=True).exists()

    again = ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[0].pk)
    assert again.networks[ETHERNET].segment == 1000 and again.networks[ETHERNET].subnet == "10.128.0.0/24"
    assert again.networks[INFINIBAND].segment == 0x1000


def test_an_ended_reservation_gets_no_network(fleet, alice):
    ended = reservation(alice)
    end(ended)
    with pytest.raises(NetworksReleased, match="has ended"):
        ensure_tenant_networks(reservation_id=ended.pk, node_id=fleet[0].pk)


def test_an_exhausted_pool_is_refused_with_the_pool_named(fleet, alice, bob):
    ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    SegmentPool.objects.filter(fabric=ETHERNET).update(first=1000, last=1000)
    with pytest.raises(NetworkPoolExhausted, match="ethernet: vlan 1000-1000"):
        ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[1].pk)
    assert TenantNetwork.objects.filter(reservation__tenant=bob).count() == 0  # nothing half made


def test_a_full_tenant_address_space_is_refused(fleet, alice, bob, settings):
    settings.TENANT_SUBNETS = (IPv4Network("10.128.0.0/24"),)
    ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    with pytest.raises(NetworkPoolExhausted, match="no /24 is free"):
        ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[1].pk)


def test_the_provisioning_vlan_is_never_a_tenants(fleet, alice, settings):
    SegmentPool.objects.filter(fabric=ETHERNET).update(first=settings.PROVISIONING_VLAN, last=4094)
    given = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    assert given.networks[ETHERNET].vlan == settings.PROVISIONING_VLAN + 1


def test_a_vxlan_pool_gives_vnis_each_with_a_vlan_of_its_own(fleet, alice, bob):
    SegmentPool.objects.filter(fabric=ETHERNET).update(kind="vxlan", first=10_000, last=19_999)
    a = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk).networks[ETHERNET]
    b = ensure_tenant_networks(reservation_id=reservation(bob).pk, node_id=fleet[1].pk).networks[ETHERNET]
    assert [(n.kind, n.segment, n.vlan) for n in (a, b)] == [("vxlan", 10_000, 2), ("vxlan", 10_001, 3)]


def test_a_fabric_pool_of_its_own_comes_before_the_fleets(fleet, alice):
    SegmentPool.objects.create(fabric=INFINIBAND, scope="p1", kind="pkey", first=0x2000, last=0x20FF)
    given = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    assert given.networks[INFINIBAND].segment == 0x2000


def test_a_node_not_on_a_fabric_gets_no_network_there(fleet, alice):
    NetworkAttachment.objects.filter(node=fleet[0]).exclude(fabric=ETHERNET).delete()
    given = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    assert set(given.networks) == {ETHERNET}


def test_live_subnets_never_overlap_and_segments_are_once_live(fleet, alice, bob):
    given = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk).networks[ETHERNET]
    other = reservation(bob)
    overlapping = TenantNetwork(
        reservation=other, fabric=ETHERNET, kind="vlan", segment=1500, vlan=1500, subnet="10.128.0.128/25",
        gateway="10.128.0.129",
    )  # fmt: skip
    with pytest.raises(ValidationError, match="tenant_network_subnets_apart"):
        overlapping.full_clean()
    with pytest.raises(IntegrityError, match="tenant_network_subnets_apart"), transaction.atomic():
        overlapping.save()
    same_vlan = TenantNetwork(
        reservation=other, fabric=ETHERNET, kind="vlan", segment=given.segment, vlan=given.vlan, subnet="10.200.0.0/24",
        gateway="10.200.0.1",
    )  # fmt: skip
    with pytest.raises(IntegrityError, match="tenant_network_segment_once_live"), transaction.atomic():
        same_vlan.save()
    # Released, its subnet and segment are free again.
    TenantNetwork.objects.filter(pk=given.pk).update(released_at=timezone.now())
    overlapping.save()


def test_a_private_address_is_unique_in_its_network(fleet, alice):
    given = ensure_tenant_networks(reservation_id=reservation(alice).pk, node_id=fleet[0].pk)
    assert given.private_interface is not None
    taken = str(given.private_interface.ip)
    with pytest.raises(IntegrityError, match="private_address_unique_in_network"), transaction.atomic():
        PrivateAddress.objects.create(network=given.networks[ETHERNET], node=fleet[1], address=taken)


@pytest.mark.django_db(transaction=True)
def test_two_nodes_of_one_reservation_at_once_share_one_network_with_addresses_apart(fleet, alice):
    reserved = reservation(alice, node_count=4)
    given = []
    at_once(
        *(lambda n=n: given.append(ensure_tenant_networks(reservation_id=reserved.pk, node_id=n.pk)) for n in fleet[:4])
    )
    assert TenantNetwork.objects.filter(reservation=reserved, fabric=ETHERNET).count() == 1
    assert len({g.networks[ETHERNET].pk for g in given}) == 1
    assert sorted(str(g.private_interface) for g in given) == [f"10.128.0.{h}/24" for h in (2, 3, 4, 5)]


@pytest.mark.django_db(transaction=True)
def test_two_reservations_at_once_get_segments_apart(fleet, alice, bob):
    first, second = reservation(alice), reservation(bob)
    given = []
    at_once(
        lambda: given.append(ensure_tenant_networks(reservation_id=first.pk, node_id=fleet[0].pk)),
        lambda: given.append(ensure_tenant_networks(reservation_id=second.pk, node_id=fleet[1].pk)),
    )
    assert sorted(g.networks[ETHERNET].segment or 0 for g in given) == [1000, 1001]
