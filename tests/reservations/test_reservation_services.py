"""reservations.services against the real PostgreSQL: place, hold, provision, release, heal, expire."""

import functools
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.range import Range

from fleet.models import Node, Pod
from reservations import services
from reservations.models import Allocation, Reservation, ReservationEvent, Tenant
from reservations.placement import PlacementRefused
from reservations.selectors import live_allocations
from tests.support.concurrency import at_once
from tests.support.factories import drive, enrol_default_fleet, make_available


def reserve(tenant, count, **kwargs) -> Reservation:
    return services.create_reservation(tenant=tenant, node_count=count, actor="test", **kwargs)


def held(reservation) -> list[str]:
    return sorted(live_allocations().filter(reservation=reservation).values_list("node__name", flat=True))


def bring_up(reservation) -> Reservation:
    """Do what the provisioning workflow does for each node: provision_succeeded."""
    for node in Node.objects.filter(reservation=reservation, state="provisioning"):
        drive(node, "provision_succeeded")
    return services.settle_reservation(reservation_id=reservation.pk)


def test_an_immediate_reservation_holds_and_provisions_its_nodes(alice, available_fleet):
    reservation = reserve(alice, 3)
    assert reservation.state == "provisioning"
    nodes = Node.objects.filter(reservation=reservation)
    assert {n.state for n in nodes} == {"provisioning"} and {n.tenant_id for n in nodes} == {alice.pk}
    assert held(reservation) == sorted(n.name for n in nodes)
    # best fit: p2 (4 free nodes) fits 3 more tightly than p1 (8)
    assert {n.rack.pod.name for n in nodes} == {"p2"}
    assert reservation.placement.startswith("p2/r02: ")
    assert ReservationEvent.objects.filter(reservation=reservation, event="created").exists()


def test_it_becomes_active_when_every_node_is_up(alice, available_fleet):
    reservation = reserve(alice, 2)
    assert bring_up(reservation).state == "active"


def test_a_refusal_keeps_nothing(alice, available_fleet):
    with pytest.raises(PlacementRefused, match="9"):
        reserve(alice, 9)
    assert not Reservation.objects.exists() and not Allocation.objects.exists()
    assert not Node.objects.exclude(state="available").exists()


def test_a_pod_can_be_asked_for(alice, available_fleet):
    reservation = reserve(alice, 2, pod=Pod.objects.get(name="p1"))
    assert {n.rack.pod.name for n in Node.objects.filter(reservation=reservation)} == {"p1"}


def test_release_sends_the_nodes_to_wiping_and_frees_them(alice, bob, available_fleet):
    reservation = bring_up(reserve(alice, 4))
    released = services.release_reservation(reservation_id=reservation.pk, actor="test")
    assert released.state == "released"
    nodes = Node.objects.filter(tenant=alice)
    assert {n.state for n in nodes} == {"wiping"} and not nodes.filter(reservation__isnull=False).exists()
    assert held(reservation) == []
    # idempotent
    assert services.release_reservation(reservation_id=reservation.pk, actor="test").state == "released"
    # the nodes are not free until wiped and attested
    with pytest.raises(PlacementRefused):
        reserve(bob, 4, pod=Pod.objects.get(name="p2"))


def test_a_lost_node_degrades_the_reservation_and_is_replaced_in_the_same_pod(alice, available_fleet):
    reservation = bring_up(reserve(alice, 3))
    lost = Node.objects.filter(reservation=reservation).first()
    assert lost is not None
    drive(lost, "hardware_fault", reason="XID 79 on GPU 3")
    reservation.refresh_from_db()
    assert reservation.state == "degraded" and lost.name in reservation.reason
    assert lost.name not in held(reservation)

    healed = services.heal_reservation(reservation_id=reservation.pk)
    assert healed.state == "degraded"  # the replacement is provisioning
    replacement = Node.objects.get(reservation=reservation, state="provisioning")
    assert replacement.rack.pod == lost.rack.pod and replacement != lost
    assert bring_up(reservation).state == "active"
    assert len(held(reservation)) == 3


def test_with_no_free_node_it_stays_degraded_says_why_and_heals_when_capacity_appears(alice, bob, available_fleet):
    p2 = Pod.objects.get(name="p2")
    reservation = bring_up(reserve(alice, 3, pod=p2))
    blocker = bring_up(reserve(bob, 1, pod=p2))
    lost = Node.objects.filter(reservation=reservation).first()
    assert lost is not None
    drive(lost, "hardware_fault", reason="XID 79")
    healed = services.heal_reservation(reservation_id=reservation.pk)
    assert healed.state == "degraded" and "waiting for capacity" in healed.reason

    services.release_reservation(reservation_id=blocker.pk, actor="test")
    freed = Node.objects.get(tenant=bob)
    drive(freed, "wipe_succeeded", "inspection_passed", "attestation_passed")
    services.reconcile_reservations()
    assert Node.objects.get(pk=freed.pk).reservation_id == reservation.pk
    assert bring_up(reservation).state == "active"


def test_an_advance_reservation_holds_nodes_for_later_and_shares_them_before(alice, bob, available_fleet):
    p2 = Pod.objects.get(name="p2")
    later = timezone.now() + timedelta(hours=2)
    future = reserve(alice, 4, pod=p2, starts_at=later, ends_at=later + timedelta(hours=1))
    assert future.state == "pending" and len(held(future)) == 4
    assert not Node.objects.filter(reservation=future).exists()  # nothing provisioned yet

    with pytest.raises(PlacementRefused):
        reserve(bob, 1, pod=p2)  # open-ended: would overlap
    before = reserve(bob, 4, pod=p2, ends_at=later - timedelta(minutes=1))
    assert sorted(held(before)) == sorted(held(future))


def test_a_release_finished_meanwhile_by_the_reconciler_still_succeeds(alice, available_fleet):
    """Found by the soak: the tenant's release and the reconciler's both ended the holds of an
    advance reservation; the second saw the first's empty periods as live and tried to end them
    again, which the database refused (a 500)."""
    later = timezone.now() + timedelta(hours=1)
    future = reserve(alice, 2, starts_at=later, ends_at=later + timedelta(hours=1))
    Reservation.objects.filter(pk=future.pk).update(state="releasing")  # the tenant's release began
    services.release_reservation(reservation_id=future.pk, actor="system:reconciler")  # the reconciler finished it
    assert held(future) == [] and Allocation.objects.filter(reservation=future, period__isempty=True).count() == 2
    Reservation.objects.filter(pk=future.pk).update(state="releasing")  # as the tenant's release read it
    assert services.release_reservation(reservation_id=future.pk, actor="tenant:alice").state == "released"


def test_provisioning_starts_at_starts_at(alice, available_fleet):
    starts_at = timezone.now() + timedelta(seconds=30)  # within the minute that needs no ends_at
    reservation = reserve(alice, 2, starts_at=starts_at)
    assert services.start_due_reservations() == 0
    assert services.start_due_reservations(now=starts_at) >= 1  # the pass as it starts
    reservation.refresh_from_db()
    assert reservation.state == "provisioning"
    assert Node.objects.filter(reservation=reservation, state="provisioning").count() == 2


def test_a_booking_given_now_decides_by_it_whether_it_has_started(alice, available_fleet):
    starts_at = timezone.now() + timedelta(hours=1)
    period = {"starts_at": starts_at, "ends_at": starts_at + timedelta(hours=1)}
    assert reserve(alice, 1, **period).state == "pending"
    started = reserve(alice, 1, **period, now=starts_at)  # booked as its period begins
    assert started.state == "provisioning"
    assert Node.objects.filter(reservation=started, state="provisioning").count() == 1  # hold saw it started


def test_a_booking_given_now_without_a_start_is_held_from_that_now(alice, available_fleet):
    later = timezone.now() + timedelta(hours=1)
    reservation = reserve(alice, 2, now=later)
    assert reservation.starts_at == later and reservation.state == "provisioning"
    assert {allocation.period.lower for allocation in Allocation.objects.filter(reservation=reservation)} == {later}


def test_an_ended_period_releases_the_reservation(alice, available_fleet):
    reservation = bring_up(reserve(alice, 1, ends_at=timezone.now() + timedelta(hours=1)))
    assert reservation.ends_at is not None
    assert services.expire_reservations(now=reservation.ends_at) == 1  # the pass as its period ends
    reservation.refresh_from_db()
    assert reservation.state == "released"
    assert Node.objects.get(tenant=alice).state == "wiping"


@pytest.mark.django_db(transaction=True)
def test_concurrent_reservations_never_double_book():
    make_available(enrol_default_fleet(12))
    tenants = [Tenant.objects.create(name=f"t{i}") for i in range(20)]
    p2 = Pod.objects.get(name="p2")
    outcomes: list[tuple[str, int | str]] = []

    def client(tenant):
        try:
            outcomes.append(("placed", reserve(tenant, 1, pod=p2).pk))
        except PlacementRefused as refused:
            outcomes.append(("refused", refused.reason))

    at_once(*(functools.partial(client, tenant) for tenant in tenants))

    assert len(outcomes) == 20
    assert sum(kind == "placed" for kind, _ in outcomes) == 4, outcomes  # p2 has 4 nodes
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM reservations_allocation a JOIN reservations_allocation b"
            " ON a.node_id = b.node_id AND a.id < b.id AND a.period && b.period"
        )
        assert cursor.fetchone()[0] == 0


def test_the_admin_shows_allocations_and_history_and_releases(admin_client, alice, available_fleet):
    reservation = reserve(alice, 2)
    page = admin_client.get(f"/admin/reservations/reservation/{reservation.pk}/change/")
    assert page.status_code == 200
    for name in held(reservation):
        assert name.encode() in page.content
    assert b"created" in page.content and reservation.placement.encode() in page.content
    admin_client.post(
        "/admin/reservations/reservation/", {"action": "release", "_selected_action": [reservation.pk]}, follow=True
    )
    reservation.refresh_from_db()
    assert reservation.state == "released"


@pytest.mark.django_db(transaction=True)
def test_concurrent_healing_places_one_replacement():
    make_available(enrol_default_fleet(12))
    reservation = bring_up(reserve(Tenant.objects.create(name="acme"), 3, pod=Pod.objects.get(name="p1")))
    lost = Node.objects.filter(reservation=reservation).first()
    assert lost is not None
    drive(lost, "hardware_fault", reason="XID 79")

    def heal() -> None:
        services.heal_reservation(reservation_id=reservation.pk)

    at_once(*[heal] * 4)
    assert len(held(reservation)) == 3  # found by bench/incident.py: two healers both topped it up
    assert bring_up(reservation).state == "active"


@pytest.mark.django_db(transaction=True)
def test_a_held_node_does_not_start_provisioning_for_a_reservation_being_released():
    """Found by the soak: the reconciler read a started reservation, a release listed its nodes
    and ended it, then the reconciler sent a held node to provisioning for no one."""
    make_available(enrol_default_fleet(12))
    starts_at = timezone.now() + timedelta(hours=1)
    reservation = reserve(
        Tenant.objects.create(name="acme"), 1, starts_at=starts_at, ends_at=starts_at + timedelta(hours=1)
    )
    allocation = Allocation.objects.get(reservation=reservation)
    # Its period has begun: the reconciler's next pass would provision the held node.
    Allocation.objects.filter(pk=allocation.pk).update(
        period=Range(timezone.now() - timedelta(minutes=1), starts_at + timedelta(hours=1))
    )
    Reservation.objects.filter(pk=reservation.pk).update(state="provisioning")
    release_listed_its_nodes = threading.Event()

    def release_not_yet_committed():
        with transaction.atomic():
            services.release_reservation(reservation_id=reservation.pk, actor="test")
            release_listed_its_nodes.set()
            time.sleep(1)

    def reconcile_from_what_is_committed():
        release_listed_its_nodes.wait()
        services.provision_held_nodes()

    at_once(release_not_yet_committed, reconcile_from_what_is_committed)

    assert Reservation.objects.get(pk=reservation.pk).state == "released"
    assert not Node.objects.filter(reservation=reservation).exists()
    assert Node.objects.get(pk=allocation.node_id).state == "available"
