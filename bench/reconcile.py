"""Every reconciler beat runs, at a fleet of N nodes with R live reservations: 10,000 nodes with
3,000 reservations and 100,000 with 30,000 unless told otherwise.

Builds its own database (gpufleet_bench_reconcile) afresh for each size, with a private Redis
for the work the passes enqueue. Enrols N nodes, all available, then writes the R live
reservations in bulk, in this order of ids: advance one-node bookings of one tenant (half of
them), each on a node for an hour after the reservation active there ends; one-node reservations
of the same tenant, active, one on each of the first R/2 nodes; last, the reservation of another
tenant that lost its node (quarantined), degraded, with the rest of the fleet free.
Times a first pass of each reconciler (the workflows.tasks beat sends to the reconcile queue, in
process), in which reconcile_reservations should heal that reservation, then the median of the
passes after it, and counts their queries. Target: a steady pass of each at most TARGET_MS at the
largest size; the table says whether each is met (exit 1 if not, unless --no-target).
Run from the repository root: .venv/bin/python -m bench.reconcile [--nodes 10000 100000]
[--reservations 3000 30000] [--passes 5] [--no-target]
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
TARGET_MS = 150
# The workflows.tasks beat sends to the reconcile queue (gpufleet/settings.py), in beat's order.
RECONCILERS = (
    "reconcile_nodes",
    "reconcile_reservations",
    "reconcile_remediations",
    "reconcile_power_actions",
    "reconcile_idle_diagnostics",
    "advance_firmware_rollouts",
)

os.environ["DATABASE_URL"] = database_url(BENCH_DB)
os.environ["DJANGO_SETTINGS_MODULE"] = "gpufleet.settings"


def recreate_database() -> None:
    """A fresh database for the next size, once this process's connection to the last is closed."""
    from django.db import connections

    connections.close_all()
    fresh_database(BENCH_DB)


def populate(fleet: int, live: int) -> int:
    """`fleet` nodes and `live` live reservations as the module says; returns the degraded one's id.

    In bulk through the models, not the services: placing 30,000 reservations one by one is not
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
    enrol_nodes(records=records_from_layout(default_layout(fleet), "http://127.0.0.1:8100"), actor="bench")
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
        # Last, the other tenant's: its node (the first after the active ones) quarantined, its hold cut short.
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


def timed(reconcile) -> tuple[float, int]:
    """One call's seconds and queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        began = time.perf_counter()
        reconcile()
        return time.perf_counter() - began, len(captured)


def measure(fleet: int, live: int, passes: int) -> dict:
    """Each reconciler's first pass and the median of `passes` after it (seconds, queries), beat's
    reconcilers in turn each pass; and whether the first healed the degraded reservation."""
    from fleet.models import Node
    from reservations.models import LIVE_STATES, Reservation
    from workflows import tasks

    began = time.perf_counter()
    victim = populate(fleet, live)
    print(f"  built in {time.perf_counter() - began:.0f} s", file=sys.stderr)
    assert Node.objects.count() == fleet
    assert Reservation.objects.filter(state__in=LIVE_STATES).count() == live
    first = {name: timed(getattr(tasks, name)) for name in RECONCILERS}
    healed = Node.objects.filter(reservation_id=victim).exists()
    later: dict[str, list[tuple[float, int]]] = {name: [] for name in RECONCILERS}
    for _ in range(passes):
        for name in RECONCILERS:
            later[name].append(timed(getattr(tasks, name)))
    steady = {name: (statistics.median(s for s, _ in each), max(q for _, q in each)) for name, each in later.items()}
    return {"first": first, "steady": steady, "healed": healed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000], help="the fleet, at each size")
    parser.add_argument(
        "--reservations", type=int, nargs="+", default=[3000, 30_000], help="the live reservations, at each size"
    )
    parser.add_argument("--passes", type=int, default=5, help="passes timed after the first")
    parser.add_argument("--no-target", action="store_true", help="exit 0 though the time target is missed")
    args = parser.parse_args()
    if len(args.nodes) != len(args.reservations):
        parser.error("give as many --reservations as --nodes: one of each per size")
    for fleet, live in zip(args.nodes, args.reservations, strict=True):
        if live < 3 or fleet < live // 2 + 2:
            parser.error(
                f"{fleet} nodes, {live} reservations: needs 3 reservations or more, and half as many nodes and 2"
            )

    redis_server = RedisServer(Path(tempfile.mkdtemp(prefix="bench-reconcile-")))
    os.environ["REDIS_URL"] = redis_server.url
    import django

    django.setup()
    rows: list[tuple[str, object]] = []
    try:
        for fleet, live in zip(args.nodes, args.reservations, strict=True):
            print(f"{fleet} nodes, {live} live reservations ...", file=sys.stderr)
            recreate_database()
            figures = measure(fleet, live, args.passes)
            size = f"{fleet} nodes, {live} live"
            for name in RECONCILERS:
                (first, first_queries), (steady, steady_queries) = figures["first"][name], figures["steady"][name]
                rows.append(
                    (
                        f"{size}: {name}, first / later ms (queries)",
                        f"{first * 1000:.0f} ({first_queries}) / {steady * 1000:.0f} ({steady_queries})",
                    )
                )
            rows.append(
                (f"{size}: every reconciler, later ms", f"{sum(s for s, _ in figures['steady'].values()) * 1000:.0f}")
            )
            rows.append(
                (f"{size}: degraded reservation healed by the first pass", "yes" if figures["healed"] else "NO")
            )
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(BENCH_DB)
        redis_server.stop()
    print_table(rows)
    slowest = max(figures["steady"], key=lambda name: figures["steady"][name][0])
    slowest_ms = figures["steady"][slowest][0] * 1000
    met = slowest_ms <= TARGET_MS and figures["healed"]
    print(
        f"\ntarget: each reconciler's later pass <= {TARGET_MS} ms at {fleet} nodes, {live} live: "
        f"{'met' if met else 'MISSED'} (slowest {slowest}, {slowest_ms:.0f} ms)"
    )
    return 0 if met or args.no_target else 1


if __name__ == "__main__":
    sys.exit(main())
