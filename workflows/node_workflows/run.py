"""One worker's run of one node's workflow, and what a step may raise or return to steer it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models.functions import Now

from fleet import leases, lifecycle
from fleet.leases import Lease, LeaseLost, record_discarded_result
from fleet.lifecycle import Event
from fleet.models import AuditEvent, AuditOnlyEvent, Node
from fleet.workflow_steps import StepName
from workflows.clients import BMC, Agent


class StepFailed(Exception):
    """The workflow cannot succeed: apply its failure event with this reason."""

    event: lifecycle.Event | None = None  # another event than the workflow's failure, whose reason says it all


class DiagnosticFailed(StepFailed):
    """A diagnostics test failed: apply diagnostic_failed, with the test and GPU as the reason."""

    event = Event.DIAGNOSTIC_FAILED


class FirmwareDrift(StepFailed):
    """The node is off its firmware baseline and no repair brings it back (none can, or one
    failed): apply firmware_drift, naming each component, what was expected and what was found."""

    event = Event.FIRMWARE_DRIFT


@dataclass(frozen=True)
class GoOnAt:
    """What a step returns when the steps after it, up to `step`, have nothing to do: a firmware
    check that finds nothing to repair goes on past the repair."""

    step: StepName


class NotYet(Exception):
    """A step cannot finish now (transient fault, or waiting on something): give the node back."""


class Waiting(Exception):
    """A wait outlasted the worker's hold: park the node and look again in `recheck_in` seconds,
    or (None) after a quarter of the time its step has waited so far."""

    def __init__(self, what: str, recheck_in: float | None = None):
        again = "after a quarter of the wait so far" if recheck_in is None else f"in {recheck_in:.1f}s"
        super().__init__(f"still waiting for {what}; again {again}")
        self.recheck_in = recheck_in


@dataclass
class Run:
    """One worker's run of one node's workflow."""

    node: Node
    lease: Lease
    actor: str
    bmc: BMC
    agent: Agent
    step: str = ""
    last_heartbeat: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    database_seconds: float = 0.0
    next_lease: Lease | None = None  # kept for the work the outcome calls for next
    # What the step before handed on to the current one, where it ran in this run (None: it ran in
    # an earlier visit, and its audit row says).
    handed_here: dict | None = None
    # The state whose workflow this worker completed just before this one, in the same visit and
    # under the same lease (a wipe, before inspection); None when this run began the visit.
    follows: lifecycle.State | None = None

    def __post_init__(self):
        # The clients serve every workflow of a worker's visit; figures are per workflow.
        self._bmc_before = (self.bmc.calls, self.bmc.seconds)
        self._agent_before = (self.agent.calls, self.agent.seconds)

    def time_queries(self, execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.database_seconds += time.perf_counter() - began

    def figures(self) -> dict:
        """Where this run's time went, recorded with its outcome in the audit log."""
        return {
            "seconds": round(time.monotonic() - self.started, 3),
            "bmc_seconds": round(self.bmc.seconds - self._bmc_before[1], 3),
            "agent_seconds": round(self.agent.seconds - self._agent_before[1], 3),
            "database_seconds": round(self.database_seconds, 3),
            "redfish_calls": self.bmc.calls - self._bmc_before[0],
            "agent_calls": self.agent.calls - self._agent_before[0],
        }

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_heartbeat >= settings.LEASE_SECONDS / 3:
            try:
                leases.heartbeat(self.lease)
            except LeaseLost:
                # A stalled worker waking up after a successor took over: what it did is void.
                record_discarded_result(lease=self.lease, attempted=f"step {self.step}", actor=self.actor)
                raise
            self.last_heartbeat = time.monotonic()

    def wait_until(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Poll `done` until it is true, heartbeating. The wait counts from when its step began,
        across visits: StepFailed once `timeout` seconds have passed since then, Waiting once it
        has outlasted the hold (checked again after a quarter of the time waited so far)."""
        # The step's start, perhaps in another visit, is in the database's clock (core.clock): read
        # once with that clock's now, it becomes a time on this process's monotonic clock.
        step_began: float | None = None
        while True:
            self.heartbeat()  # first: a worker that was stalled must not touch the machine again
            if done():
                return
            if step_began is None:  # read only for a wait that did not end at once
                began, now = Node.objects.values_list("step_since", Now()).get(pk=self.node.pk)
                assert began is not None  # a step is under way, and Node.Meta keeps its start with it
                step_began = time.monotonic() - (now - began).total_seconds()
            waited = time.monotonic() - step_began
            if waited >= timeout:
                raise StepFailed(f"timed out after {timeout:g}s waiting for {what}")
            if waited >= settings.WORKFLOW_HOLD_SECONDS:
                backoff = max(waited / 4, settings.WORKFLOW_POLL_SECONDS)
                raise Waiting(what, min(backoff, settings.WORKFLOW_RECHECK_MAX_SECONDS, timeout - waited))
            time.sleep(settings.WORKFLOW_POLL_SECONDS)


def handed_on(run: Run) -> dict:
    """What the step before handed on to the current one: kept in the current step's audit row,
    for whichever visit resumes it, and read from there unless that step ran in this run."""
    if run.handed_here is not None:
        return run.handed_here
    current = AuditEvent.objects.filter(node_id=run.node.pk, event=AuditOnlyEvent.STEP_CHANGED, reason=run.step)
    return current.latest("id").detail
