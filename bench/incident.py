"""Fault -> healthy for each rung of the remediation ladder, and fault -> quarantine, through the
agent's push path and the real Prometheus and Alertmanager.

Starts everything as the end-to-end tests do (bmcsim reporting XIDs to the control plane,
gunicorn, two Celery workers, beat, Prometheus, Alertmanager) on its own database
(gpufleet_bench_incident), once with the demo's 1 s scrape and evaluation intervals and once with
a production 15 s. In each, `--runs` rounds on a warm stack, then as many each right after the
whole stack was restarted (Prometheus keeping its series). A round injects, at once, on five
nodes:
- XID 109 that a GPU reset clears (gpu_hang: GPU reset), on an idle node;
- XID 79 that a reboot clears (gpu_lost: reboot), on an idle node;
- XID 79 that a power cycle clears (gpu_lost: reboot, then power cycle), on an idle node;
- XID 140 (hardware_failed: quarantine at once), on a tenant's node;
- XID 79 that nothing clears (gpu_lost: reboot, power cycle, quarantine), on a tenant's node,
and times each from injection to healthy (the remediation repaired) or quarantined, then the
tenant's reservation active again. Simulated time runs at SIM_TIME_SCALE=0 (instant reboots), so
the figures are the control plane's own. Prints the median and the worst of each, per cell.
Run from the repository root:
.venv/bin/python -m bench.incident [--runs 5] [--restarts RUNS] [--intervals 1s,15s] [--nodes 48]
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
from tests.support.table import print_table

BENCH_DB = bench_database("incident")
os.environ.update(DJANGO_SETTINGS_MODULE="gpufleet.settings", DATABASE_URL=database_url(BENCH_DB))

# name, XID, what clears it, on a tenant's node, the outcome awaited
FAULTS = (
    ("GPU reset", 109, "gpu_reset", False, "repaired"),
    ("reboot", 79, "reboot", False, "repaired"),
    ("power cycle", 79, "power_cycle", False, "repaired"),
    ("quarantine at once (XID 140)", 140, "never", True, "quarantined"),
    ("dead GPU: reboot, power cycle, quarantine", 79, "never", True, "quarantined"),
)
QUARANTINE_TARGET_S = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds on a warm stack")
    parser.add_argument(
        "--restarts", type=int, help="rounds each right after the whole stack restarted (default: as many as --runs)"
    )
    parser.add_argument("--intervals", default="1s,15s", help="Prometheus scrape and evaluation intervals")
    parser.add_argument("--nodes", type=int, default=48, help="bmcsim's; five take faults in each round")
    args = parser.parse_args()
    restarts = args.runs if args.restarts is None else args.restarts

    import django

    django.setup()
    from django.db import connections

    cells = {}
    try:
        for interval in args.intervals.split(","):
            connections.close_all()
            fresh_database(BENCH_DB)  # a fresh fleet for every interval
            cells.update(measure(interval, args.runs, restarts, args.nodes))
    finally:
        connections.close_all()
        drop_database(BENCH_DB)
    report(cells, args.runs, restarts)


def measure(interval: str, runs: int, restarts: int, nodes: int) -> dict[tuple[str, str, str], list[float]]:

    from fleet.models import Node
    from reservations import services as reservations
    from reservations.models import Reservation, Tenant
    from tests.support.bmcsim import start_bmcsim
    from tests.support.ports import free_port
    from tests.support.processes import RedisServer, wait_for
    from tests.support.stack import ControlPlane

    scratch = Path(tempfile.mkdtemp(prefix="bench-incident-"))
    web_port = free_port()
    bmcsim = start_bmcsim(scratch / "bmcsim", nodes=nodes, control_plane_url=f"http://127.0.0.1:{web_port}")
    redis_server = RedisServer(scratch)
    plane = ControlPlane(
        scratch,
        bmcsim.url,
        redis_server,
        web_port=web_port,
        scrape_interval=interval,
        # Every round faults nodes anew, the tenant's among them: no cap or budget may hold a remediation back.
        GPUFLEET_REMEDIATION_CAP="1000",
        GPUFLEET_REMEDIATION_POD_CAP="1000",
        GPUFLEET_TENANT_FAULT_BUDGET="1000",
    )
    cells: dict[tuple[str, str, str], list[float]] = {}
    try:
        monitoring = plane.start_stack()
        total = Node.objects.count()
        wait_for("every node available", lambda: Node.objects.filter(state="available").count() == total, 300)
        reservation = reservations.create_reservation(
            tenant=Tenant.objects.create(name="bench"), node_count=2, actor="bench"
        )

        def tenant_active() -> bool:
            return Reservation.objects.values_list("state", flat=True).get(pk=reservation.pk) == "active"

        wait_for("the reservation active", tenant_active, 120)
        wait_for("Prometheus scraping every agent", lambda: monitoring.active_targets() == total, 120)

        for stack, rounds in (("warm", runs), ("just restarted", restarts)):
            for run in range(rounds):
                if stack == "just restarted":
                    plane.restart_stack()
                wait_for("the reservation active", tenant_active, 120)
                done, injected_at = play_round(bmcsim, reservation, run)
                wait_for("the reservation active again", tenant_active, 180, interval=0.05)
                done["the tenant's reservation active again"] = time.monotonic() - injected_at
                for name, seconds in done.items():
                    cells.setdefault((interval, stack, name), []).append(seconds)
                summary = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in done.items())
                print(f"{interval} {stack} run {run + 1}: {summary}", file=sys.stderr)
                bmcsim.delete("/bmcsim/v1/faults")
    finally:
        plane.stop()
        redis_server.stop()
        bmcsim.stop()
    return cells


def play_round(bmcsim, reservation, run: int) -> tuple[dict[str, float], float]:
    """Inject every fault of FAULTS at once, each on a node of its own: the seconds to each
    outcome, and when the first was injected."""
    from django.db.models import Count, Max, Q

    from fleet.models import Node
    from remediation.models import Remediation
    from tests.support.processes import wait_for

    # The least remediated: a third remediation within a week would quarantine a repeat offender.
    acted = Count("remediations", filter=~Q(remediations__status="no_action"))
    idle = list(
        Node.objects.filter(state="available", reservation=None).annotate(acted=acted).order_by("acted", "?")[:3]
    )
    tenants = list(Node.objects.filter(reservation=reservation, state="active").order_by("name"))
    last = Remediation.objects.aggregate(last=Max("pk"))["last"] or 0
    injected = {}
    for (name, xid, clears, _, outcome), victim in zip(FAULTS, idle + tenants, strict=True):
        fault = {"node": victim.name, "kind": "xid", "gpu": run % 8, "xid": xid, "clears": clears}
        bmcsim.post("/bmcsim/v1/faults", json=fault)
        injected[name] = (victim, outcome, time.monotonic())
    done: dict[str, float] = {}

    def reached(name: str) -> bool:
        victim, outcome, at = injected[name]
        if name not in done:
            if outcome == "quarantined":
                there = Node.objects.filter(pk=victim.pk, state="quarantined").exists()
            else:
                there = Remediation.objects.filter(node=victim, pk__gt=last, status="repaired").exists()
            if there:
                done[name] = time.monotonic() - at
        return name in done

    try:
        wait_for("every outcome", lambda: all([reached(name) for name in injected]), 180, interval=0.02)
    except AssertionError:
        missing = {f"{name} on {injected[name][0].name}" for name in injected if name not in done}
        raise AssertionError(f"no outcome after 180 s for: {', '.join(sorted(missing))}") from None
    return done, min(at for _, _, at in injected.values())


def report(cells: dict[tuple[str, str, str], list[float]], runs: int, restarts: int) -> None:
    rows = [
        ("runs per cell, warm / just restarted", f"{runs} / {restarts}"),
        ("simulated time", "SIM_TIME_SCALE=0: reboots and resets are instant"),
    ]
    for (interval, stack, name), seconds in cells.items():
        median = statistics.median(seconds)
        quarantine = name.startswith("quarantine at once")
        target = f"  (target < {QUARANTINE_TARGET_S:g})" if quarantine else ""
        verdict = ("  met" if median < QUARANTINE_TARGET_S else "  MISSED") if quarantine else ""
        outcome = next((f[4] for f in FAULTS if f[0] == name), "")
        label = f"{interval} scrape, {stack}: {name}" + (f" -> {outcome}" if outcome else "")
        rows.append((f"{label}, median / worst s", f"{median:.2f} / {max(seconds):.2f}{target}{verdict}"))
    print_table(rows)


if __name__ == "__main__":
    main()
