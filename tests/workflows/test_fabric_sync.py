"""The fabric sync against bmcsim's real NVUE, UFM and NMX-M: nodes put on their reservation's
networks and read back, a manager down or refusing named on the attachments it leaves unsure,
drift put back and audited, and one NVUE revision per switch per batch."""

from __future__ import annotations

import pytest

from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node
from fleet.services import network_attachments, tenant_networks
from reservations.models import Reservation, Tenant
from tests.support.bmcsim import start_bmcsim
from tests.support.fabrics import point_managers_at, sync
from tests.support.factories import drive, enrol_default_fleet, make_available

NODES = 12  # p1: rack r01 (8 nodes, leaf p1-leaf1); p2: rack r02 (4 nodes)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    started = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield started
    started.stop()


@pytest.fixture
def managers(sim, settings, transactional_db):
    point_managers_at(settings, sim.url)
    settings.OUTBOUND_DEADLINE_SECONDS = 5
    yield sim
    assert sim.delete("/bmcsim/v1/faults", timeout=30).status_code == 200


@pytest.fixture
def fleet(managers) -> list[Node]:
    nodes = make_available(enrol_default_fleet(NODES))
    sync(full=True)  # whatever an earlier test left on the fabrics is put back where this database says
    return nodes


def serve(nodes: list[Node], tenant: str) -> Reservation:
    """The nodes provisioning for a new reservation, wanted on its networks."""
    reservation = Reservation.objects.create(tenant=Tenant.objects.create(name=tenant), node_count=len(nodes))
    for node in nodes:
        drive(node, "provision_requested", reservation=reservation)
        wanted = tenant_networks.ensure_tenant_networks(reservation_id=reservation.pk, node_id=node.pk)
        network_attachments.want_tenant_networks(node_id=node.pk, networks=wanted.networks)
    return reservation


def attachments(node: Node) -> dict[str, NetworkAttachment]:
    return {a.fabric: a for a in NetworkAttachment.objects.filter(node=node)}


def test_a_node_joined_is_put_on_every_network_and_confirmed(fleet):
    node, neighbour = fleet[0], fleet[1]
    reservation = serve([node], "alice")
    assert not network_attachments.networks_confirmed(node_id=node.pk)
    figures = sync()
    assert network_attachments.networks_confirmed(node_id=node.pk), figures
    found = {fabric: a.found for fabric, a in attachments(node).items()}
    networks = {n.fabric: n.value for n in reservation.networks.all()}
    assert found == networks and set(found) == set(FABRICS)
    assert {a.found for a in attachments(neighbour).values()} <= {"10", ""}  # untouched, on no tenant's
    confirmed = AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.NETWORKS_CONFIRMED).latest("id")
    assert confirmed.detail["memberships"] == networks


def test_a_manager_down_leaves_its_attachments_unsure_with_the_fabric_named_until_it_recovers(fleet, managers):
    node = fleet[0]
    assert managers.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": INFINIBAND}).ok
    serve([node], "alice")
    sync()
    mine = attachments(node)
    assert mine[ETHERNET].confirmed and mine[NVLINK].confirmed  # the others went on
    assert not mine[INFINIBAND].confirmed
    assert mine[INFINIBAND].problem.startswith("infiniband: p1:")
    assert network_attachments.network_problems(node_id=node.pk) == [mine[INFINIBAND].problem]

    assert managers.delete("/bmcsim/v1/faults?fabric=infiniband").ok
    sync()
    mine = attachments(node)
    assert mine[INFINIBAND].confirmed and mine[INFINIBAND].problem == ""


def test_a_manager_that_refuses_changes_is_named_too(fleet, managers):
    node = fleet[0]
    assert managers.post("/bmcsim/v1/faults", json={"kind": "fabric_apply_fails", "fabric": ETHERNET}).ok
    serve([node], "alice")
    sync()
    ethernet = attachments(node)[ETHERNET]
    assert not ethernet.confirmed and ethernet.problem.startswith("ethernet: p1-leaf1:")


@pytest.mark.parametrize("fabric", FABRICS)
def test_drift_is_put_back_and_audited_naming_fabric_port_and_segment(fleet, managers, fabric):
    node = fleet[0]
    serve([node], "alice")
    sync()
    segment = {ETHERNET: "3001", INFINIBAND: "0x3001", NVLINK: "someone-elses"}[fabric]
    drifted = {"kind": "fabric_drift", "fabric": fabric, "node": node.name, "segment": segment}
    moved = managers.post("/bmcsim/v1/faults", json=drifted)
    assert moved.ok, moved.text
    sync(full=True)
    assert network_attachments.networks_confirmed(node_id=node.pk)
    repaired = AuditEvent.objects.get(node=node, event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED)
    assert repaired.detail["fabric"] == fabric
    assert any(segment in port["found"].split(",") for port in repaired.detail["ports"])  # P_Keys: one more
    assert repaired.reason.startswith(f"{fabric}: ") and "found on" in repaired.reason and segment in repaired.reason
    assert Node.objects.get(pk=node.pk).state == "provisioning"  # put back: the node stays its tenant's


def test_a_serving_node_whose_drift_cannot_be_put_back_is_let_go_and_held(fleet, managers):
    node = fleet[0]
    reservation = serve([node], "alice")
    sync()
    Reservation.objects.filter(pk=reservation.pk).update(state="active")
    drive(Node.objects.get(pk=node.pk), "provision_succeeded")
    assert managers.post("/bmcsim/v1/faults", json={"kind": "fabric_apply_fails", "fabric": ETHERNET}).ok
    drifted = {"kind": "fabric_drift", "fabric": ETHERNET, "node": node.name, "segment": "3002"}
    assert managers.post("/bmcsim/v1/faults", json=drifted).ok
    figures = sync(full=True)
    assert figures["nodes let go"] == 1
    node = Node.objects.get(pk=node.pk)
    assert node.state == "wiping" and node.reservation_id is None
    assert Reservation.objects.get(pk=reservation.pk).state == "degraded"
    assert network_attachments.hold_reasons([node.pk])[node.pk].startswith("network_cleanup_pending: ethernet: ")

    assert managers.delete("/bmcsim/v1/faults?fabric=ethernet").ok
    sync()
    assert network_attachments.hold_reasons([node.pk]) == {}
    assert {a.found for a in attachments(node).values()} <= {"10", ""}


def test_a_batch_is_one_nvue_revision_per_switch_however_many_ports(fleet, managers):
    rack = [n for n in fleet if n.rack.name == "r01"]
    before = len(managers.get("/switches/p1-leaf1/nvue_v1/revision").json())
    serve(rack, "alice")
    sync()
    assert all(network_attachments.networks_confirmed(node_id=n.pk) for n in rack)
    assert len(managers.get("/switches/p1-leaf1/nvue_v1/revision").json()) == before + 1


def test_a_released_node_is_taken_off_and_held_until_read_back(fleet):
    node = fleet[0]
    serve([node], "alice")
    sync()
    drive(Node.objects.get(pk=node.pk), "released")
    assert network_attachments.removal_pending(node_id=node.pk)
    assert node.pk in network_attachments.hold_reasons()
    sync()
    assert not network_attachments.removal_pending(node_id=node.pk)
    assert network_attachments.hold_reasons() == {}
