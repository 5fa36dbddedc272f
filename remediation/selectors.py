"""Reads of the remediation records: the incidents the blast-radius cap counts and what a tenant's
own nodes spent of its budget (remediation/blast_radius.py), and the reliability figures
(remediation/reliability.py).

Each function is one query whatever the number of nodes or records: times come from subqueries
over the timeline, counts are aggregated in SQL. A shadow rule's records are left out everywhere:
it decided, but did nothing. When a quarantined node's replacement came up is the reservations'
to tell: console/pages/selectors/remediations.py adds it.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django.conf import settings
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce, TruncDate

from fleet import lifecycle
from fleet.models import GPU, AuditEvent, Node
from remediation import rules
from remediation.blast_radius import Budget, Cap, Incident
from remediation.models import IncidentEvent, IncidentStep, Remediation, RemediationMode, RemediationStatus
from remediation.reliability import IncidentTimes


def blast_radius_cap() -> Cap:
    """The cap as configured: GPUFLEET_REMEDIATION_CAP, _POD_CAP and _WINDOW_SECONDS."""
    return Cap(
        fleet=settings.REMEDIATION_CAP,
        pod=settings.REMEDIATION_POD_CAP,
        window=timedelta(seconds=settings.REMEDIATION_WINDOW_SECONDS),
    )


def tenant_fault_budget() -> Budget:
    """A tenant's budget as configured: GPUFLEET_TENANT_FAULT_BUDGET in the cap's window."""
    return Budget(faults=settings.TENANT_FAULT_BUDGET, window=timedelta(seconds=settings.REMEDIATION_WINDOW_SECONDS))


def _counted(since: datetime | None) -> QuerySet[Remediation]:
    counted = Remediation.objects.filter(counted_from__isnull=False)
    if since is not None:
        counted = counted.filter(Q(counted_until__isnull=True) | Q(counted_until__gt=since))
    return counted


def cap_incidents(*, since: datetime | None = None) -> list[Incident]:
    """Every incident counted, the cap's and the tenants' own (Incident.tenant): those still climbing
    or that ended after `since`, or every one ever counted. blast_radius decides which of them
    overlap a window and whose they are; this only narrows the read."""
    rows = _counted(since).values_list(
        "pk", "node__name", "node__rack__pod__name", "counted_from", "counted_until", "self_reported_by"
    )
    incidents = []
    for pk, node, pod, began, ended, tenant in rows:
        assert began is not None  # read from rows with counted_from set
        incidents.append(Incident(pk, node, pod, began, ended, tenant))
    return incidents


def self_reported_spent(*, tenant_id: int, since: datetime) -> list[tuple[datetime, datetime | None]]:
    """What the tenant's own nodes spent of its budget after `since`: the spans of its faults let act
    (open while they climb), and its reports of broken nodes (an instant each)."""
    faults = _counted(since).filter(self_reported_by_id=tenant_id).values_list("counted_from", "counted_until")
    reports = AuditEvent.objects.filter(
        event=lifecycle.Event.TENANT_REPORT, detail__tenant=tenant_id, at__gt=since
    ).values_list("at", flat=True)
    spans: list[tuple[datetime, datetime | None]] = [(began, ended) for began, ended in faults if began is not None]
    return spans + [(at, at) for at in reports]


# What an incident is: a fault the control plane acted on (a suppressed one was left to an
# operator until one applied it, and then it is applied).
INCIDENT_STATUSES = [RemediationStatus.APPLIED, RemediationStatus.PENDING, RemediationStatus.REPAIRED]


def _enforced() -> QuerySet[Remediation]:
    return Remediation.objects.exclude(mode=RemediationMode.SHADOW)


def _first(step: IncidentStep) -> Subquery:
    """When the remediation's timeline first reached `step`."""
    events = IncidentEvent.objects.filter(remediation=OuterRef("pk"), step=step).order_by("at")
    return Subquery(events.values("at")[:1])


def remediations_acted_on(node: Node, now: datetime) -> int:
    """How many times the node was remediated (reset or quarantined by the rules) within the
    repeat-offender window: suppressed alerts and those calling for nothing do not count."""
    return Remediation.objects.filter(
        node=node, at__gte=now - rules.REPEAT_OFFENDER.window, status__in=INCIDENT_STATUSES
    ).count()


def incidents_since(since: datetime | Combinable) -> list[IncidentTimes]:
    """The incidents received since `since` (a time, or one the database works out in the query),
    with no replacement time: see the module's docstring.

    The fault is the alert's firing time, or its receipt when the timeline lacks it. The GPU
    model is the failing GPU's, or the node's first GPU's when the alert named no GPU."""
    failing_gpu = GPU.objects.filter(node=OuterRef("node"), index=OuterRef("gpu"))
    first_gpu = GPU.objects.filter(node=OuterRef("node")).order_by("index")
    rows = (
        _enforced()
        .filter(at__gte=since, status__in=INCIDENT_STATUSES, node__isnull=False)
        .annotate(
            fault_at=Coalesce(_first(IncidentStep.ALERT_FIRING), F("at")),
            quarantined_at=_first(IncidentStep.QUARANTINED),
            repaired_at=_first(IncidentStep.REPAIRED),
            gpu_model=Coalesce(
                Subquery(failing_gpu.values("model")[:1]), Subquery(first_gpu.values("model")[:1]), Value("")
            ),
        )
        .values_list("node__name", "gpu_model", "fault_at", "quarantined_at", "repaired_at", "reservation_id")
    )
    return [
        IncidentTimes(
            node=node,
            gpu_model=model,
            fault_at=fault_at,
            quarantined_at=quarantined_at,
            repaired_at=repaired_at,
            reservation=reservation,
        )
        for node, model, fault_at, quarantined_at, repaired_at, reservation in rows
    ]


def nodes_per_gpu_model() -> dict[str, int]:
    """How many nodes hold a GPU of each model (a node of mixed GPUs counts for each model)."""
    return dict(GPU.objects.values_list("model").annotate(nodes=Count("node", distinct=True)).order_by())


def counts_by_step_and_status(since: datetime | Combinable) -> dict[tuple[str, str], int]:
    """Remediations received since `since` (as for incidents_since), by rung taken ("" for none) and outcome."""
    rows = _enforced().filter(at__gte=since).values_list("step", "status").annotate(n=Count("id")).order_by()
    return {(step, status): count for step, status, count in rows}


def counts_per_day(since: datetime, statuses: list[str]) -> list[tuple[date, str, int]]:
    """Remediations received since `since` with one of `statuses`, by day (in the current time zone) and status."""
    rows = (
        _enforced()
        .filter(at__gte=since, status__in=statuses)
        .annotate(day=TruncDate("at"))
        .values_list("day", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    return list(rows)
