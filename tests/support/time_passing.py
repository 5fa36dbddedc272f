"""Letting time pass without sleeping: what a wait would have done, done to the rows instead.

A pass or service that takes `now` is handed a later one (core.clock, docs/development.md "One
clock"); what is read through the API, a page or a worker's claim compares with the database's
clock, so these move the rows it compares into the past instead.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.db.models import F

from fleet.models import AuditEvent, Node
from reservations.models import Allocation, Reservation, ReservationEvent

# The history tables' append-only triggers (fleet 0003, reservations 0002), off while a test ages them.
_APPEND_ONLY = {
    "fleet_auditevent": "fleet_audit_append_only",
    "reservations_reservationevent": "reservation_history_append_only",
}


def lease_runs_out(node: Node, *, after: timedelta) -> None:
    """What waiting `after` (at least as long as the lease or the parked node's hold) did: the
    node's lease ends that much earlier, so it has run out and the node may be claimed."""
    Node.objects.filter(pk=node.pk).update(lease_expires_at=F("lease_expires_at") - after)


def reservation_ages(reservation: Reservation, *, by: timedelta) -> None:
    """What waiting `by` did to what the reservation's usage is read from: its holds, its own
    history and its nodes' state changes all happened `by` earlier."""
    nodes = Allocation.objects.filter(reservation=reservation).values("node_id")
    # One savepoint: if anything fails, the triggers are back on with the rest undone.
    with transaction.atomic(), connection.cursor() as cursor:
        # A table with checks still pending (Django's foreign keys are deferred) cannot be altered.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for table, trigger in _APPEND_ONLY.items():
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        AuditEvent.objects.filter(node_id__in=nodes).update(at=F("at") - by)
        ReservationEvent.objects.filter(reservation=reservation).update(at=F("at") - by)
        cursor.execute(
            "UPDATE reservations_allocation"
            " SET period = tstzrange(lower(period) - e.shift, upper(period) - e.shift, '[)')"
            " FROM (SELECT make_interval(secs => %s) AS shift) e WHERE reservation_id = %s AND NOT isempty(period)",
            [by.total_seconds(), reservation.pk],
        )
        for table, trigger in _APPEND_ONLY.items():
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")  # as they were: every deferrable one is initially deferred
