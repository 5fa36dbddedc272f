"""Placement in process on 10,000 and 100,000 nodes, and reservations through the HTTP API on a
10,000-node fleet against pgbench on the same server.

In process (no database): a fleet of pods, leaves of two racks and racks of 8 nodes
(default_layout), warmed to about 60% use by the trace itself, then a trace of placements and
releases applied to the free-capacity index as deltas: requests of 1-64 nodes (about 10% whole
racks, 15% `preferred: leaf`, 15% `required: leaf`). Each placement is timed through the index
(reservations.placement.place_in) and, on a sample of the same requests, through the walk of every
rack it replaced (tests/support/placement_reference.py), which must choose the same nodes.

Over HTTP: builds its own database (gpufleet_bench_placement), enrols 10 pods x 125 racks x 8
nodes, serves the API with gunicorn, and drives it with 32 concurrent clients: 5,000 reservations
of 1-16 nodes (10% rack-scale), each in a future window so that nodes are shared over time, 30% of
them extended by an hour or two, about half released again. Prints reservations/s, latency percentiles
(creates, refusals, which compute the earliest-start offer, and extensions apart), lost
placement races, double bookings
(must be 0), GET /v1/capacity latency, and two ceilings measured in the same run: pgbench's
TPS, and the rate of the cheapest authenticated read through the same server and clients, itself
set against a bare Django view in that server (bench/_bare_view.py: Django's and gunicorn's share);
then creates alone by the same clients, whose rate against that read's is what a create costs.
Run from the repository root: .venv/bin/python -m bench.placement [--part in-process|http|both]
[--in-process-nodes N ...] [--placements N] [--nodes N] [--reservations N] [--clients N]
[--pgbench-seconds S]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from bench._database import bench_database, database_url, drop_database, fresh_database, psql, run
from core.topology import LEAF, default_layout
from reservations.free_capacity import FreeCapacity, RackState
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, place_in
from tests.support import placement_reference
from tests.support.processes import start_gunicorn
from tests.support.table import print_table

BENCH_DB = bench_database("placement")


def prepare_fleet(env: dict, nodes: int, pods: int) -> None:
    """The database of env's DATABASE_URL afresh, with `nodes` nodes enrolled in `pods` pods, all available."""
    database = env["DATABASE_URL"].rsplit("/", 1)[1]
    fresh_database(database)
    code = f"""
import django; django.setup()
from bench._fleet import make_all_available
from fleet.inventory import records_from_layout
from fleet.services import enrol_nodes
from core.topology import default_layout
layout = default_layout({nodes}, pod_count={pods})
enrol_nodes(records=records_from_layout(layout, "http://127.0.0.1:8100"), actor="bench")
make_all_available()  # inspection and attestation are not what this measures
"""
    run(sys.executable, "-c", code, env=env)
    # The bulk updates left each node's two old rows and their index entries behind: vacuum, as
    # autovacuum soon would in a running fleet, so that placement's reads meet settled tables.
    psql("VACUUM ANALYZE", database)


def tenant_tokens(env: dict, count: int) -> list[str]:
    return [
        run(sys.executable, "manage.py", "create_tenant", f"bench-{i}", env=env).stdout.strip().splitlines()[-1]
        for i in range(count)
    ]


def pgbench_tps(clients: int, seconds: int) -> float:
    database = bench_database("pgbench")
    drop_database(database)
    psql(f'CREATE DATABASE "{database}"')
    run("pgbench", "-i", "-q", "-s", "10", "-h", "127.0.0.1", "-U", "postgres", database)
    out = run(
        "pgbench",
        "-c",
        str(clients),
        "-j",
        "2",
        "-T",
        str(seconds),
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        database,
    ).stdout
    drop_database(database)
    tps = re.search(r"tps = ([\d.]+)", out)
    assert tps is not None, out
    return float(tps.group(1))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def booking(rng: random.Random, window_start: datetime) -> dict:
    """A request of 1-16 nodes (10% whole racks of 8 or 16) for 1-4 hours within two days of the window's start."""
    rack_scale = rng.random() < 0.10
    starts = window_start + timedelta(hours=rng.randrange(48))
    return {
        "node_count": rng.choice([8, 16]) if rack_scale else rng.randint(1, 16),
        "rack_scale": rack_scale,
        "starts_at": starts.isoformat(),
        "ends_at": (starts + timedelta(hours=rng.randint(1, 4))).isoformat(),
    }


def tenant_session(token: str) -> requests.Session:
    """One client's connection, every request of it with the tenant's API key."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    return session


def turns(count: int) -> Callable[[], bool]:
    """`count` turns the clients' threads share: each call takes one, False once all are taken."""
    lock = threading.Lock()
    remaining = iter(range(count))

    def take() -> bool:
        with lock:
            return next(remaining, None) is not None

    return take


def drive(base: str, tokens: list[str], total: int, seed: int) -> dict:
    latencies, capacity_latencies = [], []
    by_kind: dict[str, list[float]] = {"created": [], "refused": [], "extended": [], "extension refused": []}
    outcome = {"created": 0, "refused": 0, "offered": 0, "released": 0, "extended": 0, "errors": 0}
    lock = threading.Lock()
    take_turn = turns(total)
    window_start = datetime.now(UTC) + timedelta(days=1)

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        session = tenant_session(tokens[index])
        while take_turn():
            body = booking(rng, window_start)
            started = time.perf_counter()
            answer = session.post(f"{base}/v1/reservations", json=body, timeout=30)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                kind = {201: "created", 409: "refused"}.get(answer.status_code, "errors")
                outcome[kind] += 1
                by_kind.get(kind, []).append(elapsed)
                outcome["offered"] += answer.status_code == 409 and answer.json().get("offer") is not None
            if answer.status_code == 201 and rng.random() < 0.3:
                # Extend by an hour or two: often into another booking of one of its nodes (409).
                extended_to = datetime.fromisoformat(body["ends_at"]) + timedelta(hours=rng.randint(1, 2))
                t0 = time.perf_counter()
                extension = session.patch(
                    f"{base}/v1/reservations/{answer.json()['id']}",
                    json={"ends_at": extended_to.isoformat()},
                    timeout=30,
                )
                with lock:
                    settled = {200: "extended", 409: "extension refused"}.get(extension.status_code)
                    if settled is None:
                        outcome["errors"] += 1
                    else:
                        by_kind[settled].append(time.perf_counter() - t0)
                        outcome["extended"] += extension.status_code == 200
            if answer.status_code == 201 and rng.random() < 0.5:
                released = session.post(f"{base}/v1/reservations/{answer.json()['id']}/release", timeout=30)
                with lock:
                    outcome["released" if released.status_code == 200 else "errors"] += 1

    wall = run_clients(client, len(tokens))
    floor = request_rate(base, tokens, CHEAPEST_READ)
    bare = request_rate(base, tokens, BARE_VIEW)
    creates = creates_alone(base, tokens, seed)
    probe = requests.Session()
    for _ in range(100):
        t0 = time.perf_counter()
        probe.get(f"{base}/v1/capacity", timeout=30).raise_for_status()
        capacity_latencies.append(time.perf_counter() - t0)
    return {
        "wall": wall,
        "latencies": latencies,
        "by_kind": by_kind,
        "capacity": capacity_latencies,
        "floor": floor,
        "bare": bare,
        "creates alone": creates,
        **outcome,
    }


def run_clients(client: Callable[[int], None], count: int) -> float:
    """Run client(0) ... client(count - 1) in threads at once; the seconds until the last is done."""
    threads = [threading.Thread(target=client, args=(index,)) for index in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


# The cheapest authenticated read (one reservation of the caller's): what Django, DRF, the API
# key's check, gunicorn and this load generator cost by themselves, the ceiling any write path
# lies under on this machine.
CHEAPEST_READ = "/v1/reservations?limit=1"
# A view with nothing of the API's (bench/_bare_view.py), in the same server and middleware.
BARE_VIEW = "/bench/bare"


def request_rate(base: str, tokens: list[str], path: str, per_client: int = 40) -> float:
    """Requests/s of GET `path` by the same clients and server, each with its API key."""

    def client(token: str) -> None:
        session = tenant_session(token)
        for _ in range(per_client):
            session.get(f"{base}{path}", timeout=30).raise_for_status()

    return len(tokens) * per_client / run_clients(lambda index: client(tokens[index]), len(tokens))


def creates_alone(base: str, tokens: list[str], seed: int, per_client: int = 20) -> float:
    """Reservations/s created by the same clients with nothing else asked between, right after the
    floor: a create's own cost, set against the cheapest request's. Each lands in a window after
    the mix's, so that it is placed rather than refused."""
    window_start = datetime.now(UTC) + timedelta(days=4)

    def client(index: int) -> None:
        rng = random.Random(seed * 7919 + index)
        session = tenant_session(tokens[index])
        for _ in range(per_client):
            session.post(f"{base}/v1/reservations", json=booking(rng, window_start), timeout=30).raise_for_status()

    return len(tokens) * per_client / run_clients(client, len(tokens))


def database_figures(env: dict) -> tuple[int, int]:
    code = """
import django; django.setup()
from django.db import connection
with connection.cursor() as c:
    c.execute("SELECT count(*) FROM reservations_allocation a JOIN reservations_allocation b"
              " ON a.node_id = b.node_id AND a.id < b.id AND a.period && b.period")
    double = c.fetchone()[0]
    c.execute("SELECT coalesce(sum((regexp_match(detail, %s))[1]::int), 0)"
              " FROM reservations_reservationevent WHERE event = 'created'", [r"after (\\d+) lost"])
    print(double, c.fetchone()[0])
"""
    double, races = run(sys.executable, "-c", code, env=env).stdout.split()
    return int(double), int(races)


def mixed_request(rng: random.Random) -> PlacementRequest:
    """1-64 nodes, most small; about 10% whole racks, 15% preferring one leaf, 15% requiring one."""
    kind = rng.random()
    if kind < 0.10:
        return PlacementRequest(rng.choice((8, 16, 32)), rack_scale=True)
    if kind < 0.25:
        return PlacementRequest(rng.randint(1, 16), required=LEAF)
    count = min(64, round(2 ** rng.uniform(0, 6)))
    return PlacementRequest(count, preferred=LEAF if kind < 0.40 else None)


class InProcessFleet:
    """A fleet kept two ways: the index, updated by deltas, and the racks the walk reads."""

    def __init__(self, nodes: int, pods: int):
        racks: dict[tuple, list[str]] = {}
        for spec in default_layout(nodes, pod_count=pods, gpus_per_node=0):
            racks.setdefault((spec.pod, spec.rack, spec.fabric[1:-1]), []).append(spec.name)
        self.racks = {
            rack: RackCapacity(pod, rack, tuple(n), tuple(n), path=path) for (pod, rack, path), n in racks.items()
        }
        self.rack_of = {node: rack for rack, r in self.racks.items() for node in r.nodes}
        self.index = FreeCapacity(
            RackState(r.pod, r.rack, r.path, r.nodes, frozenset(r.nodes)) for r in self.racks.values()
        )
        self.busy: set[str] = set()

    def change(self, *, taken: Sequence[str] = (), freed: Sequence[str] = ()) -> float:
        """Apply a delta to both; the seconds the index took."""
        started = time.perf_counter()
        self.index.apply(taken=taken, freed=freed)
        seconds = time.perf_counter() - started
        self.busy.update(taken)
        self.busy.difference_update(freed)
        for rack in {self.rack_of[n] for n in (*taken, *freed)}:
            r = self.racks[rack]
            self.racks[rack] = RackCapacity(
                r.pod, r.rack, r.nodes, tuple(n for n in r.nodes if n not in self.busy), path=r.path
            )
        return seconds


def in_process(nodes: int, pods: int, placements: int, walk_every: int, seed: int) -> list[tuple[str, object]]:
    rng = random.Random(seed)
    fleet = InProcessFleet(nodes, pods)
    held: list[list[str]] = []
    index_ms, walk_ms, paired, apply_ms = [], [], [], []
    refused = differ = 0
    timed = 0
    while timed < placements:
        warm = len(fleet.busy) < 0.6 * nodes and not timed
        if not warm and held and (rng.random() < 0.5 or len(fleet.busy) > 0.7 * nodes):
            apply_ms.append(fleet.change(freed=held.pop(rng.randrange(len(held)))) * 1000)
            continue
        request = mixed_request(rng)
        started = time.perf_counter()
        try:
            chosen = place_in(request, fleet.index)
        except PlacementRefused:
            chosen = None
        elapsed = (time.perf_counter() - started) * 1000
        if not warm:
            timed += 1
            index_ms.append(elapsed)
            refused += chosen is None
            if timed % walk_every == 0:
                racks = list(fleet.racks.values())
                started = time.perf_counter()
                try:
                    walked = placement_reference.place(request, racks)
                except PlacementRefused:
                    walked = None
                walk_ms.append((time.perf_counter() - started) * 1000)
                paired.append(elapsed)
                differ += walked != chosen
        if chosen is not None:
            apply_ms.append(fleet.change(taken=chosen) * 1000)
            held.append(chosen)
    width = f"{nodes:,} nodes"
    return [
        (
            f"{width}: fleet",
            f"{pods} pods > leaves of 2 racks > racks of 8 nodes; {len(fleet.busy) / nodes:.0%} in use at the end",
        ),
        (f"{width}: placements timed / refused", f"{placements} / {refused}"),
        (
            f"{width}: index place() p50 / p99 / max ms",
            f"{percentile(index_ms, 50):.2f} / {percentile(index_ms, 99):.2f} / {max(index_ms):.2f}  (target p99 < 5)",
        ),
        (
            f"{width}: index delta apply p50 / p99 ms",
            f"{percentile(apply_ms, 50):.2f} / {percentile(apply_ms, 99):.2f}",
        ),
        (
            f"{width}: walk vs index on {len(walk_ms)} of them, p50 ms",
            f"{percentile(walk_ms, 50):.1f} vs {percentile(paired, 50):.2f}",
        ),
        (f"{width}: walk vs index, p99 ms", f"{percentile(walk_ms, 99):.1f} vs {percentile(paired, 99):.2f}"),
        (
            f"{width}: walk / index, ratio of p50 / of p99",
            f"{percentile(walk_ms, 50) / percentile(paired, 50):.0f}x"
            f" / {percentile(walk_ms, 99) / percentile(paired, 99):.0f}x",
        ),
        (f"{width}: choices that differ from the walk's", f"{differ}  (must be 0)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reservations", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--part", choices=("in-process", "http", "both"), default="both")
    parser.add_argument("--in-process-nodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--placements", type=int, default=300, help="placements timed in process, per fleet")
    parser.add_argument("--walk-every", type=int, default=10, help="time the walk on every Nth placement")
    parser.add_argument("--pgbench-seconds", type=int, default=15)
    args = parser.parse_args()

    if args.part != "http":
        rows = []
        for nodes in args.in_process_nodes:
            print(f"in process: {nodes} nodes ...", file=sys.stderr)
            # The walk takes about 0.2 s a placement at 100,000 nodes: sample it less there.
            walk_every = args.walk_every * max(1, nodes // 50_000)
            rows += in_process(nodes, args.pods, args.placements, walk_every, args.seed)
        print_table(rows)
    if args.part == "in-process":
        return

    env = {
        **os.environ,
        "DATABASE_URL": database_url(BENCH_DB),
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        # Each client makes hundreds of requests a minute: measure placement, not the throttles.
        "GPUFLEET_API_READ_RATE": "1000000/min",
        "GPUFLEET_API_WRITE_RATE": "1000000/min",
    }
    print(f"preparing a {args.nodes}-node fleet in {args.pods} pods ...", file=sys.stderr)
    try:
        prepare_fleet(env, args.nodes, args.pods)
        tokens = tenant_tokens(env, args.clients)
        scratch = Path(tempfile.mkdtemp(prefix="bench-placement-"))
        # The API's settings, with one bare view beside the API to set its cheapest request against.
        served = {**env, "DJANGO_SETTINGS_MODULE": "bench._bare_view"}
        server, base = start_gunicorn("web", "gpufleet.wsgi", served, scratch, processes=args.workers)
        try:
            print(f"{args.clients} clients, {args.reservations} reservations ...", file=sys.stderr)
            figures = drive(base, tokens, args.reservations, args.seed)
        finally:
            server.stop(timeout=30)
        double, races = database_figures(env)
    finally:
        drop_database(BENCH_DB)
    print("pgbench on the same server ...", file=sys.stderr)
    tps = pgbench_tps(args.clients, args.pgbench_seconds)

    rate = figures["created"] / figures["wall"]
    extensions = len(figures["by_kind"]["extended"]) + len(figures["by_kind"]["extension refused"])
    requests_in_mix = len(figures["latencies"]) + extensions + figures["released"]
    ms = [x * 1000 for x in figures["latencies"]]
    capacity_ms = [x * 1000 for x in figures["capacity"]]
    rows = [
        ("fleet", f"{args.nodes} nodes, {args.pods} pods"),
        ("clients / gunicorn workers", f"{args.clients} / {args.workers}"),
        ("reservations asked", args.reservations),
        (
            "created (201) / refused (409) / released",
            f"{figures['created']} / {figures['refused']} / {figures['released']}",
        ),
        ("refused with an offer of the earliest fit", figures["offered"]),
        (
            "extended (200) / extension refused (409)",
            f"{figures['extended']} / {len(figures['by_kind']['extension refused'])}",
        ),
        ("errors (other statuses)", figures["errors"]),
        ("reservations/s created", f"{rate:.1f}  (target >= 300)"),
        ("POST latency p50 / p99 ms", f"{percentile(ms, 50):.1f} / {percentile(ms, 99):.1f}  (target p99 < 250)"),
        *(
            (f"latency of {kind} p50 / p99 ms", f"{percentile(ms_of, 50):.1f} / {percentile(ms_of, 99):.1f}")
            for kind, ms_of in ((k, [x * 1000 for x in v]) for k, v in figures["by_kind"].items())
        ),
        ("lost placement races (retried)", races),
        ("double bookings", f"{double}  (must be 0)"),
        (
            "GET /v1/capacity p50 / p99 ms",
            f"{percentile(capacity_ms, 50):.1f} / {percentile(capacity_ms, 99):.1f}  (target < 20)",
        ),
        ("pgbench TPS (TPC-B, same clients)", f"{tps:.0f}"),
        ("reservations/s as a share of pgbench TPS", f"{rate / tps:.3f}"),
        (f"bare Django view, same server and middleware (GET {BARE_VIEW}), req/s", f"{figures['bare']:.0f}"),
        (f"floor: authenticated GET {CHEAPEST_READ}, req/s", f"{figures['floor']:.0f}"),
        (
            "the floor costs, in the bare view's time (the API's own share above Django's)",
            f"{figures['bare'] / figures['floor']:.2f}x",
        ),
        (
            "requests/s of the mix (creates, extensions, releases) as a share of the floor",
            f"{requests_in_mix / figures['wall'] / figures['floor']:.2f}",
        ),
        (
            "a request of the mix costs, in the cheapest request's time",
            f"{figures['floor'] / (requests_in_mix / figures['wall']):.2f}x",
        ),
        ("creates alone, reservations/s", f"{figures['creates alone']:.1f}"),
        (
            "a create alone costs, in the cheapest request's time",
            f"{figures['floor'] / figures['creates alone']:.2f}x  (target <= 1.25x)",
        ),
    ]
    print_table(rows)


if __name__ == "__main__":
    main()
