"""Beat's reconciliation of reservations: start the due ones, provision held nodes, heal the
under-allocated, settle the ready, warn of endings, expire the ended, forget old idempotency keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from core import clock
from fleet import lifecycle
from fleet.models import Node
from fleet.services import transition
from reservations import webhooks
from reservations.models import (
    IDEMPOTENCY_KEY_LIFETIME,
    LIVE_STATES,
    IdempotencyKey,
    Reservation,
    ReservationEventKind,
    ReservationState,
    WebhookEvent,
)
from reservations.selectors import INSTANT, live_allocations, rack_capacity
from reservations.services.healing import WAITING_FOR_CAPACITY, heal_reservation, settle_reservation
from reservations.services.placing import record_event
from reservations.services.releasing import let_node_go, release_reservation

# Rows a reconciler pass reads per query: it goes through every row that needs work, a batch at a time.
RECONCILE_BATCH = 100


OUT_OF_SERVICE = (lifecycle.State.QUARANTINED, lifecycle.State.MAINTENANCE, lifecycle.State.ENROLLED)


def _in_batches(queryset: QuerySet) -> Iterator:
    """Every row of `queryset`, by ascending id, read RECONCILE_BATCH at a time after the last one
    seen: a pass reaches them all however many there are, and reads each batch afresh."""
    after = 0
    while True:
        batch = list(queryset.filter(pk__gt=after).order_by("pk")[:RECONCILE_BATCH])
        yield from batch
        if len(batch) < RECONCILE_BATCH:
            return
        after = batch[-1].pk


def start_due_reservations(*, actor: str = "system:reconciler", now: datetime | None = None) -> int:
    """Provision the held nodes of pending reservations whose period has begun by `now` (None:
    core.clock's)."""
    started = 0
    due = Reservation.objects.filter(state=ReservationState.PENDING, starts_at__lte=clock.in_query(now))
    for reservation in _in_batches(due):
        if Reservation.objects.filter(pk=reservation.pk, state=ReservationState.PENDING).update(
            state=ReservationState.PROVISIONING
        ):
            record_event(reservation, ReservationEventKind.STARTED, actor)
            started += 1
    return started + provision_held_nodes(actor=actor, now=now)


def provision_held_nodes(*, actor: str = "system:reconciler", now: datetime | None = None) -> int:
    """Send each held node of a reservation started by `now` (None: core.clock's) to provisioning
    as soon as it is available.

    A held node that fell out of service before its reservation started is let go and replaced.
    Held nodes still finishing with their previous tenant are not even read: they cannot move yet.
    """
    count = 0
    held = (
        live_allocations()
        .filter(
            reservation__state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED],
            period__startswith__lte=clock.in_query(now),
            node__state__in=[lifecycle.State.AVAILABLE, *OUT_OF_SERVICE],
        )
        .exclude(node__reservation_id=F("reservation_id"))
        .select_related("node", "reservation")
    )
    for allocation in _in_batches(held):
        node = allocation.node
        if node.state in OUT_OF_SERVICE:
            with transaction.atomic():
                let_node_go(
                    node_id=node.pk,
                    reservation_id=allocation.reservation_id,
                    reason=f"{node.name} is {node.state} {node.quarantine_reason}".strip(),
                    actor=actor,
                )
        else:
            count += _provision_if_still_started(node_id=node.pk, reservation_id=allocation.reservation_id, actor=actor)
    return count


def _provision_if_still_started(*, node_id: int, reservation_id: int, actor: str) -> bool:
    """Send one held node to provisioning while its reservation's row is locked and still started.

    The batch that found the node may be stale: a release that began since would list the
    reservation's nodes before this one joined it and leave it serving no one. The lock (the
    one release_reservation's first update takes) puts the two in order.
    """
    with transaction.atomic():
        reservation = (
            Reservation.objects.select_for_update(no_key=True)
            .filter(pk=reservation_id, state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED])
            .first()
        )
        if reservation is None:
            return False
        try:
            transition(node_id=node_id, event=lifecycle.Event.PROVISION_REQUESTED, actor=actor, reservation=reservation)
        except lifecycle.TransitionRefused:
            return False
    return True


def _count_per_reservation(queryset) -> Coalesce:
    """How many rows of `queryset` belong to the outer query's reservation, 0 if none."""
    counted = queryset.filter(reservation=OuterRef("pk")).order_by().values("reservation").annotate(n=Count("pk"))
    return Coalesce(Subquery(counted.values("n")), 0)


def heal_under_allocated(*, actor: str = "system:reconciler", now: datetime | None = None) -> int:
    """Place replacements for every live reservation that holds fewer nodes than it asked for and
    has not ended by `now` (None: core.clock's), where that can succeed: one that already says it
    waits for capacity is tried again only once its pod has as many nodes free now as it misses.
    Returns how many got their replacements."""
    first_held = live_allocations().filter(reservation=OuterRef("pk")).order_by("pk")
    short = (
        Reservation.objects.filter(
            state__in=[ReservationState.PENDING, ReservationState.PROVISIONING, ReservationState.DEGRADED]
        )
        .exclude(ends_at__lte=clock.in_query(now))
        .annotate(
            held=_count_per_reservation(live_allocations()),
            held_pod=Subquery(first_held.values("node__rack__pod__name")[:1]),
        )
        .filter(held__lt=F("node_count"))
        .select_related("pod")
    )
    free_now: Counter[str] | None = None  # nodes free now per pod, read once a reservation needs it
    healed = 0
    for reservation in _in_batches(short):
        missing = reservation.node_count - reservation.held
        pod = reservation.pod.name if reservation.pod_id else reservation.held_pod
        if reservation.reason.startswith(WAITING_FOR_CAPACITY):
            free_now = free_now if free_now is not None else _free_now_per_pod(now or clock.now())
            if (free_now[pod] if pod else max(free_now.values(), default=0)) < missing:
                continue  # it says why already, and nothing in this pass can place it
        heal_reservation(reservation_id=reservation.pk, actor=actor, now=now)
        if live_allocations().filter(reservation=reservation).count() >= reservation.node_count:
            healed += 1
            if free_now is not None and pod and reservation.state != ReservationState.PENDING:
                free_now[pod] -= missing
    return healed


def _free_now_per_pod(now: datetime) -> Counter[str]:
    free: Counter[str] = Counter()
    for rack in rack_capacity(starts_at=now, ends_at=now + INSTANT, now=now):
        free[rack.pod] += len(rack.free)
    return free


def settle_ready(*, actor: str = "system:reconciler") -> int:
    """Make active every provisioning or degraded reservation whose nodes are all up: what the
    node's own signal does, in case its process died before it could."""
    ready = (
        Reservation.objects.filter(state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED])
        .annotate(
            held=_count_per_reservation(live_allocations()),
            up=_count_per_reservation(Node.objects.filter(state=lifecycle.State.ACTIVE)),
        )
        .filter(held=F("node_count"), up=F("node_count"))
    )
    return sum(
        settle_reservation(reservation_id=reservation.pk, actor=actor).state == ReservationState.ACTIVE
        for reservation in _in_batches(ready)
    )


def reconcile_reservations(*, now: datetime | None = None) -> dict[str, int]:
    """One pass of the reconciler over every reservation that owes work; each step is idempotent.

    Each step reads only the reservations it can move (in batches, however many are live): what
    has ended, what is being released, what has started, what misses nodes that are free, what
    is up. Releases come first, since they free capacity that healing can use. Each step compares
    with `now`, or (None) with core.clock's as it reaches it.
    """
    done = {"expired": expire_reservations(now=now), "released": 0}
    for reservation in _in_batches(Reservation.objects.filter(state=ReservationState.RELEASING)):
        release_reservation(reservation_id=reservation.pk, actor="system:reconciler")
        done["released"] += 1
    done["ending notices"] = notify_ending_reservations(now=now)
    done["started"] = start_due_reservations(now=now)
    done["healed"] = heal_under_allocated(now=now)
    done["settled"] = settle_ready()
    done["idempotency keys forgotten"] = forget_expired_idempotency_keys(now=now)
    return done


def notify_ending_reservations(*, actor: str = "system:reconciler", now: datetime | None = None) -> int:
    """Tell each tenant that a reservation ends within RESERVATION_ENDING_NOTICE_MINUTES of `now`
    (None: core.clock's): once per end (an end that moves is told again), marked with a
    compare-and-set so two passes tell once."""
    notice = timedelta(minutes=settings.RESERVATION_ENDING_NOTICE_MINUTES)
    at = clock.in_query(now)
    ending = Reservation.objects.filter(
        state__in=[ReservationState.PROVISIONING, ReservationState.ACTIVE, ReservationState.DEGRADED],
        ends_at__lte=at + notice,
        ends_at__gt=at,
    ).exclude(ending_notice_for=F("ends_at"))
    told = 0
    for reservation in _in_batches(ending):
        ends_at = reservation.ends_at.isoformat()
        with transaction.atomic():
            marked = (
                Reservation.objects.filter(pk=reservation.pk, ends_at=reservation.ends_at)
                .exclude(ending_notice_for=F("ends_at"))
                .update(ending_notice_for=F("ends_at"))
            )
            if not marked:
                continue  # another pass told it, or its end just moved
            record_event(reservation, ReservationEventKind.ENDING_NOTICE, actor, f"ends at {ends_at}")
            webhooks.notify(reservation, WebhookEvent.RESERVATION_ENDING, ends_at=ends_at)
        told += 1
    return told


def expire_reservations(*, actor: str = "system:expiry", now: datetime | None = None) -> int:
    """Release live reservations whose period has ended by `now` (None: core.clock's)."""
    ended = 0
    for reservation in _in_batches(Reservation.objects.filter(state__in=LIVE_STATES, ends_at__lte=clock.in_query(now))):
        release_reservation(reservation_id=reservation.pk, actor=actor, reason="period ended")
        ended += 1
    return ended


def forget_expired_idempotency_keys(*, now: datetime | None = None) -> int:
    """Drop the answers kept for idempotency keys older than their lifetime at `now` (None:
    core.clock's)."""
    expired = IdempotencyKey.objects.filter(created_at__lte=clock.in_query(now) - IDEMPOTENCY_KEY_LIFETIME)
    deleted, _ = expired.delete()
    return deleted
