"""Reads for placement and the tenants' API."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Exists, OuterRef, Q, Value
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
    usable = [State.AVAILABLE] if immediate else IN_SERVICE_STATES
    # Aggregated in PostgreSQL, one row per rack: Python never walks the whole fleet node by node.
    booked = Allocation.objects.filter(node=OuterRef("pk"), period__overlap=period(starts_at, ends_at))
    free = Q(state__in=usable) & ~Exists(booked)
    nodes = Node.objects.all() if pod is None else Node.objects.filter(rack__pod__name=pod)
    rows = (
        nodes.values("rack__pod__name", "rack__name")
        .annotate(
            members=ArrayAgg("name", order_by="position"),
            free=ArrayAgg("name", filter=free, order_by="position", default=Value([])),
        )
        .order_by("rack__pod__name", "rack__name")
    )
    return [
        RackCapacity(
            pod=row["rack__pod__name"], rack=row["rack__name"], nodes=tuple(row["members"]), free=tuple(row["free"])
        )
        for row in rows
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
