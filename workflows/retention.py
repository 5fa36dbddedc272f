"""The retention sweep: what each table that only grows keeps no longer is deleted, a batch per
transaction (core.retention.BATCH_SIZE), so that no delete holds its locks for long.

What is still in use stays whatever its age: a webhook delivery still pending, a remediation whose
ladder still climbs or that the blast-radius cap still counts (its incident timeline goes with it),
each node's latest attestation result (GET /v1/nodes/{name}/attestation serves it), an idle
diagnostics run still running, a tenant's power action not yet done, a node credential not yet
revoked, a login lockout still cooling off. Expired sessions go whatever their age. The
append-only audit tables (fleet's audit events, the reservations' history) keep everything:
their triggers refuse DELETE (docs/architecture.md, "Retention").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery

from attestation.models import AttestationResult, ResultKind
from core import clock, retention
from fleet.models import IdleDiagnosticRun, IdleDiagnosticStatus, NodeCredential, PowerAction
from fleet.models.power_actions import OPEN as OPEN_POWER_ACTIONS
from remediation import rules
from remediation.models import Remediation, RemediationStatus
from reservations.models import WebhookDelivery

Expired = Callable[[datetime], QuerySet]  # a table's rows that may go, given the database's time


def _webhook_deliveries(now: datetime) -> QuerySet[WebhookDelivery]:
    old = retention.cutoff(now, days=settings.RETAIN_WEBHOOK_DELIVERIES_DAYS)
    return WebhookDelivery.objects.filter(created_at__lt=old).exclude(state=WebhookDelivery.State.PENDING)


def _remediations(now: datetime) -> QuerySet[Remediation]:
    window = timedelta(seconds=settings.REMEDIATION_WINDOW_SECONDS)
    old = retention.cutoff(
        now, days=settings.RETAIN_REMEDIATIONS_DAYS, keep_at_least=max(rules.REPEAT_OFFENDER.window, window)
    )
    counted = Q(counted_from__isnull=False) & (Q(counted_until__isnull=True) | Q(counted_until__gte=now - window))
    return Remediation.objects.filter(at__lt=old).exclude(status=RemediationStatus.PENDING).exclude(counted)


def _attestation_results(now: datetime) -> QuerySet[AttestationResult]:
    old = retention.cutoff(now, days=settings.RETAIN_ATTESTATION_RESULTS_DAYS)
    newest = AttestationResult.objects.filter(node=OuterRef("node")).order_by("-at", "-id").values("pk")
    latest = newest[:1]
    # A handoff result re-signs the node's latest inspection: that one stays while the tenant does.
    inspected = newest.filter(kind=ResultKind.INSPECTION)[:1]
    return AttestationResult.objects.filter(at__lt=old).exclude(pk=Subquery(latest)).exclude(pk=Subquery(inspected))


def _idle_diagnostic_runs(now: datetime) -> QuerySet[IdleDiagnosticRun]:
    old = retention.cutoff(
        now,
        days=settings.RETAIN_IDLE_DIAGNOSTIC_RUNS_DAYS,
        keep_at_least=timedelta(seconds=settings.IDLE_DIAGNOSTICS_RETRY_SECONDS),
    )
    return IdleDiagnosticRun.objects.filter(ended_at__lt=old).exclude(status=IdleDiagnosticStatus.RUNNING)


def _power_actions(now: datetime) -> QuerySet[PowerAction]:
    old = retention.cutoff(now, days=settings.RETAIN_POWER_ACTIONS_DAYS)
    return PowerAction.objects.filter(finished_at__lt=old).exclude(state__in=OPEN_POWER_ACTIONS)


def _node_credentials(now: datetime) -> QuerySet[NodeCredential]:
    """Revoked ones (their drives go with them): a report that still carries one is then refused
    as a token that matches nothing, no longer audited as an earlier holder's."""
    old = retention.cutoff(now, days=settings.RETAIN_NODE_CREDENTIALS_DAYS)
    return NodeCredential.objects.filter(revoked_at__lt=old)


def _sessions(now: datetime) -> QuerySet[Session]:
    return Session.objects.filter(expire_date__lt=now)


def _login_attempts(model: type[AccessAttempt | AccessLog | AccessFailureLog]) -> Expired:
    def expired(now: datetime) -> QuerySet:
        old = retention.cutoff(now, days=settings.RETAIN_LOGIN_ATTEMPTS_DAYS, keep_at_least=settings.AXES_COOLOFF_TIME)
        return model.objects.filter(attempt_time__lt=old)

    return expired


TABLES: dict[str, Expired] = {
    "webhook_deliveries": _webhook_deliveries,
    "remediations": _remediations,
    "attestation_results": _attestation_results,
    "idle_diagnostic_runs": _idle_diagnostic_runs,
    "power_actions": _power_actions,
    "node_credentials": _node_credentials,
    "sessions": _sessions,
    "login_attempts": _login_attempts(AccessAttempt),
    "login_logs": _login_attempts(AccessLog),
    "login_failure_logs": _login_attempts(AccessFailureLog),
}


def _delete_batch(rows: QuerySet, batch_size: int) -> tuple[int, int]:
    """Delete up to `batch_size` of `rows` (and what cascades from them) in one transaction: how
    many of `rows` were read, and how many went. The delete asks the conditions again: a row that
    came into use since it was read stays."""
    with transaction.atomic():
        taken = list(rows.order_by("pk").values_list("pk", flat=True)[:batch_size])
        _, gone = rows.filter(pk__in=taken).delete() if taken else (0, {})
    return len(taken), gone.get(rows.model._meta.label, 0)


def delete_old_rows(*, now: datetime | None = None, batch_size: int = retention.BATCH_SIZE) -> dict[str, int]:
    """Delete what each table keeps no longer at `now` (None: the database's clock), a batch of
    each table in turn until none has more, so that one table's backlog cannot starve the others
    when the task's time runs out; how many rows of each table went."""
    at = clock.now() if now is None else now
    expired = {table: rows(at) for table, rows in TABLES.items()}
    deleted = dict.fromkeys(expired, 0)
    while expired:
        for table, rows in list(expired.items()):
            taken, gone = _delete_batch(rows, batch_size)
            deleted[table] += gone
            if taken < batch_size:
                del expired[table]
    return deleted
