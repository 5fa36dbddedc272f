"""Fault -> quarantine -> replacement through the real Prometheus and Alertmanager, demo configs.

Starts everything as the end-to-end tests do (bmcsim, gunicorn, two Celery workers, beat,
Prometheus, Alertmanager) on its own database (gpufleet_bench_incident), reserves 4 nodes in
p2, then 5 times injects XID 79 on one of the reservation's nodes and times: injection ->
quarantined, quarantined -> replacement placed, -> reservation active again. Prints the
median and the worst of each.
Run from the repository root: .venv/bin/python -m bench.incident [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.table import print_table

os.environ.update(
    DJANGO_SETTINGS_MODULE="gpufleet.settings",
    DATABASE_URL="postgres://postgres@127.0.0.1:5432/gpufleet_bench_incident",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    from io import StringIO

    from django.core.management import call_command

    from fleet.models import Node, Pod
    from reservations import services as reservations
    from reservations.models import Reservation, ReservationEvent, Tenant
    from tests.support.bmcsim import start_bmcsim
    from tests.support.processes import RedisServer, wait_for
    from tests.support.stack import ControlPlane

    scratch = Path(tempfile.mkdtemp(prefix="bench-incident-"))
    call_command("ensure_database", stdout=StringIO())
    from django.db import connection

    with connection.cursor() as cursor:  # a fresh start for every run of the benchmark
        cursor.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    call_command("migrate", verbosity=0)
    bmcsim = start_bmcsim(scratch / "bmcsim", nodes=32)
    redis_server = RedisServer(scratch)
    plane = ControlPlane(
        scratch, bmcsim.url, redis_server, GPUFLEET_REMEDIATION_CAP="100", GPUFLEET_REMEDIATION_POD_CAP="100"
    )
    try:
        monitoring = plane.start_stack()
        total = Node.objects.count()
        wait_for("every node available", lambda: Node.objects.filter(state="available").count() == total, 300)
        reservation = reservations.create_reservation(
            tenant=Tenant.objects.create(name="bench"), node_count=4, pod=Pod.objects.get(name="p2"), actor="bench"
        )

        def state() -> str:
            return Reservation.objects.values_list("state", flat=True).get(pk=reservation.pk)

        wait_for("the reservation active", lambda: state() == "active", 120)

        def incident(run: int) -> tuple[float, float, float]:
            serving = Node.objects.filter(reservation=reservation, state="active")
            wait_for(
                "Prometheus scraping the tenant's nodes", lambda: monitoring.active_targets() >= serving.count(), 60
            )
            victim = serving.order_by("name").first()
            placed_events = ReservationEvent.objects.filter(reservation=reservation, event="replacement_placed")
            placed_before = placed_events.count()
            injected = time.monotonic()
            bmcsim.post("/bmcsim/v1/faults", json={"node": victim.name, "kind": "xid", "gpu": run % 8, "xid": 79})
            wait_for("quarantine", lambda: Node.objects.get(pk=victim.pk).state == "quarantined", 60, interval=0.02)
            quarantined = time.monotonic()
            wait_for("replacement placed", lambda: placed_events.count() > placed_before, 60, interval=0.02)
            placed = time.monotonic()
            wait_for("reservation active", lambda: state() == "active", 120, interval=0.05)
            print(f"run {run + 1}: {victim.name} quarantined in {quarantined - injected:.2f} s", file=sys.stderr)
            return quarantined - injected, placed - quarantined, time.monotonic() - injected

        to_quarantine, to_placed, to_active = zip(*(incident(run) for run in range(args.runs)), strict=True)
    finally:
        plane.stop()
        redis_server.stop()
        bmcsim.stop()

    rows = [
        ("runs", str(args.runs)),
        (
            "XID 79 -> quarantined, median / worst s",
            f"{statistics.median(to_quarantine):.2f} / {max(to_quarantine):.2f}  (target <= 10; seed 88)",
        ),
        (
            "quarantined -> replacement placed, median / worst s",
            f"{statistics.median(to_placed):.2f} / {max(to_placed):.2f}  (target <= 1; seed 2)",
        ),
        ("XID 79 -> reservation active again, median s", f"{statistics.median(to_active):.2f}"),
        ("intervals", "scrape 1 s, rule evaluation 1 s, Alertmanager group_wait 0 s"),
    ]
    print_table(rows)


if __name__ == "__main__":
    main()
