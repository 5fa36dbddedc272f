"""The engine: each owing state's workflow, run step by step under the worker's lease, its
outcome applied as a lifecycle event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

import tenacity
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from core import database_busy
from fleet import leases, lifecycle, services
from fleet.leases import Lease, LeaseLost, record_discarded_result
from fleet.lifecycle import Event, State
from fleet.models import AuditEvent, AuditOnlyEvent, Node
from fleet.workflow_steps import StepName
from workflows.agent import AgentError, AgentUnavailable
from workflows.clients import HARDWARE, Clients
from workflows.node_workflows.booting import boot_service_image, boot_service_image_unless_wiped, wait_for_agent
from workflows.node_workflows.handoff import sign_handoff
from workflows.node_workflows.inspection import (
    attest,
    check_firmware,
    check_inventory,
    finish_firmware_update,
    recheck_firmware,
    start_diagnostics,
    wait_for_diagnostics,
)
from workflows.node_workflows.provisioning import (
    boot_tenant_image,
    check_booted_image,
    check_secure_boot_for_image,
    enable_secure_boot_for_image,
    erase_drives_if_reinstalling,
    join_tenant_networks,
    prepare_config_drive,
    stop_idle_diagnostics,
    wait_for_tenant_networks,
)
from workflows.node_workflows.run import GoOnAt, NotYet, Run, StepFailed, Waiting
from workflows.node_workflows.wiping import (
    clear_console_log,
    join_provisioning_network,
    leave_tenant_networks,
    start_drive_erase,
    start_gpu_wipe,
    wait_for_drive_erase,
    wait_for_gpu_wipe,
)
from workflows.redfish import BMCPermanentError, BMCTransientError

log = logging.getLogger(__name__)

# A step returns what it hands on to the next step, or where to go on.
WorkflowStep = Callable[[Run], dict | GoOnAt | None]


@dataclass(frozen=True)
class Workflow:
    steps: tuple[tuple[StepName, WorkflowStep], ...]  # each under the name the node stores
    succeeded: lifecycle.Event | None  # None: the last step applies the outcome itself
    failed: lifecycle.Event
    deadline_setting: str  # how long the node may stay in this state, all retries included
    # A first step whose wait no deadline bounds; the state's deadline then counts from when the
    # node first went past it (deadline_runs_since).
    unbounded_first_step: StepName | None = None


WORKFLOWS: dict[lifecycle.State, Workflow] = {
    State.INSPECTING: Workflow(
        steps=(
            (StepName.BOOT_SERVICE_IMAGE, boot_service_image_unless_wiped),
            (StepName.WAIT_FOR_AGENT, wait_for_agent),
            (StepName.CHECK_FIRMWARE, check_firmware),
            (StepName.FINISH_FIRMWARE_UPDATE, finish_firmware_update),
            (StepName.RECHECK_FIRMWARE, recheck_firmware),
            (StepName.CHECK_INVENTORY, check_inventory),
            (StepName.START_DIAGNOSTICS, start_diagnostics),
            (StepName.WAIT_FOR_DIAGNOSTICS, wait_for_diagnostics),
            (StepName.ATTEST, attest),
        ),
        succeeded=None,
        failed=Event.INSPECTION_FAILED,
        deadline_setting="INSPECTION_DEADLINE",
    ),
    State.PROVISIONING: Workflow(
        steps=(
            (StepName.STOP_IDLE_DIAGNOSTICS, stop_idle_diagnostics),
            (StepName.ERASE_DRIVES_IF_REINSTALLING, erase_drives_if_reinstalling),
            (StepName.WAIT_FOR_DRIVE_ERASE, wait_for_drive_erase),
            (StepName.PREPARE_CONFIG_DRIVE, prepare_config_drive),
            (StepName.ENABLE_SECURE_BOOT_FOR_IMAGE, enable_secure_boot_for_image),
            (StepName.BOOT_TENANT_IMAGE, boot_tenant_image),
            (StepName.WAIT_FOR_AGENT, wait_for_agent),
            (StepName.CHECK_SECURE_BOOT_FOR_IMAGE, check_secure_boot_for_image),
            (StepName.CHECK_BOOTED_IMAGE, check_booted_image),
            (StepName.JOIN_TENANT_NETWORKS, join_tenant_networks),
            (StepName.WAIT_FOR_TENANT_NETWORKS, wait_for_tenant_networks),
            (StepName.SIGN_HANDOFF, sign_handoff),
        ),
        succeeded=Event.PROVISION_SUCCEEDED,
        failed=Event.PROVISION_FAILED,
        deadline_setting="PROVISION_DEADLINE",
    ),
    State.WIPING: Workflow(
        steps=(
            (StepName.LEAVE_TENANT_NETWORKS, leave_tenant_networks),
            (StepName.BOOT_SERVICE_IMAGE, boot_service_image),
            (StepName.JOIN_PROVISIONING_NETWORK, join_provisioning_network),
            (StepName.WAIT_FOR_AGENT, wait_for_agent),
            (StepName.START_GPU_WIPE, start_gpu_wipe),
            (StepName.WAIT_FOR_GPU_WIPE, wait_for_gpu_wipe),
            (StepName.START_DRIVE_ERASE, start_drive_erase),
            (StepName.WAIT_FOR_DRIVE_ERASE, wait_for_drive_erase),
            (StepName.CLEAR_CONSOLE_LOG, clear_console_log),
        ),
        succeeded=Event.WIPE_SUCCEEDED,
        failed=Event.WIPE_FAILED,
        deadline_setting="WIPE_DEADLINE",
        unbounded_first_step=StepName.LEAVE_TENANT_NETWORKS,
    ),
}


def _remaining_steps(workflow: Workflow, run: Run) -> tuple[tuple[StepName, WorkflowStep], ...]:
    """Resume where a paused run stopped. After a worker died, stalled or lost its database
    mid-step, start over: nobody knows what it left the machine doing, and every step is safe to
    repeat."""
    names = [name for name, _ in workflow.steps]
    if run.lease.took_over or run.node.step not in names:
        return workflow.steps
    return workflow.steps[names.index(StepName(run.node.step)) :]


def run_workflow(*, node_id: int, worker: str, clients: Clients = HARDWARE) -> str:
    """Claim the node if it owes work and nobody holds it, and run its workflows until it owes
    none or waits on its hardware, through `clients`. Returns what happened, one outcome per workflow."""
    claimed = leases.claim(owner=worker, node_ids=[node_id])
    if not claimed:
        return "not claimed"
    lease: Lease | None = claimed[0]
    node, in_state = _node_and_time_in_state(node_id)
    bmc = clients.bmc(node)
    agent = clients.agent(node)
    outcomes = []
    follows: lifecycle.State | None = None  # the state whose workflow this visit has just completed
    try:
        while lease is not None:
            run = Run(node=node, lease=lease, actor=f"worker:{worker}", bmc=bmc, agent=agent, follows=follows)
            try:
                with connection.execute_wrapper(run.time_queries):
                    outcomes.append(_run_steps(run, WORKFLOWS[lifecycle.State(node.state)], in_state))
            except LeaseLost:
                outcomes.append("lease lost")
            except DatabaseError as error:
                if not database_busy.unavailable(error):
                    raise
                # The database went away mid-step (its primary died: a failover). What the step had
                # not committed is gone with it; what the machine was left doing nobody knows.
                log.warning("%s: the database went away at %s: %s", node.name, run.step or "start", error)
                outcomes.append(f"database lost at {run.step or 'start'}")
                run.next_lease = _lease_once_the_database_is_back(lease)
                if run.next_lease is None:  # a successor took the node meanwhile: the step was for nothing
                    record_discarded_result(lease=lease, attempted=f"step {run.step or 'start'}", actor=run.actor)
            lease = run.next_lease
            if lease is not None:
                follows = None if lease.took_over else lifecycle.State(node.state)
                node, in_state = _node_and_time_in_state(node_id)
    finally:
        bmc.close()
        agent.close()
    return ", ".join(outcomes)


def _lease_once_the_database_is_back(lease: Lease) -> Lease | None:
    """`lease`, to start the node's workflow over as a takeover does, once the database answers
    again (a standby promoted) and the lease still holds: retried with backoff for as long as the
    lease may last, the broken connection dropped before each try. None if the lease was lost
    meanwhile (a stalled worker's connection may be what the server ended); a database still out
    of reach is raised, and the reconciler sends the node again once the lease has run out."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(database_busy.unavailable),
        wait=tenacity.wait_random_exponential(multiplier=0.5, max=5),
        stop=tenacity.stop_after_delay(settings.LEASE_SECONDS),
        before=lambda _: close_old_connections(),
        reraise=True,
    )
    try:
        retrying(leases.heartbeat, lease)
    except LeaseLost:
        return None
    return replace(lease, took_over=True)


def _node_and_time_in_state(node_id: int) -> tuple[Node, float]:
    """The node, and how many seconds it has been in its state by the database's clock
    (core.clock), read in the same statement rather than in a round trip of its own."""
    node = Node.objects.annotate(in_state=Now() - F("state_since")).get(pk=node_id)
    return node, node.in_state.total_seconds()


def deadline_runs_since(node: Node) -> datetime | None:
    """When the node's state's deadline began to run: when it entered the state, or, for a workflow
    with an unbounded first step (a wipe waits for the node's removal from its tenant's networks
    as long as a manager takes), when it first went past that step in this stay, as its audit rows
    of step_changed say (they survive every run and takeover; a takeover that starts over at the
    first step does not start the clock again). None while the node has not gone past that step:
    no deadline runs yet."""
    workflow = WORKFLOWS.get(lifecycle.State(node.state))
    unbounded = workflow.unbounded_first_step if workflow is not None else None
    if unbounded is None:
        return node.state_since
    if node.step in ("", unbounded):
        return None
    past = AuditEvent.objects.filter(
        node_id=node.pk, event=AuditOnlyEvent.STEP_CHANGED, at__gte=node.state_since
    ).exclude(reason=unbounded)
    return past.order_by("id").values_list("at", flat=True).first()


def _run_steps(run: Run, workflow: Workflow, in_state: float) -> str:
    """Run the workflow's steps left, unless the node, `in_state` seconds in its state already, is
    past the workflow's deadline (counted from deadline_runs_since where the workflow has an
    unbounded first step)."""
    deadline = getattr(settings, workflow.deadline_setting)
    current = run.node.step or "start"
    try:
        if workflow.unbounded_first_step is not None and in_state > deadline:
            since = deadline_runs_since(run.node)
            in_state = 0.0 if since is None else in_state - (since - run.node.state_since).total_seconds()
        if in_state > deadline:
            raise StepFailed(f"still {run.node.state} after {in_state:.0f}s (deadline {deadline:g}s, retries included)")
        handed_on: dict | None = None  # what a step returned for the next one: audited with it, read from there
        go_on_at: StepName | None = None  # the step to go on at, past those with nothing to do
        starting = True  # at the step this run starts at, what was handed on to it is in its audit row alone
        for name, step in _remaining_steps(workflow, run):
            if go_on_at is not None and name != go_on_at:
                continue
            current = run.step = name
            if not leases.set_step(run.lease, step=current, actor=run.actor, detail=handed_on):
                return "lease lost"
            run.handed_here, starting = (None if starting else handed_on or {}), False
            returned = step(run)
            handed_on, go_on_at = (None, returned.step) if isinstance(returned, GoOnAt) else (returned, None)
    except (StepFailed, BMCPermanentError) as failure:
        event, reason = workflow.failed, f"{current}: {failure}"
        if isinstance(failure, StepFailed) and failure.event is not None:
            event, reason = failure.event, str(failure)
        log.warning("%s: %s failed at %s", run.node.name, run.node.state, reason)
        run.next_lease = _complete_and_go_on(run, event=event, reason=reason)
        return event.value
    except Waiting as wait:
        log.info("%s: %s at %s: %s", run.node.name, run.node.state, current, wait)
        if wait.recheck_in is None:
            parked = leases.park_backing_off(run.lease, most=settings.WORKFLOW_RECHECK_MAX_SECONDS)
        else:
            parked = leases.park(run.lease, seconds=wait.recheck_in)
        if not parked:
            record_discarded_result(lease=run.lease, attempted=f"park at {current}", actor=run.actor)
            return "lease lost"
        return f"waiting at {current}"
    except (NotYet, BMCTransientError, AgentUnavailable, AgentError) as pause:
        log.info("%s: %s paused at %s: %s", run.node.name, run.node.state, current, pause)
        first = workflow.steps[0][0]
        if isinstance(pause, AgentUnavailable) and current != first:
            # The agent answered earlier in this workflow and now does not: the machine rebooted
            # or lost power under us, and what it had booted is gone. Resuming here would wait for
            # an agent that never comes back; the next run starts over.
            leases.set_step(run.lease, step=first, actor=run.actor)
        # Parked, not released: a pause at a step that has lasted (a BMC that keeps failing,
        # attestation not configured yet) is sent again less and less often, not at every
        # reconcile, each visit a claim and the step's calls for nothing.
        if not leases.park_backing_off(run.lease, most=settings.WORKFLOW_RECHECK_MAX_SECONDS):
            record_discarded_result(lease=run.lease, attempted=f"pause at {current}", actor=run.actor)
            return "lease lost"
        return f"paused at {current}"
    if workflow.succeeded is not None:
        run.next_lease = _complete_and_go_on(run, event=workflow.succeeded, found=handed_on)
        return workflow.succeeded.value
    return "done"


def _complete_and_go_on(
    run: Run, *, event: lifecycle.Event, reason: str = "", found: dict | None = None
) -> Lease | None:
    """Apply the outcome, with what the last step `found` (the console log's clear) in its audit
    row, and, if it owes more work (a wipe is followed by inspection), claim the node again in the
    same transaction: no other worker is sent it, and this one keeps its BMC connection and what
    it learnt of the BMC."""
    with transaction.atomic():
        detail = {**(found or {}), **run.figures()}
        node = services.complete(run.lease, event=event, actor=run.actor, reason=reason, detail=detail)
        return leases.reclaim(run.lease) if node is not None else None
