"""Reads for the server-rendered pages: the fleet floor, a node, incidents (remediations, failed
attestations, firmware drift) and their replay, and a tenant's own page.

Every function runs a fixed number of queries whatever the fleet size: rows come back through
values() with the names they need already joined, and counts are aggregated in SQL. Each takes
the viewer's `disclosure` (console/pages/disclosure.py), which decides whom the answer may name.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, time, timedelta

from django.db.models import Count, F, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils import timezone

from attestation.models import AttestationResult
from console.pages.disclosure import Disclosure
from fleet.lifecycle import Event, State
from fleet.models import GPU, AuditEvent, AuditOnlyEvent, Node
from remediation import reliability, rules
from remediation import selectors as remediation_selectors
from remediation.models import IncidentStep, Remediation, RemediationMode, RemediationStatus
from reservations.models import LIVE_STATES, Reservation, ReservationEventKind, Tenant, Webhook, WebhookDelivery
from reservations.models import ReservationEvent as ReservationHistory
from reservations.selectors import capacity_by_pod, quota_of, reservation_machines, reservation_nodes, usage_of
from reservations.usage import KINDS as USAGE_KINDS
from reservations.usage import calendar_month
from workflows.node_workflows import finish_firmware_update

# Above this many nodes on screen a rack collapses into a bar of per-state counts: 10,000
# tiles would be megabytes of HTML every poll, and no operator reads them one by one.
COLLAPSE_ABOVE = 2000
# Nodes listed one by one under a collapsed floor: those an operator must look at.
ATTENTION_STATES = (State.QUARANTINED, State.MAINTENANCE)
ATTENTION_LIMIT = 200
NODE_TIMELINE_LIMIT = 200
INCIDENT_LIMIT = 50
REMEDIATION_LIMIT = 200
RELIABILITY_WINDOW = timedelta(days=30)  # what MTTR, MTBI and the counts by rung and outcome look back on
CHART_DAYS = 14  # the remediations page's chart of remediations per day
RECENT_DELIVERIES = 10  # per webhook, on the tenant's page


@dataclass(frozen=True)
class LegendEntry:
    css: str
    label: str
    states: tuple[State, ...]


# What the floor colours: provisioning and active share the tenant-workload colour.
LEGEND = (
    LegendEntry("available", "available", (State.AVAILABLE,)),
    LegendEntry("workload", "tenant workload", (State.PROVISIONING, State.ACTIVE)),
    LegendEntry("inspecting", "inspecting", (State.INSPECTING,)),
    LegendEntry("wiping", "wiping", (State.WIPING,)),
    LegendEntry("quarantined", "quarantined", (State.QUARANTINED,)),
    LegendEntry("maintenance", "maintenance", (State.MAINTENANCE,)),
    LegendEntry("enrolled", "enrolled", (State.ENROLLED,)),
)
STATE_ORDER = [state for entry in LEGEND for state in entry.states]


@dataclass
class RackView:
    pod: str
    name: str
    counts: dict[str, int]
    tiles: list[dict] = field(default_factory=list)
    html: str = ""  # its tiles or its bar, filled in by console/pages/tiles.py

    @property
    def size(self) -> int:
        return sum(self.counts.values())

    @property
    def segments(self) -> list[tuple[str, int]]:
        return [(state, self.counts[state]) for state in STATE_ORDER if self.counts.get(state)]


@dataclass
class PodView:
    name: str
    racks: list[RackView]
    capacity: dict | None = None

    @property
    def size(self) -> int:
        return sum(rack.size for rack in self.racks)


@dataclass
class FloorView:
    pods: list[PodView]
    legend: list[dict]
    total: int
    collapsed: bool
    attention: list[dict]
    shown: int
    capacity: list[dict] = field(default_factory=list)
    attention_html: str = ""


def _tile(row: dict, disclosure: Disclosure) -> dict:
    row["label"] = row["name"].rsplit("-", 1)[-1]
    row["in_use_by"] = disclosure.in_use_by(row.pop("tenant__name"))
    return row


TILE_FIELDS = ("name", "state", "step", "rack__name", "tenant__name")


def fleet_floor(nodes: QuerySet[Node], *, disclosure: Disclosure) -> FloorView:
    """Every rack holding any of `nodes` (the fleet, or what fleet.api.filtersets.NodeFilterSet
    kept of it) with those nodes as tiles, or collapsed to per-state counts when too many are on
    screen; the legend counts the whole fleet, and capacity is per pod."""
    per_rack = (
        Node.objects.values_list("rack__pod__name", "rack__name", "state")
        .annotate(count=Count("id"), kept=Count("id", filter=Q(id__in=nodes.values("id"))))
        .order_by("rack__pod__name", "rack__name")
    )
    pods: dict[str, PodView] = {}
    racks: dict[str, RackView] = {}
    by_state: Counter[str] = Counter()
    for pod_name, rack_name, state, count, kept in per_rack:
        by_state[state] += count
        if not kept:
            continue
        if rack_name not in racks:
            racks[rack_name] = RackView(pod=pod_name, name=rack_name, counts={})
            pods.setdefault(pod_name, PodView(name=pod_name, racks=[])).racks.append(racks[rack_name])
        racks[rack_name].counts[state] = kept
    shown = sum(r.size for r in racks.values())
    collapsed = shown > COLLAPSE_ABOVE

    nodes = nodes.order_by("rack__name", "position")
    attention = []
    if collapsed:
        out_of_service = nodes.filter(state__in=ATTENTION_STATES).values(*TILE_FIELDS)[:ATTENTION_LIMIT]
        attention = [_tile(row, disclosure) for row in out_of_service]
    else:
        for row in nodes.values(*TILE_FIELDS):
            racks[row["rack__name"]].tiles.append(_tile(row, disclosure))

    capacity = capacity_by_pod()
    for summary in capacity:
        if summary["name"] in pods:
            pods[summary["name"]].capacity = summary
    return FloorView(
        pods=list(pods.values()),
        legend=legend_counts(by_state),
        total=sum(by_state.values()),
        collapsed=collapsed,
        attention=attention,
        shown=shown,
        capacity=capacity,
    )


def legend_counts(by_state: Counter[str]) -> list[dict]:
    return [
        {
            "css": entry.css,
            "label": entry.label,
            "count": sum(by_state[state] for state in entry.states),
            "states": [(state.value, by_state[state]) for state in entry.states] if len(entry.states) > 1 else [],
        }
        for entry in LEGEND
    ]


# -- a node --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineRow:
    """One audit row as the viewer may see it."""

    at: datetime
    event: str
    from_state: str
    to_state: str
    actor: str
    reason: str


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


def _remediation_row(remediation: Remediation, disclosure: Disclosure) -> RemediationRow:
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


@dataclass
class NodePage:
    node: Node
    tenant: str | None
    quarantine_reason: str
    gpus: list[GPU]
    timeline: list[TimelineRow]
    attestation: AttestationResult | None
    remediations: list[RemediationRow]
    remediated_recently: int  # within the repeat-offender window
    repeat_offender: rules.RepeatOffender = rules.REPEAT_OFFENDER
    timeline_limit: int = NODE_TIMELINE_LIMIT


def node_page(name: str, *, disclosure: Disclosure) -> NodePage | None:
    node = Node.objects.select_related("rack__pod", "tenant").filter(name=name).first()
    if node is None:
        return None
    timeline = [
        TimelineRow(
            at=event.at,
            event=event.event,
            from_state=event.from_state,
            to_state=event.to_state,
            actor=disclosure.actor(event.actor),
            reason=disclosure.audit_reason(event),
        )
        for event in node.audit_events.order_by("-at", "-id")[:NODE_TIMELINE_LIMIT]
    ]
    return NodePage(
        node=node,
        tenant=disclosure.tenant(node.tenant.name if node.tenant else None),
        quarantine_reason=disclosure.text(node.quarantine_reason),
        gpus=list(node.gpus.order_by("index")),
        timeline=timeline,
        attestation=AttestationResult.objects.filter(node=node).first(),
        remediations=[
            _remediation_row(remediation, disclosure) for remediation in node.remediations.order_by("-at", "-id")[:10]
        ],
        remediated_recently=remediation_selectors.remediations_acted_on(node, timezone.now()),
    )


# -- incidents -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    at: datetime | None  # None: expected, not happened yet
    detail: str = ""


@dataclass
class Incident:
    key: str  # "remediation-<id>", "attestation-<id>" or "firmware-<id>"
    kind: str
    node: str
    title: str
    at: datetime
    outcome: str
    steps: list[Step]
    involved: list[str]

    @property
    def happened(self) -> list[Step]:
        return [step for step in self.steps if step.at is not None]


def _replacement_history(reservation_ids: set[int]) -> dict[int, list[ReservationHistory]]:
    """Each reservation's replacements placed and its becoming active, oldest first."""
    history = defaultdict(list)
    for event in ReservationHistory.objects.filter(
        reservation_id__in=reservation_ids,
        event__in=[ReservationEventKind.REPLACEMENT_PLACED, ReservationEventKind.ACTIVE],
    ).order_by("at", "id"):
        history[event.reservation_id].append(event)
    return history


def _replacement(
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
    history = _replacement_history({r.reservation_id for r in remediations if r.reservation_id})
    incidents = []
    for remediation in remediations:
        steps = [Step(e.step, e.at, disclosure.text(e.detail)) for e in remediation.timeline.all()]
        involved = [remediation.node.name] if remediation.node else []
        quarantined = next((s.at for s in steps if s.name == IncidentStep.QUARANTINED), None)
        if quarantined and remediation.reservation_id:
            placed, active = _replacement(history[remediation.reservation_id], quarantined)
            steps.append(
                Step("replacement_placed", placed and placed.at, disclosure.text(placed.detail) if placed else "")
            )
            steps.append(Step("replacement_active", active and active.at))
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
REFLASH_STEP = finish_firmware_update.__name__
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


# What the incidents and remediations pages show: alerts acted on, or that would have been but for the cap.
ACTED_ON = [
    RemediationStatus.APPLIED,
    RemediationStatus.SUPPRESSED,
    RemediationStatus.PENDING,
    RemediationStatus.REPAIRED,
]


def _automatic_remediations():
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


def incidents(limit: int = INCIDENT_LIMIT, *, disclosure: Disclosure) -> list[Incident]:
    """The latest automatic remediations, failed attestations and firmware drifts, newest first."""
    found = _remediation_incidents(list(_automatic_remediations()[:limit]), disclosure)
    found += _attestation_incidents(list(_failed_attestations()[:limit]), disclosure)
    found += _firmware_incidents(list(_firmware_drifts()[:limit]), disclosure)
    return sorted(found, key=lambda incident: incident.at, reverse=True)[:limit]


def incident(key: str, *, disclosure: Disclosure) -> Incident | None:
    kind, _, pk = key.partition("-")
    if not pk.isdigit():
        return None
    if kind == "remediation":
        found = _remediation_incidents(list(_automatic_remediations().filter(pk=pk)), disclosure)
    elif kind == "attestation":
        found = _attestation_incidents(list(_failed_attestations().filter(pk=pk)), disclosure)
    elif kind == "firmware":
        found = _firmware_incidents(list(_firmware_drifts().filter(pk=pk)), disclosure)
    else:
        return None
    return found[0] if found else None


# -- replay --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    at: datetime
    caption: str
    node: str = ""
    to_state: str = ""


@dataclass
class Replay:
    incident: Incident
    frames: list[Frame]
    step: int
    floor: FloorView
    changed: str  # the node whose state this step changed


def replay(key: str, step: int, *, disclosure: Disclosure) -> Replay | None:
    """The floor of the incident's pods as it was just before the incident, with its events up
    to `step` applied: the incident's own steps and the audit log of the nodes involved."""
    found = incident(key, disclosure=disclosure)
    if found is None or not found.happened:
        return None
    start = found.happened[0].at
    pods = list(Node.objects.filter(name__in=found.involved).values_list("rack__pod__name", flat=True).distinct())
    layout = list(
        Node.objects.filter(rack__pod__name__in=pods)
        .order_by("rack__pod__name", "rack__name", "position")
        .values("id", "name", "rack__name", "rack__pod__name")
    )
    frames = _replay_frames(found, disclosure)
    step = max(0, min(step, len(frames) - 1))
    before = _states_before(pods, start)
    states = {row["name"]: before.get(row["id"]) for row in layout}
    for frame in frames[1 : step + 1]:
        if frame.node:
            states[frame.node] = frame.to_state
    floor = _floor_of(layout, states, disclosure)
    return Replay(incident=found, frames=frames, step=step, floor=floor, changed=frames[step].node)


def _states_before(pods: list[str], start: datetime) -> dict[int, str]:
    """Each node's state just before the incident: the last state its audit log recorded."""
    return dict(
        AuditEvent.objects.filter(node__rack__pod__name__in=pods, at__lt=start)
        .exclude(to_state="")
        .order_by("node_id", "-at", "-id")
        .distinct("node_id")
        .values_list("node_id", "to_state")
    )


def _replay_frames(found: Incident, disclosure: Disclosure) -> list[Frame]:
    """The incident's steps and its nodes' changes of state, in time order, after a first frame
    for the moment before it."""
    start, end = found.happened[0].at, max(s.at for s in found.happened)
    changes = [
        Frame(
            e.at,
            f"{e.node.name}: {e.event} ({e.from_state} → {e.to_state}) by {disclosure.actor(e.actor)}",
            e.node.name,
            e.to_state,
        )
        for e in AuditEvent.objects.filter(node__name__in=found.involved, at__gte=start, at__lte=end)
        .exclude(to_state="")
        .exclude(to_state=F("from_state"))
        .select_related("node")
        .order_by("at", "id")
    ]
    markers = [Frame(s.at, f"{s.name.replace('_', ' ')} {s.detail}".strip()) for s in found.happened]
    return [Frame(start, "before the incident"), *sorted(markers + changes, key=lambda f: f.at)]


def _floor_of(layout: list[dict], states: dict[str, str | None], disclosure: Disclosure) -> FloorView:
    """The floor's pods and racks with each node in `states` (a node with none was not enrolled yet)."""
    racks: dict[str, RackView] = {}
    floor_pods: dict[str, PodView] = {}
    by_state: Counter[str] = Counter()
    for row in layout:
        state = states[row["name"]]
        if state is None:
            continue
        by_state[state] += 1
        rack = racks.get(row["rack__name"])
        if rack is None:
            rack = racks[row["rack__name"]] = RackView(pod=row["rack__pod__name"], name=row["rack__name"], counts={})
            floor_pods.setdefault(rack.pod, PodView(name=rack.pod, racks=[])).racks.append(rack)
        rack.counts[state] = rack.counts.get(state, 0) + 1
        rack.tiles.append(_tile({"name": row["name"], "state": state, "step": "", "tenant__name": None}, disclosure))
    return FloorView(
        pods=list(floor_pods.values()),
        legend=legend_counts(by_state),
        total=sum(by_state.values()),
        collapsed=False,
        attention=[],
        shown=sum(by_state.values()),
    )


# -- remediations and reservations ---------------------------------------------------------


def remediations(limit: int = REMEDIATION_LIMIT, *, disclosure: Disclosure) -> list[RemediationRow]:
    return [_remediation_row(remediation, disclosure) for remediation in _automatic_remediations()[:limit]]


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
    return [_remediation_row(remediation, disclosure) for remediation in found[:limit]]


def shadow_tallies() -> list[ShadowTally]:
    since = timezone.now() - RELIABILITY_WINDOW
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
    _, active = _replacement(history[incident.reservation], incident.quarantined_at)
    return replace(incident, replacement_up_at=active.at) if active else incident


def remediation_reliability() -> Reliability:
    """MTTR, MTBI and the counts by rung and outcome of the remediations received in the window.
    It names nodes and GPU models only, which every viewer may see: it takes no disclosure.

    Here rather than in remediation/selectors.py: a quarantine under a tenant ends when the
    replacement is up, which the reservation's history tells (as on the incidents page)."""
    window = RELIABILITY_WINDOW
    since = timezone.now() - window
    found = remediation_selectors.incidents_since(since)
    history = _replacement_history({i.reservation for i in found if i.reservation and i.quarantined_at})
    found = [_with_replacement(incident, history) for incident in found]
    return Reliability(
        window=window,
        repair=reliability.repair_times(found),
        mtbi_per_gpu_model=reliability.mtbi_per_gpu_model(found, remediation_selectors.nodes_per_gpu_model(), window),
        mtbi_per_node=reliability.mtbi_per_node(found),
        by_step_and_status=remediation_selectors.counts_by_step_and_status(since),
    )


def remediations_per_day() -> list[reliability.DayCounts]:
    """The remediations the page lists, per day by outcome (in ACTED_ON's order), over the CHART_DAYS days to today."""
    first_day = timezone.localdate() - timedelta(days=CHART_DAYS - 1)
    since = datetime.combine(first_day, time.min, tzinfo=timezone.get_current_timezone())
    counts = remediation_selectors.counts_per_day(since, ACTED_ON)
    return reliability.per_day(counts, ACTED_ON, first_day, CHART_DAYS)


def tenant_of(user) -> Tenant | None:
    return Tenant.objects.filter(user=user).first() if user.is_authenticated else None


def tenant_reservations(tenant: Tenant) -> list[dict]:
    """The tenant's reservations, newest first, each with the nodes it holds and their states,
    the machines serving it (address, SSH port, host key), and whether it can still change."""
    reservations = list(Reservation.objects.filter(tenant=tenant).select_related("pod").order_by("-created_at", "-id"))
    held = reservation_nodes(reservations)
    machines = reservation_machines(reservations)
    states = dict(
        Node.objects.filter(name__in=[n for names in held.values() for n in names]).values_list("name", "state")
    )
    return [
        {
            "reservation": r,
            "nodes": [(name, states.get(name, "")) for name in held.get(r.pk, [])],
            "machines": machines.get(r.pk, []),
            "live": r.state in LIVE_STATES,
        }
        for r in reservations
    ]


def tenant_page(tenant: Tenant) -> dict:
    """Everything the tenant's page shows besides its forms."""
    return {
        "reservations": tenant_reservations(tenant),
        "capacity": capacity_by_pod(),
        "quota": quota_of(tenant),
        "webhooks": tenant_webhooks(tenant),
        "usage": usage_this_month(tenant),
    }


def tenant_webhooks(tenant: Tenant, deliveries: int = RECENT_DELIVERIES) -> list[dict]:
    """The tenant's webhooks (without their secrets), each with its latest deliveries, newest first."""
    latest = WebhookDelivery.objects.order_by("-created_at", "-id")[:deliveries]
    hooks = Webhook.objects.filter(tenant=tenant).order_by("id")
    hooks = hooks.prefetch_related(Prefetch("deliveries", latest, to_attr="latest_deliveries"))
    return [{"webhook": hook, "deliveries": hook.latest_deliveries} for hook in hooks]


@dataclass(frozen=True)
class UsageRow:
    reservation: int | None  # None: the total
    seconds: dict[str, int]

    @property
    def hours(self) -> dict[str, float]:
        return {kind: seconds / 3600 for kind, seconds in self.seconds.items()}


@dataclass(frozen=True)
class Usage:
    start: datetime
    end: datetime
    rows: list[UsageRow]
    total: UsageRow


def usage_this_month(tenant: Tenant, now: datetime | None = None) -> Usage:
    """The tenant's node-seconds per reservation from the first of this month (UTC) until now."""
    end = now or timezone.now()
    start = calendar_month(end).start
    usage = usage_of(tenant, start, end)

    def row(reservation, seconds) -> UsageRow:
        return UsageRow(reservation=reservation, seconds={kind: seconds[kind] for kind in USAGE_KINDS})

    return Usage(
        start=start,
        end=end,
        rows=[row(entry["reservation"], entry) for entry in usage["results"]],
        total=row(None, usage["total"]),
    )
