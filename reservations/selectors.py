"""Reads for placement and the tenants' API."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Now
from django.utils import timezone
from psycopg.types.range import Range

from core.kept import Kept
from fleet import fabric
from fleet.fabric_health import RackNodes
from fleet.lifecycle import State
from fleet.models import GPU, AuditEvent, Node
from fleet.selectors import nodes_cut_off_in, rack_fabric_paths, recently_passed_long_diagnostics
from reservations import usage
from reservations.free_capacity import FreeCapacity, RackState
from reservations.models import (
    Allocation,
    Quota,
    Reservation,
    ReservationEvent,
    ReservationEventKind,
    ReservationState,
    Tenant,
)
from reservations.offers import Busy
from reservations.periods import START_GRACE, BookingLimits
from reservations.placement import RackCapacity

# A node in these states will be in service for a reservation that starts later.
IN_SERVICE_STATES = [State.AVAILABLE, State.PROVISIONING, State.ACTIVE, State.WIPING, State.INSPECTING]
OUT_OF_SERVICE_STATES = [state for state in State if state not in IN_SERVICE_STATES]
NOT_AVAILABLE_STATES = [state for state in State if state is not State.AVAILABLE]
INSTANT = timedelta(microseconds=1)


def period(starts_at: datetime, ends_at: datetime | None) -> Range:
    return Range(starts_at, ends_at, "[)")


def live_allocations():
    """Allocations whose period has not ended. An empty period (a hold cut short before it
    began) has no upper bound either, yet it ended before it started."""
    return Allocation.objects.filter(
        Q(period__endswith__isnull=True) | Q(period__endswith__gt=Now()), period__isempty=False
    )


@dataclass(frozen=True)
class Topology:
    """The fleet's racks and nodes as placement sees them, with every rack wholly free."""

    version: int
    racks: tuple[RackCapacity, ...]
    rack_ids: tuple[tuple[int, ...], ...]  # node ids of each rack, in slot order
    rack_of: dict[int, int]  # node id -> index into racks
    node_ids: dict[str, int]  # node name -> id


_topology: Kept[Topology] = Kept()


def topology() -> Topology:
    """The fleet's topology, read again only when enrolment changed it.

    Placement runs on every reservation; the topology changes on enrolment only, so it is kept
    per process and checked with one cheap query instead of being read whole each time.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM fleet_topology_version")  # see fleet/migrations/0004
        (version,) = cursor.fetchone()
    return _topology.get(version, lambda: _read_topology(version))


def _read_topology(version: int) -> Topology:
    paths = rack_fabric_paths()
    # A node's GPUs are of one model: its first GPU's names it.
    models = dict(GPU.objects.order_by("node_id", "index").distinct("node_id").values_list("node__name", "model"))
    racks: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    attributes: dict[str, dict] = {}
    rows = Node.objects.order_by("rack__pod__name", "rack__name", "position")
    for node_id, name, rack, pod, said in rows.values_list("id", "name", "rack__name", "rack__pod__name", "attributes"):
        racks[(pod, rack)].append((node_id, name))
        if said:
            attributes[name] = said
    members = [tuple(zip(*nodes, strict=True)) for nodes in racks.values()]
    return Topology(
        version=version,
        racks=tuple(
            RackCapacity(
                pod=pod,
                rack=rack,
                nodes=names,
                free=names,
                gpu_models={name: models[name] for name in names if name in models} or None,
                path=paths[rack],
                attributes={name: attributes[name] for name in names if name in attributes} or None,
            )
            for (pod, rack), (_, names) in zip(racks, members, strict=True)
        ),
        rack_ids=tuple(ids for ids, _ in members),
        rack_of={node_id: i for i, (ids, _) in enumerate(members) for node_id in ids},
        node_ids={name: node_id for ids, names in members for node_id, name in zip(ids, names, strict=True)},
    )


def rack_capacity(*, starts_at: datetime, ends_at: datetime | None) -> list[RackCapacity]:
    """Every rack with its nodes, those free for the period, and those with a recent long
    diagnostics pass (which placement prefers among equal choices).

    Free: no allocation overlaps the period, the node can serve then (available if the period
    starts now, in service (not quarantined, in maintenance or still unenrolled) if later), and no
    unhealthy switch cuts it off from the fabric now (nodes_cut_off). Only the racks that hold a
    node that is not free, or a recently tested one, are looked at node by node.
    """
    fleet = topology()
    not_free, passed = _not_free_and_tested(starts_at=starts_at, ends_at=ends_at, fleet=fleet)
    blocked, tested = _by_rack(fleet, not_free), _by_rack(fleet, passed)
    racks = []
    for i, rack in enumerate(fleet.racks):
        ids = fleet.rack_ids[i]
        if i in blocked:
            out = blocked[i]
            free = tuple(name for node_id, name in zip(ids, rack.nodes, strict=True) if node_id not in out)
            rack = replace(rack, free=free)
        if i in tested:
            passed = frozenset(name for node_id, name in zip(ids, rack.nodes, strict=True) if node_id in tested[i])
            rack = replace(rack, recently_tested=passed)  # `free` stays the very tuple `nodes` if it was
        racks.append(rack)
    return racks


@dataclass
class _KeptFree:
    """The process's index of free capacity, and the nodes it was last told were not free or
    recently tested (by id)."""

    version: int
    capacity: FreeCapacity
    names: dict[int, str]  # node id -> name
    not_free: set[int] = field(default_factory=set)
    tested: set[int] = field(default_factory=set)


_kept_free: Kept[_KeptFree] = Kept()
_kept_free_lock = threading.Lock()  # one period at a time: the index is the process's, threads share it


@contextmanager
def free_capacity(
    *, starts_at: datetime, ends_at: datetime | None, fleet: Topology | None = None
) -> Iterator[FreeCapacity]:
    """The process's index of free capacity (reservations/free_capacity.py) as it is for the
    period, free as rack_capacity says, held for the caller alone until the block ends.

    Built from the topology once per version; each call applies only the difference between the
    nodes not free for this period (one array query, the cut-off nodes, the recently tested) and
    those it applied last, so a request costs what changed since the last one, not the fleet.
    """
    fleet = fleet or topology()
    not_free, tested = _not_free_and_tested(starts_at=starts_at, ends_at=ends_at, fleet=fleet)
    with _kept_free_lock:
        kept = _kept_free.get(fleet.version, lambda: _fresh_index(fleet))
        names = kept.names
        kept.capacity.apply(
            freed=[names[i] for i in kept.not_free - not_free if i in names],
            taken=[names[i] for i in not_free - kept.not_free if i in names],
            tested=[names[i] for i in tested - kept.tested if i in names],
            untested=[names[i] for i in kept.tested - tested if i in names],
        )
        kept.not_free, kept.tested = not_free, tested
        yield kept.capacity


def _fresh_index(fleet: Topology) -> _KeptFree:
    """An index of the fleet with every node free and none tested."""
    racks = (
        RackState(
            rack.pod,
            rack.rack,
            rack.path,
            rack.nodes,
            frozenset(rack.nodes),
            gpu_models=rack.gpu_models,
            attributes=rack.attributes,
        )
        for rack in fleet.racks
    )
    return _KeptFree(
        version=fleet.version,
        capacity=FreeCapacity(racks),
        names={node_id: name for name, node_id in fleet.node_ids.items()},
    )


def warm_placement() -> None:
    """Read the topology and build the index of free capacity before a request needs them: at
    100,000 nodes that takes seconds, which a web process's first tenants would wait for."""
    now = timezone.now()
    with free_capacity(starts_at=now, ends_at=now + INSTANT):
        pass


def nodes_cut_off(fleet: Topology | None = None, *, lasting: timedelta = timedelta(0)) -> dict[int, str]:
    """The ids of the nodes an unhealthy switch cuts off from the fabric, each with why
    (fleet/fabric_health.py): placement gives them to nobody, for any period, until the switch
    manager reads their switch healthy again. With `lasting`, only trouble that has lasted so long."""
    fleet = fleet or topology()
    return nodes_cut_off_in(
        (
            RackNodes(pod=rack.pod, path=rack.path, ids=ids, names=rack.nodes)
            for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True)
        ),
        lasting=lasting,
    )


def _by_rack(fleet: Topology, node_ids: list[int]) -> dict[int, set[int]]:
    """The nodes by the index of their rack; nodes enrolled since the topology was read are left out
    (not placeable yet)."""
    racks: dict[int, set[int]] = defaultdict(set)
    for node_id in node_ids:
        if (rack := fleet.rack_of.get(node_id)) is not None:
            racks[rack].add(node_id)
    return racks


def _not_free_and_tested(
    *, starts_at: datetime, ends_at: datetime | None, fleet: Topology
) -> tuple[set[int], set[int]]:
    """The ids of the nodes not free for the period (_not_free's, and those a switch cuts off), and
    of those with a recent long diagnostics pass: what placement's free capacity is read from."""
    not_free, tested = _ids_of_each(_not_free_sources(starts_at=starts_at, ends_at=ends_at), [_tested_source()])
    return {*not_free, *nodes_cut_off(fleet)}, set(tested)


def _tested_source() -> QuerySet:
    """The ids of the nodes with a recent long diagnostics pass."""
    return recently_passed_long_diagnostics().order_by().values_list("id")


def _not_free(*, starts_at: datetime, ends_at: datetime | None) -> list[int]:
    """Ids of the nodes that are not free for the period (see rack_capacity), some maybe twice."""
    return _ids_of(*_not_free_sources(starts_at=starts_at, ends_at=ends_at))


def _not_free_sources(*, starts_at: datetime, ends_at: datetime | None) -> tuple[QuerySet, QuerySet]:
    # Unordered: the models' default orderings would join and sort thousands of rows for nothing.
    taken = Allocation.objects.filter(period__overlap=period(starts_at, ends_at)).order_by()
    # The states named, not excluded, so that node_state_idx finds the few such nodes.
    if starts_at <= timezone.now():
        # A node a remediation ladder is repairing waits for the ladder's verdict.
        unusable = Node.objects.filter(Q(state__in=NOT_AVAILABLE_STATES) | Q(under_repair=True)).order_by()
    else:
        unusable = Node.objects.filter(state__in=OUT_OF_SERVICE_STATES).order_by()
    return taken.values_list("node_id"), unusable.values_list("id")


def capacity_over_time(*, earliest: datetime, until: datetime, pod: str | None = None):
    """What an earliest-start offer is computed from: every rack with its nodes that can serve at
    all as free, and when the others are busy between `earliest` and `until` (their holds, and a
    minute for a node in service but not available yet, as after its last tenant). A node an
    unhealthy switch cuts off cannot serve: nobody knows when the switch is back."""
    fleet = topology()
    names = {node_id: name for name, node_id in fleet.node_ids.items()}
    states = dict(Node.objects.exclude(state=State.AVAILABLE).order_by().values_list("id", "state"))
    cut_off = nodes_cut_off(fleet)

    def can_serve(node_id: int) -> bool:
        return node_id not in cut_off and states.get(node_id, State.AVAILABLE) in IN_SERVICE_STATES

    racks = []
    for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True):
        if pod is not None and rack.pod != pod:
            continue
        if not all(map(can_serve, ids)):
            free = tuple(name for node_id, name in zip(ids, rack.nodes, strict=True) if can_serve(node_id))
            rack = replace(rack, free=free)
        racks.append(rack)
    holds = Allocation.objects.filter(period__overlap=period(earliest, until)).order_by()
    busy = [
        Busy(names[node_id], lower, upper or until)
        for node_id, lower, upper in holds.values_list("node_id", "period__startswith", "period__endswith")
        if node_id in names
    ]
    busy += [
        Busy(names[node_id], earliest, earliest + START_GRACE)
        for node_id, state in states.items()
        if state in IN_SERVICE_STATES and node_id in names
    ]
    return racks, busy


def _ids_of(*querysets: QuerySet) -> list[int]:
    """The ids the one-column querysets select, read in one round trip as one array: thousands
    of rows through the ORM cost milliseconds on every placement, one array next to nothing."""
    return _ids_of_each(querysets)[0]


def _ids_of_each(*groups: Sequence[QuerySet]) -> list[list[int]]:
    """For each group of one-column querysets, the ids they select: one array a group, all in one
    round trip."""
    arrays, params = [], []
    for querysets in groups:
        parts = []
        for queryset in querysets:
            sql, more = queryset.query.sql_with_params()
            parts.append(f"({sql})")
            params.extend(more)
        arrays.append(f"array({' UNION ALL '.join(parts)})")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(arrays)}", params)
        return list(cursor.fetchone())


def booking_limits(quota: Quota | None = None) -> BookingLimits:
    """How far ahead a tenant of `quota` may book and for how long; None: the limits every tenant has.

    The one place the limits are worked out, so that per-tenant quotas can refine them here.
    """
    return BookingLimits(
        horizon=timedelta(days=(quota and quota.booking_horizon_days) or settings.BOOKING_HORIZON_DAYS),
        max_duration=timedelta(days=(quota and quota.max_duration_days) or settings.MAX_RESERVATION_DAYS),
    )


def nodes_held(tenant: Tenant, starts_at: datetime, ends_at: datetime | None) -> Counter:
    """The tenant's nodes held over any part of the period, per pod."""
    overlapping = live_allocations().filter(reservation__tenant=tenant, period__overlap=period(starts_at, ends_at))
    return Counter(overlapping.values_list("node__rack__pod__name", flat=True))


def node_hours_booked(tenant: Tenant, month: usage.Span) -> float:
    """The node-hours the tenant's holds take within `month`: used, and booked still ahead."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(extract(epoch FROM upper(a.period * m.span) - lower(a.period * m.span))), 0)"
            " FROM reservations_allocation a JOIN reservations_reservation r ON r.id = a.reservation_id,"
            " (SELECT tstzrange(%s, %s) AS span) m WHERE r.tenant_id = %s AND a.period && m.span",
            [month.start, month.end, tenant.pk],
        )
        return float(cursor.fetchone()[0]) / 3600


_kept_capacity: Kept[list[dict]] = Kept()  # at (capacity version, topology version)

# Both versions in one round trip: reservations/migrations/0013 and fleet/migrations/0004.
_CAPACITY_VERSIONS = "SELECT s.last_value, t.version FROM reservations_capacity_version_seq s, fleet_topology_version t"


def capacity_by_pod() -> list[dict]:
    """Per pod: nodes, nodes free now, nodes free now and for as long as a reservation without
    ends_at lasts (no later booking holds them), racks whose every node is free now, and its
    fabric domains as a tree down to its racks, with their nodes and those free now. A node an
    unhealthy switch cuts off is free for none of them.

    Anyone may ask (the public listener serves it), and counting walks every rack: the answer is
    kept per process, shared by its callers (who must not change it), and computed again when the
    capacity or topology version moves or it is CAPACITY_MAX_AGE_SECONDS old, since a hold
    starting or ending changes "free now" with no row written. The capacity version is a
    sequence, which moves outside transactions: a reader can see the version a writer moved
    before the writer commits, count without the change and keep that answer under the new
    version, where it stays at most the maximum age.

    Inside a transaction the answer is counted afresh, neither kept nor taken from the kept one:
    it may hold the transaction's own uncommitted changes, which a rollback takes back while the
    version they moved stays.
    """
    if not connection.get_autocommit():
        return _count_capacity()
    with connection.cursor() as cursor:
        cursor.execute(_CAPACITY_VERSIONS)
        versions = cursor.fetchone()
    return _kept_capacity.get(versions, _count_capacity, max_age=settings.CAPACITY_MAX_AGE_SECONDS)


def _count_capacity() -> list[dict]:
    """capacity_by_pod's answer, from the allocations, nodes and switches as they are."""
    now = timezone.now()
    fleet = topology()
    # Counts only: no rack's free nodes are listed, as placement needs them.
    cut_off = nodes_cut_off(fleet).keys()
    busy_now = {*_not_free(starts_at=now, ends_at=now + INSTANT), *cut_off}
    busy_open_ended = {*_not_free(starts_at=now, ends_at=now + booking_limits().max_duration), *cut_off}
    pods: dict[str, dict] = {}
    loads = []
    for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True):
        summary = pods.setdefault(
            rack.pod,
            {"name": rack.pod, "nodes": 0, "available": 0, "free_open_ended": 0, "whole_free_racks": 0},
        )
        free_now = sum(node_id not in busy_now for node_id in ids)
        summary["nodes"] += len(ids)
        summary["available"] += free_now
        summary["free_open_ended"] += sum(node_id not in busy_open_ended for node_id in ids)
        summary["whole_free_racks"] += free_now == len(ids)
        loads.append(fabric.RackLoad(pod=rack.pod, path=rack.path, rack=rack.rack, nodes=len(ids), available=free_now))
    trees = fabric.domain_tree(loads)
    return [{**pods[name], "domains": trees[name]} for name in sorted(pods)]


def reservation_machines(reservations: list[Reservation]) -> dict[int, list[dict]]:
    """The nodes serving each reservation now, with what a tenant needs to reach them."""
    machines: dict[int, list[dict]] = defaultdict(list)
    # A reservation is provisioning before its first node is: a pending one has none serving.
    started = [r for r in reservations if r.state != ReservationState.PENDING]
    if not started:
        return machines
    serving = Node.objects.filter(reservation__in=started).select_related("address__pool").order_by("name")
    for node in serving:
        address = getattr(node, "address", None)
        machines[node.reservation_id].append(
            {
                "name": node.name,
                "state": node.state,
                "address": address.address if address else None,
                "ssh_port": address.pool.ssh_port if address else None,
                "host_key_fingerprint": node.ssh_host_key_fingerprint or None,
            }
        )
    return machines


def reservation_nodes(reservations: list[Reservation]) -> dict[int, list[str]]:
    """Names of the nodes each reservation holds now (or will hold, if it starts later)."""
    return _placed_or_read(
        reservations,
        lambda r: r.placed_nodes,
        lambda unknown: (
            live_allocations()
            .filter(reservation__in=unknown)
            .order_by("node__name")
            .values_list("reservation_id", "node__name")
        ),
    )


def reservation_ssh_keys(reservations: list[Reservation]) -> dict[int, list[int]]:
    """Ids of the keys that may log in to each reservation's nodes, in the order of their names."""
    return _placed_or_read(
        reservations,
        lambda r: r.placed_ssh_keys,
        lambda unknown: (
            Reservation.ssh_keys.through.objects.filter(reservation__in=unknown)
            .order_by("sshkey__name")
            .values_list("reservation_id", "sshkey_id")
        ),
    )


def _placed_or_read(
    reservations: list[Reservation],
    placed: Callable[[Reservation], list | None],
    read: Callable[[list[Reservation]], QuerySet],
) -> dict[int, list]:
    """Per reservation, what the service that created it left on it (`placed`), or else the values
    of the (reservation id, value) rows `read` selects for the others, in its order."""
    found: dict[int, list] = defaultdict(list)
    found.update((r.pk, placed(r)) for r in reservations if placed(r) is not None)
    if unknown := [r for r in reservations if placed(r) is None]:
        for reservation_id, value in read(unknown):
            found[reservation_id].append(value)
    return found


def quota_of(tenant: Tenant) -> dict:
    """The tenant's limits and what it holds now: GET /v1/quota."""
    quota = Quota.objects.filter(tenant=tenant).first()
    limits = booking_limits(quota)
    now = timezone.now()
    held = nodes_held(tenant, now, now + INSTANT)
    return {
        "limits": {
            "nodes": quota.nodes if quota else None,
            "nodes_per_pod": quota.nodes_per_pod if quota else None,
            "node_hours_per_month": quota.node_hours_per_month if quota else None,
            "booking_horizon_days": limits.horizon / timedelta(days=1),
            "max_duration_days": limits.max_duration / timedelta(days=1),
        },
        "used": {
            "nodes": sum(held.values()),
            "nodes_per_pod": dict(sorted(held.items())),
            "node_hours_this_month": round(node_hours_booked(tenant, usage.calendar_month(now)), 1),
        },
    }


def usage_of(tenant: Tenant, start: datetime, end: datetime) -> dict:
    """GET /v1/usage: the tenant's node-seconds per reservation between `start` and `end` (see
    reservations/usage.py), their total, and the totals per calendar month."""
    end = min(end, timezone.now())  # nothing is used in the future
    window = usage.Span(start, end)
    holds = (
        Allocation.objects.filter(reservation__tenant=tenant, period__overlap=period(start, end))
        .order_by("reservation_id", "node__name")
        .values_list("reservation_id", "node_id", "node__name", "period")
    )
    by_reservation: dict[int, list[tuple[int, str, Range]]] = defaultdict(list)
    for reservation_id, node_id, name, held in holds:
        by_reservation[reservation_id].append((node_id, name, held))
    if not by_reservation:
        return _usage_answer(window, {}, [])
    node_ids = {node_id for rows in by_reservation.values() for node_id, _, _ in rows}
    earliest = min(held.lower for rows in by_reservation.values() for _, _, held in rows)
    active: dict[str, list] = defaultdict(list)
    for name, at, to_state in (
        AuditEvent.objects.filter(node_id__in=node_ids, at__gte=earliest, at__lt=end)
        .filter(Q(to_state=State.ACTIVE) | Q(from_state=State.ACTIVE))
        .exclude(to_state=F("from_state"))
        .order_by("at", "id")
        .values_list("node__name", "at", "to_state")
    ):
        active[name].append((at, to_state == State.ACTIVE))
    active_spans = {name: usage.spans(changes, until=end) for name, changes in active.items()}
    history: dict[int, list] = defaultdict(list)
    replaced: dict[int, set[str]] = defaultdict(set)
    for reservation_id, event, detail, at in (
        ReservationEvent.objects.filter(reservation_id__in=list(by_reservation), event__in=_USAGE_EVENTS)
        .order_by("at", "id")
        .values_list("reservation_id", "event", "detail", "at")
    ):
        if event == ReservationEventKind.REPLACEMENT_PLACED:
            replaced[reservation_id].update(name.strip() for name in detail.split(","))
        else:
            history[reservation_id].append((at, event == ReservationEventKind.NODE_LOST))
    per_reservation = {
        reservation_id: (
            [
                usage.Hold(name, usage.Span(held.lower, held.upper or end), name in replaced[reservation_id])
                for _, name, held in rows
                if held.lower is not None
            ],
            usage.spans(history[reservation_id], until=end),
        )
        for reservation_id, rows in by_reservation.items()
    }
    return _usage_answer(window, per_reservation, active_spans)


# What a reservation's usage is read from: when it lost a node, was whole again or ended.
_USAGE_EVENTS = [
    ReservationEventKind.NODE_LOST,
    ReservationEventKind.ACTIVE,
    ReservationEventKind.RELEASING,
    ReservationEventKind.RELEASED,
    ReservationEventKind.REPLACEMENT_PLACED,
]


def _usage_answer(window, per_reservation: dict, active_spans) -> dict:
    results = [
        {"reservation": reservation_id, **usage.node_seconds(holds, active_spans, degraded, window)}
        for reservation_id, (holds, degraded) in sorted(per_reservation.items())
    ]
    months = []
    for month in usage.months(window):
        counted = [
            usage.node_seconds(holds, active_spans, degraded, month) for holds, degraded in per_reservation.values()
        ]
        months.append({"month": month.start.strftime("%Y-%m"), **_total(counted)})
    return {"from": window.start, "to": window.end, "results": results, "total": _total(results), "months": months}


def _total(rows: list[dict]) -> dict[str, int]:
    return {kind: sum(row[kind] for row in rows) for kind in usage.KINDS}
