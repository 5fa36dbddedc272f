"""Each node's ends on the fabrics that keep tenants apart, from the inventory to its places on
every fabric: parsed and checked, enrolled, kept once per node however often it is enrolled."""

import pytest
from django.db import IntegrityError, transaction

from core.topology import ETHERNET, INFINIBAND, NVLINK, default_layout, network_ports
from fleet.inventory import InventoryError, parse_inventory, records_from_layout
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node, SegmentPool
from fleet.services import enrol_nodes
from fleet.services.enrolment import FabricEndTaken

BMCSIM = "http://127.0.0.1:8100"
GUIDS = ["b8cef60300000001", "b8cef60300000002"]


def entry(name="node-001", *, position=1, rack="r01", gpus=1, **extra) -> dict:
    return {
        "name": name,
        "pod": "p1",
        "rack": rack,
        "position": position,
        "serial": f"S-{name}",
        "redfish_url": BMCSIM,
        "system_id": name,
        "credentials": {"username": "admin", "password": "pw"},
        "agent_url": f"{BMCSIM}/agent/{name}",
        "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "H100"} for i in range(gpus)],
        **extra,
    }


def network(switch="p1-leaf1", port="swp1", guids=GUIDS) -> dict:
    return {"ethernet": {"switch": switch, "port": port}, "infiniband": {"guids": guids}}


def test_a_nodes_network_is_parsed_with_its_guids_in_lowercase():
    document = {
        "nodes": [entry(network=network(guids=["B8CEF60300000001"]))],
        "fabric_managers": {"ethernet": f"{BMCSIM}/switches/{{switch}}"},  # the control plane's settings say where
    }
    (record,) = parse_inventory(document)
    assert (record.ethernet_switch, record.ethernet_port, record.hca_guids) == (
        "p1-leaf1",
        "swp1",
        ("b8cef60300000001",),
    )


def test_a_node_without_a_network_is_on_no_fabric():
    (record,) = parse_inventory({"nodes": [entry()]})
    assert (record.ethernet_switch, record.ethernet_port, record.hca_guids) == ("", "", ())


@pytest.mark.parametrize(
    ("network_", "message"),
    [
        ({"ethernet": {"switch": "p1-leaf1"}}, "node-001.network.ethernet.port: must be a port name"),
        ({"ethernet": {"switch": "leaf one", "port": "swp1"}}, "node-001.network.ethernet.switch: must be a switch"),
        ({"infiniband": {"guids": ["b8cef603"]}}, r"node-001.network.infiniband.guids\[0\]: must be a GUID"),
        ({"infiniband": {"guids": ["0xb8cef60300000001"]}}, "must be a GUID of 16 hex digits"),
        ({"infiniband": {"guids": []}}, "node-001.network.infiniband.guids: must be a list of HCA port GUIDs"),
        ({"infiniband": {"guids": [GUIDS[0], GUIDS[0]]}}, "node-001: names an HCA GUID twice"),
        ("swp1", "node-001.network: must be an object"),
    ],
)
def test_a_bad_network_is_refused_naming_the_place(network_, message):
    with pytest.raises(InventoryError, match=message):
        parse_inventory({"nodes": [entry(network=network_)]})


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (network(guids=["b8cef60300000009"]), "node-002: port swp1 of p1-leaf1 is node-001's too"),
        (network(port="swp2", guids=[GUIDS[1]]), "node-002: HCA GUID b8cef60300000002 is node-001's too"),
    ],
)
def test_two_nodes_never_share_a_port_or_a_guid(other, message):
    nodes = [entry(network=network()), entry("node-002", position=2, network=other)]
    with pytest.raises(InventoryError, match=message):
        parse_inventory({"nodes": nodes})


def test_the_default_layouts_records_carry_the_ports_the_layout_draws():
    layout = default_layout(12)
    ports = network_ports(layout)
    for record in records_from_layout(layout, BMCSIM):
        drawn = ports[record.name]
        assert (record.ethernet_switch, record.ethernet_port, record.hca_guids) == (
            drawn.ethernet_switch,
            drawn.ethernet_port,
            drawn.hca_guids,
        )


def places(node: str) -> set[str]:
    return set(NetworkAttachment.objects.filter(node__name=node).values_list("fabric", flat=True))


def test_enrolment_keeps_the_ends_and_gives_each_node_its_places(fleet):
    node = Node.objects.get(name="node-001")
    drawn = network_ports(default_layout(12))["node-001"]
    assert (node.ethernet_switch, node.ethernet_port, node.hca_guids) == (
        drawn.ethernet_switch,
        drawn.ethernet_port,
        list(drawn.hca_guids),
    )
    # Every node of the small fleet has GPUs in a rack of several: on all three fabrics, on no tenant's network.
    assert NetworkAttachment.objects.count() == 3 * len(fleet)
    assert places("node-001") == {ETHERNET, INFINIBAND, NVLINK}
    assert not NetworkAttachment.objects.filter(wanted__isnull=False).exists()
    assert not NetworkAttachment.objects.filter(confirmed=True).exists()
    # The pools tenants' networks start from, from the settings.
    assert set(SegmentPool.objects.values_list("fabric", "scope", "kind", "first", "last")) == {
        (ETHERNET, "", "vlan", 1000, 3999),
        (INFINIBAND, "", "pkey", 0x1000, 0x7FFE),
    }


def test_enrolling_again_adds_no_place_and_takes_the_inventorys_new_ends(fleet):
    records = records_from_layout(default_layout(12), BMCSIM)
    enrol_nodes(records=records, actor="test")
    assert NetworkAttachment.objects.count() == 3 * len(fleet)

    moved = parse_inventory({"nodes": [entry("node-001", network=network("p1-leaf9", "swp9"))]})
    enrol_nodes(records=moved, actor="test")
    node = Node.objects.get(name="node-001")
    assert (node.ethernet_switch, node.ethernet_port, node.hca_guids) == ("p1-leaf9", "swp9", GUIDS)
    assert NetworkAttachment.objects.count() == 3 * len(fleet)


def test_a_node_alone_in_its_rack_or_without_gpus_has_no_nvlink_place(db):
    alone = entry(network=network())
    no_gpus = entry("node-002", rack="r02", gpus=0, network=network(port="swp2", guids=["b8cef60300000003"]))
    enrol_nodes(records=parse_inventory({"nodes": [alone, no_gpus]}), actor="test")
    assert places("node-001") == {ETHERNET, INFINIBAND}
    assert places("node-002") == {ETHERNET, INFINIBAND}

    # A second node with GPUs in r01 makes it an NVLink domain: both get their place there.
    second = entry("node-003", position=2, network=network(port="swp3", guids=["b8cef60300000004"]))
    enrol_nodes(records=parse_inventory({"nodes": [second]}), actor="test")
    assert places("node-001") == places("node-003") == {ETHERNET, INFINIBAND, NVLINK}


def test_a_node_without_a_network_has_no_place(db):
    enrol_nodes(records=parse_inventory({"nodes": [entry()]}), actor="test")
    assert places("node-001") == set()


def test_an_end_another_node_holds_is_refused_before_anything_is_written(fleet):
    held = Node.objects.get(name="node-001")
    newcomer = entry("node-100", rack="r09", network=network(port="swp99", guids=[held.hca_guids[0]]))
    with pytest.raises(FabricEndTaken, match=f"node-100: HCA GUID {held.hca_guids[0]} is node-001's"):
        enrol_nodes(records=parse_inventory({"nodes": [newcomer]}), actor="test")
    newcomer = entry("node-100", rack="r09", network=network(held.ethernet_switch, held.ethernet_port, ["ab" * 8]))
    with pytest.raises(FabricEndTaken, match=f"port {held.ethernet_port} of {held.ethernet_switch} is node-001's"):
        enrol_nodes(records=parse_inventory({"nodes": [newcomer]}), actor="test")
    assert not Node.objects.filter(name="node-100").exists()


def test_the_database_keeps_one_node_per_switch_port(fleet):
    one, other = fleet[0], fleet[1]
    with pytest.raises(IntegrityError, match="node_one_per_ethernet_port"), transaction.atomic():
        Node.objects.filter(pk=other.pk).update(ethernet_switch=one.ethernet_switch, ethernet_port=one.ethernet_port)
    with pytest.raises(IntegrityError, match="node_ethernet_switch_and_port_together"), transaction.atomic():
        Node.objects.filter(pk=other.pk).update(ethernet_switch="")


@pytest.mark.parametrize("event", [AuditOnlyEvent.FABRIC_DRIFT_REPAIRED, AuditOnlyEvent.NETWORKS_CONFIRMED])
def test_the_fabric_events_are_audited(node, event):
    AuditEvent.objects.create(node=node, actor="fabric-sync", event=event, detail={"fabric": ETHERNET})
    assert AuditEvent.objects.filter(node=node, event=event).exists()
