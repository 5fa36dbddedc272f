"""The fabric's health, with no operator: bmcsim takes a leaf switch down, the real beat and workers
read it from Redfish Fabrics within the poll interval, GET /v1/capacity counts the leaf's nodes as
not available and a new reservation lands elsewhere; the leaf back, its nodes are available again.

bmcsim's 24 nodes: p1 is r01 and r02 under p1-leaf1, p2 is r03 under p2-leaf1."""

import time
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from fleet.models import FabricSwitch, Node
from reservations import services
from reservations.models import Tenant
from tests.support.processes import wait_for

FABRIC_POLL = {"GPUFLEET_FABRIC_POLL_SECONDS": "1"}


def leaf_available(name: str) -> int:
    pods = APIClient().get("/v1/capacity").json()["pods"]
    return next(domain["available"] for pod in pods for domain in pod["domains"] if domain["name"] == name)


@pytest.mark.parametrize("control_plane", [FABRIC_POLL], indirect=True)
def test_a_leaf_switch_down_takes_its_nodes_out_of_placement_until_it_is_back(bmcsim, control_plane):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    nodes = Node.objects.count()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == nodes, 180)
    wait_for("every switch read", lambda: not FabricSwitch.objects.filter(read_at=None).exists(), 30)
    under_leaf = set(Node.objects.filter(rack__fabric_domain__name="p1-leaf1").values_list("name", flat=True))
    assert len(under_leaf) == 16 and leaf_available("p1-leaf1") == 16

    injected = time.monotonic()
    assert bmcsim.post("/bmcsim/v1/faults", json={"switch": "p1-leaf1", "kind": "switch_down"}).status_code == 201
    wait_for("the leaf's nodes unavailable", lambda: leaf_available("p1-leaf1") == 0, timeout=10)
    print(f"\nswitch_down p1-leaf1 -> its nodes out of placement in {time.monotonic() - injected:.1f} s")
    reservation = services.create_reservation(tenant=Tenant.objects.create(name="acme"), node_count=2, actor="test")
    held = set(reservation.allocations.values_list("node__name", flat=True))
    assert len(held) == 2 and not held & under_leaf

    assert bmcsim.delete("/bmcsim/v1/faults?switch=p1-leaf1").status_code == 200
    wait_for("the leaf's nodes available again", lambda: leaf_available("p1-leaf1") == 16, timeout=10)
