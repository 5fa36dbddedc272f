"""The remediations page: what automatic remediation did and would have done (shadow rules), its
reliability figures and its chart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta

from django.db.models import Count
from django.utils import timezone

from console.pages.disclosure import Disclosure
from console.pages.selectors.incidents import ACTED_ON, automatic_remediations, replacement, replacement_history
from core import clock
from remediation import reliability
from remediation import selectors as remediation_selectors
from remediation.models import Remediation, RemediationMode
from reservations.models import ReservationEvent as ReservationHistory

REMEDIATION_LIMIT = 200


RELIABILITY_WINDOW = timedelta(days=30)  # what MTTR, MTBI and the counts by rung and outcome look back on


CHART_DAYS = 14  # the remediations page's chart of remediations per day


@dataclass(frozen=True)
class RemediationRow:
    """One remediation as the viewer may see it."""

    pk: int
    at: datetime
    status: str
    decided_by: str
    node: str  # the enrolled node it acted on, "" if none
    alerted_node: str  # the node the alert named, enrolled or not
    gpu: int | None
    alert: str
    action: str
    step: str  # the rung taken (or, in shadow mode, that would have been): gpu_reset, reboot, power_cycle, quarantine
    reason: str


def remediation_row(remediation: Remediation, disclosure: Disclosure) -> RemediationRow:
    return RemediationRow(
        pk=remediation.pk,
        at=remediation.at,
        status=remediation.status,
        decided_by=disclosure.actor(remediation.decided_by) if remediation.decided_by else "",
        node=remediation.node.name if remediation.node else "",
        alerted_node=remediation.labels.get("node", ""),
        gpu=remediation.gpu,
        alert=remediation.alert,
        action=remediation.action,
        step=remediation.step,
        reason=disclosure.text(remediation.reason),
    )


def remediations(limit: int = REMEDIATION_LIMIT, *, disclosure: Disclosure) -> list[RemediationRow]:
    return [remediation_row(remediation, disclosure) for remediation in automatic_remediations()[:limit]]


@dataclass(frozen=True)
class ShadowTally:
    """How often a shadow ladder would have taken a rung in the window: the evidence for promoting it."""

    ladder: str
    step: str
    decisions: int
    nodes: int


def shadow_decisions(limit: int = REMEDIATION_LIMIT, *, disclosure: Disclosure) -> list[RemediationRow]:
    """What shadow ladders would have done (a rung; shadow decisions to do nothing are left out), newest first."""
    found = (
        Remediation.objects.filter(mode=RemediationMode.SHADOW)
        .exclude(step="")
        .select_related("node")
        .order_by("-at", "-id")
    )
    return [remediation_row(remediation, disclosure) for remediation in found[:limit]]


def shadow_tallies(*, now: datetime | None = None) -> list[ShadowTally]:
    """What shadow ladders would have done in the window that ends at `now` (None: core.clock's)."""
    since = clock.in_query(now) - RELIABILITY_WINDOW
    found = (
        Remediation.objects.filter(mode=RemediationMode.SHADOW, at__gte=since)
        .exclude(step="")
        .values("action", "step")
        .annotate(decisions=Count("id"), nodes=Count("node", distinct=True))
        .order_by("action", "step")
    )
    return [ShadowTally(row["action"], row["step"], row["decisions"], row["nodes"]) for row in found]


@dataclass(frozen=True)
class Reliability:
    """Automatic remediation's figures over the window that ends now (remediation/reliability.py)."""

    window: timedelta
    repair: reliability.RepairTimes
    mtbi_per_gpu_model: list[reliability.ModelMTBI]
    mtbi_per_node: list[reliability.NodeMTBI]  # most frequent first
    by_step_and_status: dict[tuple[str, str], int]


def _with_replacement(
    incident: reliability.IncidentTimes, history: dict[int, list[ReservationHistory]]
) -> reliability.IncidentTimes:
    """The incident with its replacement's coming up, if it was quarantined under a tenant and that happened."""
    if incident.reservation is None or incident.quarantined_at is None:
        return incident
    _, active = replacement(history[incident.reservation], incident.quarantined_at)
    return replace(incident, replacement_up_at=active.at) if active else incident


def remediation_reliability(*, now: datetime | None = None) -> Reliability:
    """MTTR, MTBI and the counts by rung and outcome of the remediations received in the window
    that ends at `now` (None: core.clock's).
    It names nodes and GPU models only, which every viewer may see: it takes no disclosure.

    Here rather than in remediation/selectors.py: a quarantine under a tenant ends when the
    replacement is up, which the reservation's history tells (as on the incidents page)."""
    window = RELIABILITY_WINDOW
    since = clock.in_query(now) - window  # the database's Now() in each query: no round trip of its own
    found = remediation_selectors.incidents_since(since)
    history = replacement_history({i.reservation for i in found if i.reservation and i.quarantined_at})
    found = [_with_replacement(incident, history) for incident in found]
    return Reliability(
        window=window,
        repair=reliability.repair_times(found),
        mtbi_per_gpu_model=reliability.mtbi_per_gpu_model(found, remediation_selectors.nodes_per_gpu_model(), window),
        mtbi_per_node=reliability.mtbi_per_node(found),
        by_step_and_status=remediation_selectors.counts_by_step_and_status(since),
    )


def remediations_per_day(*, now: datetime | None = None) -> list[reliability.DayCounts]:
    """The remediations the page lists, per day by outcome (in ACTED_ON's order), over the CHART_DAYS
    days to the day of `now` in the current time zone (None: this process's today)."""
    # The chart's calendar, not a comparison with a row's time: the page has no round trip to spare
    # for the database's clock, and a day drawn a second early or late is no error.
    first_day = timezone.localdate(now) - timedelta(days=CHART_DAYS - 1)
    since = datetime.combine(first_day, time.min, tzinfo=timezone.get_current_timezone())
    counts = remediation_selectors.counts_per_day(since, ACTED_ON)
    return reliability.per_day(counts, ACTED_ON, first_day, CHART_DAYS)
