"""PATCH /v1/reservations/{id} {"node_count"} and {"release_nodes"}: grow next to the nodes held,
give back the named nodes or those that leave whole racks free; all or nothing, audited."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node, Pod
from reservations import services
from reservations.models import Quota, Reservation, ReservationEvent, ReservationState, Tenant
from reservations.placement import PlacementRefused, give_back
from reservations.selectors import live_allocations
from tests.support.concurrency import at_once
from tests.support.factories import drive, enrol_default_fleet, make_available, overlaps

H = timedelta(hours=1)


def patch(client, reservation_id: int, body: dict):
    return client.patch(f"/v1/reservations/{reservation_id}", body, format="json")


def held(reservation) -> list[str]:
    return sorted(live_allocations().filter(reservation=reservation).values_list("node__name", flat=True))


def reserve(tenant_name, count, pod=None, **extra) -> Reservation:
    return services.create_reservation(
        tenant=Tenant.objects.get(name=tenant_name),
        node_count=count,
        pod=Pod.objects.get(name=pod) if pod else None,
        ends_at=timezone.now() + 2 * H,
        actor="t",
        **extra,
    )


def test_give_back_frees_whole_racks_first():
    held_by_rack = {"r1": ["a1", "a2", "a3"], "r2": ["b1"], "r3": ["c1", "c2"]}
    assert give_back(held_by_rack, 1, rack_scale=False) == ["b1"]
    assert give_back(held_by_rack, 3, rack_scale=False) == ["b1", "c1", "c2"]
    assert give_back(held_by_rack, 4, rack_scale=False) == ["b1", "c1", "c2", "a3"]
    assert sorted(give_back({"r1": ["a1", "a2"], "r2": ["b1", "b2"]}, 2, rack_scale=True)) in (
        ["a1", "a2"],
        ["b1", "b2"],
    )


def test_growing_places_next_to_the_nodes_held_and_provisions_them(acme, db):
    make_available(enrol_default_fleet(50))  # p1: racks r01-r04 of 8 and r05 of 1..., p2 the rest
    mine = reserve("acme", 2, "p1")
    first_rack = Node.objects.get(name=held(mine)[0]).rack
    answer = patch(acme, mine.pk, {"node_count": 5})
    assert answer.status_code == 200, answer.content
    assert answer.json()["node_count"] == 5 and len(answer.json()["nodes"]) == 5
    assert {Node.objects.get(name=n).rack for n in held(mine)} == {first_rack}
    assert Node.objects.filter(reservation=mine, state="provisioning").count() == 5
    (changed,) = ReservationEvent.objects.filter(reservation=mine, event="changed")
    assert changed.detail.startswith("node_count 2 -> 5")


def test_an_active_reservation_that_grows_provisions_again(acme, available_fleet):
    mine = reserve("acme", 1, "p2")
    (node,) = Node.objects.filter(reservation=mine)
    drive(node, "provision_succeeded")
    assert services.settle_reservation(reservation_id=mine.pk).state == ReservationState.ACTIVE
    assert patch(acme, mine.pk, {"node_count": 2}).json()["state"] == ReservationState.PROVISIONING


def test_growing_past_capacity_is_refused_and_changes_nothing(acme, available_fleet):
    mine = reserve("acme", 3, "p2")
    answer = patch(acme, mine.pk, {"node_count": 5, "ends_at": (timezone.now() + 3 * H).isoformat()})
    assert answer.status_code == 409 and "fewer than the 2 requested" in answer.json()["detail"]
    mine.refresh_from_db()
    assert mine.node_count == 3 and len(held(mine)) == 3
    assert mine.ends_at is not None
    assert mine.ends_at < timezone.now() + 2 * H + timedelta(seconds=5)  # the end did not move either
    assert not ReservationEvent.objects.filter(reservation=mine, event="changed").exists()


def test_growing_past_the_quota_is_a_403_naming_it(acme, available_fleet):
    mine = reserve("acme", 2, "p1")
    Quota.objects.create(tenant=Tenant.objects.get(name="acme"), nodes=3)
    answer = patch(acme, mine.pk, {"node_count": 4})
    assert answer.status_code == 403 and "your quota is 3 nodes" in answer.json()["detail"]


def test_releasing_named_nodes_sends_them_to_wiping(acme, globex, available_fleet):
    mine = reserve("acme", 3, "p2")
    give = held(mine)[:2]
    answer = patch(acme, mine.pk, {"release_nodes": give})
    assert answer.status_code == 200, answer.content
    assert answer.json()["node_count"] == 1 and answer.json()["nodes"] == held(mine) == sorted(
        set(held(mine)) - set(give)
    )
    assert set(Node.objects.filter(name__in=give).values_list("state", flat=True)) == {"wiping"}
    assert reserve("globex", 3, "p2", starts_at=timezone.now() + H)  # their holds ended: room again, once wiped


def test_shrinking_without_names_lets_placement_choose(acme, available_fleet):
    mine = reserve("acme", 6, "p1")
    assert patch(acme, mine.pk, {"node_count": 4}).status_code == 200
    assert len(held(mine)) == 4


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"release_nodes": ["node-001"]}, "not held by this reservation: node-001"),
        ({"node_count": 2, "release_nodes": ["x"]}, "node_count"),
        ({"release_nodes": "node-009"}, "release_nodes"),
    ],
)
def test_bad_shrinks_are_a_400_and_change_nothing(acme, available_fleet, body, says):
    mine = reserve("acme", 2, "p2")
    answer = patch(acme, mine.pk, body)
    assert answer.status_code == 400 and says in answer.json()["detail"], answer.content
    assert len(held(mine)) == 2


def test_giving_back_every_node_is_refused_release_is_for_that(acme, available_fleet):
    mine = reserve("acme", 2, "p2")
    answer = patch(acme, mine.pk, {"release_nodes": held(mine)})
    assert answer.status_code == 400 and "release it" in answer.json()["detail"]


def test_a_rack_scale_reservation_gives_back_whole_racks_only(acme, db):
    make_available(enrol_default_fleet(50))
    mine = reserve("acme", 16, "p1", rack_scale=True)
    one = held(mine)[0]
    answer = patch(acme, mine.pk, {"release_nodes": [one]})
    assert answer.status_code == 400 and "whole racks" in answer.json()["detail"]
    assert patch(acme, mine.pk, {"node_count": 8}).status_code == 200
    assert len({Node.objects.get(name=n).rack_id for n in held(mine)}) == 1


@pytest.mark.django_db(transaction=True)
def test_growth_and_new_bookings_racing_for_the_last_nodes_never_overlap():
    make_available(enrol_default_fleet(12))
    tenants = [Tenant.objects.create(name=f"t{i}") for i in range(4)]
    mine = services.create_reservation(
        tenant=tenants[0], node_count=1, pod=Pod.objects.get(name="p2"), ends_at=timezone.now() + H, actor="t"
    )
    outcomes = []

    def grow():
        try:
            services.change_reservation(reservation_id=mine.pk, tenant=tenants[0], node_count=3, actor="t")
            outcomes.append("grew")
        except PlacementRefused:
            outcomes.append("growth refused")

    def book(tenant):
        try:
            services.create_reservation(
                tenant=tenant, node_count=2, pod=Pod.objects.get(name="p2"), ends_at=timezone.now() + H, actor="t"
            )
            outcomes.append("booked")
        except PlacementRefused as refused:
            assert refused.offer is not None  # a loser is told when it fits
            outcomes.append("booking refused")

    at_once(grow, *(functools.partial(book, t) for t in tenants[1:]))
    assert overlaps() == 0
    assert sum(o in ("grew", "booked") for o in outcomes) == 1  # p2 has 3 free nodes: one request of 2 fits
