"""What holds nodes: live allocations and the periods they cover, the booking limits, and a
tenant's nodes and node-hours booked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from psycopg.types.range import Range

from core import clock
from fleet.lifecycle import State
from fleet.models import Node
from fleet.selectors import recently_passed_long_diagnostics
from reservations import usage
from reservations.models import Allocation, Quota, Tenant
from reservations.periods import BookingLimits

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


def tenant_quota(tenant: Tenant) -> Quota | None:
    """The tenant's quota, None where the operators set none: read with the tenant where it was
    (an API key's caller comes with it), else in a query of its own."""
    try:
        return tenant.quota
    except Quota.DoesNotExist:
        return None


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


def not_free_sources(
    *, starts_at: datetime, ends_at: datetime | None, now: datetime | None = None
) -> tuple[QuerySet, QuerySet]:
    """The queries of the ids of the nodes not free for the period; one that has started by `now`
    (None: core.clock's) needs nodes available then."""
    # Unordered: the models' default orderings would join and sort thousands of rows for nothing.
    taken = Allocation.objects.filter(period__overlap=period(starts_at, ends_at)).order_by()
    out_of_use = unusable(started=starts_at <= (now or clock.now()))
    return taken.values_list("node_id"), out_of_use.values_list("id")


def unusable(*, started: bool) -> QuerySet:
    """The nodes that cannot serve a period that has started (not available) or a later one (out
    of service)."""
    # The states named, not excluded, so that node_state_idx finds the few such nodes.
    if started:
        # A node a remediation ladder is repairing waits for the ladder's verdict.
        return Node.objects.filter(Q(state__in=NOT_AVAILABLE_STATES) | Q(under_repair=True)).order_by()
    return Node.objects.filter(state__in=OUT_OF_SERVICE_STATES).order_by()


def ids_of(*querysets: QuerySet) -> list[int]:
    """The ids the one-column querysets select, read in one round trip as one array: thousands
    of rows through the ORM cost milliseconds on every placement, one array next to nothing."""
    return ids_of_each(querysets)[0]


def ids_of_each(*groups: Sequence[QuerySet]) -> list[list[int]]:
    """For each group of one-column querysets, the ids they select: one array a group, all in one
    round trip."""
    arrays: list[str] = []
    params: list[Any] = []  # the querysets' own, whatever they compare with
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


def tested_source() -> QuerySet:
    """The ids of the nodes with a recent long diagnostics pass."""
    return recently_passed_long_diagnostics().order_by().values_list("id")
