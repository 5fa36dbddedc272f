"""Long diagnostics on idle available nodes, at low priority, preempted when placement wants the node.

The reconciler opens runs on available nodes with no recent long pass, at most
GPUFLEET_IDLE_DIAGNOSTICS_AT_ONCE at a time, and has a worker look at each one every
GPUFLEET_IDLE_DIAGNOSTICS_POLL_SECONDS (fleet.services.open_idle_diagnostics and
take_due_idle_diagnostics): start it through the agent, or see how it stands. A run is a row
(fleet.models.IdleDiagnosticRun), not a worker's memory: a worker that dies loses nothing, the next
look carries on. A node under diagnostics stays available, and so placeable.

Preemption: provisioning's first step (node_workflows.stop_idle_diagnostics) cancels the run on its
node (DELETE /diagnostics) before anything else; a look that finds its node gone elsewhere (an
operator's maintenance, a quarantine) cancels it too. A run that had finished by itself before the
cancel keeps its verdict: a failed test still quarantines the node, even one placement has taken.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from django.conf import settings

from core import clock
from fleet import diagnostics, lifecycle, services
from fleet.models import IdleDiagnosticRun, IdleDiagnosticStatus
from workflows.agent import AgentError, AgentUnavailable
from workflows.clients import HARDWARE, Agent, Clients

ACTOR = "system:idle-diagnostics"
Status = IdleDiagnosticStatus
# A node found here (a late look: it went through a wipe meanwhile) was rebooted, which ended the
# run; the agent is not asked to cancel, since what it runs now may be the inspection's own diagnostics.
REBOOTED = frozenset({lifecycle.State.WIPING, lifecycle.State.INSPECTING})


def look_at_run(run_id: int, clients: Clients = HARDWARE) -> str:
    """One look at a diagnostics run on an idle node, through its agent; its status after."""
    run = IdleDiagnosticRun.objects.select_related("node").get(pk=run_id)
    if run.status != IdleDiagnosticStatus.RUNNING:
        return run.status
    agent = clients.agent(run.node)
    try:
        return look(run, agent)
    finally:
        agent.close()


def look(run: IdleDiagnosticRun, agent: Agent) -> str:
    """One look at a run under way: start it, or see how it stands. Returns its status after."""
    if run.node.state in REBOOTED:
        return _end(run, Status.PREEMPTED, f"the node went {run.node.state}, which rebooted it")
    if run.node.state != lifecycle.State.AVAILABLE:
        return preempt(run, agent, why=f"the node went {run.node.state}")
    try:
        if run.started_at is None:
            return _start(run, agent)
        answer = agent.diagnostics()
    except AgentUnavailable as error:
        if _overdue(run):
            return _end(run, Status.INTERRUPTED, f"the agent did not answer within {_timeout()}: {error}")
        return Status.RUNNING
    except AgentError as error:  # refused (a run of someone else's), or cannot (no DCGM)
        return _end(run, Status.INTERRUPTED, str(error))
    if _is_this_run(run, answer) and answer.get("state") == "running":
        if not _overdue(run):
            return Status.RUNNING
        _cancel_quietly(agent)
        return _end(run, Status.INTERRUPTED, f"still running after {_timeout()}: cancelled")
    return _settle(run, answer)


def preempt(run: IdleDiagnosticRun, agent: Agent, *, why: str) -> str:
    """Cancel the run on the agent and end it preempted, unless it had finished by itself: then its
    verdict stands. Returns the run's status after."""
    try:
        answer = agent.cancel_diagnostics()
    except (AgentUnavailable, AgentError) as error:
        # Nothing else to try: whoever takes the node reboots it, and a reboot ends any run.
        return _end(run, Status.PREEMPTED, f"{why}; the agent could not cancel the run: {error}")
    if _is_this_run(run, answer) and answer.get("state") == "succeeded":
        return _settle(run, answer)
    return _end(run, Status.PREEMPTED, f"{why}; the agent's run: {answer.get('state')}")


def _start(run: IdleDiagnosticRun, agent: Agent) -> str:
    started = agent.start_diagnostics(run.level)
    if services.idle_diagnostics_started(run_id=run.pk, started_at=_agent_time(started)):
        return Status.RUNNING
    _cancel_quietly(agent)  # preempted while the agent was starting it: stop what was started
    return IdleDiagnosticRun.objects.values_list("status", flat=True).get(pk=run.pk)


def _settle(run: IdleDiagnosticRun, answer: dict) -> str:
    """The run has ended on the agent: its verdict, or interrupted if the agent has none for it."""
    if not _is_this_run(run, answer):
        return _end(run, Status.INTERRUPTED, f"the agent no longer has the run (its last: {answer.get('state')})")
    if answer.get("state") != "succeeded":
        return _end(run, Status.INTERRUPTED, f"the run ended {answer.get('state')}, without results")
    if failed := diagnostics.failed_tests(answer.get("results")):
        return _end(run, Status.FAILED, diagnostics.verdict(failed))
    return _end(run, Status.PASSED)


def _end(run: IdleDiagnosticRun, status: IdleDiagnosticStatus, detail: str = "") -> str:
    return services.end_idle_diagnostics(run_id=run.pk, status=status, actor=ACTOR, detail=detail)


def _agent_time(answer: dict) -> datetime:
    started = answer.get("started_at")
    if not isinstance(started, int | float) or isinstance(started, bool):
        raise AgentError(f"the agent did not say when the run started: {started!r}")
    return datetime.fromtimestamp(started, UTC)


def _is_this_run(run: IdleDiagnosticRun, answer: dict) -> bool:
    """Whether the agent's answer is about this run: the one it started when it said it did."""
    try:
        return run.started_at is not None and _agent_time(answer) == run.started_at
    except AgentError:
        return False


def _cancel_quietly(agent: Agent) -> None:
    with contextlib.suppress(AgentUnavailable, AgentError):  # it ends anyway: at its end, or at a reboot
        agent.cancel_diagnostics()


def _timeout() -> str:
    return f"{settings.DIAGNOSTICS_TIMEOUT:g}s"


def _overdue(run: IdleDiagnosticRun) -> bool:
    """Open longer than DIAGNOSTICS_TIMEOUT by the database's clock, which stamped created_at
    (core.clock): read once the agent has answered, at most once a look."""
    return clock.now() - run.created_at > timedelta(seconds=settings.DIAGNOSTICS_TIMEOUT)
