"""Celery tasks of the fleet: thin, they call the workflows and the reconciler's selectors."""

import os
import socket
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from fleet import services, workflows
from fleet.selectors import nodes_owing_work

WORKER = f"{socket.gethostname()}:{os.getpid()}"


@shared_task(ignore_result=True)
def run_workflow(node_id: int) -> str:
    return workflows.run_workflow(node_id=node_id, worker=WORKER)


def enqueue_workflow(node_id: int) -> None:
    run_workflow.apply_async(args=[node_id], expires=settings.WORKFLOW_MESSAGE_EXPIRES)


@shared_task(ignore_result=True)
def reconcile_nodes(limit: int = 500) -> dict:
    """Start inspecting newly enrolled nodes; enqueue every node that owes work and that no live lease holds."""
    started = services.start_inspections(actor="system:reconciler", limit=limit)
    owing = nodes_owing_work(limit=limit, quiet_for=timedelta(seconds=2 * settings.RECONCILE_SECONDS))
    for node_id in owing:
        enqueue_workflow(node_id)
    return {"inspections_started": started, "enqueued": len(owing)}
