"""The whole control plane at fleet scale, each step timed per node, so that one whose cost grows
faster than the fleet shows.

Booted: bmcsim with N nodes at SIM_TIME_SCALE=0, a private Redis, gunicorn (whose config drives
the BMCs fetch), Celery workers and beat, attestation configured as an operator does once. Enrols
the nodes from bmcsim's inventory and times until every one is inspected and attested
(available); then a pass of the reconcilers, R reservations placed through the API (each in a
future window, so that none provisions) and half of them released, GET /v1/capacity and the
floor (GET / as a signed-in operator); last, the resident memory of web, worker, beat and bmcsim.

Enrolled: no bmcsim. At N/10 and N nodes, enrols the fleet from an inventory file (CSV: pods and
racks, no fabric levels), passes every node in bulk (bench/_fleet.py), places and releases R
reservations through the API, then times the reconcilers, capacity and the floor; prints each
step's cost per node (per reservation for placement; the smaller fleet takes a tenth of them) at
both sizes and their ratio: about 1 for a step that grows with the fleet, well above it for one
that grows faster.
Capacity and the floor are requested in process through Django's whole stack, as
bench/capacity.py and bench/dashboard.py do.
Run from the repository root: .venv/bin/python -m bench.fleet_scale [--booted-nodes 10000]
[--workers 8] [--reservations 5000] [--enrolled-nodes 100000] [--part booted|enrolled|both]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from attestation.ear import generate_signing_key
from bench._database import bench_database, database_url, drop_database, fresh_database, psql, run
from bench.placement import run_clients, tenant_session, turns
from tests.support.bmcsim import Bmcsim, start_bmcsim
from tests.support.processes import Process, RedisServer, start_beat, start_gunicorn, start_worker
from tests.support.table import print_table

BENCH_DB = bench_database("fleet_scale")
CLIENTS = 4
GROWTH_FLAGGED = 1.5  # a per-node cost this many times the smaller fleet's grows faster than the fleet

STATES = """
import django, json; django.setup()
from django.db.models import Count
from fleet.models import Node
print(json.dumps(dict(Node.objects.values_list("state").annotate(n=Count("pk")))))
"""


def enrol(source: str, pass_all: bool, attestation_from: str | None) -> dict:
    """In the bench database's process: seed_fleet from `source` (bmcsim's URL or an inventory
    file), timed without the process's start; every node passed in bulk after, if asked;
    attestation configured from bmcsim's URL, if given; and the API keys of CLIENTS tenants."""
    import django

    django.setup()
    from io import StringIO

    from django.core.management import call_command

    options = {"inventory": Path(source)} if Path(source).exists() else {"bmcsim_url": source, "wait": 30}
    began = time.perf_counter()
    call_command("seed_fleet", stdout=StringIO(), verbosity=0, **options)
    figures: dict = {"enrol": time.perf_counter() - began}
    if pass_all:
        from bench._fleet import make_all_available

        make_all_available()  # inspection is what the booted part measures
    if attestation_from:
        # What an operator does once: trust the vendors' roots and import their golden digests.
        for command, path in (
            ("import_trust_anchors", "roots"),
            ("import_reference_values", "reference-values"),
            ("import_gpu_rims", "gpu-rims"),
        ):
            call_command(command, f"{attestation_from}/bmcsim/v1/{path}", stdout=StringIO())
    figures["tokens"] = []
    for index in range(CLIENTS):
        said = StringIO()
        call_command("create_tenant", f"bench-{index}", stdout=said)
        figures["tokens"].append(said.getvalue().strip().splitlines()[-1])
    return figures


def measure() -> dict:
    """In the bench database's process: a pass of the reconcilers (the first, and the median of
    two after it), a miss of GET /v1/capacity, and the floor as an operator, each timed."""
    import warnings

    import django

    warnings.filterwarnings("ignore", message="No directory at")  # whitenoise: no collectstatic
    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from workflows import tasks

    figures: dict[str, float] = {}
    for name, reconcile in (
        ("reconcile nodes", tasks.reconcile_nodes),
        ("reconcile reservations", tasks.reconcile_reservations),
    ):
        passes = []
        for _ in range(3):
            began = time.perf_counter()
            reconcile()
            passes.append(time.perf_counter() - began)
        figures[f"{name}: first pass"], figures[f"{name}: pass after"] = passes[0], statistics.median(passes[1:])

    client = Client(HTTP_HOST="127.0.0.1")

    def timed(path: str) -> float:
        began = time.perf_counter()
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        return time.perf_counter() - began

    figures["GET /v1/capacity: first"] = timed("/v1/capacity")
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('reservations_capacity_version_seq')")  # as any write would
    figures["GET /v1/capacity: miss"] = timed("/v1/capacity")
    client.force_login(get_user_model().objects.create_user("bench-operator", is_staff=True))
    figures["GET / (floor): first"] = timed("/")
    figures["GET / (floor): after"] = statistics.median(timed("/") for _ in range(3))
    return figures


def child(env: dict, *args: str) -> dict:
    return json.loads(run(sys.executable, "-m", "bench.fleet_scale", *args, env=env).stdout)


def place_and_release(base: str, tokens: list[str], count: int, largest: int, seed: int = 7) -> dict:
    """`count` reservations of 1-`largest` nodes for 1-4 hours from tomorrow, by len(tokens)
    clients at once, then half of those placed released; the seconds of each."""
    placed: list[tuple[str, int]] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    take_turn = turns(count)
    window_start = datetime.now(UTC) + timedelta(days=1)

    def place(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        session = tenant_session(tokens[index])
        while take_turn():
            starts = window_start + timedelta(hours=rng.randrange(48))
            body = {
                "node_count": rng.randint(1, largest),
                "starts_at": starts.isoformat(),
                "ends_at": (starts + timedelta(hours=rng.randint(1, 4))).isoformat(),
            }
            answer = session.post(f"{base}/v1/reservations", json=body, timeout=60)
            with lock:
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                if answer.status_code == 201:
                    placed.append((tokens[index], answer.json()["id"]))

    placing = run_clients(place, len(tokens))
    releasing_list = placed[::2]

    def release(index: int) -> None:
        session = requests.Session()
        for token, pk in releasing_list[index :: len(tokens)]:
            answer = session.post(
                f"{base}/v1/reservations/{pk}/release", headers={"Authorization": f"Token {token}"}, timeout=60
            )
            with lock:
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    releasing = run_clients(release, len(tokens))
    return {"place": placing, "release": releasing, "released": len(releasing_list), "statuses": statuses}


def resident_mib(pid: int) -> float:
    """VmRSS of every process in the process group `pid` leads (gunicorn's and Celery's children with it)."""
    kib = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != pid:
                continue
            status = stat.with_name("status").read_text()
        except (OSError, IndexError, ValueError):
            continue  # gone since listed
        kib += sum(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return kib / 1024


def wait_until_available(env: dict, nodes: int, timeout: float) -> float:
    started = time.monotonic()
    while True:
        states = json.loads(run(sys.executable, "-c", STATES, env=env).stdout)
        if states.get("available", 0) >= nodes:
            return time.monotonic() - started
        if time.monotonic() - started > timeout or states.get("quarantined"):
            raise SystemExit(f"not every node available after {time.monotonic() - started:.0f}s: {states}")
        time.sleep(1)


def booted(args, scratch: Path, base_env: dict) -> list[tuple[str, object]]:
    nodes = args.booted_nodes
    env = {**base_env, "SIM_TIME_SCALE": "0"}
    processes: list[RedisServer | Bmcsim | Process] = []
    control_plane: dict[str, Process] = {}  # whose memory the table shows, bmcsim's beside it
    began = time.perf_counter()
    try:
        redis_server = RedisServer(scratch)
        processes.append(redis_server)
        env["REDIS_URL"] = redis_server.url
        fresh_database(BENCH_DB)
        bmcsim = start_bmcsim(scratch / "bmcsim", nodes=nodes, timeout=max(120, nodes / 50))
        processes.append(bmcsim)
        env["BMCSIM_URL"] = bmcsim.url
        env["GPUFLEET_OCSP_RESPONDER"] = f"{bmcsim.url}/bmcsim/v1/ocsp"
        setup = child(env, "--enrol", bmcsim.url, "--attestation-from", bmcsim.url)
        # Every boot's BMC fetches the node's config drive from the web server: this bench's own.
        control_plane["web"], env["GPUFLEET_CONFIG_DRIVE_BASE_URL"] = start_gunicorn(
            "web", "gpufleet.wsgi", env, scratch
        )
        processes.append(control_plane["web"])
        control_plane["worker"] = start_worker("worker", env, scratch, concurrency=args.workers, loglevel="WARNING")
        processes.append(control_plane["worker"])
        control_plane["beat"] = start_beat(env, scratch, loglevel="WARNING")
        processes.append(control_plane["beat"])
        print(f"first inspection of {nodes} nodes ...", file=sys.stderr)
        inspected = wait_until_available(env, nodes, args.timeout)
        api = place_and_release(
            env["GPUFLEET_CONFIG_DRIVE_BASE_URL"], setup["tokens"], args.reservations, min(4, nodes)
        )
        figures = child(env, "--measure")
        memory = {name: resident_mib(process.popen.pid) for name, process in control_plane.items()}
        memory["bmcsim"] = resident_mib(bmcsim.process.popen.pid)
    finally:
        for process in reversed(processes):
            process.stop()
        drop_database(BENCH_DB)
    wall = time.perf_counter() - began

    def per_node(seconds: float) -> str:
        return f"{seconds:.2f} s  ({seconds / nodes * 1000:.2f} ms/node)"

    return [
        ("booted fleet", f"{nodes:,} nodes, {args.workers} worker processes, SIM_TIME_SCALE=0"),
        ("wall time, setup to teardown", per_node(wall)),
        ("enrol from bmcsim's inventory", per_node(setup["enrol"])),
        ("first inspection and attestation, all available", per_node(inspected)),
        ("  nodes/minute", f"{nodes / inspected * 60:.0f}"),
        *(_api_rows(api, args.reservations)),
        *((name, per_node(seconds)) for name, seconds in figures.items()),
        *((f"resident memory: {name}", f"{mib:.0f} MiB") for name, mib in memory.items()),
    ]


def _api_rows(api: dict, asked: int) -> list[tuple[str, object]]:
    return [
        (
            f"place {asked} reservations through the API",
            f"{api['place']:.2f} s  ({api['place'] / asked * 1000:.2f} ms each)",
        ),
        (
            f"release {api['released']} of them",
            f"{api['release']:.2f} s  ({api['release'] / max(1, api['released']) * 1000:.2f} ms each)",
        ),
        ("  answers by status", ", ".join(f"{status}: {n}" for status, n in sorted(api["statuses"].items()))),
    ]


def write_inventory(path: Path, nodes: int) -> None:
    """The default layout of `nodes` nodes as a CSV inventory (fleet/inventory.py's columns)."""
    from core.topology import default_layout
    from fleet.inventory import CSV_COLUMNS, records_from_layout

    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(CSV_COLUMNS)
        for r in records_from_layout(default_layout(nodes), "http://127.0.0.1:8100"):
            gpus = r.gpus
            model = gpus[0].model if gpus else ""
            uuids, serials = " ".join(g.uuid for g in gpus), " ".join(g.serial for g in gpus)
            fields = (r.name, r.pod, r.rack, r.position, r.serial, r.redfish_url, r.system_id, r.bmc_username)
            writer.writerow((*fields, r.bmc_password, r.agent_url, model, uuids, serials))


def enrolled_at(nodes: int, reservations: int, scratch: Path, env: dict) -> dict:
    inventory = scratch / f"inventory-{nodes}.csv"
    write_inventory(inventory, nodes)
    fresh_database(BENCH_DB)
    try:
        figures = child(env, "--enrol", str(inventory), "--pass-all")
        tokens = figures.pop("tokens")
        psql("VACUUM ANALYZE", BENCH_DB)  # the bulk moves' dead rows, as autovacuum soon would
        server, base = start_gunicorn("web", "gpufleet.wsgi", env, scratch)
        try:
            api = place_and_release(base, tokens, reservations, 16)
        finally:
            server.stop(timeout=30)
        figures.update(child(env, "--measure"))
    finally:
        drop_database(BENCH_DB)
    return {"steps": figures, "api": api}


def enrolled(args, scratch: Path, base_env: dict) -> list[tuple[str, object]]:
    redis_server = RedisServer(scratch)
    env = {**base_env, "REDIS_URL": redis_server.url}
    sizes = (max(1, args.enrolled_nodes // 10), args.enrolled_nodes)
    # The smaller fleet takes a tenth of the reservations too: as busy, so that a placement's cost compares.
    asked = (max(1, args.reservations // 10), args.reservations)
    try:
        small, large = (enrolled_at(n, r, scratch, env) for n, r in zip(sizes, asked, strict=True))
    finally:
        redis_server.stop()
    heading = f"{sizes[0]:,} / {sizes[1]:,} nodes ({asked[0]:,} / {asked[1]:,} reservations)"
    rows: list[tuple[str, object]] = [("enrolled fleet (per node, µs)", f"{heading}; ratio of per-node cost")]
    for step in small["steps"]:
        a, b = (figures["steps"][step] / n * 1e6 for figures, n in zip((small, large), sizes, strict=True))
        rows.append((step, _compared(a, b)))
    for step in ("place", "release"):
        counts = asked if step == "place" else (small["api"]["released"], large["api"]["released"])
        a, b = (f["api"][step] / max(1, count) * 1e3 for f, count in zip((small, large), counts, strict=True))
        rows.append((f"{step} through the API (per reservation, ms)", _compared(a, b)))
    rows.append(("answers by status", f"{small['api']['statuses']} / {large['api']['statuses']}"))
    return rows


def _compared(small: float, large: float) -> str:
    ratio = large / small if small else float("nan")
    flag = "  GROWS FASTER THAN THE FLEET" if ratio > GROWTH_FLAGGED else ""
    return f"{small:10.2f} / {large:10.2f}   {ratio:5.2f}{flag}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--booted-nodes", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8, help="Celery worker processes")
    parser.add_argument("--reservations", type=int, default=5000)
    parser.add_argument("--enrolled-nodes", type=int, default=100_000, help="the larger fleet; the smaller is a tenth")
    parser.add_argument("--part", choices=("booted", "enrolled", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds the first inspection may take")
    # The child processes' steps, in the bench database's process.
    parser.add_argument("--enrol", metavar="SOURCE", help=argparse.SUPPRESS)
    parser.add_argument("--pass-all", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--attestation-from", metavar="BMCSIM_URL", help=argparse.SUPPRESS)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.enrol:
        print(json.dumps(enrol(args.enrol, args.pass_all, args.attestation_from)))
        return
    if args.measure:
        print(json.dumps(measure()))
        return

    scratch = Path(tempfile.mkdtemp(prefix="bench-fleet-scale-"))
    keys = scratch / "signing-keys"
    keys.mkdir()
    generate_signing_key(keys / "key.pem")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        "DATABASE_URL": database_url(BENCH_DB),
        "GPUFLEET_SIGNING_KEY": str(keys),
        "GPUFLEET_RECONCILE_SECONDS": "2",
        "GPUFLEET_WORKFLOW_POLL_SECONDS": "0.05",
        "GPUFLEET_LOG_LEVEL": "WARNING",
        # The clients make thousands of requests a minute: measure the fleet, not the throttles.
        "GPUFLEET_API_READ_RATE": "1000000/min",
        "GPUFLEET_API_WRITE_RATE": "1000000/min",
    }
    if args.part != "enrolled":
        print_table(booted(args, scratch, env))
    if args.part != "booted":
        print()
        print_table(enrolled(args, scratch, env))


if __name__ == "__main__":
    main()
