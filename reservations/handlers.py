"""Reservations follow their nodes: settle when one comes up, degrade when one is lost (and say
so with reservation_lost_node, so that healing starts at once)."""

from django.db import transaction
from django.dispatch import receiver

from fleet import lifecycle
from fleet.models import Node
from fleet.signals import node_remediation_planned, node_transitioned
from reservations import services, webhooks
from reservations.models import Reservation, WebhookEvent
from reservations.signals import reservation_lost_node


@receiver(node_transitioned, dispatch_uid="reservations.follow_node")
def follow_node(sender, *, node_id, event, actor, to_state, reservation_id, **kwargs):
    if reservation_id is None:
        return
    if to_state is lifecycle.State.ACTIVE:
        transaction.on_commit(lambda: services.settle_reservation(reservation_id=reservation_id), robust=True)
    # A node released leaves by its reservation's own service, which saw to the reservation
    # (released it, took the node back, or let it go for its switch): it is no loss.
    elif to_state not in lifecycle.SERVING_STATES and event is not lifecycle.Event.RELEASED:
        node = Node.objects.get(pk=node_id)
        if to_state is lifecycle.State.QUARANTINED:
            webhooks.notify(
                Reservation.objects.get(pk=reservation_id),
                WebhookEvent.NODE_QUARANTINED,
                node=node.name,
                reason=webhooks.reason_for_tenant(node.quarantine_reason),
            )
        reason = f"{node.name} lost ({event.value})"
        if services.let_node_go(node_id=node_id, reservation_id=reservation_id, reason=reason, actor=actor):
            reservation_lost_node.send(sender=services, reservation_id=reservation_id)


@receiver(node_remediation_planned, dispatch_uid="reservations.tell_tenant_of_remediation")
def tell_tenant_of_remediation(sender, *, node_id, reservation_id, gpu, step, reason, acts_at, **kwargs):
    reservation = Reservation.objects.filter(pk=reservation_id).first()
    if reservation is None:
        return
    webhooks.notify(
        reservation,
        WebhookEvent.NODE_REMEDIATION,
        node=Node.objects.values_list("name", flat=True).get(pk=node_id),
        gpu=gpu,
        step=step,
        reason=reason,
        acts_at=acts_at.isoformat() if acts_at else None,
    )
