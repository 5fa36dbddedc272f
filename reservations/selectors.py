"""Reads for placement and the tenants' API."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Max, Q
from django.db.models.functions import Now
from django.utils import timezone
from psycopg.types.range import Range

from fleet.lifecycle import State
from fleet.models import Node
from reservations.models import Allocation, Reservation
from reservations.placement import RackCapacity

# A node in these states will be in service for a reservation that starts later.
IN_SERVICE_STATES = [State.AVAILABLE, State.PROVISIONING, State.ACTIVE, State.WIPING, State.INSPECTING]
INSTANT = timedelta(microseconds=1)


def period(starts_at: datetime, ends_at: datetime | None) -> Range:
    return Range(starts_at, ends_at, "[)")


def live_allocations():
    """Allocations whose period has not ended."""
    return Allocation.objects.filter(Q(period__endswith__isnull=True) | Q(period__endswith__gt=Now()))


@dataclass(frozen=True)
class _Rack:
    pod: str
    name: str
    ids: tuple[int, ...]  # in slot order
    names: tuple[str, ...]


_topology: dict[str, object] = {}


def _racks() -> list[_Rack]:
    """The fleet's racks and their nodes, read again only when enrolment changed them.

    Placement runs on every reservation; the topology changes on enrolment only, so it is kept
    per process and checked with one cheap query instead of being read whole each time.
    """
    version = tuple(
        Node.objects.aggregate(count=Count("id"), last=Max("id"), racks=Count("rack_id", distinct=True)).values()
    )
    if _topology.get("version") != version:
        racks: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
        rows = Node.objects.order_by("rack__pod__name", "rack__name", "position")
        for node_id, name, rack, pod in rows.values_list("id", "name", "rack__name", "rack__pod__name"):
            racks[(pod, rack)].append((node_id, name))
        _topology.update(
            version=version,
            racks=[_Rack(pod, rack, *map(tuple, zip(*members, strict=True))) for (pod, rack), members in racks.items()],
        )
    return _topology["racks"]


def rack_capacity(*, starts_at: datetime, ends_at: datetime | None, pod: str | None = None) -> list[RackCapacity]:
    """Every rack with its nodes and those free for the period.

    Free: no allocation overlaps the period, and the node can serve then: available if the
    period starts now, in service (not quarantined, in maintenance or still unenrolled) if later.
    """
    booked = set(
        Allocation.objects.filter(period__overlap=period(starts_at, ends_at)).values_list("node_id", flat=True)
    )
    if starts_at <= timezone.now():
        usable = set(Node.objects.filter(state=State.AVAILABLE).values_list("id", flat=True)).__contains__
    else:
        out = set(Node.objects.exclude(state__in=IN_SERVICE_STATES).values_list("id", flat=True))
        usable = lambda node_id: node_id not in out  # noqa: E731 - the cheaper of two membership tests
    return [
        RackCapacity(
            pod=rack.pod,
            rack=rack.name,
            nodes=rack.names,
            free=tuple(
                name
                for node_id, name in zip(rack.ids, rack.names, strict=True)
                if node_id not in booked and usable(node_id)
            ),
        )
        for rack in _racks()
        if pod is None or rack.pod == pod
    ]


def capacity_by_pod() -> list[dict]:
    """Per pod: nodes, nodes free now, and racks whose every node is free now."""
    now = timezone.now()
    pods: dict[str, dict] = {}
    for rack in rack_capacity(starts_at=now, ends_at=now + INSTANT):
        summary = pods.setdefault(rack.pod, {"name": rack.pod, "nodes": 0, "available": 0, "whole_free_racks": 0})
        summary["nodes"] += len(rack.nodes)
        summary["available"] += len(rack.free)
        summary["whole_free_racks"] += len(rack.free) == len(rack.nodes)
    return [pods[name] for name in sorted(pods)]


def reservation_nodes(reservations: list[Reservation]) -> dict[int, list[str]]:
    """Names of the nodes each reservation holds now (or will hold, if it starts later)."""
    held: dict[int, list[str]] = defaultdict(list)
    for reservation_id, name in (
        live_allocations()
        .filter(reservation__in=reservations)
        .order_by("node__name")
        .values_list("reservation_id", "node__name")
    ):
        held[reservation_id].append(name)
    return held
