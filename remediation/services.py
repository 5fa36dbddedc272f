"""Acting on alerts: each decided by the pure remediation/rules.py, each acted on once, and every
automatic quarantine counted against the blast-radius cap under a PostgreSQL advisory lock."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from fleet import lifecycle
from fleet.models import AuditEvent, Node, NodeState
from fleet.services import ConcurrentTransition, transition
from remediation import rules
from remediation.models import IncidentEvent, IncidentStep, Remediation, RemediationStatus, RemediationStep

log = logging.getLogger(__name__)

AUTOMATIC_ACTOR = "remediation:alertmanager"
# One lock for every process and replica that may quarantine on its own ("gpuf" in ASCII).
CAP_LOCK = 0x67707566


def _parse_time(text: str) -> datetime | None:
    """Alertmanager's RFC 3339 times carry nanoseconds; Python takes microseconds."""
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(trimmed)
    except ValueError:
        return None


def receive_alerts(alerts: list[rules.Alert]) -> list[Remediation]:
    """Act on each alert of a webhook, each in its own transaction; repeats are answered, not redone."""
    return [_receive(alert) for alert in alerts]


def _receive(alert: rules.Alert) -> Remediation:
    decision = rules.decide(alert)
    received_at = timezone.now()
    try:
        with transaction.atomic():
            node = Node.objects.filter(name=decision.node).select_related("rack").first() if decision.node else None
            if node is not None:
                decision = rules.repeat_offense(decision, earlier=remediations_acted_on(node, received_at))
            remediation = Remediation.objects.create(
                fingerprint=alert.fingerprint,
                starts_at=alert.starts_at,
                alert=alert.name,
                alert_status=alert.status,
                labels=dict(alert.labels),
                node=node,
                gpu=decision.gpu,
                action=decision.action.value,
                reason=decision.reason,
                status=RemediationStatus.NO_ACTION,
                reservation_id=node.reservation_id if node else None,
            )
            firing_at = _parse_time(alert.starts_at) or received_at
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.ALERT_FIRING, at=firing_at)
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.WEBHOOK_RECEIVED, at=received_at)
            if node is None:
                if decision.action is not rules.Action.NONE:
                    remediation.reason = f"{decision.reason}; no enrolled node {decision.node!r}"
            elif node.state == NodeState.QUARANTINED and decision.action is not rules.Action.NONE:
                # e.g. GPUUnhealthy minutes after the XID that quarantined it: already out of service.
                remediation.reason = f"{decision.reason}; {node.name} is already quarantined"
            elif decision.action is rules.Action.QUARANTINE:
                remediation.step = RemediationStep.QUARANTINE
                _quarantine_within_cap(remediation, node)
            elif decision.action is rules.Action.RESET_GPU:
                remediation.status = RemediationStatus.PENDING
                remediation.step = RemediationStep.GPU_RESET
                # Due at once: the reconciler has a worker start the reset (take_due_repairs).
                remediation.recheck_due_at = received_at
            remediation.save(update_fields=["status", "reason", "step", "recheck_due_at"])
    except IntegrityError:
        # The same notification, received by another process at the same moment: its answer stands.
        return Remediation.objects.get(
            fingerprint=alert.fingerprint, starts_at=alert.starts_at, alert_status=alert.status
        )
    return remediation


def remediations_acted_on(node: Node, now: datetime) -> int:
    """How many times the node was remediated (reset or quarantined by the rules) within the
    repeat-offender window: suppressed alerts and those calling for nothing do not count."""
    return Remediation.objects.filter(
        node=node,
        at__gte=now - rules.REPEAT_OFFENDER.window,
        status__in=[RemediationStatus.APPLIED, RemediationStatus.PENDING, RemediationStatus.REPAIRED],
    ).count()


def take_due_repairs(*, limit: int) -> list[int]:
    """The pending repairs whose next look is due, each due again one recheck period later; the
    caller has a worker look at each (start the GPU reset, or see how it went).

    The due time is in the database, not in a countdown message: Redis loses those when it
    restarts, and a worker holding one when the broker restarts dies (kombu's Redis transport).
    Because each repair taken is due again later, a message lost with Redis, or dropped on expiry
    in a backlog, is sent again; a repair that has ended is not pending any more."""
    period = timedelta(seconds=settings.REMEDIATION_RECHECK_SECONDS)
    with transaction.atomic():
        due = list(
            Remediation.objects.filter(status=RemediationStatus.PENDING, recheck_due_at__lte=Now())
            .order_by("recheck_due_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        Remediation.objects.filter(pk__in=due).update(recheck_due_at=Now() + period)
    return due


def _quarantine_within_cap(remediation: Remediation, node: Node) -> None:
    """Quarantine unless the cap is reached; the count and the quarantine share one locked transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CAP_LOCK])
    window = timedelta(seconds=settings.REMEDIATION_WINDOW_SECONDS)
    recent = AuditEvent.objects.filter(
        event=lifecycle.Event.HARDWARE_FAULT, actor=AUTOMATIC_ACTOR, at__gte=timezone.now() - window
    )
    minutes = f"{settings.REMEDIATION_WINDOW_SECONDS / 60:g} minutes"
    over = None
    if (fleet_count := recent.count()) >= settings.REMEDIATION_CAP:
        over = f"{fleet_count} automatic quarantines in the last {minutes} (cap {settings.REMEDIATION_CAP})"
    elif (pod_count := recent.filter(node__rack__pod_id=node.rack.pod_id).count()) >= settings.REMEDIATION_POD_CAP:
        over = (
            f"{pod_count} automatic quarantines in pod in the last {minutes} (pod cap {settings.REMEDIATION_POD_CAP})"
        )
    if over:
        remediation.status = RemediationStatus.SUPPRESSED
        remediation.reason = f"{remediation.reason}; suppressed: {over}"
        IncidentEvent.objects.create(
            remediation=remediation, step=IncidentStep.SUPPRESSED, at=timezone.now(), detail=over
        )
        log.warning("suppressed %s on %s: %s", remediation.alert, node.name, over)
        return
    _quarantine(remediation, node, actor=AUTOMATIC_ACTOR)


def _quarantine(remediation: Remediation, node: Node, *, actor: str) -> None:
    try:
        transition(node_id=node.pk, event=lifecycle.Event.HARDWARE_FAULT, actor=actor, reason=remediation.reason)
    except (lifecycle.IllegalTransition, ConcurrentTransition) as error:
        remediation.status = RemediationStatus.NO_ACTION
        remediation.reason = f"{remediation.reason}; nothing to do: {error}"
        return
    remediation.status = RemediationStatus.APPLIED
    IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.QUARANTINED, at=timezone.now())


def apply_suppressed(*, remediation_id: int, operator: str) -> Remediation:
    """An operator decides to act on a suppressed alert: the quarantine is theirs, not counted as automatic."""
    with transaction.atomic():
        remediation = Remediation.objects.select_for_update(of=("self",)).select_related("node").get(pk=remediation_id)
        if remediation.status != RemediationStatus.SUPPRESSED or remediation.node is None:
            return remediation
        _quarantine(remediation, remediation.node, actor=operator)
        remediation.decided_by = operator
        remediation.save(update_fields=["status", "reason", "decided_by"])
    return remediation


def gpu_reset_started(*, remediation_id: int) -> bool:
    """The agent took the reset: look at it again in REMEDIATION_RESET_POLL_SECONDS. False if
    another worker started it first (compare-and-set on the start), or the repair has ended."""
    started = Remediation.objects.filter(
        pk=remediation_id, status=RemediationStatus.PENDING, step_started_at__isnull=True
    ).update(step_started_at=Now(), recheck_due_at=Now() + _poll())
    if started:
        IncidentEvent.objects.create(remediation_id=remediation_id, step=IncidentStep.GPU_RESET, at=timezone.now())
    return bool(started)


def gpu_reset_running(*, remediation_id: int) -> None:
    """Still resetting: look again in REMEDIATION_RESET_POLL_SECONDS."""
    Remediation.objects.filter(pk=remediation_id, status=RemediationStatus.PENDING).update(
        recheck_due_at=Now() + _poll()
    )


def _poll() -> timedelta:
    return timedelta(seconds=settings.REMEDIATION_RESET_POLL_SECONDS)


def gpu_reset_overdue(remediation: Remediation) -> bool:
    """The reset began longer ago than REMEDIATION_RESET_TIMEOUT_SECONDS."""
    started = remediation.step_started_at
    timeout = timedelta(seconds=settings.REMEDIATION_RESET_TIMEOUT_SECONDS)
    return started is not None and timezone.now() - started > timeout


def gpu_reset_finished(*, remediation_id: int, healthy: bool, why: str = "") -> Remediation:
    """After the GPU reset: healthy again, the node stays in service (repaired); otherwise escalate
    to a (capped) quarantine. `why` says what went wrong with the reset, if something did."""
    with transaction.atomic():
        remediation = (
            Remediation.objects.select_for_update(of=("self",)).select_related("node__rack").get(pk=remediation_id)
        )
        if remediation.status != RemediationStatus.PENDING:
            return remediation
        pending = rules.Decision(rules.Action.RESET_GPU, remediation.node.name, remediation.gpu, remediation.reason)
        decision = rules.after_reset(pending, healthy=healthy, why=why)
        remediation.reason = decision.reason
        if decision.action is rules.Action.QUARANTINE:
            remediation.step = RemediationStep.QUARANTINE
            _quarantine_within_cap(remediation, remediation.node)
        else:
            remediation.status = RemediationStatus.REPAIRED
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.REPAIRED, at=timezone.now())
        remediation.save(update_fields=["status", "reason", "step"])
    return remediation
