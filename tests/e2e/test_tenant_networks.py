"""Tenants' networks with real workers, beat and bmcsim's NVUE, UFM and NMX-M, no operator.

A reservation becomes active only once every node's membership on every fabric was read back;
while UFM is down it stays provisioning with a reason naming InfiniBand, and goes active once UFM
is back. Drift of each fabric is put back within a sync period and audited. A release while NVUE
is down leaves the nodes held (network_cleanup_pending), out of placement and unwiped, until NVUE
is back and their removal is read back.

bmcsim's 8 nodes: one pod p1, racks r01 and r02 (two NVLink domains) under one leaf p1-leaf1."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node
from fleet.workflow_steps import StepName
from reservations.models import Reservation, ReservationEvent
from reservations.selectors import nodes_cut_off
from tests.support.api import post, tenant_client
from tests.support.invariants import check_all
from tests.support.processes import wait_for

SMALL = {"nodes": 8, "pods": 1, "nodes_per_rack": 4, "racks_per_leaf": 2}
FAST_SYNC = {"GPUFLEET_FABRIC_SYNC_SECONDS": "1"}


def start(bmcsim, control_plane) -> None:
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == SMALL["nodes"], 240)


def reserve(nodes: int) -> Reservation:
    answer = post(tenant_client("acme"), "/v1/reservations", {"node_count": nodes})
    assert answer.status_code == 201, answer.content
    return Reservation.objects.get(pk=answer.json()["id"])


def state_of(reservation: Reservation) -> str:
    return Reservation.objects.get(pk=reservation.pk).state


def confirmed_before_active(reservation: Reservation) -> None:
    """Every node's memberships were read back, each before the reservation went active."""
    active = ReservationEvent.objects.filter(reservation=reservation, event="active").latest("id").at
    for node in Node.objects.filter(reservation=reservation):
        attachments = NetworkAttachment.objects.filter(node=node)
        assert {a.fabric for a in attachments if a.confirmed and a.wanted_id} == set(FABRICS), node.name
        confirmed = AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.NETWORKS_CONFIRMED).latest("id")
        assert confirmed.at <= active


@pytest.mark.parametrize("bmcsim", [SMALL], indirect=True)
@pytest.mark.parametrize("control_plane", [FAST_SYNC], indirect=True)
def test_a_reservation_waits_for_ufm_then_goes_active_and_drift_is_put_back(bmcsim, control_plane):
    start(bmcsim, control_plane)
    assert bmcsim.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": INFINIBAND}).ok
    reservation = reserve(2)

    def waiting_on_infiniband() -> bool:
        now = Reservation.objects.get(pk=reservation.pk)
        steps = set(Node.objects.filter(reservation=reservation).values_list("step", flat=True))
        return now.state == "provisioning" and "infiniband" in now.reason and steps == {"wait_for_tenant_networks"}

    wait_for("every node waiting and the reservation naming infiniband", waiting_on_infiniband, 120)
    nodes = list(Node.objects.filter(reservation=reservation))

    assert bmcsim.delete("/bmcsim/v1/faults?fabric=infiniband").ok
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 60)
    assert Reservation.objects.get(pk=reservation.pk).reason == ""
    confirmed_before_active(reservation)

    node = nodes[0]
    for fabric, segment in ((ETHERNET, "3001"), (INFINIBAND, "0x3001"), (NVLINK, "someone-elses")):
        drift = {"kind": "fabric_drift", "fabric": fabric, "node": node.name, "segment": segment}
        assert bmcsim.post("/bmcsim/v1/faults", json=drift).ok

        def repaired(fabric: str = fabric) -> bool:
            rows = AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED)
            return rows.filter(detail__fabric=fabric).exists()

        wait_for(f"the {fabric} drift put back", repaired, 30)
        row = AuditEvent.objects.get(node=node, event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED, detail__fabric=fabric)
        assert segment in row.reason
    assert state_of(reservation) == "active"
    assert Node.objects.get(pk=node.pk).state == "active"
    assert check_all() == []


@pytest.mark.parametrize("bmcsim", [SMALL], indirect=True)
@pytest.mark.parametrize("control_plane", [FAST_SYNC], indirect=True)
def test_a_release_while_nvue_is_down_holds_the_nodes_until_their_removal_is_read_back(bmcsim, control_plane):
    start(bmcsim, control_plane)
    reservation = reserve(2)
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 120)
    names = sorted(Node.objects.filter(reservation=reservation).values_list("name", flat=True))

    assert bmcsim.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": ETHERNET}).ok
    released = tenant_client("acme").post(f"/v1/reservations/{reservation.pk}/release")
    assert released.status_code == 200, released.content

    def held() -> bool:
        nodes = Node.objects.filter(name__in=names)
        return all(n.state == "wiping" and n.step == StepName.LEAVE_TENANT_NETWORKS for n in nodes)

    wait_for("the released nodes held at leave_tenant_networks", held, 60)
    operator = APIClient()
    operator.force_login(get_user_model().objects.create_superuser("operator", password="not-the-demo-one"))
    for name in names:
        answer = operator.get(f"/v1/nodes/{name}").json()
        assert answer["hold_reason"].startswith("network_cleanup_pending: ethernet: "), answer
    ids = set(Node.objects.filter(name__in=names).values_list("pk", flat=True))
    assert ids <= nodes_cut_off().keys()  # placement gives them to no one, for any period

    assert bmcsim.delete("/bmcsim/v1/faults?fabric=ethernet").ok
    wait_for("the held nodes wiped and available", lambda: ids.isdisjoint(nodes_cut_off()), 60)
    for node in Node.objects.filter(name__in=names):
        assert {a.found for a in NetworkAttachment.objects.filter(node=node)} <= {"10", ""}
    assert check_all() == []
