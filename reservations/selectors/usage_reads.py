"""A tenant's usage: node time per reservation over a period, from the reservations' history."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import F, Q
from psycopg.types.range import Range

from core import clock
from fleet.lifecycle import State
from fleet.models import AuditEvent
from reservations import usage
from reservations.models import Allocation, ReservationEvent, ReservationEventKind, Tenant
from reservations.selectors.holds import period


def usage_of(tenant: Tenant, start: datetime, end: datetime, *, now: datetime | None = None) -> dict:
    """GET /v1/usage: the tenant's node-seconds per reservation between `start` and `end` (see
    reservations/usage.py), their total, and the totals per calendar month and per member (the
    person who made each reservation); until `now` at the latest (None: core.clock's)."""
    end = min(end, now or clock.now())  # nothing is used in the future
    window = usage.Span(start, end)
    holds = (
        Allocation.objects.filter(reservation__tenant=tenant, period__overlap=period(start, end))
        .order_by("reservation_id", "node__name")
        .values_list("reservation_id", "node_id", "node__name", "period")
    )
    by_reservation: dict[int, list[tuple[int, str, Range[datetime]]]] = defaultdict(list)
    for reservation_id, node_id, name, held in holds:
        by_reservation[reservation_id].append((node_id, name, held))
    if not by_reservation:
        return _usage_answer(window, {}, [], {})
    node_ids = {node_id for rows in by_reservation.values() for node_id, _, _ in rows}
    earliest = min(held.lower for rows in by_reservation.values() for _, _, held in rows if held.lower is not None)
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
    made_by = dict(
        ReservationEvent.objects.filter(reservation_id__in=list(by_reservation), event=ReservationEventKind.CREATED)
        .order_by("id")
        .values_list("reservation_id", "user")
    )
    return _usage_answer(window, per_reservation, active_spans, made_by)


# What a reservation's usage is read from: when it lost a node, was whole again or ended.
_USAGE_EVENTS = [
    ReservationEventKind.NODE_LOST,
    ReservationEventKind.ACTIVE,
    ReservationEventKind.RELEASING,
    ReservationEventKind.RELEASED,
    ReservationEventKind.REPLACEMENT_PLACED,
]


def _usage_answer(window, per_reservation: dict, active_spans, made_by: dict[int, str]) -> dict:
    results = [
        {
            "reservation": reservation_id,
            "user": made_by.get(reservation_id, ""),
            **usage.node_seconds(holds, active_spans, degraded, window),
        }
        for reservation_id, (holds, degraded) in sorted(per_reservation.items())
    ]
    by_member: dict[str, list[dict]] = defaultdict(list)
    for row in results:
        by_member[row["user"]].append(row)
    months = []
    for month in usage.months(window):
        counted = [
            usage.node_seconds(holds, active_spans, degraded, month) for holds, degraded in per_reservation.values()
        ]
        months.append({"month": month.start.strftime("%Y-%m"), **_total(counted)})
    members = [{"user": user, **_total(rows)} for user, rows in sorted(by_member.items())]
    return {
        "from": window.start,
        "to": window.end,
        "results": results,
        "total": _total(results),
        "months": months,
        "members": members,
    }


def _total(rows: list[dict]) -> dict[str, int]:
    return {kind: sum(row[kind] for row in rows) for kind in usage.KINDS}
