"""PATCH /v1/reservations/{id} {"ends_at"}: extend or shorten, every node's hold moved under the same
exclusion constraint as any booking, refused with the latest end possible when another is in the way."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from django.conf import settings
from django.db.models import F, Func, Value
from django.utils import timezone

from fleet.models import Pod
from reservations import services
from reservations.models import Quota, Reservation, ReservationEvent, Tenant
from reservations.placement import PlacementRefused
from reservations.selectors import live_allocations
from tests.support.concurrency import at_once
from tests.support.factories import enrol_default_fleet, make_available, overlaps

H = timedelta(hours=1)


def patch(client, reservation_id: int, body: dict):
    return client.patch(f"/v1/reservations/{reservation_id}", body, format="json")


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def reserve(tenant, count, pod, starts_at=None, ends_at=None) -> Reservation:
    return services.create_reservation(
        tenant=tenant, node_count=count, pod=Pod.objects.get(name=pod), starts_at=starts_at, ends_at=ends_at, actor="t"
    )


def test_an_extension_moves_every_hold_and_is_in_the_history(acme, available_fleet):
    now = timezone.now()
    mine = reserve(Tenant.objects.get(name="acme"), 2, "p2", ends_at=now + 2 * H)
    answer = patch(acme, mine.pk, {"ends_at": iso(now + 5 * H)})
    assert answer.status_code == 200, answer.content
    assert answer.json()["ends_at"] == iso(now + 5 * H)
    assert {a.period.upper for a in live_allocations().filter(reservation=mine)} == {now + 5 * H}
    (changed,) = ReservationEvent.objects.filter(reservation=mine, event="changed")
    assert changed.detail == f"ends_at {(now + 2 * H).isoformat()} -> {(now + 5 * H).isoformat()}"


def test_an_extension_into_another_booking_says_until_when_it_can_go(acme, globex, available_fleet):
    now = timezone.now()
    mine = reserve(Tenant.objects.get(name="acme"), 4, "p2", ends_at=now + 2 * H)  # p2 has 4 nodes
    theirs = reserve(Tenant.objects.get(name="globex"), 1, "p2", starts_at=now + 3 * H, ends_at=now + 4 * H)
    answer = patch(acme, mine.pk, {"ends_at": iso(now + 6 * H)})
    assert answer.status_code == 409
    (node,) = live_allocations().filter(reservation=theirs).values_list("node__name", flat=True)
    until = (now + 3 * H).isoformat()
    assert answer.json() == {"detail": f"{node} is booked from {until}: this reservation can be extended until {until}"}
    assert Reservation.objects.get(pk=mine.pk).ends_at == now + 2 * H
    assert {a.period.upper for a in live_allocations().filter(reservation=mine)} == {now + 2 * H}
    assert patch(acme, mine.pk, {"ends_at": until}).status_code == 200  # exactly up to it fits
    assert overlaps() == 0


def test_a_shortened_reservation_frees_its_nodes_from_the_new_end(acme, available_fleet):
    now = timezone.now()
    mine = reserve(Tenant.objects.get(name="acme"), 4, "p2", ends_at=now + 10 * H)
    with pytest.raises(PlacementRefused):
        reserve(Tenant.objects.get(name="acme"), 1, "p2", starts_at=now + 3 * H, ends_at=now + 4 * H)
    assert patch(acme, mine.pk, {"ends_at": iso(now + 2 * H)}).status_code == 200
    assert reserve(Tenant.objects.get(name="acme"), 1, "p2", starts_at=now + 3 * H, ends_at=now + 4 * H)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"ends_at": "yesterday"}, 400, "ends_at"),
        ({"ends_at": iso(timezone.now() - H)}, 400, "release it"),
        ({"ends_at": iso(timezone.now() + timedelta(days=settings.MAX_RESERVATION_DAYS + 1))}, 400, "at most"),
        ({"node_count": 0}, 400, "node_count"),
        ({"nodes": 3}, 400, "unknown field"),
        ({}, 400, "ends_at"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(acme, available_fleet, body, status, says):
    mine = reserve(Tenant.objects.get(name="acme"), 1, "p2", ends_at=timezone.now() + 2 * H)
    answer = patch(acme, mine.pk, body)
    assert answer.status_code == status and says in answer.json()["detail"], answer.content
    assert not ReservationEvent.objects.filter(reservation=mine, event="changed").exists()


def test_only_ones_own_live_reservation_changes(acme, globex, available_fleet):
    mine = reserve(Tenant.objects.get(name="acme"), 1, "p2", ends_at=timezone.now() + 2 * H)
    assert patch(globex, mine.pk, {"ends_at": iso(timezone.now() + 3 * H)}).status_code == 404
    services.release_reservation(reservation_id=mine.pk, actor="t")
    answer = patch(acme, mine.pk, {"ends_at": iso(timezone.now() + 3 * H)})
    assert answer.status_code == 409 and "released: it cannot change" in answer.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_extensions_and_new_bookings_racing_for_one_window_never_overlap():
    make_available(enrol_default_fleet(12))
    now = timezone.now()
    tenants = [Tenant.objects.create(name=f"t{i}") for i in range(6)]
    held = [reserve(t, 1, "p2", ends_at=now + H) for t in tenants[:3]]  # three of p2's four nodes
    outcomes = []

    def extend(reservation):
        try:
            services.change_reservation(
                reservation_id=reservation.pk, tenant=reservation.tenant, ends_at=now + 4 * H, actor="t"
            )
            outcomes.append("extended")
        except services.EndRefused:
            outcomes.append("extension refused")

    def book(tenant):
        try:
            reserve(tenant, 2, "p2", starts_at=now + 2 * H, ends_at=now + 3 * H)
            outcomes.append("booked")
        except PlacementRefused as refused:
            # A loser is offered the earliest fit: after the extensions, if they won.
            assert refused.offer is not None and refused.offer.starts_at >= now + 2 * H
            outcomes.append("booking refused")

    at_once(*(functools.partial(extend, r) for r in held), *(functools.partial(book, t) for t in tenants[3:]))
    assert overlaps() == 0
    assert len(outcomes) == 6


def open_ended(reservation: Reservation) -> Reservation:
    """The reservation as one booked before every booking had an end: no end, holds without one."""
    Reservation.objects.filter(pk=reservation.pk).update(ends_at=None)
    live_allocations().filter(reservation=reservation).update(
        period=Func(Func(F("period"), function="lower"), Value(None), function="tstzrange")
    )
    return Reservation.objects.get(pk=reservation.pk)


def test_an_open_ended_reservation_from_before_booking_limits_is_given_an_end(acme, available_fleet):
    tenant = Tenant.objects.get(name="acme")
    Quota.objects.create(tenant=tenant, nodes=4, node_hours_per_month=10_000)
    now = timezone.now()
    mine = open_ended(reserve(tenant, 2, "p2", ends_at=now + 2 * H))
    answer = acme.patch(f"/v1/reservations/{mine.pk}", {"node_count": 3}, format="json")
    assert answer.status_code == 403
    assert "an open-ended reservation cannot be counted against it: give it an end first" in answer.json()["detail"]
    answer = patch(acme, mine.pk, {"ends_at": iso(now + 5 * H)})
    assert answer.status_code == 200, answer.content
    assert {a.period.upper for a in live_allocations().filter(reservation=mine)} == {now + 5 * H}
    (changed,) = ReservationEvent.objects.filter(reservation=mine, event="changed")
    assert changed.detail == f"ends_at open -> {(now + 5 * H).isoformat()}"
