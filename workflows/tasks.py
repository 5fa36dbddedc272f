"""Every Celery task: thin, each loads what it needs by id and calls one workflow or service."""

import os
import socket
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models.functions import Now

from fleet import firmware_rollouts
from fleet import services as fleet_services
from fleet.selectors import nodes_owing_work, unleased_nodes_owing_work
from fleet.services import network_attachments
from remediation import services as remediation_services
from reservations import services as reservation_services
from reservations.selectors import live_allocations
from workflows import (
    bmc_event_logs,
    fabric_health,
    fabric_sync,
    idle_diagnostics,
    node_workflows,
    repairs,
    retention,
    triggers,
    webhooks,
)
from workflows.fabric_managers import drivers_from_settings

WORKER = f"{socket.gethostname()}:{os.getpid()}"


# -- nodes -----------------------------------------------------------------------------------


@shared_task(ignore_result=True)
def run_workflow(node_id: int) -> str:
    triggers.unmark(node_id)  # first: whatever the node needs from now on is sent again
    return node_workflows.run_workflow(node_id=node_id, worker=WORKER)


def enqueue_workflows(node_ids: list[int]) -> int:
    """Send a workflow message for each node that has none waiting; how many were sent."""
    sent = 0
    for node_id in triggers.mark_waiting(node_ids):
        try:
            run_workflow.apply_async(args=(node_id,), expires=settings.WORKFLOW_MESSAGE_EXPIRES)
        except Exception:
            triggers.unmark(node_id)  # not sent: the reconciler must be free to send it
            raise
        sent += 1
    return sent


@shared_task(ignore_result=True)
def reconcile_nodes(limit: int = 500) -> dict:
    """Start inspecting newly enrolled nodes; enqueue every node that owes work, that no live
    lease holds and that has no message waiting."""
    started = fleet_services.start_inspections(actor="system:reconciler", limit=limit)
    owing = nodes_owing_work(limit=limit, quiet_for=timedelta(seconds=2 * settings.RECONCILE_SECONDS))
    # A node waits on its networks' read-back: a sync, unless one waits already.
    resynced = network_attachments.syncs_owed() and fabric_sync.request_sync()
    return {
        "inspections_started": started,
        "owing": len(owing),
        "enqueued": enqueue_workflows(owing),
        "fabric sync sent": resynced,
    }


@shared_task(ignore_result=True)
def power_action(power_action_id: int) -> str:
    """A tenant's reboot (graceful; checked after TENANT_REBOOT_GRACE_SECONDS and forced if the OS
    did not restart) or power cycle, once, while the reservation that asked still holds the node."""
    return node_workflows.power_action(power_action_id=power_action_id)


@shared_task(ignore_result=True)
def force_restart_if_stuck(power_action_id: int) -> str:
    return node_workflows.force_restart_if_stuck(power_action_id=power_action_id)


def send_power_action(power_action_id: int) -> None:
    """A message for the worker to carry out the action; the reconciler sends another if it is lost."""
    power_action.apply_async(args=(power_action_id,), expires=settings.WORKER_SWEEP_EXPIRES)


@shared_task(ignore_result=True)
def reconcile_power_actions(limit: int = 500) -> dict:
    """Send the tenants' power actions that no worker took (the message lost, or expired in a
    backlog), and the reboots' forced-restart checks whose grace is over."""
    asks, checks = fleet_services.take_due_power_actions(limit=limit)
    for power_action_id in asks:
        send_power_action(power_action_id)
    for power_action_id in checks:
        force_restart_if_stuck.apply_async(args=(power_action_id,), expires=settings.WORKER_SWEEP_EXPIRES)
    return {"power_actions_sent": len(asks), "restart_checks_sent": len(checks)}


# -- reservations ----------------------------------------------------------------------------


@shared_task(ignore_result=True)
def deliver_webhooks() -> dict:
    """Send tenants' webhook deliveries that are due: on commit of the change that queued them,
    and every reconcile interval for retries and for what a lost message left."""
    return webhooks.deliver_due()


@shared_task(ignore_result=True)
def heal_reservation(reservation_id: int) -> None:
    reservation_services.heal_reservation(reservation_id=reservation_id)


@shared_task(ignore_result=True)
def reconcile_reservations() -> dict:
    return reservation_services.reconcile_reservations()


# -- remediation -----------------------------------------------------------------------------


@shared_task(ignore_result=True)
def repair_gpu(remediation_id: int) -> str:
    """One look at a repair rung: a GPU reset, a reboot or a power cycle."""
    return repairs.look_at_repair(remediation_id)


@shared_task(ignore_result=True)
def reconcile_remediations(limit: int = 500) -> dict:
    """Send the looks at repairs that are due."""
    due = remediation_services.take_due_repairs(limit=limit)
    for remediation_id in due:
        repair_gpu.apply_async(args=(remediation_id,), expires=settings.REMEDIATION_RECHECK_SECONDS)
    return {"repairs_looked_at": len(due)}


@shared_task(ignore_result=True)
def read_bmc_event_logs(limit: int = 500) -> dict:
    """Read the BMC event logs (SEL) that are due, and act on their new entries."""
    return bmc_event_logs.read_due(limit=limit)


# -- diagnostics on idle nodes ----------------------------------------------------------------


@shared_task(ignore_result=True)
def reconcile_idle_diagnostics(limit: int = 500) -> dict:
    """Open long diagnostics runs on idle available nodes, up to the cap, and send the looks that are due."""
    opened = fleet_services.open_idle_diagnostics(at_once=settings.IDLE_DIAGNOSTICS_AT_ONCE)
    due = fleet_services.take_due_idle_diagnostics(limit=limit)
    for run_id in due:
        look_at_idle_diagnostics.apply_async(args=(run_id,), expires=settings.IDLE_DIAGNOSTICS_POLL_SECONDS)
    return {"opened": len(opened), "looked_at": len(due)}


@shared_task(ignore_result=True)
def look_at_idle_diagnostics(run_id: int) -> str:
    return idle_diagnostics.look_at_run(run_id)


# -- firmware rollouts ------------------------------------------------------------------------


@shared_task(ignore_result=True)
def advance_firmware_rollouts() -> dict:
    """Settle what the firmware rollouts' nodes did, pause at a failure, send the next batches to
    inspection. A node a booking holds from now until an inspection could have ended is left for its tenant."""
    soon = Now() + timedelta(seconds=settings.INSPECTION_DEADLINE)  # the database's clock, in the query
    held = live_allocations().filter(period__startswith__lt=soon).order_by().values_list("node_id", flat=True)
    return firmware_rollouts.advance_all(held=held)


# -- the fabric ------------------------------------------------------------------------------


@shared_task(ignore_result=True)
def read_fabric_health() -> dict:
    """Read the health of the fabric's switches from their switch manager."""
    return fabric_health.read_switches()


@shared_task(ignore_result=True)
def sync_fabrics(full: bool = False) -> dict:
    """Put nodes on the networks their attachments name and read the fabrics back (full: every
    attachment, for drift), one fabric at a time across the workers; then wake the nodes whose
    workflows waited for it."""
    fabric_sync.sync_picked_up()  # first: whatever changes from now on is sent again
    drivers = drivers_from_settings()
    try:
        figures = fabric_sync.sync_fabrics(drivers=drivers, full=full)
    finally:
        for driver in drivers.values():
            driver.close()
    # Nodes parked until their memberships were read back go on now.
    woken = network_attachments.wake_waiting(figures.pop("settled"))
    figures["workflows sent"] = enqueue_workflows(unleased_nodes_owing_work(woken))
    return figures


# -- retention -------------------------------------------------------------------------------


@shared_task(ignore_result=True)
def delete_old_rows() -> dict:
    """Delete the rows the growing tables keep no longer (GPUFLEET_RETAIN_*_DAYS)."""
    return retention.delete_old_rows()
