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
from remediation.models import IncidentEvent, IncidentStep, Remediation, RemediationStatus

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
                _quarantine_within_cap(remediation, node)
            elif decision.action is rules.Action.RECHECK_GPU:
                remediation.status = RemediationStatus.PENDING
                # The reconciler sends the recheck when it is due (take_due_rechecks).
                remediation.recheck_due_at = received_at + timedelta(seconds=settings.REMEDIATION_RECHECK_SECONDS)
            remediation.save(update_fields=["status", "reason", "recheck_due_at"])
    except IntegrityError:
        # The same notification, received by another process at the same moment: its answer stands.
        return Remediation.objects.get(
            fingerprint=alert.fingerprint, starts_at=alert.starts_at, alert_status=alert.status
        )
    return remediation


def take_due_rechecks(*, limit: int) -> list[int]:
    """The pending remediations whose recheck is due, each due again one recheck period later;
    the caller sends their rechecks.

    The due time is in the database, not in a countdown message: Redis loses those when it
    restarts, and a worker holding one when the broker restarts dies (kombu's Redis transport).
    Because each recheck taken is due again later, one lost with Redis, or dropped on expiry in
    a backlog, is sent again; a recheck that was made is not pending any more."""
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


def recheck_gpu(*, remediation_id: int, healthy: bool) -> Remediation:
    """After a GPU reset: healthy again closes the alert; otherwise escalate to a (capped) quarantine."""
    with transaction.atomic():
        remediation = (
            Remediation.objects.select_for_update(of=("self",)).select_related("node__rack").get(pk=remediation_id)
        )
        if remediation.status != RemediationStatus.PENDING:
            return remediation
        pending = rules.Decision(rules.Action.RECHECK_GPU, remediation.node.name, remediation.gpu, remediation.reason)
        decision = rules.after_recheck(pending, healthy=healthy)
        remediation.reason = decision.reason
        if decision.action is rules.Action.QUARANTINE:
            _quarantine_within_cap(remediation, remediation.node)
        else:
            remediation.status = RemediationStatus.NO_ACTION
        remediation.save(update_fields=["status", "reason"])
    return remediation
