"""The fabric's health, with no operator. A tenant asks for 16 nodes `preferred: leaf` and gets one
leaf; bmcsim takes that leaf switch down; the real beat and workers read it from Redfish Fabrics
within the poll interval, GET /v1/capacity counts the leaf's nodes as not available, and the
reservation is degraded and heals onto the pod's other leaf. The leaf back, its nodes are wiped
and available again.

bmcsim's 32 nodes: one pod p1 of four racks of 8, a leaf per rack pair: p1-leaf1 is r01 and r02,
p1-leaf2 is r03 and r04."""

import time
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from fleet.models import FabricSwitch, Node
from reservations.models import Reservation, ReservationEvent
from tests.support.api import post, tenant_client
from tests.support.processes import wait_for

# A reservation loses its nodes once their switch has been down 2 s: two reads.
FABRIC_POLL = {"GPUFLEET_FABRIC_POLL_SECONDS": "1", "GPUFLEET_FABRIC_LET_GO_AFTER_SECONDS": "2"}
TWO_LEAVES = {"nodes": 32, "pods": 1, "nodes_per_rack": 8, "racks_per_leaf": 2}


def leaf_available(name: str) -> int:
    pods = APIClient().get("/v1/capacity").json()["pods"]
    return next(domain["available"] for pod in pods for domain in pod["domains"] if domain["name"] == name)


def under(leaf: str) -> set[str]:
    return set(Node.objects.filter(rack__fabric_domain__name=leaf).values_list("name", flat=True))


@pytest.mark.parametrize("bmcsim", [TWO_LEAVES], indirect=True)
@pytest.mark.parametrize("control_plane", [FABRIC_POLL], indirect=True)
def test_a_reservation_on_one_leaf_heals_onto_another_when_its_leaf_switch_fails(bmcsim, control_plane):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == 32, 240)
    wait_for("every switch read", lambda: not FabricSwitch.objects.filter(read_at=None).exists(), 30)
    leaves = {"p1-leaf1": under("p1-leaf1"), "p1-leaf2": under("p1-leaf2")}
    assert [len(nodes) for nodes in leaves.values()] == [16, 16]

    answer = post(tenant_client("acme"), "/v1/reservations", {"node_count": 16, "topology": {"preferred": "leaf"}})
    assert answer.status_code == 201, answer.content
    first = set(answer.json()["nodes"])
    (leaf,) = [name for name, nodes in leaves.items() if nodes == first]  # one leaf, whole
    (other,) = set(leaves) - {leaf}
    reservation = Reservation.objects.get(pk=answer.json()["id"])
    wait_for("the reservation active", lambda: Reservation.objects.get(pk=reservation.pk).state == "active", 120)

    injected = time.monotonic()
    assert bmcsim.post("/bmcsim/v1/faults", json={"switch": leaf, "kind": "switch_down"}).status_code == 201
    wait_for("the leaf's nodes out of placement", lambda: leaf_available(leaf) == 0, timeout=10)
    cut_off = time.monotonic() - injected

    def healed() -> bool:
        now = Reservation.objects.get(pk=reservation.pk)
        serving = set(Node.objects.filter(reservation=now, state="active").values_list("name", flat=True))
        return now.state == "active" and serving == leaves[other]

    wait_for("the reservation healed onto the other leaf", healed, timeout=180)
    print(
        f"\nswitch_down {leaf} -> out of placement in {cut_off:.1f} s, "
        f"16 nodes active again on {other} in {time.monotonic() - injected:.1f} s"
    )
    lost = ReservationEvent.objects.filter(reservation=reservation, event="node_lost").values_list("detail", flat=True)
    assert len(lost) == 16 and all(detail.endswith(f"leaf switch {leaf} down") for detail in lost)

    assert bmcsim.delete(f"/bmcsim/v1/faults?switch={leaf}").status_code == 200
    wait_for("the leaf's nodes wiped and available again", lambda: leaf_available(leaf) == 16, timeout=120)
