"""Reads for placement and the tenants' API."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q
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


def rack_capacity(*, starts_at: datetime, ends_at: datetime | None, pod: str | None = None) -> list[RackCapacity]:
    """Every rack with its nodes and those free for the period, in one query.

    Free: no allocation overlaps the period, and the node can serve then: available if the
    period starts now, in service (not quarantined, in maintenance or still unenrolled) if later.
    """
    immediate = starts_at <= timezone.now()
    booked = Allocation.objects.filter(node=OuterRef("pk"), period__overlap=period(starts_at, ends_at))
    nodes = Node.objects.annotate(booked=Exists(booked)).order_by("rack__pod__name", "rack__name", "position")
    if pod is not None:
        nodes = nodes.filter(rack__pod__name=pod)
    usable = [State.AVAILABLE] if immediate else IN_SERVICE_STATES
    racks: dict[tuple[str, str], tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for name, rack, pod_name, state, booked_then in nodes.values_list(
        "name", "rack__name", "rack__pod__name", "state", "booked"
    ):
        members, free = racks[(pod_name, rack)]
        members.append(name)
        if state in usable and not booked_then:
            free.append(name)
    return [
        RackCapacity(pod=pod_name, rack=rack, nodes=tuple(members), free=tuple(free))
        for (pod_name, rack), (members, free) in racks.items()
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
