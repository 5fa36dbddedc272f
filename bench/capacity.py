"""GET /v1/capacity in process at 1,000, 10,000 and 100,000 nodes: a miss (the capacity version
has just moved, so the answer is counted over every rack and rendered again) and a hit (nothing
changed: one query for the versions, and the kept JSON), p50 and p99.

For each size, builds its own database (GPUFLEET_BENCH_DATABASE, gpufleet_bench by default) with
10 pods as bench/placement.py does, holds 60 % of the racks from an hour ago for a day and every
seventh node from tomorrow for a day, then times the view through Django's test client in a fresh
process (whose kept answers are the new database's alone).
Run from the repository root: .venv/bin/python -m bench.capacity [--nodes N ...] [--misses N] [--hits N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.placement import BENCH_DB, PG, percentile, prepare_fleet, run
from tests.support.table import print_table

# 60 % of the racks held now, and every seventh node booked from tomorrow: counted free now, not
# for as long as a reservation without an end.
HOLDS = [
    "INSERT INTO reservations_allocation (reservation_id, node_id, period, ended_reason)"
    " SELECT %s, id, tstzrange(now() - interval '1 hour', now() + interval '1 day'), ''"
    " FROM fleet_node WHERE rack_id %% 5 < 3",
    "INSERT INTO reservations_allocation (reservation_id, node_id, period, ended_reason)"
    " SELECT %s, id, tstzrange(now() + interval '1 day', now() + interval '2 days'), ''"
    " FROM fleet_node WHERE id %% 7 = 0",
]


def measure(misses: int, hits: int) -> dict:
    """In the bench database's process: hold nodes, then time misses and hits of the view."""
    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    from reservations.models import Reservation, Tenant

    tenant = Tenant.objects.create(name="bench")
    with connection.cursor() as cursor:
        for sql in HOLDS:
            cursor.execute(sql, [Reservation.objects.create(tenant=tenant, node_count=1).pk])

    client = Client(HTTP_HOST="localhost")

    def timed_read() -> tuple[float, int]:
        started = time.perf_counter()
        answer = client.get("/v1/capacity")
        elapsed = (time.perf_counter() - started) * 1000
        assert answer.status_code == 200, answer.status_code
        return elapsed, len(answer.content)

    timed_read()  # the topology, read once per process, is no part of a miss
    miss_ms = []
    for _ in range(misses):
        with connection.cursor() as cursor:
            cursor.execute("SELECT nextval('reservations_capacity_version_seq')")  # as any write would
        miss_ms.append(timed_read()[0])
    hit_ms, size = zip(*(timed_read() for _ in range(hits)), strict=True)
    return {"miss_ms": miss_ms, "hit_ms": hit_ms, "bytes": size[0]}


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

    env = {**os.environ, "DATABASE_URL": f"{PG}/{BENCH_DB}", "DJANGO_SETTINGS_MODULE": "gpufleet.settings"}
    rows = []
    for nodes in args.nodes:
        print(f"preparing a {nodes}-node fleet in {args.pods} pods ...", file=sys.stderr)
        prepare_fleet(env, nodes, args.pods)
        print(f"{args.misses} misses, {args.hits} hits ...", file=sys.stderr)
        child = [sys.executable, "-m", "bench.capacity", "--measure", "--misses", str(args.misses)]
        figures = json.loads(run(*child, "--hits", str(args.hits), env=env).stdout)
        miss, hit = figures["miss_ms"], figures["hit_ms"]
        rows += [
            (f"{nodes:,} nodes: miss p50 / p99 ms", f"{percentile(miss, 50):.2f} / {percentile(miss, 99):.2f}"),
            (f"{nodes:,} nodes: hit p50 / p99 ms", f"{percentile(hit, 50):.3f} / {percentile(hit, 99):.3f}"),
            (f"{nodes:,} nodes: answer", f"{figures['bytes'] / 1024:,.0f} KiB"),
        ]
    print_table(rows)


if __name__ == "__main__":
    main()
