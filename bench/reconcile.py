"""One pass of the reservation reconciler at 1,000 and 10,000 live reservations.

Builds its own database (gpufleet_bench_reconcile) afresh for each size, with a private Redis
for the work the pass enqueues. Enrols a node for every other reservation plus a spare rack,
then writes the live reservations in bulk, in this order of ids: advance one-node bookings of
one tenant (half of them), each on a node for an hour after the reservation active there ends;
one-node reservations of the same tenant, active, one on every node but the spares; last, the
reservation of another tenant that lost its node (quarantined), degraded, with spare nodes free.
Times a first pass of reconcile_reservations(), which should heal that reservation, then the
passes after it (nothing is left to do), and counts their queries. Prints a table; run it on an
older checkout to compare.
Run from the repository root: .venv/bin/python -m bench.reconcile [--sizes 1000 10000] [--passes 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.placement import PG, run
from tests.support.processes import RedisServer
from tests.support.table import print_table

BENCH_DB = "gpufleet_bench_reconcile"
SPARE_NODES = 8

os.environ["DATABASE_URL"] = f"{PG}/{BENCH_DB}"
os.environ["DJANGO_SETTINGS_MODULE"] = "gpufleet.settings"


def drop_database() -> None:
    from django.db import connections

    connections.close_all()
    run("psql", f"{PG}/postgres", "-qc", f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def fresh_database() -> None:
    drop_database()
    for command in (["ensure_database"], ["migrate", "-v0"]):
        run(sys.executable, "manage.py", *command, env=os.environ)


def populate(live: int) -> int:
    """`live` live reservations as the module says; returns the degraded one's id.

    Bulk SQL, not the services: placing 10,000 reservations one by one is not what this
    measures. Every node move writes its audit row in the same transaction, as the trigger demands.
    """
    from django.db import connection, transaction
    from django.utils import timezone

    from core.topology import default_layout
    from fleet.inventory import records_from_layout
    from fleet.services import enrol_nodes

    active = live // 2
    pending = live - active - 1
    layout = default_layout(active + SPARE_NODES)
    enrol_nodes(records=records_from_layout(layout, "http://127.0.0.1:8100"), actor="bench")
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:

        def sql(statement: str, params=()) -> None:
            cursor.execute(statement, params)

        def move(event: str, old: str, new: str, where: str = "true", sets: str = "") -> None:
            nodes = f"FROM fleet_node n WHERE state = %s AND {where}"
            sql(
                "INSERT INTO fleet_auditevent (actor, event, from_state, to_state, reason, detail, node_id)"
                f" SELECT 'bench', %s, %s, %s, 'bench setup', '{{}}', n.id {nodes}",
                [event, old, new, old],
            )
            sql(
                f"UPDATE fleet_node n SET state = %s, state_since = now() {sets} WHERE state = %s AND {where}",
                [new, old],
            )

        def reserve(tenant: str, state: str, count: int, starts: str, ends: str, params, reason: str = "") -> None:
            """`count` reservations of one node each, numbered g from 0; `starts` and `ends` are SQL of g."""
            sql(
                "INSERT INTO reservations_reservation (tenant_id, state, node_count, rack_scale, starts_at, ends_at,"
                f" reason, placement, created_at) SELECT t.id, %s, 1, false, {starts}, {ends}, %s, '', now()"
                " FROM reservations_tenant t, generate_series(0, %s - 1) g WHERE t.name = %s ORDER BY g",
                [state, *params, reason, count, tenant],
            )

        def hold(state: str, node: str) -> None:
            """Allocations for the reservations in `state` over their periods, the k-th by id on node `node`."""
            sql(
                "INSERT INTO reservations_allocation (reservation_id, node_id, period, ended_reason)"
                " SELECT r.id, n.id, tstzrange(r.starts_at, r.ends_at), '' FROM"
                " (SELECT *, row_number() OVER (ORDER BY id) - 1 AS k FROM reservations_reservation WHERE state = %s) r"
                f" JOIN bench_node n ON n.i = {node}",
                [state],
            )

        move("inspection_started", "enrolled", "inspecting")
        move("attestation_passed", "inspecting", "available")
        sql("INSERT INTO reservations_tenant (name, created_at) VALUES ('booker', now()), ('victim', now())")
        # The nodes in name order, numbered from 0: reservations pick theirs by number.
        sql(
            "CREATE TEMPORARY TABLE bench_node AS SELECT id, row_number() OVER (ORDER BY name) - 1 AS i FROM fleet_node"
        )
        # Advance bookings first, so that they have the lowest ids: the g-th on active node
        # g mod `active`, for an hour, after the active reservations end.
        later = "%s + make_interval(hours => (g / %s)::int)"
        hour = f"{later} + interval '1 hour'"
        first = now + timedelta(days=31)
        reserve("booker", "pending", pending, later, hour, [first, active, first, active])
        hold("pending", f"r.k %% {active}")
        reserve("booker", "active", active, "%s", "%s", [now, now + timedelta(days=30)])
        hold("active", "r.k")
        sql(
            "CREATE TEMPORARY TABLE bench_serving AS SELECT a.node_id, r.id AS reservation_id, r.tenant_id"
            " FROM reservations_allocation a JOIN reservations_reservation r ON r.id = a.reservation_id"
            " WHERE r.state = 'active'"
        )
        sql("CREATE INDEX ON bench_serving (node_id)")
        serving = "(SELECT {} FROM bench_serving s WHERE s.node_id = n.id)"
        move(
            "provision_succeeded",
            "available",
            "active",
            "n.id IN (SELECT node_id FROM bench_serving)",
            f", tenant_id = {serving.format('tenant_id')}, reservation_id = {serving.format('reservation_id')},"
            " step = 'serving', step_since = now()",
        )
        # Last, the other tenant's: its node (the first spare) quarantined, its hold cut short.
        spare = f"n.id = (SELECT id FROM bench_node WHERE i = {active})"
        move("hardware_fault", "available", "quarantined", spare, ", quarantine_reason = 'hardware_fault: XID 79'")
        reason = "node lost; placing a replacement"
        day = [now - timedelta(days=1), now + timedelta(days=1)]
        reserve("victim", "degraded", 1, "%s", "%s", day, reason)
        sql("SELECT max(id) FROM reservations_reservation")
        (victim,) = cursor.fetchone()
        sql(
            "INSERT INTO reservations_allocation (reservation_id, node_id, period, ended_reason)"
            " SELECT %s, id, tstzrange(%s, %s), 'lost' FROM bench_node WHERE i = %s",
            [victim, now - timedelta(days=1), now - timedelta(hours=1), active],
        )
        sql("ANALYZE")
    return victim


def measure(live: int, passes: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from fleet.models import Node
    from reservations import services
    from reservations.models import LIVE_STATES, Reservation

    victim = populate(live)
    assert Reservation.objects.filter(state__in=LIVE_STATES).count() == live
    with CaptureQueriesContext(connection) as first_queries:
        began = time.perf_counter()
        services.reconcile_reservations()
        first = time.perf_counter() - began
    healed = Node.objects.filter(reservation_id=victim).exists()
    quiet, quiet_queries = [], 0
    for _ in range(passes):
        with CaptureQueriesContext(connection) as captured:
            began = time.perf_counter()
            services.reconcile_reservations()
            quiet.append(time.perf_counter() - began)
        quiet_queries = len(captured)
    return {
        "live": live,
        "first": first,
        "first_queries": len(first_queries),
        "healed": healed,
        "quiet": statistics.median(quiet),
        "quiet_queries": quiet_queries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--passes", type=int, default=5, help="passes timed after the first")
    args = parser.parse_args()

    redis_server = RedisServer(Path(tempfile.mkdtemp(prefix="bench-reconcile-")))
    os.environ["REDIS_URL"] = redis_server.url
    import django

    django.setup()
    rows = []
    try:
        for live in args.sizes:
            print(f"{live} live reservations ...", file=sys.stderr)
            fresh_database()
            figures = measure(live, args.passes)
            rows += [
                (
                    f"{live} live: first pass, ms (queries)",
                    f"{figures['first'] * 1000:.0f} ({figures['first_queries']})",
                ),
                (f"{live} live: degraded reservation healed by it", "yes" if figures["healed"] else "NO"),
                (
                    f"{live} live: the passes after it, median ms (queries)",
                    f"{figures['quiet'] * 1000:.0f} ({figures['quiet_queries']})",
                ),
            ]
    finally:
        drop_database()
        redis_server.stop()
    print_table(rows)


if __name__ == "__main__":
    main()
