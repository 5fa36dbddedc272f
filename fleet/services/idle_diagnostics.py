"""Long diagnostics on idle available nodes: a few at a time, fleet-wide, and their verdicts."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from core.due_work import take_due
from fleet import diagnostics, lifecycle, selectors
from fleet.models import IdleDiagnosticRun, IdleDiagnosticStatus, Node
from fleet.services.transitions import transition

# One lock for every process that opens idle runs, so the cap is counted once ("diag" in ASCII).
IDLE_DIAGNOSTICS_LOCK = 0x64696167


# Where an idle run's failure quarantines the node: still idle, or just taken by placement (a tenant
# must not get a GPU that failed). A node an operator took, or that is on its way back through a wipe,
# is out of service already, and its way back ends in a burn-in.
IDLE_VERDICT_STATES = frozenset({lifecycle.State.AVAILABLE, lifecycle.State.PROVISIONING})


def record_diagnostics_pass(*, node_id: int, level: int) -> None:
    """The node passed a diagnostics run of `level` just now (at inspection, or idle)."""
    Node.objects.filter(pk=node_id).update(diagnostic_passed_at=Now(), diagnostic_level=level)


def open_idle_diagnostics(*, at_once: int) -> list[int]:
    """Open long runs on the available nodes that are due one (selectors.due_for_idle_diagnostics),
    as many as keep at most `at_once` under way fleet-wide; the new runs, due for a look now."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [IDLE_DIAGNOSTICS_LOCK])
        room = at_once - IdleDiagnosticRun.objects.filter(status=IdleDiagnosticStatus.RUNNING).count()
        if room <= 0:
            return []
        runs = IdleDiagnosticRun.objects.bulk_create(
            IdleDiagnosticRun(node_id=node_id, level=diagnostics.LONG)
            for node_id in selectors.due_for_idle_diagnostics(limit=room)
        )
    return [run.pk for run in runs]


def take_due_idle_diagnostics(*, limit: int) -> list[int]:
    """The runs under way whose next look is due, each due again a poll period later; the caller
    has a worker look at each. As with repairs, the due time is in the database: a look whose
    message is lost, or dropped on expiry in a backlog, is simply due again."""
    return take_due(
        IdleDiagnosticRun.objects.filter(status=IdleDiagnosticStatus.RUNNING),
        due_field="look_due_at",
        again_in=timedelta(seconds=settings.IDLE_DIAGNOSTICS_POLL_SECONDS),
        limit=limit,
    )


def idle_diagnostics_started(*, run_id: int, started_at: datetime) -> bool:
    """Record when the agent says it started the run; False if the run ended meanwhile (preempted
    while the agent was starting it): the caller stops what it started."""
    started = IdleDiagnosticRun.objects.filter(
        pk=run_id, status=IdleDiagnosticStatus.RUNNING, started_at__isnull=True
    ).update(started_at=started_at)
    return started == 1


def end_idle_diagnostics(*, run_id: int, status: IdleDiagnosticStatus, actor: str, detail: str = "") -> str:
    """End the run, if it is still under way, with `status`: a pass is recorded on the node; a
    failure (`detail` names the test and GPU, diagnostics.verdict) quarantines the node
    `diagnostic_failed` in IDLE_VERDICT_STATES. Returns the run's status: an ended run keeps the
    one it ended with. ConcurrentTransition if the node moved meanwhile: nothing is recorded."""
    with transaction.atomic():
        ended = IdleDiagnosticRun.objects.filter(pk=run_id, status=IdleDiagnosticStatus.RUNNING).update(
            status=status, ended_at=Now(), detail=detail
        )
        run = IdleDiagnosticRun.objects.select_related("node").get(pk=run_id)
        if not ended:
            return run.status
        if status == IdleDiagnosticStatus.PASSED:
            record_diagnostics_pass(node_id=run.node_id, level=run.level)
        elif status == IdleDiagnosticStatus.FAILED and run.node.state in IDLE_VERDICT_STATES:
            transition(
                node_id=run.node_id,
                event=lifecycle.Event.DIAGNOSTIC_FAILED,
                actor=actor,
                reason=detail,
                detail={"idle_diagnostic_run": run_id, "level": run.level},
            )
    return status
