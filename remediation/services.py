"""Acting on alerts: each decided by the pure remediation/rules/, each acted on once, and every
automatic action counted against the blast-radius cap (remediation/blast_radius.py) under a
PostgreSQL advisory lock, or, for what a tenant's own node says of itself, against that tenant's
budget under the tenant's row lock.

Locks, always in this order: the node's row, then the tenant's row (a budget) or the cap's
advisory lock; a tenant's report of a broken node (reservations.services.report_node) takes the
node's row and then the tenant's too."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, Q
from django.db.models.functions import Now

from core import clock
from core.due_work import take_due
from core.parsing import InvalidInput
from fleet import lifecycle
from fleet.models import Node, NodeState
from fleet.services import audit_power_action, transition
from fleet.signals import node_remediation_planned
from remediation import counting, rules, selectors
from remediation.models import (
    BMCEventLogCursor,
    IncidentEvent,
    IncidentStep,
    Remediation,
    RemediationMode,
    RemediationStatus,
    RemediationStep,
)

log = logging.getLogger(__name__)

AUTOMATIC_ACTOR = "remediation:alertmanager"
# The fields that hold an incident's span against the blast-radius cap.
_COUNTED = ("counted_from", "counted_until")


def _parse_time(text: str) -> datetime | None:
    """Alertmanager's RFC 3339 times, nanoseconds and all (Python keeps microseconds)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def receive_alerts(alerts: list[rules.Alert]) -> list[Remediation]:
    """Act on each alert of a webhook, each in its own transaction; repeats are answered, not redone."""
    return [_receive(alert)[0] for alert in alerts]


def receive_agent_report(*, node: Node, gpu: int, xid: int, occurrence: int, seen_at: str) -> tuple[Remediation, bool]:
    """Act on an XID the node's agent reported the moment it saw it; a repeat of the same
    occurrence is answered with the first one's record. Raises validation.Invalid for a seen_at
    that is no RFC 3339 time. Whether it was new is the second value."""
    return _receive(rules.agent_report(node=node.name, gpu=gpu, xid=xid, occurrence=occurrence, seen_at=seen_at))


# Nodes that operators hold: their SEL is read, so that its cursor stays current, but what it logs
# is theirs to read (a power supply pulled in maintenance is no fault to quarantine for).
_HELD_BY_OPERATORS = (NodeState.QUARANTINED, NodeState.MAINTENANCE)


def receive_sel_entries(*, node: Node, entries: list[dict]) -> None:
    """Act on new entries of a node's BMC event log (SEL), each read as an alert (rules.sel_entry)
    and acted on in its own transaction, under the cap like any other; an entry read again keeps
    its first record. Nothing is done for a node that operators hold, nor for an entry that
    cannot be read or stored, which is logged."""
    if Node.objects.filter(pk=node.pk, state__in=_HELD_BY_OPERATORS).exists():
        return
    for entry in entries:
        try:
            alert = rules.sel_entry(node.name, entry)
        except InvalidInput as error:
            log.warning("%s: SEL entry passed over: %s", node.name, error)
            continue
        if alert is not None:
            _receive(alert)


def take_due_event_logs(*, limit: int) -> list[int]:
    """The cursors of the BMC event logs due a read, each due again SEL_POLL_SECONDS later
    (core.due_work). A node gets its cursor, due at once, when it leaves `enrolled`: from then on
    the control plane drives its BMC."""
    unread = Node.objects.exclude(state=NodeState.ENROLLED).filter(event_log_cursor__isnull=True)
    BMCEventLogCursor.objects.bulk_create(
        [BMCEventLogCursor(node_id=pk) for pk in unread.values_list("pk", flat=True)], ignore_conflicts=True
    )
    return take_due(
        BMCEventLogCursor.objects.all(),
        due_field="read_due_at",
        again_in=timedelta(seconds=settings.SEL_POLL_SECONDS),
        limit=limit,
    )


def event_log_read(
    *, cursor_id: int, entries_path: str, last_entry_id: str, last_entry_created: str, position: int, etag: str
) -> None:
    """The log was read up to that entry, and what it held was received: the next read starts there."""
    BMCEventLogCursor.objects.filter(pk=cursor_id).update(
        entries_path=entries_path,
        last_entry_id=last_entry_id,
        last_entry_created=last_entry_created,
        position=position,
        etag=etag,
        read_at=Now(),
        failure="",
    )


def event_log_unread(*, cursor_id: int, failure: str) -> None:
    """The BMC could not be read: the cursor stays, the log is read again when next due."""
    BMCEventLogCursor.objects.filter(pk=cursor_id).update(failure=failure)


def _receive(alert: rules.Alert) -> tuple[Remediation, bool]:
    decision = rules.decide(alert, shadow=frozenset(settings.REMEDIATION_SHADOW_RULES))
    received_at = clock.now()  # once: the timeline's rows and the decisions of this receipt share it
    try:
        with transaction.atomic():
            # The node's row lock comes first, here as wherever a ladder moves: one decision per
            # node at a time sees what the last one did (the agent's report and Alertmanager's
            # alert for one XID may arrive together, at two web processes).
            nodes = Node.objects.select_for_update(of=("self",)).select_related("rack__pod")
            node = nodes.filter(name=decision.node).first() if decision.node else None
            if node is not None:
                decision = rules.repeat_offense(decision, earlier=selectors.remediations_acted_on(node, received_at))
            remediation = Remediation.objects.create(
                fingerprint=alert.fingerprint,
                starts_at=alert.starts_at,
                alert=alert.name,
                alert_status=alert.status,
                labels=dict(alert.labels),
                node=node,
                gpu=decision.gpu,
                action=decision.rule,
                reason=decision.reason,
                status=RemediationStatus.NO_ACTION,
                reservation_id=node.reservation_id if node else None,
                mode=decision.mode.value,
                self_reported_by_id=_tenants_word(alert, node),
            )
            firing_at = _parse_time(alert.starts_at) or received_at
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.ALERT_FIRING, at=firing_at)
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.WEBHOOK_RECEIVED, at=received_at)
            _act_on(remediation, decision, node, firing_at, now=received_at)
            remediation.save(update_fields=["status", "reason", "step", "recheck_due_at", *_COUNTED])
            if node is not None:
                _hold_while_repairing(node.pk)
    except IntegrityError:
        # The same notification, received by another process at the same moment: its answer stands.
        found = Remediation.objects.get(
            fingerprint=alert.fingerprint, starts_at=alert.starts_at, alert_status=alert.status
        )
        return found, False
    return remediation, True


def _tenants_word(alert: rules.Alert, node: Node | None) -> int | None:
    """The tenant whose budget the alert spends: the node's tenant if it serves one and the alert
    rests on what software on the node says (rules.said_by_the_node); None puts it under the cap."""
    if node is None or node.reservation_id is None or not rules.said_by_the_node(alert):
        return None
    return node.tenant_id


def _act_on(
    remediation: Remediation, decision: rules.Decision, node: Node | None, firing_at: datetime, *, now: datetime
) -> None:
    if node is None:
        if decision.step is not None:
            remediation.reason = f"{decision.reason}; no enrolled node {decision.node!r}"
        return
    if decision.step is None:
        if decision.ladder.notify_tenant and decision.mode is rules.Mode.ENFORCE:
            _tell_tenant(remediation, node, step=None, acts_at=None, now=now)
        return
    remediation.step = decision.step.value
    if decision.mode is rules.Mode.SHADOW:
        remediation.reason = f"shadow: would {decision.step.value.replace('_', ' ')}; {decision.reason}"
        IncidentEvent.objects.create(
            remediation=remediation, step=IncidentStep.SHADOW, at=now, detail=decision.step.value
        )
        return
    if (other := _same_occurrence_acted_on(remediation, node, firing_at)) is not None:
        # The agent's report and Alertmanager's alert for one XID: the first to arrive acts.
        remediation.step = ""
        remediation.reason = f"{decision.reason}; already acted on by remediation {other.pk} ({other.alert})"
        return
    if node.state == NodeState.QUARANTINED:
        # e.g. GPUUnhealthy minutes after the XID that quarantined it: already out of service.
        remediation.step = ""
        remediation.reason = f"{decision.reason}; {node.name} is already quarantined"
        return
    repairing = Remediation.objects.filter(node=node, status=RemediationStatus.PENDING).exclude(pk=remediation.pk)
    if (under_way := repairing.values_list("pk", flat=True).first()) is not None:
        # One ladder at a time per node: the same fault seen again (the agent's report and then
        # Alertmanager's, or GPUUnhealthy behind an XID), or the agent down while it reboots.
        remediation.step = ""
        remediation.reason = f"{decision.reason}; {node.name} is already being repaired (remediation {under_way})"
        return
    _climb(remediation, decision.step, node, now=now)


def _same_occurrence_acted_on(remediation: Remediation, node: Node, firing_at: datetime) -> Remediation | None:
    """Another path's record of the fault `remediation` is about, if it was acted on.

    An agent reports an XID as it sees it; Alertmanager's alert for it begins when Prometheus
    first scrapes it, up to the alert's 5-minute window later. So an alert is the occurrence an
    agent reported within that window before it, and a (late) report the occurrence of an alert
    that began at or after it was seen (clocks may disagree by rules.CLOCK_SKEW). A BMC logs a GPU
    lost to the host in its SEL when it happens, but a BMC's clock is its own, and the SEL is read
    every SEL_POLL_SECONDS: its entry is the occurrence of any record of the same ladder on the
    same GPU that began within the window either side of it (another entry of the same fault too)."""
    if remediation.alert == rules.BMC_CRITICAL_EVENT:
        if remediation.gpu is None:
            return None
        same_fault = Q(action=remediation.action) & _began(firing_at, rules.SAME_OCCURRENCE, rules.SAME_OCCURRENCE)
    elif rules.is_xid_alert(remediation.alert) and "xid" in remediation.labels:
        if remediation.alert == rules.AGENT_XID_REPORT:
            other_path = ~Q(alert=rules.AGENT_XID_REPORT) & _began(firing_at, rules.CLOCK_SKEW, rules.SAME_OCCURRENCE)
        else:
            other_path = Q(alert=rules.AGENT_XID_REPORT) & _began(firing_at, rules.SAME_OCCURRENCE, rules.CLOCK_SKEW)
        logged = Q(alert=rules.BMC_CRITICAL_EVENT, action=remediation.action)
        same_fault = (other_path & Q(labels__xid=remediation.labels["xid"])) | (
            logged & _began(firing_at, rules.SAME_OCCURRENCE, rules.SAME_OCCURRENCE)
        )
    else:
        return None
    others = Remediation.objects.filter(
        same_fault, node=node, gpu=remediation.gpu, mode=RemediationMode.ENFORCE
    ).exclude(status=RemediationStatus.NO_ACTION)
    return others.order_by("at", "pk").first()


def _began(at: datetime, before: timedelta, after: timedelta) -> Q:
    """Records whose alert began from `before` ahead of `at` to `after` past it."""
    return Q(timeline__step=IncidentStep.ALERT_FIRING, timeline__at__range=(at - before, at + after))


def _climb(remediation: Remediation, step: rules.Step, node: Node, *, now: datetime) -> None:
    """Make `step` the remediation's current rung: quarantine now, or a repair that a worker
    starts when it is due (at once, or when the tenant's drain time is up)."""
    remediation.step = step.value
    remediation.step_started_at = None
    remediation.reset_before = ""
    remediation.forced_at = None
    if step is rules.Step.QUARANTINE:
        remediation.recheck_due_at = None
        _quarantine_within_cap(remediation, node, now=now)
        return
    # A ladder already counted climbs on: its rungs are one incident.
    if remediation.counted_from is None and (over := counting.count_against_cap(remediation, node)):
        _suppress(remediation, node, over, now=now)
        return
    ladder = rules.LADDERS[remediation.action]
    acts_at = now
    if node.reservation_id is not None and ladder.notify_tenant:
        if step in rules.NODE_STEPS:
            acts_at = now + ladder.drain
        _tell_tenant(remediation, node, step=step, acts_at=acts_at, now=now)
    remediation.status = RemediationStatus.PENDING
    # The reconciler has a worker start the rung once due (take_due_repairs).
    remediation.recheck_due_at = acts_at


def _tell_tenant(
    remediation: Remediation, node: Node, *, step: rules.Step | None, acts_at: datetime | None, now: datetime
) -> None:
    if node.reservation_id is None:
        return
    node_remediation_planned.send(
        sender=Remediation,
        node_id=node.pk,
        reservation_id=node.reservation_id,
        gpu=remediation.gpu,
        step=step.value if step else None,
        reason=remediation.reason,
        acts_at=acts_at,
    )
    when = f"{step.value} at {acts_at.isoformat()}" if step and acts_at else "told, nothing done"
    IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.TENANT_NOTIFIED, at=now, detail=when)


def take_due_repairs(*, limit: int) -> list[int]:
    """The pending repairs whose next look is due, each due again one recheck period later
    (core.due_work); the caller has a worker look at each (start the rung, or see how it went)."""
    return take_due(
        Remediation.objects.filter(status=RemediationStatus.PENDING),
        due_field="recheck_due_at",
        again_in=timedelta(seconds=settings.REMEDIATION_RECHECK_SECONDS),
        limit=limit,
    )


def _suppress(remediation: Remediation, node: Node, over: str, *, now: datetime) -> None:
    remediation.status = RemediationStatus.SUPPRESSED
    remediation.recheck_due_at = None
    remediation.reason = f"{remediation.reason}; suppressed: {over}"
    IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.SUPPRESSED, at=now, detail=over)
    log.warning("suppressed %s on %s: %s", remediation.alert, node.name, over)


def _quarantine_within_cap(remediation: Remediation, node: Node, *, now: datetime) -> None:
    """Quarantine as a new incident unless the cap is reached, or as the last rung of a ladder
    already counted; either way the incident ends here. A quarantine that found nothing to do
    (the node moved on) counts only if rungs before it acted."""
    new_incident = remediation.counted_from is None
    if new_incident and (over := counting.count_against_cap(remediation, node)):
        _suppress(remediation, node, over, now=now)
        return
    _quarantine(remediation, node, actor=AUTOMATIC_ACTOR, now=now)
    if new_incident and remediation.status != RemediationStatus.APPLIED:
        remediation.counted_from = None
    else:
        # Read again, not `now`: the span ends after counted_from, which the cap read later than `now`.
        remediation.counted_until = clock.now()


def _quarantine(remediation: Remediation, node: Node, *, actor: str, now: datetime) -> None:
    try:
        transition(
            node_id=node.pk,
            event=lifecycle.Event.HARDWARE_FAULT,
            actor=actor,
            reason=remediation.reason,
            # The incident it belongs to: check_invariants finds an automatic quarantine the cap never counted.
            detail={"remediation": remediation.pk},
        )
    except lifecycle.TransitionRefused as error:
        remediation.status = RemediationStatus.NO_ACTION
        remediation.reason = f"{remediation.reason}; nothing to do: {error}"
        return
    remediation.status = RemediationStatus.APPLIED
    IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.QUARANTINED, at=now)


def apply_suppressed(*, remediation_id: int, operator: str) -> Remediation:
    """An operator decides to act on a suppressed alert: the quarantine is theirs, not counted as automatic."""
    with transaction.atomic():
        _lock_node_of(remediation_id)
        remediation = Remediation.objects.select_for_update(of=("self",)).select_related("node").get(pk=remediation_id)
        if remediation.status != RemediationStatus.SUPPRESSED or remediation.node is None:
            return remediation
        _quarantine(remediation, remediation.node, actor=operator, now=clock.now())
        remediation.decided_by = operator
        remediation.save(update_fields=["status", "reason", "decided_by"])
    return remediation


def step_started(*, remediation_id: int, reset_before: str = "", now: datetime | None = None) -> bool:
    """The rung was acted on (the agent took the reset, the BMC the restart) at `now` (None:
    core.clock's): look at it again in REMEDIATION_RESET_POLL_SECONDS. False if another worker
    started it first (compare-and-set on the start), or the repair has ended."""
    remediation = Remediation.objects.filter(
        pk=remediation_id, status=RemediationStatus.PENDING, step_started_at__isnull=True
    )
    step = remediation.values_list("step", flat=True).first()
    at = now or clock.now()
    started = remediation.update(step_started_at=at, recheck_due_at=at + _poll(), reset_before=reset_before)
    if started:
        assert step is not None  # the row the update matched was read above
        IncidentEvent.objects.create(remediation_id=remediation_id, step=step, at=at)
        if step in rules.NODE_STEPS:
            # The node's own audit trail shows who restarted it and why, beside its tenants' power actions.
            node = Node.objects.get(remediations__pk=remediation_id)
            reason = f"remediation {remediation_id}: {step.replace('_', ' ')}"
            audit_power_action(node, actor=AUTOMATIC_ACTOR, reason=reason)
    return bool(started)


def step_running(*, remediation_id: int) -> None:
    """Not done yet: look again in REMEDIATION_RESET_POLL_SECONDS."""
    Remediation.objects.filter(pk=remediation_id, status=RemediationStatus.PENDING).update(
        recheck_due_at=Now() + _poll()
    )


def reboot_forced(*, remediation_id: int, grace: float, now: datetime | None = None) -> None:
    """The OS ignored the graceful restart for `grace` seconds and the BMC was told to force it at
    `now` (None: core.clock's)."""
    at = now or clock.now()
    if Remediation.objects.filter(pk=remediation_id, forced_at__isnull=True).update(forced_at=at):
        IncidentEvent.objects.create(
            remediation_id=remediation_id,
            step=IncidentStep.REBOOT_FORCED,
            at=at,
            detail=f"no restart within {grace:g}s",
        )


def _poll() -> timedelta:
    return timedelta(seconds=settings.REMEDIATION_RESET_POLL_SECONDS)


def step_overdue(remediation: Remediation, *, now: datetime | None = None) -> bool:
    """The rung began longer ago than its timeout at `now` (None: core.clock's):
    REMEDIATION_RESET_TIMEOUT_SECONDS for a GPU reset, REMEDIATION_REBOOT_TIMEOUT_SECONDS for a
    rung that restarts the node."""
    started = remediation.step_started_at
    if remediation.step == RemediationStep.GPU_RESET:
        timeout = settings.REMEDIATION_RESET_TIMEOUT_SECONDS
    else:
        timeout = settings.REMEDIATION_REBOOT_TIMEOUT_SECONDS
    return started is not None and (now or clock.now()) - started > timedelta(seconds=timeout)


def step_finished(*, remediation_id: int, healthy: bool, why: str = "") -> Remediation:
    """After a repair rung: healthy again, the node stays in service (repaired); otherwise the
    ladder's next rung, ending in a (capped) quarantine. `why` says what went wrong, if known."""
    with transaction.atomic():
        _lock_node_of(remediation_id)
        remediation = (
            Remediation.objects.select_for_update(of=("self",)).select_related("node__rack__pod").get(pk=remediation_id)
        )
        if remediation.status != RemediationStatus.PENDING:
            return remediation
        node = remediation.node
        assert node is not None  # a pending ladder is counted, and only a node's is (Remediation.Meta)
        current = rules.Decision(
            remediation.action, rules.Step(remediation.step), node.name, remediation.gpu, remediation.reason
        )
        decision = rules.after_step(current, healthy=healthy, why=why)
        remediation.reason = decision.reason
        now = clock.now()  # once the locks are held: the rung's end, its timeline row, the next rung's start
        if decision.step is None:
            remediation.status = RemediationStatus.REPAIRED
            remediation.recheck_due_at = None
            remediation.counted_until = now
            IncidentEvent.objects.create(remediation=remediation, step=IncidentStep.REPAIRED, at=now)
        else:
            IncidentEvent.objects.create(
                remediation=remediation, step=IncidentStep.ESCALATED, at=now, detail=decision.step.value
            )
            _climb(remediation, decision.step, node, now=now)
        remediation.save(
            update_fields=[
                *("status", "reason", "step", "recheck_due_at", "step_started_at", "reset_before", "forced_at"),
                *_COUNTED,
            ]
        )
        _hold_while_repairing(node.pk)
    return remediation


def _hold_while_repairing(node_id: int) -> None:
    """The node is under repair exactly while a ladder of its own is pending: placement gives it to
    no new tenant until the ladder's verdict (a node it repairs under a tenant stays the tenant's)."""
    pending = Remediation.objects.filter(node_id=node_id, status=RemediationStatus.PENDING)
    Node.objects.filter(pk=node_id).update(under_repair=Exists(pending))


def _lock_node_of(remediation_id: int) -> None:
    """Locks in the order _receive takes them (the node, then the tenant's row or the cap's advisory lock), so that a
    ladder's next rung and a new alert for the same node wait for each other, never deadlock."""
    node_id = Remediation.objects.values_list("node_id", flat=True).get(pk=remediation_id)
    list(Node.objects.select_for_update().filter(pk=node_id).values_list("pk", flat=True))


def node_moved_on(*, remediation_id: int) -> Remediation:
    """The node left service while its repair waited (quarantined by an operator or another
    alert): nothing is left to repair here."""
    with transaction.atomic():
        remediation = Remediation.objects.select_for_update(of=("self",)).select_related("node").get(pk=remediation_id)
        if remediation.status == RemediationStatus.PENDING:
            remediation.status = RemediationStatus.NO_ACTION
            remediation.recheck_due_at = None
            node = remediation.node
            assert node is not None  # a pending ladder is counted, and only a node's is (Remediation.Meta)
            remediation.reason = f"{remediation.reason}; {node.name} is {node.state}: left as it is"
            remediation.counted_until = clock.now()
            remediation.save(update_fields=["status", "recheck_due_at", "reason", "counted_until"])
            _hold_while_repairing(node.pk)
    return remediation
