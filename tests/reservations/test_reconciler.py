"""The reservation reconciler reaches every reservation that needs work in one pass, however many
others are live (it used to look at the 100 lowest ids of each kind only)."""

from datetime import timedelta

from django.utils import timezone

from fleet.models import Node
from reservations import services
from reservations.models import Reservation
from reservations.selectors import live_allocations
from tests.support.factories import bring_up, drive

HOUR = timedelta(hours=1)


def test_one_pass_heals_a_degraded_reservation_behind_more_than_a_hundred_advance_bookings(alice, bob, available_fleet):
    """The audit's item 6: 100 advance one-node bookings kept another tenant's degraded
    reservation from healing though a node was free."""
    first = timezone.now() + 2 * HOUR
    for i in range(120):
        starts = first + i * HOUR
        services.create_reservation(tenant=alice, node_count=1, starts_at=starts, ends_at=starts + HOUR, actor="test")
    degraded = bring_up(services.create_reservation(tenant=bob, node_count=1, ends_at=first, actor="test"))
    lost = Node.objects.get(reservation=degraded)
    drive(lost, "hardware_fault", reason="XID 79")
    degraded.refresh_from_db()
    assert degraded.state == "degraded"
    assert Reservation.objects.filter(state="pending").count() == 120

    services.reconcile_reservations()

    replacement = Node.objects.get(reservation=degraded)
    assert replacement != lost and replacement.state == "provisioning"
    drive(replacement, "provision_succeeded")
    services.reconcile_reservations()  # settles it too, had the node's own signal been lost
    degraded.refresh_from_db()
    assert degraded.state == "active"


def test_one_pass_expires_every_reservation_whose_period_ended(alice, db):
    now = timezone.now()
    ended = [
        Reservation.objects.create(tenant=alice, node_count=1, starts_at=now - 2 * HOUR, ends_at=now - HOUR)
        for _ in range(150)
    ]
    assert services.reconcile_reservations()["expired"] == 150
    assert set(Reservation.objects.filter(pk__in=[r.pk for r in ended]).values_list("state", flat=True)) == {"released"}


def test_one_pass_settles_every_reservation_whose_nodes_are_all_up(alice, available_fleet):
    """What the node's own signal does; the pass repeats it, for all of them, if that was lost."""
    reservations = [services.create_reservation(tenant=alice, node_count=1, actor="test") for _ in range(12)]
    for node in Node.objects.filter(state="provisioning"):
        drive(node, "provision_succeeded")
    Reservation.objects.filter(pk__in=[r.pk for r in reservations]).update(state="provisioning")  # as if lost
    assert services.reconcile_reservations()["settled"] == 12
    assert set(Reservation.objects.values_list("state", flat=True)) == {"active"}


def test_healing_a_reservation_whose_period_has_just_ended_places_nothing_and_does_not_fail(alice, available_fleet):
    """Found with the test above on the old pass: a replacement for an ended period is an
    empty range, which PostgreSQL refuses; expiry releases such a reservation instead."""
    reservation = bring_up(
        services.create_reservation(tenant=alice, node_count=1, ends_at=timezone.now() + HOUR, actor="test")
    )
    ended = reservation.ends_at  # the healing and the pass below look as its period ends
    assert ended is not None
    drive(Node.objects.get(reservation=reservation), "hardware_fault", reason="XID 79")
    assert services.heal_reservation(reservation_id=reservation.pk, now=ended).state == "degraded"
    assert not live_allocations().filter(reservation=reservation).exists()
    services.reconcile_reservations(now=ended)
    reservation.refresh_from_db()
    assert reservation.state == "released"
