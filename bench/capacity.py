"""GET /v1/capacity in process at 1,000, 10,000 and 100,000 nodes: a miss (the capacity version
has just moved, so the nodes not free are read again, what changed is counted, and the answer
rendered again) and a hit (nothing changed: one query for the versions, and the kept JSON), p50
and p99, at the default depth (the answer says which). Target (issue #38): a miss at most
10 ms p50 at 100,000 nodes.

For each size, builds its own database (gpufleet_bench_capacity) with
10 pods as bench/placement.py does, holds 60 % of the racks from an hour ago for a day and every
seventh node from tomorrow for a day (then vacuums, as autovacuum would), then times the view
through Django's test client in a fresh process (whose kept answers are the new database's alone).
Run from the repository root: .venv/bin/python -m bench.capacity [--nodes N ...] [--misses N] [--hits N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench._database import bench_database, database_url, drop_database, run
from bench.placement import percentile, prepare_fleet
from tests.support.table import print_table

BENCH_DB = bench_database("capacity")
TARGET_NODES, TARGET_MISS_P50_MS = 100_000, 10.0


def hold_nodes() -> None:
    """60 % of the racks held now, and every seventh node booked from tomorrow: counted free now,
    not for as long as a reservation without an end."""
    from datetime import timedelta

    from django.db.models.functions import Mod
    from django.utils import timezone

    from fleet.models import Node
    from reservations.models import Allocation, Reservation, Tenant

    now, hour, day = timezone.now(), timedelta(hours=1), timedelta(days=1)
    racks_held = Node.objects.annotate(slot=Mod("rack_id", 5)).filter(slot__lt=3)
    booked = Node.objects.annotate(slot=Mod("pk", 7)).filter(slot=0)
    tenant = Tenant.objects.create(name="bench")
    for nodes, period in ((racks_held, (now - hour, now + day)), (booked, (now + day, now + 2 * day))):
        reservation = Reservation.objects.create(tenant=tenant, node_count=1)
        Allocation.objects.bulk_create(
            (
                Allocation(reservation=reservation, node_id=pk, period=period)
                for pk in nodes.values_list("pk", flat=True)
            ),
            batch_size=2000,
        )


def measure(misses: int, hits: int) -> dict:
    """In the bench database's process: hold nodes, then time misses and hits of the view."""
    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    hold_nodes()
    with connection.cursor() as cursor:
        # As autovacuum soon would after so many rows: the reads meet a settled table, planned from its statistics.
        cursor.execute("VACUUM ANALYZE reservations_allocation")
    client = Client(HTTP_HOST="localhost")

    def timed_read() -> tuple[float, bytes]:
        started = time.perf_counter()
        answer = client.get("/v1/capacity")
        elapsed = (time.perf_counter() - started) * 1000
        assert answer.status_code == 200, answer.status_code
        return elapsed, answer.content

    # The topology and the counts, built once per process, are no part of a miss.
    first_ms, content = timed_read()
    miss_ms = []
    for _ in range(misses):
        with connection.cursor() as cursor:
            cursor.execute("SELECT nextval('reservations_capacity_version_seq')")  # as any write would
        miss_ms.append(timed_read()[0])
    hit_ms = [timed_read()[0] for _ in range(hits)]
    return {
        "first_ms": first_ms,
        "miss_ms": miss_ms,
        "hit_ms": hit_ms,
        "bytes": len(content),
        "depth": json.loads(content)["depth"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--misses", type=int, default=30)
    parser.add_argument("--hits", type=int, default=2000)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.misses, args.hits)))
        return

    env = {**os.environ, "DATABASE_URL": database_url(BENCH_DB), "DJANGO_SETTINGS_MODULE": "gpufleet.settings"}
    rows = []
    for nodes in args.nodes:
        print(f"preparing a {nodes}-node fleet in {args.pods} pods ...", file=sys.stderr)
        try:
            prepare_fleet(env, nodes, args.pods)
            print(f"{args.misses} misses, {args.hits} hits ...", file=sys.stderr)
            child = [sys.executable, "-m", "bench.capacity", "--measure", "--misses", str(args.misses)]
            figures = json.loads(run(*child, "--hits", str(args.hits), env=env).stdout)
        finally:
            drop_database(BENCH_DB)
        miss, hit = figures["miss_ms"], figures["hit_ms"]
        rows += [
            (f"{nodes:,} nodes: first read ms", f"{figures['first_ms']:.0f}"),
            (f"{nodes:,} nodes: miss p50 / p99 ms", f"{percentile(miss, 50):.2f} / {percentile(miss, 99):.2f}"),
            (f"{nodes:,} nodes: hit p50 / p99 ms", f"{percentile(hit, 50):.3f} / {percentile(hit, 99):.3f}"),
            (f"{nodes:,} nodes: answer", f"{figures['bytes'] / 1024:,.1f} KiB, depth {figures['depth']}"),
        ]
        if nodes == TARGET_NODES:
            met = "met" if percentile(miss, 50) <= TARGET_MISS_P50_MS else "NOT met"
            rows.append((f"target: miss p50 <= {TARGET_MISS_P50_MS:.0f} ms at {nodes:,} nodes", met))
    if TARGET_NODES not in args.nodes:
        rows.append((f"target: miss p50 <= {TARGET_MISS_P50_MS:.0f} ms at {TARGET_NODES:,} nodes", "not measured"))
    print_table(rows)


if __name__ == "__main__":
    main()
