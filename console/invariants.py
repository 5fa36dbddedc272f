"""Whole-history checks of what must always hold, for `manage.py check_invariants` and the soak test.

Each check reads the database and the audit log and returns the violations it finds, each with
the rows involved. PostgreSQL already refuses most broken rows; these checks look for what no
single row can show: histories, windows, and time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now

from core import clock
from core.topology import ETHERNET, INFINIBAND, NVLINK
from fleet.lifecycle import SERVING_STATES, Event, State
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node, TenantNetwork
from fleet.workflow_steps import StepName
from remediation import blast_radius, selectors
from remediation.services import AUTOMATIC_ACTOR
from reservations.models import Reservation, ReservationState
from workflows.node_workflows.engine import deadline_runs_since


@dataclass(frozen=True)
class Violation:
    check: str
    message: str
    rows: tuple[str, ...] = ()


def overlapping_allocations() -> Iterator[Violation]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.id, b.id, n.name FROM reservations_allocation a"
            " JOIN reservations_allocation b ON a.node_id = b.node_id AND a.id < b.id AND a.period && b.period"
            " JOIN fleet_node n ON n.id = a.node_id"
        )
        for first, second, node in cursor.fetchall():
            yield Violation(
                "overlapping_allocations", f"{node} is booked twice", (f"allocation {first}", f"allocation {second}")
            )


def _transitions() -> Iterator[tuple[int, list[AuditEvent]]]:
    """Each node's audited transitions in order (enrolment included, steps and discards left out)."""
    rows = (
        AuditEvent.objects.exclude(event__in=[AuditOnlyEvent.STEP_CHANGED, AuditOnlyEvent.RESULT_DISCARDED])
        .order_by("node_id", "id")
        .only("id", "node_id", "event", "from_state", "to_state", "at")
    )
    current: int | None = None
    history: list[AuditEvent] = []
    for row in rows.iterator(chunk_size=5000):
        if row.node_id != current:
            if current is not None:
                yield current, history
            current, history = row.node_id, []
        history.append(row)
    if current is not None:
        yield current, history


def dirty_nodes_made_available() -> Iterator[Violation]:
    """After a tenant, `available` needs wipe_succeeded and then attestation_passed."""
    names = dict(Node.objects.values_list("id", "name"))
    for node_id, history in _transitions():
        dirty, wiped = False, False
        for row in history:
            if row.event == Event.PROVISION_REQUESTED:
                dirty, wiped = True, False
            elif row.event == Event.WIPE_SUCCEEDED:
                wiped = True
            elif row.to_state == State.AVAILABLE:
                if dirty and not (wiped and row.event == Event.ATTESTATION_PASSED):
                    yield Violation(
                        "dirty_node_available",
                        f"{names[node_id]} became available after a tenant without a wipe and a passing attestation",
                        (f"audit {row.id}",),
                    )
                dirty = wiped = False


def audit_gaps() -> Iterator[Violation]:
    """Every state change has its row: each transition starts where the previous one ended, and the
    last one ends in the node's present state."""
    nodes = {pk: (name, state) for pk, name, state in Node.objects.values_list("id", "name", "state")}
    seen = set()
    for node_id, history in _transitions():
        seen.add(node_id)
        name, state = nodes[node_id]
        for before, after in pairwise(history):
            if after.from_state != before.to_state:
                yield Violation(
                    "audit_gap",
                    f"{name}: a change from {before.to_state} to {after.from_state} has no audit row",
                    (f"audit {before.id}", f"audit {after.id}"),
                )
        if history[-1].to_state != state:
            yield Violation(
                "audit_gap",
                f"{name} is {state} but its last audit row says {history[-1].to_state}",
                (f"audit {history[-1].id}",),
            )
    for node_id in nodes.keys() - seen:
        yield Violation("audit_gap", f"{nodes[node_id][0]} has no audit row at all", (f"node {node_id}",))


def active_without_live_reservation() -> Iterator[Violation]:
    live = [ReservationState.PROVISIONING, ReservationState.ACTIVE, ReservationState.DEGRADED]
    broken = Node.objects.filter(state=State.ACTIVE).exclude(reservation__state__in=live)
    for name, reservation in broken.values_list("name", "reservation_id"):
        yield Violation(
            "active_without_reservation", f"{name} is active for no live reservation", (f"reservation {reservation}",)
        )


def remediations_over_the_cap() -> Iterator[Violation]:
    """In no window more automatic remediations than the blast-radius cap allows, fleet-wide or in
    a pod, by the definition the decision to act uses (remediation/blast_radius.py); and no
    automatic quarantine that the cap never counted."""
    cap = selectors.blast_radius_cap()
    incidents = selectors.cap_incidents()
    for breach in blast_radius.breaches(cap, incidents):
        where = "fleet-wide" if breach.pod is None else f"in pod {breach.pod}"
        yield Violation(
            "remediation_cap",
            f"{blast_radius.remediations(len(breach.incidents))} {where} within {cap.describe_window()}"
            f" up to {breach.at:%Y-%m-%d %H:%M:%S} (cap {breach.limit})",
            tuple(f"remediation {incident.remediation} ({incident.node})" for incident in breach.incidents),
        )
    counted = {incident.remediation for incident in incidents}
    # Rows written before incidents were counted name no remediation.
    automatic = AuditEvent.objects.filter(
        event=Event.HARDWARE_FAULT, actor=AUTOMATIC_ACTOR, detail__has_key="remediation"
    )
    for pk, node, detail in automatic.values_list("pk", "node__name", "detail"):
        if (remediation := detail["remediation"]) not in counted:
            yield Violation(
                "remediation_cap",
                f"{node} was quarantined automatically by remediation {remediation}, which the cap never counted",
                (f"audit {pk}",),
            )


def stuck_without_a_lease() -> Iterator[Violation]:
    """A node owing work past its deadline that nobody holds: work lost somewhere."""
    deadlines = {
        State.INSPECTING: settings.INSPECTION_DEADLINE,
        State.PROVISIONING: settings.PROVISION_DEADLINE,
        State.WIPING: settings.WIPE_DEADLINE,
    }
    unleased = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
    now = clock.now()
    for state, seconds in deadlines.items():
        late = Node.objects.filter(unleased, state=state, state_since__lt=now - timedelta(seconds=seconds))
        for node in late.order_by("pk"):
            # A wipe's deadline runs only from when the node left its tenant's networks (the engine's).
            since = deadline_runs_since(node)
            if since is None or since >= now - timedelta(seconds=seconds):
                continue
            yield Violation(
                "stuck", f"{node.name} has been {state} since {since:%Y-%m-%d %H:%M:%S} with no worker on it"
            )


def unsettled_reservations() -> Iterator[Violation]:
    """Once the fleet has settled, an accepted reservation is active, released, failed, or not due yet."""
    unsettled = Reservation.objects.exclude(
        state__in=[ReservationState.ACTIVE, ReservationState.RELEASED, ReservationState.FAILED]
    ).exclude(state=ReservationState.PENDING, starts_at__gt=Now())
    for pk, state, reason in unsettled.values_list("id", "state", "reason"):
        yield Violation(
            "unsettled_reservation",
            f"reservation {pk} is {state}{': ' + reason if reason else ''}",
            (f"reservation {pk}",),
        )


def _tenant_memberships(fabric: str, found: str) -> list[str]:
    """The tenant segments a read-back names (not the provisioning VLAN, not none)."""
    idle = {"", str(settings.PROVISIONING_VLAN)} if fabric == ETHERNET else {""}
    return [member for member in found.split(",") if member not in idle]


def _attachments_with_reservations() -> Iterator[tuple[NetworkAttachment, set[int]]]:
    """Each attachment, and the reservations whose live networks its read-back names."""
    live: dict[tuple[str, str, str], int] = {
        (network.fabric, network.scope, network.value): network.reservation_id
        for network in TenantNetwork.objects.filter(released_at__isnull=True)
    }
    attachments = NetworkAttachment.objects.select_related("node__rack__pod", "wanted").order_by("node_id", "fabric")
    for attachment in attachments:
        node = attachment.node
        scope = {ETHERNET: "", INFINIBAND: node.rack.pod.name, NVLINK: node.rack.name}[attachment.fabric]
        found = {
            live[key]
            for member in _tenant_memberships(attachment.fabric, attachment.found)
            if (key := (attachment.fabric, scope, member)) in live
        }
        yield attachment, found


def nodes_on_two_tenants() -> Iterator[Violation]:
    """No node is on, or wanted on, the networks of two reservations, nor on a network of one while
    it serves another."""
    reservations: dict[int, set[int]] = {}
    names: dict[int, str] = {}
    for attachment, found in _attachments_with_reservations():
        node = attachment.node
        names[node.pk] = node.name
        held = reservations.setdefault(node.pk, set())
        held |= found
        if attachment.wanted is not None:
            held.add(attachment.wanted.reservation_id)
        if node.state in SERVING_STATES and node.reservation_id is not None:
            held.add(node.reservation_id)
    for node_id, held in reservations.items():
        if len(held) > 1:
            yield Violation(
                "node_on_two_tenants",
                f"{names[node_id]} is on, wanted on, or serves the networks of reservations {sorted(held)}",
                tuple(f"reservation {pk}" for pk in sorted(held)),
            )


def held_nodes_on_tenant_segments() -> Iterator[Violation]:
    """A node outside service whose wipe has gone past leave_tenant_networks (wiping further on,
    inspecting, available) is read back on no tenant's segment."""
    past_leaving = Q(state__in=[State.INSPECTING, State.AVAILABLE]) | (
        Q(state=State.WIPING) & ~Q(step__in=["", StepName.LEAVE_TENANT_NETWORKS])
    )
    attachments = NetworkAttachment.objects.filter(node__in=Node.objects.filter(past_leaving))
    for pk, name, state, fabric, found in attachments.values_list("pk", "node__name", "node__state", "fabric", "found"):
        if members := _tenant_memberships(fabric, found):
            yield Violation(
                "held_node_on_tenant_segment",
                f"{name} is {state} but its {fabric} ports were read back on {', '.join(members)}",
                (f"network attachment {pk}",),
            )


def tenant_segments_without_live_reservation() -> Iterator[Violation]:
    """A tenant network is given back once its reservation has ended and no node is on it or
    leaving it (fleet.services.tenant_networks.release_finished_networks, after every sync: a
    reservation that ended two sync periods ago has had one)."""
    on_or_leaving: set[int] = set()
    wanted = set(NetworkAttachment.objects.filter(wanted__isnull=False).values_list("wanted_id", flat=True))
    for _attachment, found in _attachments_with_reservations():
        on_or_leaving |= found
    settled = Now() - timedelta(seconds=2 * settings.FABRIC_SYNC_SECONDS)
    ended = TenantNetwork.objects.filter(
        released_at__isnull=True, reservation__state__in=[ReservationState.RELEASED, ReservationState.FAILED]
    ).exclude(reservation__events__at__gt=settled)
    for network in ended.exclude(pk__in=wanted):
        if network.reservation_id not in on_or_leaving:
            yield Violation(
                "tenant_segment_without_live_reservation",
                f"reservation {network.reservation_id} has ended, yet its {network.fabric} network"
                f" {network.value} is still held with no node on it",
                (f"tenant network {network.pk}",),
            )


CHECKS: dict[str, Callable[[], Iterator[Violation]]] = {
    "overlapping_allocations": overlapping_allocations,
    "dirty_node_available": dirty_nodes_made_available,
    "active_without_reservation": active_without_live_reservation,
    "remediation_cap": remediations_over_the_cap,
    "stuck": stuck_without_a_lease,
    "unsettled_reservation": unsettled_reservations,
    "audit_gap": audit_gaps,
    "node_on_two_tenants": nodes_on_two_tenants,
    "held_node_on_tenant_segment": held_nodes_on_tenant_segments,
    "tenant_segment_without_live_reservation": tenant_segments_without_live_reservation,
}
