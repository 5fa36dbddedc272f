"""Reservations and their nodes' networks: a reservation waits for its nodes' memberships with the
fabric's reason, and a node that drifted off its tenant's networks and could not be put back is let go.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.db import transaction

from fleet import lifecycle
from fleet.models import Node
from fleet.services import transition
from reservations.models import Reservation, ReservationState
from reservations.services.releasing import let_node_go
from reservations.signals import reservation_lost_node

log = logging.getLogger(__name__)


def say_why_networks_wait(*, reservation_id: int, reason: str) -> None:
    """A provisioning reservation's reason while a node's memberships cannot be confirmed (a
    manager refuses or is down), naming the fabric; cleared when it goes active."""
    Reservation.objects.filter(pk=reservation_id, state=ReservationState.PROVISIONING).exclude(reason=reason).update(
        reason=reason
    )


def let_go_of_drifted_nodes(reasons: Mapping[int, str], *, actor: str = "system:fabric-sync") -> int:
    """Take each node (id -> why) that was found off its tenant's networks and could not be put
    back from the reservation it serves, as a cut-off node is (releasing.let_go_of_cut_off_nodes):
    the reservation is degraded and heals elsewhere, the node goes to wiping in the same
    transaction, and there it is held until its removal from the tenant's networks is read back.
    Returns how many nodes were let go; one whose transition races another is left for the next sync."""
    serving = Node.objects.filter(pk__in=list(reasons), state__in=lifecycle.SERVING_STATES, reservation__isnull=False)
    let_go = 0
    for node_id, reservation_id in serving.order_by("pk").values_list("pk", "reservation_id"):
        try:
            with transaction.atomic():
                lost = let_node_go(node_id=node_id, reservation_id=reservation_id, reason=reasons[node_id], actor=actor)
                transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reasons[node_id])
        except lifecycle.TransitionRefused:
            log.info("node %s moved on its own while it was let go for its networks", node_id)
            continue
        let_go += 1
        if lost:
            reservation_lost_node.send(sender=let_go_of_drifted_nodes, reservation_id=reservation_id)
    return let_go
