"""Time from placement to every fabric membership confirmed, and the calls each fabric costs.

Builds its own database (gpufleet_bench_fabric) and Redis, starts bmcsim with 600 nodes in one
pod at SIM_TIME_SCALE=0 (NVUE per leaf switch, a UFM, an NMX-M per rack), enrols them and makes
them available. Then, for reservations of 1, 8, 64 and 512 nodes in turn, placed by the
reservation services: gives each node the reservation's networks and puts its attachments on them
(what provisioning's `join_tenant_networks` does), and times the syncer (workflows/fabric_sync.py,
with the drivers the workers use) until every membership is read back as configured; then
releases the reservation and times until every node's removal is read back. No worker runs: the
syncs are this process's. Calls are counted per fabric by the drivers' address
check, which core.outbound runs once per call; SQL statements (COMMITs aside) per node given, and
per sync. The target: a 64-node reservation confirmed in under 2 s, and calls and statements that
grow with the switches, fabrics and domains touched, not with ports.
Run from the repository root: .venv/bin/python -m bench.fabric [--sizes 1,8,64,512] [--nodes 600]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from ipaddress import ip_network
from pathlib import Path

from bench._database import bench_database, database_url, drop_database, fresh_database, run
from tests.support.bmcsim import Bmcsim, start_bmcsim
from tests.support.processes import RedisServer
from tests.support.table import print_table

BENCH_DB = bench_database("fabric")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,64,512", help="reservation sizes, comma-separated")
    parser.add_argument("--nodes", type=int, default=600, help="bmcsim's, in one pod")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if sum(sizes) > args.nodes:
        raise SystemExit(f"the sizes add up to more than the bench's {args.nodes} nodes")

    scratch = Path(tempfile.mkdtemp(prefix="bench-fabric-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        "DATABASE_URL": database_url(BENCH_DB),
        "SIM_TIME_SCALE": "0",
        "GPUFLEET_LOG_LEVEL": "WARNING",
    }
    processes: list[RedisServer | Bmcsim] = []
    try:
        redis_server = RedisServer(scratch)
        processes.append(redis_server)
        env["REDIS_URL"] = redis_server.url
        topology = scratch / "topology.json"
        topology.write_text(json.dumps({"nodes": args.nodes, "pods": 1}))
        fresh_database(BENCH_DB)
        bmcsim = start_bmcsim(scratch / "bmcsim", nodes=args.nodes, args=("--topology", str(topology)), timeout=120)
        processes.append(bmcsim)
        env["BMCSIM_URL"] = bmcsim.url
        run(sys.executable, "manage.py", "seed_fleet", "--bmcsim-url", bmcsim.url, "--wait", "30", env=env)
        os.environ.update(env)
        rows = measure(bmcsim.url, sizes)
    finally:
        for process in reversed(processes):
            process.stop()
        drop_database(BENCH_DB)
    print_table(
        rows,
        heading=(
            "reservation",
            f"{'switches':>8}  {'racks':>5}  {'given, s':>8}  {'joined, s':>9}  {'left, s':>7}  "
            f"{'NVUE calls':>10}  {'UFM calls':>9}  {'NMX-M calls':>11}  {'syncs':>5}  "
            f"{'SQL/node given':>14}  {'SQL/sync':>8}",
        ),
    )


def measure(bmcsim_url: str, sizes: list[int]) -> list[tuple[str, str]]:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from core import outbound
    from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
    from fleet.lifecycle import Event
    from fleet.models import Node
    from fleet.services import transition
    from fleet.services.network_attachments import want_tenant_networks
    from fleet.services.tenant_networks import ensure_tenant_networks
    from reservations.models import Tenant
    from reservations.services import create_reservation, release_reservation
    from workflows.fabric_managers.base import FabricDriver
    from workflows.fabric_managers.nmx import NmxDriver
    from workflows.fabric_managers.nvue import NvueDriver
    from workflows.fabric_managers.ufm import UfmDriver
    from workflows.fabric_sync import sync_fabrics

    calls: Counter[str] = Counter()
    loopback = outbound.public_only([ip_network("127.0.0.0/8")])

    def counted(fabric: str) -> outbound.AddressCheck:
        def check(address: outbound.IPAddress) -> str | None:
            calls[fabric] += 1
            return loopback(address)

        return check

    def driver_args(fabric: str) -> dict:
        return {
            "username": settings.FABRIC_REDFISH_USERNAME,
            "password": settings.FABRIC_REDFISH_PASSWORD,
            "check": counted(fabric),
            "deadline_s": 30.0,
            "max_body_bytes": settings.OUTBOUND_MAX_BODY_BYTES,
        }

    drivers: dict[str, FabricDriver] = {
        ETHERNET: NvueDriver(url=f"{bmcsim_url}/switches/{{switch}}", **driver_args(ETHERNET)),
        INFINIBAND: UfmDriver(url=f"{bmcsim_url}/pods/{{fabric}}", **driver_args(INFINIBAND)),
        NVLINK: NmxDriver(url=f"{bmcsim_url}/nvlink-domains/{{domain}}", **driver_args(NVLINK)),
    }
    for node_id in Node.objects.values_list("pk", flat=True):
        for event in (Event.INSPECTION_STARTED, Event.ATTESTATION_PASSED):
            transition(node_id=node_id, event=event, actor="bench")
    _synced(sync_fabrics, drivers, list(Node.objects.values_list("pk", flat=True)))  # every node read back once, idle
    tenant = Tenant.objects.create(name="bench")
    rows = []
    for size in sizes:
        reservation = create_reservation(tenant=tenant, node_count=size, actor="tenant:bench")
        chosen = list(Node.objects.filter(reservation=reservation).select_related("rack"))
        ids = [node.pk for node in chosen]
        calls.clear()
        given_statements, sync_statements = _Statements(), _Statements()
        started = time.perf_counter()
        with connection.execute_wrapper(given_statements):
            for node in chosen:
                joined = ensure_tenant_networks(reservation_id=reservation.pk, node_id=node.pk)
                want_tenant_networks(node_id=node.pk, networks=joined.networks)
        given_s = time.perf_counter() - started
        with connection.execute_wrapper(sync_statements):
            joined_s, syncs = _synced(sync_fabrics, drivers, ids)
        join_calls = dict(calls)
        release_reservation(reservation_id=reservation.pk, actor="tenant:bench")
        left_s, _ = _synced(sync_fabrics, drivers, ids)
        switches = len({node.ethernet_switch for node in chosen})
        racks = len({node.rack_id for node in chosen})
        counts = [join_calls.get(fabric, 0) for fabric in FABRICS]
        rows.append(
            (
                f"{size} nodes",
                f"{switches:>8}  {racks:>5}  {given_s:>8.3f}  {joined_s:>9.3f}  {left_s:>7.3f}  "
                f"{counts[0]:>10}  {counts[1]:>9}  {counts[2]:>11}  {syncs:>5}  "
                f"{given_statements.count / size:>14.1f}  {sync_statements.count / max(syncs, 1):>8.0f}",
            )
        )
    for driver in drivers.values():
        driver.close()
    return rows


class _Statements:
    """Counts the SQL statements run on Django's connection, as a connection.execute_wrapper
    (those of _synced's own check among them)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def _synced(sync_fabrics, drivers, node_ids: list[int]) -> tuple[float, int]:
    """Seconds and syncs until every attachment of the nodes is confirmed."""
    from fleet.models import NetworkAttachment

    started, syncs = time.perf_counter(), 0
    while NetworkAttachment.objects.filter(node_id__in=node_ids, confirmed=False).exists():
        if syncs == 10:
            raise SystemExit(f"not confirmed after {syncs} syncs")
        sync_fabrics(drivers=drivers, full=False)
        syncs += 1
    return time.perf_counter() - started, syncs


if __name__ == "__main__":
    main()
