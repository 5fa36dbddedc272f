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
from pathlib import Path

from bench._database import bench_database, database_url, drop_database, fresh_database
from tests.support.processes import RedisServer
from tests.support.table import print_table

BENCH_DB = bench_database("reconcile")
SPARE_NODES = 8

os.environ["DATABASE_URL"] = database_url(BENCH_DB)
os.environ["DJANGO_SETTINGS_MODULE"] = "gpufleet.settings"


def recreate_database() -> None:
    """A fresh database for the next size, once this process's connection to the last is closed."""
    from django.db import connections

    connections.close_all()
    fresh_database(BENCH_DB)


def populate(live: int) -> int:
    """`live` live reservations as the module says; returns the degraded one's id.

    In bulk through the models, not the services: placing 10,000 reservations one by one is not
    what this measures.
    """
    from datetime import timedelta

    from django.db import connection, transaction
    from django.db.models import Exists, OuterRef, Subquery
    from django.db.models.functions import Now
    from django.utils import timezone

    from bench._fleet import make_all_available, move_nodes
    from core.topology import default_layout
    from fleet.inventory import records_from_layout
    from fleet.models import Node
    from fleet.services import enrol_nodes
    from reservations.models import Allocation, Reservation, Tenant

    active = live // 2
    pending = live - active - 1
    layout = default_layout(active + SPARE_NODES)
    enrol_nodes(records=records_from_layout(layout, "http://127.0.0.1:8100"), actor="bench")
    now = timezone.now()
    with transaction.atomic():
        make_all_available()
        booker, victim_tenant = (Tenant.objects.create(name=name) for name in ("booker", "victim"))
        # The nodes in name order: reservations pick theirs by number.
        nodes = list(Node.objects.order_by("name").values_list("pk", flat=True))

        def reserve(tenant: Tenant, state: str, periods: list[tuple], reason: str = "") -> list[Reservation]:
            """One-node reservations of `tenant`, one per period, their ids in the periods' order."""
            return Reservation.objects.bulk_create(
                [
                    Reservation(tenant=tenant, state=state, node_count=1, starts_at=starts, ends_at=ends, reason=reason)
                    for starts, ends in periods
                ],
                batch_size=2000,
            )

        def hold(reservations: list[Reservation], node_of) -> None:
            """An allocation for each reservation over its period, the k-th on node node_of(k)."""
            Allocation.objects.bulk_create(
                [
                    Allocation(reservation=r, node_id=nodes[node_of(k)], period=(r.starts_at, r.ends_at))
                    for k, r in enumerate(reservations)
                ],
                batch_size=2000,
            )

        # Advance bookings first, so that they have the lowest ids: the g-th on active node
        # g mod `active`, for an hour, after the active reservations end.
        first = now + timedelta(days=31)
        later = [first + timedelta(hours=g // active) for g in range(pending)]
        hold(reserve(booker, "pending", [(t, t + timedelta(hours=1)) for t in later]), lambda k: k % active)
        hold(reserve(booker, "active", [(now, now + timedelta(days=30))] * active), lambda k: k)
        serving = Allocation.objects.filter(node=OuterRef("pk"), reservation__state="active")
        move_nodes(
            Node.objects.filter(Exists(serving)),
            "provision_succeeded",
            "active",
            tenant=booker,
            reservation_id=Subquery(serving.values("reservation")[:1]),
            step="serving",
            step_since=Now(),
        )
        # Last, the other tenant's: its node (the first spare) quarantined, its hold cut short.
        lost = Node.objects.filter(pk=nodes[active])
        move_nodes(lost, "hardware_fault", "quarantined", quarantine_reason="hardware_fault: XID 79")
        day = (now - timedelta(days=1), now + timedelta(days=1))
        (victim,) = reserve(victim_tenant, "degraded", [day], "node lost; placing a replacement")
        Allocation.objects.create(
            reservation=victim, node_id=nodes[active], period=(day[0], now - timedelta(hours=1)), ended_reason="lost"
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return victim.pk


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
            recreate_database()
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
        from django.db import connections

        connections.close_all()
        drop_database(BENCH_DB)
        redis_server.stop()
    print_table(rows)


if __name__ == "__main__":
    main()
