"""Incidents and their steps: automatic remediations (with the tenant's replacement), failed
attestations, firmware drift and fabric drift put back, each told from the records and the audit log.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import OuterRef, Q, Subquery
from django.utils.dateparse import parse_datetime

from attestation.models import AttestationResult
from console.pages.disclosure import Disclosure
from fleet.lifecycle import Event, State
from fleet.models import AuditEvent, AuditOnlyEvent
from fleet.workflow_steps import StepName
from remediation.models import IncidentStep, Remediation, RemediationStatus
from reservations.models import ReservationEvent as ReservationHistory
from reservations.models import ReservationEventKind

INCIDENT_LIMIT = 50


@dataclass(frozen=True)
class Step:
    name: str
    at: datetime | None  # None: expected, not happened yet
    detail: str = ""


@dataclass(frozen=True)
class Happened:
    """A step that has happened, so has a time."""

    name: str
    at: datetime
    detail: str


@dataclass
class Incident:
    key: str  # "remediation-<id>", "attestation-<id>", "firmware-<id>" or "fabric-<id>"
    kind: str
    node: str
    title: str
    at: datetime
    outcome: str
    steps: list[Step]
    involved: list[str]
    window: timedelta | None = None  # how long a fabric drift lasted, as far as the control plane knows

    @property
    def happened(self) -> list[Happened]:
        return [Happened(step.name, step.at, step.detail) for step in self.steps if step.at is not None]


def replacement_history(reservation_ids: set[int]) -> dict[int, list[ReservationHistory]]:
    """Each reservation's replacements placed and its becoming active, oldest first."""
    history = defaultdict(list)
    for event in ReservationHistory.objects.filter(
        reservation_id__in=reservation_ids,
        event__in=[ReservationEventKind.REPLACEMENT_PLACED, ReservationEventKind.ACTIVE],
    ).order_by("at", "id"):
        history[event.reservation_id].append(event)
    return history


def replacement(
    history: list[ReservationHistory], quarantined: datetime
) -> tuple[ReservationHistory | None, ReservationHistory | None]:
    """The first replacement placed after the quarantine, and the reservation active again after it."""
    later = [e for e in history if e.at >= quarantined]
    placed = next((e for e in later if e.event == ReservationEventKind.REPLACEMENT_PLACED), None)
    active = placed and next((e for e in later if e.event == ReservationEventKind.ACTIVE and e.at >= placed.at), None)
    return placed, active


def _remediation_incidents(remediations: list[Remediation], disclosure: Disclosure) -> list[Incident]:
    """Alert firing -> webhook received -> (GPU reset ->) repaired, quarantined or suppressed, then
    the replacement placed and active, from the reservation's history after the quarantine."""
    history = replacement_history({r.reservation_id for r in remediations if r.reservation_id})
    incidents = []
    for remediation in remediations:
        steps = [Step(e.step, e.at, disclosure.text(e.detail)) for e in remediation.timeline.all()]
        involved = [remediation.node.name] if remediation.node else []
        quarantined = next((s.at for s in steps if s.name == IncidentStep.QUARANTINED), None)
        if quarantined and remediation.reservation_id:
            placed, active = replacement(history[remediation.reservation_id], quarantined)
            steps.append(
                Step(
                    "replacement_placed",
                    placed.at if placed else None,
                    disclosure.text(placed.detail) if placed else "",
                )
            )
            steps.append(Step("replacement_active", active.at if active else None))
            if placed:
                involved += [name.strip() for name in placed.detail.split(",") if name.strip()]
        incidents.append(
            Incident(
                key=f"remediation-{remediation.pk}",
                kind="remediation",
                node=remediation.node.name if remediation.node else remediation.labels.get("node", "?"),
                title=f"{remediation.alert}: {disclosure.text(remediation.reason)}",
                at=remediation.at,
                outcome=remediation.status,
                steps=steps,
                involved=involved,
            )
        )
    return incidents


# A failed attestation's story in the audit log: each step is the first matching event after the one before.
ATTESTATION_PATH = (
    ("released", (Event.RELEASED,)),
    ("wipe_succeeded", (Event.WIPE_SUCCEEDED,)),
    ("inspection", (Event.INSPECTION_STARTED, Event.INSPECTION_PASSED)),
)


VERDICTS = (Event.ATTESTATION_PASSED, Event.ATTESTATION_FAILED)


# Longer than any wipe plus inspection may take (their deadlines are hours): the audit rows of
# one cycle, released to attestation, fall within it.
ATTESTATION_CYCLE = timedelta(days=1)


def _cycle_steps(
    history: list[AuditEvent],
    *,
    until: datetime,
    ending: AuditEvent | None,
    verdicts: tuple[str, ...],
    path: tuple[tuple[str, tuple[str, ...]], ...],
    detail: Callable[[AuditEvent], str],
) -> list[Step]:
    """The steps of `path` in the node's inspection cycle that ended at `until` (in `ending`, if its
    row is known): among the node's audit rows since the verdict before, each step is the first
    matching row after the step before it."""
    before = [e for e in history if e.at <= until and (ending is None or e.pk != ending.pk)]
    previous_verdict = max((i for i, e in enumerate(before) if e.event in verdicts), default=-1)
    cycle = before[previous_verdict + 1 :]
    steps: list[Step] = []
    for name, kinds in path:
        after = steps[-1].at if steps else None
        found = next((e for e in cycle if e.event in kinds and (after is None or e.at >= after)), None)
        if found:
            steps.append(Step(name, found.at, detail(found)))
    return steps


def _attestation_incidents(results: list[AttestationResult], disclosure: Disclosure) -> list[Incident]:
    """Released -> wipe succeeded -> inspection -> attestation failed, from the node's audit log."""
    if not results:
        return []
    events = defaultdict(list)
    for event in AuditEvent.objects.filter(
        node_id__in={r.node_id for r in results},
        event__in=[kind for _, kinds in ATTESTATION_PATH for kind in kinds] + list(VERDICTS),
        at__gte=min(r.at for r in results) - ATTESTATION_CYCLE,
        at__lte=max(r.at for r in results) + ATTESTATION_CYCLE,
    ).order_by("at", "id"):
        events[event.node_id].append(event)
    incidents = []
    for result in results:
        history = events[result.node_id]
        failed = next((e for e in history if e.event == Event.ATTESTATION_FAILED and e.at >= result.at), None)
        verdict_at = failed.at if failed else result.at
        steps = _cycle_steps(
            history,
            until=verdict_at,
            ending=failed,
            verdicts=VERDICTS,
            path=ATTESTATION_PATH,
            detail=disclosure.audit_reason,
        )
        codes = ", ".join(sorted({f.get("code", "?") for f in result.failures}))
        steps.append(Step(Event.ATTESTATION_FAILED.value, verdict_at, codes))
        incidents.append(
            Incident(
                key=f"attestation-{result.pk}",
                kind="attestation",
                node=result.node.name,
                title=f"attestation contraindicated: {codes}",
                at=result.at,
                outcome="contraindicated",
                steps=steps,
                involved=[result.node.name],
            )
        )
    return incidents


# A firmware incident's story in the audit log: the reflash is the step that waits on it, whose row
# holds the drifts the firmware check found. After a repair, the inspection's verdict follows.
REFLASH_STEP = StepName.FINISH_FIRMWARE_UPDATE


FIRMWARE_PATH = (
    ("released", (Event.RELEASED,)),
    ("wipe_succeeded", (Event.WIPE_SUCCEEDED,)),
    ("reflash", (AuditOnlyEvent.STEP_CHANGED,)),
)


FIRMWARE_VERDICTS = (*VERDICTS, Event.FIRMWARE_DRIFT)


AFTER_REPAIR = (Event.ATTESTATION_PASSED, Event.ATTESTATION_FAILED, Event.INSPECTION_FAILED, Event.DIAGNOSTIC_FAILED)


def _firmware_incidents(found: list[AuditEvent], disclosure: Disclosure) -> list[Incident]:
    """Released -> wipe succeeded -> reflash of the drifts -> firmware_drift (quarantined), or ->
    firmware_checked naming what was repaired -> the node available, from the node's audit log."""
    if not found:
        return []
    events = defaultdict(list)
    for event in (
        AuditEvent.objects.filter(
            node_id__in={row.node_id for row in found},
            at__gte=min(row.at for row in found) - ATTESTATION_CYCLE,
            at__lte=max(row.at for row in found) + ATTESTATION_CYCLE,
        )
        .filter(
            Q(event__in=[Event.RELEASED, Event.WIPE_SUCCEEDED, *FIRMWARE_VERDICTS, *AFTER_REPAIR])
            | Q(event=AuditOnlyEvent.STEP_CHANGED, reason=REFLASH_STEP)
        )
        .order_by("at", "id")
    ):
        events[event.node_id].append(event)

    def detail(event: AuditEvent) -> str:
        if event.event == AuditOnlyEvent.STEP_CHANGED:
            return disclosure.text("; ".join(event.detail.get("drifts", [])))
        return disclosure.audit_reason(event)

    incidents = []
    for row in found:
        history = events[row.node_id]
        steps = _cycle_steps(
            history, until=row.at, ending=row, verdicts=FIRMWARE_VERDICTS, path=FIRMWARE_PATH, detail=detail
        )
        steps.append(Step(row.event, row.at, disclosure.audit_reason(row)))
        if row.event == Event.FIRMWARE_DRIFT:
            title, outcome = f"{row.event}: {disclosure.audit_reason(row)}", "quarantined"
        else:
            title = f"firmware repaired: {', '.join(row.detail['repaired'])} (baseline {row.detail['baseline']})"
            outcome = "repaired"
            verdict = next((e for e in history if e.event in AFTER_REPAIR and e.at >= row.at), None)
            if verdict is None:
                steps.append(Step(State.AVAILABLE.value, None))  # not attested yet
            else:
                name = State.AVAILABLE.value if verdict.event == Event.ATTESTATION_PASSED else verdict.event
                steps.append(Step(name, verdict.at, disclosure.audit_reason(verdict)))
        incidents.append(
            Incident(
                key=f"firmware-{row.pk}",
                kind="firmware",
                node=row.node.name,
                title=title,
                at=row.at,
                outcome=outcome,
                steps=steps,
                involved=[row.node.name],
            )
        )
    return incidents


def _fabric_incidents(repairs: list[AuditEvent], disclosure: Disclosure) -> list[Incident]:
    """Ports or GUIDs found where they must not be -> put back, from a fabric_drift_repaired row.
    The read-back that found them is the row's `found_at` where the repair recorded one, else the
    repair's own (it writes its row once the ports are back). The window, as far as the control
    plane can know it, runs to the row from `since` (the read-back before, which found them right),
    where recorded, else from the finding."""
    incidents = []
    for row in repairs:
        found_at = _moment(row.detail.get("found_at")) or row.at
        since = _moment(row.detail.get("since")) or found_at
        fabric = row.detail.get("fabric", "?")
        ports = [(port.get("port", "?"), port.get("found") or "none") for port in row.detail.get("ports", [])]
        where = disclosure.text(f"{fabric} {', '.join(f'{port} on {segment}' for port, segment in ports)}")
        found_on = disclosure.text(f"{fabric} {', '.join(f'{port} found on {segment}' for port, segment in ports)}")
        incidents.append(
            Incident(
                key=f"fabric-{row.pk}",
                kind="fabric",
                node=row.node.name,
                title=f"fabric drift on {row.node.name}: {found_on}",
                at=row.at,
                outcome="repaired",
                steps=[
                    Step("found", found_at, where),
                    Step("put_back", row.at, disclosure.text(f"on {row.detail.get('put_back_on') or 'none'}")),
                ],
                involved=[row.node.name],
                window=row.at - since,
            )
        )
    return incidents


def _moment(value: object) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None


# What the incidents and remediations pages show: alerts acted on, or that would have been but for the cap.
ACTED_ON: list[str] = [
    RemediationStatus.APPLIED,
    RemediationStatus.SUPPRESSED,
    RemediationStatus.PENDING,
    RemediationStatus.REPAIRED,
]


def automatic_remediations():
    return (
        Remediation.objects.filter(status__in=ACTED_ON)
        .select_related("node")
        .prefetch_related("timeline")
        .order_by("-at", "-id")
    )


def _failed_attestations():
    return AttestationResult.objects.filter(affirming=False).select_related("node").order_by("-at", "-id")


def _firmware_drifts():
    """Drift that quarantined its node, and drift repaired in an inspection that a wipe led to:
    firmware that changed while the node was in a tenant's hands, or out of service. Bringing a
    newly enrolled node to its baseline (its first inspection) is commissioning, not an incident."""
    inspection_entered_by = (
        AuditEvent.objects.filter(node_id=OuterRef("node_id"), id__lt=OuterRef("id"), to_state=State.INSPECTING)
        .exclude(from_state=State.INSPECTING)
        .order_by("-id")
        .values("event")[:1]
    )
    repaired_after_a_wipe = Q(event=AuditOnlyEvent.FIRMWARE_CHECKED, entered_by=Event.WIPE_SUCCEEDED) & ~Q(
        detail__repaired=[]
    )
    return (
        AuditEvent.objects.annotate(entered_by=Subquery(inspection_entered_by))
        .filter(Q(event=Event.FIRMWARE_DRIFT) | repaired_after_a_wipe)
        .select_related("node")
        .order_by("-at", "-id")
    )


def _fabric_drifts_repaired():
    return (
        AuditEvent.objects.filter(event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED)
        .select_related("node")
        .order_by("-at", "-id")
    )


def incidents(limit: int = INCIDENT_LIMIT, *, disclosure: Disclosure) -> list[Incident]:
    """The latest automatic remediations, failed attestations, firmware drifts and fabric drifts
    put back, newest first."""
    found = _remediation_incidents(list(automatic_remediations()[:limit]), disclosure)
    found += _attestation_incidents(list(_failed_attestations()[:limit]), disclosure)
    found += _firmware_incidents(list(_firmware_drifts()[:limit]), disclosure)
    found += _fabric_incidents(list(_fabric_drifts_repaired()[:limit]), disclosure)
    return sorted(found, key=lambda incident: incident.at, reverse=True)[:limit]


def incident(key: str, *, disclosure: Disclosure) -> Incident | None:
    kind, _, pk = key.partition("-")
    if not pk.isdigit():
        return None
    if kind == "remediation":
        found = _remediation_incidents(list(automatic_remediations().filter(pk=pk)), disclosure)
    elif kind == "attestation":
        found = _attestation_incidents(list(_failed_attestations().filter(pk=pk)), disclosure)
    elif kind == "firmware":
        found = _firmware_incidents(list(_firmware_drifts().filter(pk=pk)), disclosure)
    elif kind == "fabric":
        found = _fabric_incidents(list(_fabric_drifts_repaired().filter(pk=pk)), disclosure)
    else:
        return None
    return found[0] if found else None
