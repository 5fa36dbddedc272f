"""Who a booted tenant node reaches, from the fabric managers' state (bmcsim/reachability.py): pure,
over a Fleet of bmcsim's own state classes, its ports moved through the managers as their APIs or
a hand at the switch would move them."""

from __future__ import annotations

import pytest

from bmcsim import reachability
from bmcsim.state import Fleet
from bmcsim.store import Store
from core.topology import default_layout

NOW = 1000.0

# 16 nodes, 2 GPUs each, 4 a rack (NVLink domain): p1-leaf1 holds node-001..008 (r01, r02),
# p2-leaf1 node-009..016 (r03, r04); InfiniBand fabrics p1 and p2.
A1, A2, B1, FAR = "node-001", "node-002", "node-003", "node-009"


@pytest.fixture
def fleet(tmp_path) -> Fleet:
    specs = default_layout(16, nodes_per_rack=4, pod_count=2, gpus_per_node=2, racks_per_leaf=2)
    fleet = Fleet(specs, Store(tmp_path))
    for number, name in enumerate((A1, A2, B1, FAR), start=1):
        boot_tenant(fleet, name, private_address=f"10.128.0.{number}")
    return fleet


def boot_tenant(fleet: Fleet, name: str, private_address: str | None) -> None:
    node = fleet.nodes[name]
    node.power_on, node.booted_at = True, 0.0
    node.guest = {"address": f"127.62.0.{name[-1]}", "private_address": private_address}


def private(fleet: Fleet, name: str) -> str:
    tenant = fleet.nodes[name].guest
    assert tenant is not None
    return tenant["private_address"]


def provisioning(fleet: Fleet, name: str) -> str:
    return fleet.fabric.ports[name].provisioning_address


def move_port(fleet: Fleet, name: str, vlan: int) -> None:
    ports = fleet.fabric.ports[name]
    fleet.fabric.nvue[ports.ethernet_switch].drift(ports.ethernet_port, str(vlan))


def map_vni(fleet: Fleet, switch: str, vlan: int, vni: int) -> None:
    """Map the VLAN to a VNI on the switch through an NVUE revision, as the control plane would."""
    nvue = fleet.fabric.nvue[switch]
    revision = nvue.create_revision("admin", NOW)
    nvue.stage(revision, {"bridge": {"domain": {"br_default": {"vlan": {str(vlan): {"vni": {str(vni): {}}}}}}}})
    nvue.apply(revision, NOW, 0.0, fails=False)
    nvue.settle(NOW)
    assert nvue.vni(vlan) == vni


def test_a_node_reaches_its_own_addresses_and_any_loopback(fleet):
    for address in (private(fleet, A1), provisioning(fleet, A1), "127.62.0.1", "127.0.0.1", "::1"):
        assert reachability.ping(fleet, A1, address, NOW), address
    move_port(fleet, A1, 1001)
    assert reachability.ping(fleet, A1, private(fleet, A1), NOW)


def test_private_addresses_answer_on_the_same_vlan_only(fleet):
    for name in (A1, A2, FAR):
        move_port(fleet, name, 1001)
    move_port(fleet, B1, 1002)

    assert reachability.ping(fleet, A1, private(fleet, A2), NOW)
    assert reachability.ping(fleet, A2, private(fleet, A1), NOW)
    assert reachability.ping(fleet, A1, private(fleet, FAR), NOW), "a VLAN is stretched over every leaf"
    assert not reachability.ping(fleet, A1, private(fleet, B1), NOW)
    assert not reachability.ping(fleet, B1, private(fleet, A1), NOW)
    assert not reachability.ping(fleet, A1, "10.128.0.99", NOW), "an address nobody holds"


def test_a_node_without_a_private_address_or_not_booted_is_not_reached(fleet):
    for name in (A1, A2):
        move_port(fleet, name, 1001)
    address = private(fleet, A2)
    boot_tenant(fleet, A1, private_address=None)
    assert not reachability.ping(fleet, A1, address, NOW)

    boot_tenant(fleet, A1, private_address="10.128.0.1")
    fleet.nodes[A2].booted_at = NOW + 10  # still booting
    assert not reachability.ping(fleet, A1, address, NOW)
    fleet.nodes[A2].booted_at, fleet.nodes[A2].power_on = 0.0, False
    assert not reachability.ping(fleet, A1, address, NOW)


def test_the_same_private_address_in_two_tenants_answers_on_ones_own_segment(fleet):
    boot_tenant(fleet, A2, private_address="10.128.0.7")
    boot_tenant(fleet, B1, private_address="10.128.0.7")
    move_port(fleet, A1, 1001)
    move_port(fleet, A2, 1002)
    move_port(fleet, B1, 1001)
    assert reachability.ping(fleet, A1, "10.128.0.7", NOW)
    move_port(fleet, B1, 1003)
    assert not reachability.ping(fleet, A1, "10.128.0.7", NOW)


def test_vnis_must_match_where_a_vlan_is_mapped(fleet):
    move_port(fleet, A1, 1001)
    move_port(fleet, FAR, 1001)
    map_vni(fleet, "p1-leaf1", 1001, 5001)
    assert not reachability.ping(fleet, A1, private(fleet, FAR), NOW), "mapped on one leaf only"
    map_vni(fleet, "p2-leaf1", 1001, 5002)
    assert not reachability.ping(fleet, A1, private(fleet, FAR), NOW)
    other = fleet.fabric.nvue["p2-leaf1"]
    revision = other.create_revision("admin", NOW)
    other.stage(revision, {"bridge": {"domain": {"br_default": {"vlan": {"1001": {"vni": None}}}}}})
    other.apply(revision, NOW, 0.0, fails=False)
    other.settle(NOW)
    map_vni(fleet, "p2-leaf1", 1001, 5001)
    assert reachability.ping(fleet, A1, private(fleet, FAR), NOW)


def test_provisioning_addresses_answer_while_both_ports_are_on_the_provisioning_vlan(fleet):
    assert reachability.ping(fleet, A1, provisioning(fleet, A2), NOW)
    assert reachability.ping(fleet, A1, provisioning(fleet, FAR), NOW)
    assert reachability.ping(fleet, A1, provisioning(fleet, "node-004"), NOW), "an agent of a node with no tenant OS"
    assert reachability.ping(fleet, A1, private(fleet, A2), NOW), "both private, both on the same (provisioning) VLAN"

    move_port(fleet, A1, 1001)
    assert not reachability.ping(fleet, A1, provisioning(fleet, A2), NOW)
    assert not reachability.ping(fleet, A2, provisioning(fleet, A1), NOW)
    move_port(fleet, A2, 1001)
    assert not reachability.ping(fleet, A1, provisioning(fleet, A2), NOW), "on one VLAN, but not the provisioning one"

    fleet.nodes["node-004"].power_on = False
    assert not reachability.ping(fleet, B1, provisioning(fleet, "node-004"), NOW)


def test_management_addresses_are_never_reached_in_band(fleet):
    for target in (A1, A2, FAR, "node-004"):
        assert not reachability.ping(fleet, A1, fleet.fabric.ports[target].management_address, NOW)


def guids(fleet: Fleet, name: str) -> tuple[str, ...]:
    return fleet.fabric.ports[name].hca_guids


def add_to_partition(fleet: Fleet, name: str, pkey: str, membership: str) -> None:
    ufm = fleet.fabric.ufm[fleet.fabric.ports[name].infiniband_fabric]
    ufm.add_guids({"pkey": pkey, "guids": list(guids(fleet, name)), "membership": membership})


def test_infiniband_ports_reach_each_other_sharing_a_pkey_with_a_full_member(fleet):
    assert reachability.ib_reaches(fleet, A1, guids(fleet, A1)[1]), "its own port"
    assert not reachability.ib_reaches(fleet, A1, guids(fleet, A2)[0]), "two limited members of the default partition"

    add_to_partition(fleet, A1, "0x1001", "full")
    add_to_partition(fleet, A2, "0x1001", "full")
    add_to_partition(fleet, B1, "0x1001", "limited")
    add_to_partition(fleet, "node-004", "0x1002", "full")
    assert reachability.ib_reaches(fleet, A1, guids(fleet, A2)[1])
    assert reachability.ib_reaches(fleet, A2, guids(fleet, A1)[0])
    assert reachability.ib_reaches(fleet, A1, guids(fleet, B1)[0]), "a full member reaches a limited one"
    assert reachability.ib_reaches(fleet, B1, guids(fleet, A1)[0]), "and the limited one the full one"
    assert not reachability.ib_reaches(fleet, A1, guids(fleet, "node-004")[0]), "another P_Key"

    add_to_partition(fleet, "node-005", "0x1001", "limited")
    assert not reachability.ib_reaches(fleet, B1, guids(fleet, "node-005")[0]), "two limited members"
    assert not reachability.ib_reaches(fleet, A1, guids(fleet, FAR)[0]), "another InfiniBand fabric"
    assert not reachability.ib_reaches(fleet, A1, "00000000deadbeef"), "no such port"


def test_a_full_member_of_the_default_partition_by_hand_reaches_every_port(fleet):
    ufm = fleet.fabric.ufm["p1"]
    ufm.drift(guids(fleet, A1), "0x7fff")
    assert reachability.ib_reaches(fleet, A1, guids(fleet, "node-008")[0])
    assert reachability.ib_reaches(fleet, "node-008", guids(fleet, A1)[0])
    assert not reachability.ib_reaches(fleet, A2, guids(fleet, "node-008")[0])


def gpus(fleet: Fleet, name: str) -> list[str]:
    return fleet.fabric.gpus[name]


def test_nvlink_peers_are_other_nodes_gpus_in_the_same_partition(fleet):
    nmx = fleet.fabric.nmx["r01"]
    assert reachability.nvlink_peers(fleet, A1) == [], "no partition"

    nmx.drift(tuple(gpus(fleet, A1)), "tenant-a", NOW)
    nmx.drift(tuple(gpus(fleet, A2)), "tenant-a", NOW)
    nmx.drift(tuple(gpus(fleet, B1)), "tenant-b", NOW)
    assert reachability.nvlink_peers(fleet, A1) == gpus(fleet, A2)
    assert reachability.nvlink_peers(fleet, A2) == gpus(fleet, A1)
    assert reachability.nvlink_peers(fleet, B1) == []
    assert reachability.nvlink_peers(fleet, "node-004") == []

    fleet.fabric.nmx["r03"].drift(tuple(gpus(fleet, FAR)), "tenant-a", NOW)  # the same name, another domain
    assert reachability.nvlink_peers(fleet, A1) == gpus(fleet, A2)
    assert reachability.nvlink_peers(fleet, FAR) == []
