"""Placement keeps off the nodes an unhealthy switch cuts off, and GET /v1/capacity counts them as
not free: the switches' rows set as the fabric sweep sets them, the reservations made by the real
service. The 12-node fleet: p1 is r01 (node-001..008) under p1-leaf1, p2 is r02 (node-009..012)
under p2-leaf1, each pod with two spines."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.fabric_health import CRITICAL, OK, WARNING
from fleet.models import FabricSwitch, Node, Pod
from reservations import services
from reservations.models import Tenant
from reservations.placement import PlacementRefused
from reservations.selectors import nodes_cut_off


def read_as(name: str, *, health: str, state: str = "Enabled", links_down: tuple[str, ...] = ()) -> None:
    FabricSwitch.objects.filter(name=name).update(health=health, state=state, links_down=list(links_down))


def reserve(count: int, pod: str | None = None):
    tenant, _ = Tenant.objects.get_or_create(name="acme")
    in_pod = Pod.objects.get(name=pod) if pod else None
    return services.create_reservation(tenant=tenant, node_count=count, pod=in_pod, actor="test")


def held(reservation) -> set[str]:
    return set(reservation.allocations.values_list("node__name", flat=True))


def capacity() -> dict[str, tuple[int, int, int, int]]:
    """Per pod: available, free_open_ended, whole_free_racks, and its leaf's available."""
    answer = APIClient().get("/v1/capacity")
    assert answer.status_code == 200
    return {
        pod["name"]: (pod["available"], pod["free_open_ended"], pod["whole_free_racks"], pod["domains"][0]["available"])
        for pod in answer.json()["pods"]
    }


def test_nothing_is_placed_behind_a_leaf_that_is_down(available_fleet):
    read_as("p1-leaf1", health=CRITICAL, state="UnavailableOffline")
    assert capacity() == {"p1": (0, 0, 0, 0), "p2": (4, 4, 1, 4)}
    assert set(nodes_cut_off().values()) == {"leaf switch p1-leaf1 down"}

    with pytest.raises(PlacementRefused) as refused:
        reserve(1, pod="p1")
    assert refused.value.offer is None  # no later start either: nobody knows when the leaf is back
    assert held(reserve(2)) <= {"node-009", "node-010", "node-011", "node-012"}

    read_as("p1-leaf1", health=OK)
    assert capacity() == {"p1": (8, 8, 1, 8), "p2": (2, 2, 0, 2)}
    assert held(reserve(1, pod="p1")) <= {f"node-00{n}" for n in range(1, 9)}


def test_a_node_whose_downlink_is_down_is_passed_over_and_the_warning_alone_blocks_nothing(available_fleet):
    read_as("p2-leaf1", health=WARNING, links_down=("node-010", "p2-spine1"))
    assert capacity()["p2"] == (3, 3, 0, 3)
    assert nodes_cut_off() == {Node.objects.get(name="node-010").pk: "port node-010 of leaf switch p2-leaf1 down"}
    with pytest.raises(PlacementRefused):
        reserve(4, pod="p2")
    assert held(reserve(3, pod="p2")) == {"node-009", "node-011", "node-012"}


def test_every_spine_of_a_pod_down_cuts_off_the_pod(available_fleet):
    read_as("p2-spine1", health=CRITICAL, state="UnavailableOffline")
    assert capacity()["p2"] == (4, 4, 1, 4)  # one spine still carries the pod
    read_as("p2-spine2", health=CRITICAL, state="UnavailableOffline")
    assert capacity()["p2"] == (0, 0, 0, 0)
    with pytest.raises(PlacementRefused):
        reserve(1, pod="p2")
