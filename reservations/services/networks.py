"""Reservations and their nodes' networks: a reservation waits for its nodes' memberships with the
fabric's reason, and a node that drifted off its tenant's networks and could not be put back is let go.
"""

from __future__ import annotations

from collections.abc import Mapping

from reservations.models import Reservation, ReservationState
from reservations.services.releasing import let_serving_nodes_go


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
    return let_serving_nodes_go(reasons, describe=lambda name, why: why, actor=actor, sender=let_go_of_drifted_nodes)
