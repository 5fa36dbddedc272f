"""The fleet floor's server time and query count at 50, 1,000, 10,000 and 100,000 nodes.

Builds its own database (gpufleet_bench_dashboard) afresh for each size, enrols the default
topology, puts the fleet in a busy mix of states (tenants on a third of it, some nodes wiping,
inspecting, quarantined, in maintenance), then requests the floor through Django's whole stack
(middleware, view, template) in this process, as a signed-in operator: the full page and the
fragment htmx polls, on an unchanged fleet (what the process keeps kept: the floor's counts and
capacity_by_pod's answer); then the fragment with a node's state changed before each request, as
on a busy fleet (both counted again), and capacity_by_pod() alone after a change: its share of that.
Prints a table; the target (issue #38) is <= 200 ms for the page at 100,000 nodes (at the largest
size asked) and the same query count at every size.
Run from the repository root: .venv/bin/python -m bench.dashboard [--sizes 50 1000 10000 100000]
[--requests 20] [--no-target]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from bench._database import bench_database, database_url, drop_database, fresh_database

BENCH_DB = bench_database("dashboard")
TARGET_MS = 200

os.environ["DATABASE_URL"] = database_url(BENCH_DB)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpufleet.settings")
# whitenoise notes that collectstatic has not run: the pages do not need it (it finds app files).
warnings.filterwarnings("ignore", message="No directory at")

# Share of the fleet in each state, the rest available: (state, event into it, share).
MIX = [
    ("active", "provision_succeeded", 0.33),
    ("wiping", "released", 0.03),
    ("inspecting", "inspection_started", 0.02),
    ("quarantined", "hardware_fault", 0.01),
    ("maintenance", "operator_maintenance", 0.005),
]


def recreate_database() -> None:
    """A fresh database for the next size, once this process's connection to the last is closed."""
    from django.db import connections

    connections.close_all()
    fresh_database(BENCH_DB)


def build_fleet(size: int) -> None:
    """Enrol `size` nodes, pass them all, then move shares of them into the other states.

    Inspection and provisioning are not what this measures: the moves are in bulk (bench/_fleet.py).
    """
    from django.db.models.functions import Now

    from bench._fleet import make_all_available, move_nodes
    from core.topology import default_layout
    from fleet.inventory import records_from_layout
    from fleet.models import Node
    from fleet.services import enrol_nodes
    from reservations.models import Reservation, Tenant

    enrol_nodes(records=records_from_layout(default_layout(size), "http://127.0.0.1:8100"), actor="bench")
    tenant = Tenant.objects.create(name="bench-tenant")
    reservation = Reservation.objects.create(tenant=tenant, node_count=size, state="active")
    make_all_available()
    # What each state needs beside itself (the database's CHECK constraints): a tenant, a reason.
    extra: dict[str, dict[str, Any]] = {
        "active": {"tenant": tenant, "reservation": reservation, "step": "serving", "step_since": Now()},
        "wiping": {"tenant": tenant, "step": "secure erase", "step_since": Now()},
        "quarantined": {"quarantine_reason": "hardware_fault: XID 79 on GPU 3"},
    }
    in_name_order = list(Node.objects.order_by("name").values_list("pk", flat=True))
    start = 0
    for state, event, share in MIX:
        count = max(1, round(size * share))
        move_nodes(
            Node.objects.filter(pk__in=in_name_order[start : start + count]), event, state, **extra.get(state, {})
        )
        start += count


def measure(size: int, requests: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from bench._fleet import move_nodes
    from fleet.models import Node
    from reservations.selectors import capacity_by_pod

    client = Client(HTTP_HOST="127.0.0.1")
    # The floor is an operator's: anyone else is sent to the login page.
    client.force_login(get_user_model().objects.create_user("bench-operator", is_staff=True))
    # Before each request of a busy fleet's rows, a node put into maintenance, or passed back.
    toggled = Node.objects.filter(state="available").earliest("name").pk
    moves = itertools.cycle([("operator_maintenance", "maintenance"), ("attestation_passed", "available")])

    def change_a_node() -> None:
        move_nodes(Node.objects.filter(pk=toggled), *next(moves))

    def floor(headers: dict[str, str]) -> Callable[[], bytes | None]:
        def get() -> bytes:
            response = client.get("/", headers=headers)
            if response.status_code != 200:
                raise SystemExit(f"GET / answered {response.status_code}: are the pages in gpufleet/urls.py?")
            return response.content

        return get

    def capacity() -> None:
        capacity_by_pod()  # as the floor calls it

    figures: dict[str, object] = {"size": size}
    for kind, call, before in (
        ("page", floor({}), None),
        ("fragment", floor({"HX-Request": "true"}), None),
        ("changed", floor({"HX-Request": "true"}), change_a_node),
        ("capacity", capacity, change_a_node),
    ):
        content = call()  # warm: placement reads the topology once per process
        if before:
            before()
        with CaptureQueriesContext(connection) as captured:
            call()
        queries = len(captured)  # now: the next request empties the connection's query log
        times = []
        for _ in range(requests):
            if before:
                before()
            began = time.perf_counter()
            content = call()
            times.append((time.perf_counter() - began) * 1000)
        figures[kind] = {
            "median": statistics.median(times),
            "p95": sorted(times)[int(0.95 * (len(times) - 1))],
            "queries": queries,
            "kib": len(content or b"") / 1024,
            "layout": "" if content is None else "collapsed" if b'class="racks collapsed"' in content else "tiles",
        }
    return figures


# The table's rows for each size: (figures' key, what the row says).
ROWS = (
    ("page", "page"),
    ("fragment", "fragment"),
    ("changed", "fragment, a node changed"),
    ("capacity", "  its capacity_by_pod()"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 1000, 10000, 100000])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--no-target", action="store_true", help="exit 0 though the time target is missed")
    args = parser.parse_args()

    import django

    django.setup()
    rows = []
    try:
        for size in args.sizes:
            recreate_database()
            began = time.perf_counter()
            build_fleet(size)
            print(f"{size} nodes built in {time.perf_counter() - began:.1f} s", file=sys.stderr)
            rows.append(measure(size, args.requests))
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(BENCH_DB)

    print(f"\nGET / (the fleet floor), {args.requests} requests each, in-process through Django's whole stack")
    print(f"{'nodes':>7} {'view':<33} {'racks':<10} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'KiB':>7}")
    for row in rows:
        for kind, label in ROWS:
            f = row[kind]
            print(
                f"{row['size']:>7} {label:<33} {f['layout']:<10} {f['median']:>8.1f} {f['p95']:>8.1f} "
                f"{f['queries']:>8} {f['kib']:>7.0f}"
            )
    largest = rows[-1]
    # Per kind: what is counted again differs between them, never between sizes.
    same_queries = all(len({row[kind]["queries"] for row in rows}) == 1 for kind, _ in ROWS)
    fast = largest["page"]["median"] <= TARGET_MS
    print(
        f"\ntarget <= {TARGET_MS} ms for the page at 100000 nodes, here {largest['size']}: "
        f"{'met' if fast else 'MISSED'} ({largest['page']['median']:.1f} ms); "
        f"same query count at every size: {'yes' if same_queries else 'NO'}"
    )
    return 0 if same_queries and (fast or args.no_target) else 1


if __name__ == "__main__":
    sys.exit(main())
