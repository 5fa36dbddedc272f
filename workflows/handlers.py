"""Work starts when the domain says it is owed: the receivers that turn the apps' signals into
Celery messages, sent once the transaction that made the work commits. The reconciler is the
fallback for a message lost on the way."""

from django.db import transaction
from django.dispatch import receiver

from fleet import lifecycle
from fleet.selectors import unleased_nodes_owing_work
from fleet.signals import node_transitioned, power_action_requested
from reservations.signals import reservation_lost_node, webhook_deliveries_due
from workflows import tasks


@receiver(node_transitioned, dispatch_uid="workflows.start_owed_work")
def start_owed_work(sender, *, node_id, from_state, to_state, **kwargs):
    if to_state != from_state and to_state in lifecycle.WORK_STATES:
        transaction.on_commit(lambda: _enqueue_if_unleased(node_id), robust=True)


def _enqueue_if_unleased(node_id: int) -> None:
    # A worker that re-claimed the node to go straight on to its next work holds it already.
    tasks.enqueue_workflows(unleased_nodes_owing_work([node_id]))


@receiver(power_action_requested, dispatch_uid="workflows.power_action")
def carry_out_power_action(sender, *, power_action_id, **kwargs):
    transaction.on_commit(lambda: tasks.send_power_action(power_action_id), robust=True)


@receiver(webhook_deliveries_due, dispatch_uid="workflows.deliver_webhooks")
def send_webhooks(sender, **kwargs):
    transaction.on_commit(tasks.deliver_webhooks.delay, robust=True)


@receiver(reservation_lost_node, dispatch_uid="workflows.heal_at_once")
def heal_at_once(sender, *, reservation_id, **kwargs):
    transaction.on_commit(lambda: tasks.heal_reservation.delay(reservation_id), robust=True)
