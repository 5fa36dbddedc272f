"""What a tenant asks placement for through the API: fabric levels (`topology`, `whole`), a GPU
model and node attributes; kept on the reservation, so that healing and growth ask for the same
inside the domain it was placed in.

The fleet: 32 nodes, a leaf per rack. p1 is r01 (node-001..008, p1-leaf1) and r02 (009..016,
p1-leaf2); p2 is r03 (017..024, p2-leaf1) and r04 (025..032, p2-leaf2). r02's nodes have B200
GPUs and a cx8 NIC; the others H100s and a cx7.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from core.topology import default_layout
from fleet.fabric_health import CRITICAL
from fleet.inventory import records_from_layout
from fleet.models import FabricSwitch, Node
from fleet.services import enrol_nodes
from reservations import services
from reservations.models import Reservation
from reservations.selectors import nodes_cut_off, reservation_nodes
from tests.support.api import post
from tests.support.factories import bring_up, make_available

R01 = [f"node-{n:03d}" for n in range(1, 9)]
R02 = [f"node-{n:03d}" for n in range(9, 17)]
R03 = [f"node-{n:03d}" for n in range(17, 25)]


@pytest.fixture
def leaf_fleet(db) -> list[Node]:
    records = []
    for record in records_from_layout(default_layout(32, racks_per_leaf=1), "http://127.0.0.1:8100"):
        newer = record.rack.endswith("r02")
        gpus = tuple(replace(gpu, model="NVIDIA B200" if newer else gpu.model) for gpu in record.gpus)
        records.append(replace(record, gpus=gpus, attributes={"nic": "cx8" if newer else "cx7"}))
    enrol_nodes(records=records, actor="test")
    return make_available(list(Node.objects.order_by("name")))


def reserve(client, **body):
    return post(client, "/v1/reservations", {"node_count": 1, **body})


def test_preferred_leaf_keeps_a_reservation_on_one_leaf_and_the_answer_says_what_was_asked(acme, leaf_fleet):
    answer = reserve(acme, node_count=8, topology={"preferred": "leaf"})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert len({Node.objects.get(name=n).rack.name for n in body["nodes"]}) == 1
    assert body["topology"] == {"required": "pod", "preferred": "leaf"}
    assert (body["whole"], body["gpu_model"], body["attributes"]) == (None, None, {})
    assert body["placed_in"] in ("p1", "p2")


def test_required_leaf_is_refused_with_the_level_that_was_short(acme, leaf_fleet):
    answer = reserve(acme, node_count=12, topology={"required": "leaf"})
    assert answer.status_code == 409
    assert answer.json()["detail"] == "no leaf has 12 free nodes; the most is p1-leaf1 with 8"
    placed = reserve(acme, node_count=6, topology={"required": "leaf"}).json()
    assert placed["placed_in"].startswith(("p1-leaf", "p2-leaf"))


def test_whole_leaves_are_taken_whole(acme, leaf_fleet):
    answer = reserve(acme, node_count=16, whole="leaf")
    assert answer.status_code == 201, answer.content
    racks = {Node.objects.get(name=n).rack.name for n in answer.json()["nodes"]}
    assert len(racks) == 2 and answer.json()["whole"] == "leaf"
    assert reserve(acme, node_count=12, whole="leaf").status_code == 409


@pytest.mark.parametrize(
    "body, field",
    [
        ({"topology": {"required": "rail"}}, "topology.required"),
        ({"topology": {"preferred": "spine_group"}}, "topology.preferred"),
        ({"topology": {"required": "leaf", "favourite": "pod"}}, "topology.favourite"),
        ({"topology": "leaf"}, "topology"),
        ({"whole": "pod", "topology": {"required": "leaf"}}, "whole"),
        ({"whole": "leaf", "rack_scale": True}, "rack_scale"),
        ({"attributes": {"NIC": "cx7"}}, "attributes.NIC"),
        ({"attributes": {"nic": 7}}, "attributes.nic"),
        ({"attributes": ["nic"]}, "attributes"),
        ({"gpu_model": "x" * 129}, "gpu_model"),
    ],
)
def test_bad_levels_and_selectors_are_400_naming_the_field(acme, fleet, body, field):
    answer = reserve(acme, **body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith(f"{field}: "), answer.json()


def test_gpu_model_and_attributes_select_the_nodes(acme, leaf_fleet):
    newer = reserve(acme, node_count=3, gpu_model="NVIDIA B200")
    assert newer.status_code == 201, newer.content
    assert set(newer.json()["nodes"]) <= set(R02) and newer.json()["gpu_model"] == "NVIDIA B200"
    cx8 = reserve(acme, node_count=5, attributes={"nic": "cx8"})
    assert set(cx8.json()["nodes"]) <= set(R02) and cx8.json()["attributes"] == {"nic": "cx8"}

    refused = reserve(acme, node_count=1, gpu_model="NVIDIA B200", attributes={"nic": "cx8"})
    assert refused.status_code == 409
    assert refused.json()["detail"].endswith("free nodes with GPU model NVIDIA B200 and nic=cx8; the most is p1 with 0")
    unknown = reserve(acme, gpu_model="NVIDIA GB300")
    assert (unknown.status_code, unknown.json()["detail"]) == (409, "no node has GPU model NVIDIA GB300")


def test_a_heal_stays_in_the_domain_it_was_placed_in_with_what_it_asked_for(acme, leaf_fleet):
    body = reserve(acme, node_count=4, topology={"required": "leaf"}, gpu_model="NVIDIA B200").json()
    reservation = Reservation.objects.get(pk=body["id"])
    assert reservation.placed_in == "p1-leaf2"
    lost = Node.objects.get(name=body["nodes"][0])
    services.let_node_go(node_id=lost.pk, reservation_id=reservation.pk, reason="test", actor="test")
    services.heal_reservation(reservation_id=reservation.pk)
    now = held(reservation)
    assert len(now) == 4 and now <= set(R02) and lost.name not in now

    # Nothing left of its kind in its leaf: it waits there, however free the other leaves are.
    others = reserve(acme, node_count=3, gpu_model="NVIDIA B200").json()["nodes"]
    assert len(others) == 3
    victim = Node.objects.get(name=sorted(now)[0])
    services.let_node_go(node_id=victim.pk, reservation_id=reservation.pk, reason="test", actor="test")
    healed = services.heal_reservation(reservation_id=reservation.pk)
    assert healed.state == "degraded" and "waiting for capacity" in healed.reason
    assert len(held(reservation)) == 3


def test_growth_takes_nodes_of_the_same_model_in_the_same_pod(acme, leaf_fleet):
    body = reserve(acme, node_count=2, gpu_model="NVIDIA B200").json()
    grown = acme.patch(f"/v1/reservations/{body['id']}", {"node_count": 5}, format="json")
    assert grown.status_code == 200, grown.content
    assert set(grown.json()["nodes"]) <= set(R02)


def held(reservation) -> set[str]:
    return set(reservation_nodes([reservation])[reservation.pk])


def test_a_leaf_that_goes_down_moves_its_reservation_to_another_leaf_of_its_pod(acme, leaf_fleet):
    body = reserve(acme, node_count=8, pod="p1", topology={"preferred": "leaf"}).json()
    reservation = Reservation.objects.get(pk=body["id"])
    first = held(reservation)
    assert first in (set(R01), set(R02)) and reservation.placed_in == "p1"
    leaf = "p1-leaf1" if first == set(R01) else "p1-leaf2"
    bring_up(reservation)
    assert services.let_go_of_cut_off_nodes() == 0  # every switch healthy: nothing moves

    FabricSwitch.objects.filter(name=leaf).update(health=CRITICAL, state="UnavailableOffline")
    assert services.let_go_of_cut_off_nodes() == 8
    reservation.refresh_from_db()
    assert reservation.state == "degraded"
    assert reservation.reason.endswith(f"cut off from the fabric: leaf switch {leaf} down; placing a replacement")
    assert set(Node.objects.filter(name__in=first).values_list("state", flat=True)) == {"wiping"}
    assert services.let_go_of_cut_off_nodes() == 0  # let go once

    services.heal_reservation(reservation_id=reservation.pk)
    assert held(reservation) == ({*R01, *R02} - first)  # the pod's other leaf, whole


def test_nodes_given_back_are_not_lost_nodes(acme, leaf_fleet):
    body = reserve(acme, node_count=4).json()
    reservation = Reservation.objects.get(pk=body["id"])
    assert bring_up(reservation).state == "active"
    assert acme.patch(f"/v1/reservations/{body['id']}", {"node_count": 2}, format="json").status_code == 200
    events = list(reservation.events.values_list("event", flat=True))
    assert "node_lost" not in events and events[-1] == "changed"
    reservation.refresh_from_db()
    assert reservation.state == "active"


def test_a_switch_down_only_a_moment_keeps_its_nodes_out_of_placement_but_takes_them_from_no_one(acme, leaf_fleet):
    body = reserve(acme, node_count=8, pod="p1", topology={"preferred": "leaf"}).json()
    reservation = Reservation.objects.get(pk=body["id"])
    bring_up(reservation)
    domain = Node.objects.get(name=body["nodes"][0]).rack.fabric_domain
    assert domain is not None
    leaf = domain.name
    down = FabricSwitch.objects.filter(name=leaf)
    down.update(health=CRITICAL, state="UnavailableOffline", troubled_since=timezone.now())
    assert len(nodes_cut_off()) == 8  # placement keeps off them at once
    with override_settings(FABRIC_LET_GO_AFTER_SECONDS=60):
        assert services.let_go_of_cut_off_nodes() == 0
        assert held(reservation) == set(body["nodes"])
        down.update(troubled_since=timezone.now() - timedelta(seconds=61))
        assert services.let_go_of_cut_off_nodes() == 8
