"""Healing a reservation that lost nodes, and settling its state from its nodes'."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from core import clock
from fleet import lifecycle
from fleet.models import Node
from reservations import webhooks
from reservations.models import LIVE_STATES, Reservation, ReservationEventKind, ReservationState, WebhookEvent
from reservations.placement import PlacementRefused
from reservations.selectors import live_allocations
from reservations.services.placing import choose, hold, record_event, request_of, with_retries

WAITING_FOR_CAPACITY = "waiting for capacity"  # how a degraded reservation's reason says no node was free


def heal_reservation(*, reservation_id: int, actor: str = "system:healer", now: datetime | None = None) -> Reservation:
    """Place replacements for the nodes a live reservation lost, in its pod; say why if none is free.
    One whose period has ended by `now` (None: core.clock's) needs none.

    The reservation's row is locked while it is counted and topped up: the healing enqueued on
    commit and the reconciler's may run at the same moment, and only one may place the replacement.
    """
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation_id)
        if reservation.state not in LIVE_STATES:
            return reservation
        now = now or clock.now()
        # A period that has ended needs no replacement: expiry releases it.
        if reservation.ends_at is not None and reservation.ends_at <= now:
            return reservation
        held = live_allocations().filter(reservation=reservation)
        missing = reservation.node_count - held.count()
        if missing > 0:
            # Replacements need not make whole domains: the nodes kept are not whole ones any more.
            wanted = request_of(reservation, missing, rack_scale=False, whole=None)

            def replacements(lost_races: int) -> list[str]:
                placement = choose(wanted, starts_at=reservation.starts_at, ends_at=reservation.ends_at, now=now)
                hold(reservation, placement, actor=actor)
                return list(placement.node_ids)

            try:
                chosen = with_retries(replacements)
            except PlacementRefused as refused:
                Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
                    state=ReservationState.DEGRADED,
                    reason=f"{WAITING_FOR_CAPACITY} to replace {missing} node(s): {refused.reason}",
                )
            else:
                record_event(reservation, ReservationEventKind.REPLACEMENT_PLACED, actor, ", ".join(chosen))
    return settle_reservation(reservation_id=reservation_id, actor=actor)


def settle_reservation(*, reservation_id: int, actor: str = "system:reconciler") -> Reservation:
    """Active once every node it holds serves it and is up, and none is missing."""
    reservation = Reservation.objects.get(pk=reservation_id)
    if reservation.state in (ReservationState.PROVISIONING, ReservationState.DEGRADED):
        up = Node.objects.filter(reservation=reservation, state=lifecycle.State.ACTIVE).count()
        held = live_allocations().filter(reservation=reservation).count()
        if up == held == reservation.node_count:
            with transaction.atomic():
                if Reservation.objects.filter(pk=reservation_id, state=reservation.state).update(
                    state=ReservationState.ACTIVE, reason=""
                ):
                    record_event(reservation, ReservationEventKind.ACTIVE, actor)
                    # Active again after it lost a node: healed.
                    healed = reservation.state == ReservationState.DEGRADED
                    webhooks.notify(
                        reservation,
                        WebhookEvent.RESERVATION_HEALED if healed else WebhookEvent.RESERVATION_ACTIVE,
                        state=ReservationState.ACTIVE,
                        nodes=sorted(Node.objects.filter(reservation=reservation).values_list("name", flat=True)),
                    )
            reservation.refresh_from_db()
    return reservation
