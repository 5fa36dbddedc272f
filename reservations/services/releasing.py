"""Giving nodes back: a tenant's release, and a node let go of (lost to a fault, cut off by a
failed switch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from fleet import lifecycle
from fleet.models import Node
from fleet.services import transition
from reservations import webhooks
from reservations.models import LIVE_STATES, Reservation, ReservationEventKind, ReservationState, WebhookEvent
from reservations.selectors import live_allocations, nodes_cut_off
from reservations.services.placing import end_allocations, record_event
from reservations.signals import reservation_lost_node

log = logging.getLogger(__name__)


def release_reservation(*, reservation_id: int, actor: str, reason: str = "released") -> Reservation:
    """End the reservation now; its nodes go to wiping. Idempotent, and resumable if interrupted."""
    started = Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
        state=ReservationState.RELEASING, reason=""
    )
    reservation = Reservation.objects.get(pk=reservation_id)
    if started:
        record_event(reservation, ReservationEventKind.RELEASING, actor, reason)
    if reservation.state != ReservationState.RELEASING:
        return reservation
    # One transaction per node: a node's release must not wait on, or roll back, another's.
    for node_id in Node.objects.filter(reservation=reservation).order_by("pk").values_list("pk", flat=True):
        try:
            transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
        except lifecycle.TransitionRefused:
            log.info("node %s left reservation %s on its own while it was released", node_id, reservation_id)
    with transaction.atomic():
        end_allocations(live_allocations().filter(reservation=reservation), reason)
        # The tenant's release and the reconciler's may finish the same release: one records it.
        if Reservation.objects.filter(pk=reservation_id, state=ReservationState.RELEASING).update(
            state=ReservationState.RELEASED
        ):
            record_event(reservation, ReservationEventKind.RELEASED, actor, reason)
            webhooks.notify(
                reservation, WebhookEvent.RESERVATION_RELEASED, state=ReservationState.RELEASED, detail=reason
            )
    return Reservation.objects.get(pk=reservation_id)


def let_node_go(*, node_id: int, reservation_id: int, reason: str, actor: str) -> bool:
    """A node can no longer serve a live reservation: end its allocation and degrade the reservation.

    Returns whether the reservation needs a replacement (heal_reservation places it). A
    reservation that has not started yet stays pending; one being released needs nothing.
    """
    end_allocations(live_allocations().filter(reservation_id=reservation_id, node_id=node_id), reason)
    reservation = Reservation.objects.get(pk=reservation_id)
    if reservation.state not in LIVE_STATES:
        return False
    if reservation.state != ReservationState.PENDING:
        Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
            state=ReservationState.DEGRADED, reason=f"{reason}; placing a replacement"
        )
        webhooks.notify(reservation, WebhookEvent.RESERVATION_DEGRADED, state=ReservationState.DEGRADED, detail=reason)
    record_event(reservation, ReservationEventKind.NODE_LOST, actor, reason)
    return True


def let_go_of_cut_off_nodes(*, actor: str = "system:fabric") -> int:
    """Take the nodes an unhealthy switch has cut off (selectors.nodes_cut_off) for at least
    FABRIC_LET_GO_AFTER_SECONDS from the reservations they serve: each is let go with the switch's
    reason, which degrades its reservation, and wiped; healing places its replacement inside the
    reservation's domain, on nodes the fabric reaches. Returns how many nodes were let go."""
    cut_off = nodes_cut_off(lasting=timedelta(seconds=settings.FABRIC_LET_GO_AFTER_SECONDS))
    return let_serving_nodes_go(
        cut_off,
        describe=lambda name, why: f"{name} cut off from the fabric: {why}",
        actor=actor,
        sender=let_go_of_cut_off_nodes,
    )


def let_serving_nodes_go(
    reasons: Mapping[int, str], *, describe: Callable[[str, str], str], actor: str, sender: object
) -> int:
    """Take each serving node of `reasons` (id -> why) from its reservation (`let_node_go`, with
    `describe(name, why)` as the reason) and release it to wiping, a transaction each; a
    reservation that lost a node hears reservation_lost_node. A node whose transition races
    another is left for the next sweep, all of its change undone. Returns how many were let go."""
    serving = Node.objects.filter(pk__in=list(reasons), state__in=lifecycle.SERVING_STATES, reservation__isnull=False)
    let_go = 0
    for node_id, name, reservation_id in serving.order_by("pk").values_list("pk", "name", "reservation_id"):
        reason = describe(name, reasons[node_id])
        try:
            with transaction.atomic():
                lost = let_node_go(node_id=node_id, reservation_id=reservation_id, reason=reason, actor=actor)
                transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
        except lifecycle.TransitionRefused:
            log.info("node %s moved on its own while it was let go: %s", name, reason)
            continue
        let_go += 1
        if lost:
            reservation_lost_node.send(sender=sender, reservation_id=reservation_id)
    return let_go
