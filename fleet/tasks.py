"""Celery tasks of the fleet: thin, they call the workflows and the reconciler's selectors."""

import os
import socket
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from fleet import services, workflow_triggers, workflows
from fleet.selectors import nodes_owing_work

WORKER = f"{socket.gethostname()}:{os.getpid()}"


@shared_task(ignore_result=True)
def run_workflow(node_id: int) -> str:
    workflow_triggers.unmark(node_id)  # first: whatever the node needs from now on is sent again
    return workflows.run_workflow(node_id=node_id, worker=WORKER)


def enqueue_workflows(node_ids: list[int]) -> int:
    """Send a workflow message for each node that has none waiting; how many were sent."""
    sent = 0
    for node_id in workflow_triggers.mark_waiting(node_ids):
        try:
            run_workflow.apply_async(args=[node_id], expires=settings.WORKFLOW_MESSAGE_EXPIRES)
        except Exception:
            workflow_triggers.unmark(node_id)  # not sent: the reconciler must be free to send it
            raise
        sent += 1
    return sent


def enqueue_workflow(node_id: int) -> None:
    enqueue_workflows([node_id])


@shared_task(ignore_result=True)
def reconcile_nodes(limit: int = 500) -> dict:
    """Start inspecting newly enrolled nodes; enqueue every node that owes work, that no live
    lease holds and that has no message waiting."""
    started = services.start_inspections(actor="system:reconciler", limit=limit)
    owing = nodes_owing_work(limit=limit, quiet_for=timedelta(seconds=2 * settings.RECONCILE_SECONDS))
    return {"inspections_started": started, "owing": len(owing), "enqueued": enqueue_workflows(owing)}
