"""Wipe and re-inspection of a whole fleet by real Celery workers against bmcsim at SIM_TIME_SCALE=0.

Builds its own database (gpufleet_bench_lifecycle), starts a private Redis, bmcsim with N nodes,
workers and beat as the end-to-end tests do, enrols the nodes and sets the demo's firmware baseline
(deploy/firmware-baseline.json with bmcsim's newest releases: every inspection checks firmware, BIOS
settings and Secure Boot, and the first turns Secure Boot on), lets the workers inspect them once
(setup). Then it sends every node to wiping at once and times until each is wiped and inspected
again: once without a firmware baseline (no firmware check) and once with it, in the same run, so
the cost of the check reads as a ratio the machine's noise touches less than two runs apart.
Prints nodes per minute, Redfish and agent calls per node, and where a node's time went (BMC,
agent, database, the rest of the worker), from the figures each workflow run records with its
outcome in the audit log. Its workers and beat import this module too (--include): each task they
run counts its SQL statements, its time and its outcome in the bench's Redis, so that the tables
say how many run_workflow messages a node took, how many statements every task ran per node, and
at which steps the nodes waited (parked) or paused, over all the visits, not only the last.
Run from the repository root: .venv/bin/python -m bench.lifecycle [--nodes 1000] [--workers 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import redis
from celery import signals

from bench._database import bench_database, database_url, drop_database, fresh_database, run
from tests.support.bmcsim import Bmcsim, start_bmcsim
from tests.support.processes import CELERY_WORKER, Process, RedisServer, start_gunicorn
from tests.support.table import print_table

BENCH_DB = bench_database("lifecycle")
FIRMWARE_BASELINE = "deploy/firmware-baseline.json"

COUNT_INSPECTED = """
import django; django.setup()
from fleet.models import Node
print(Node.objects.filter(state="inspecting", step="attest").count())
"""

SEND_TO_WIPING = """
import django; django.setup()
from fleet.models import Node
from fleet.services import transition
for pk in Node.objects.values_list("pk", flat=True):
    transition(node_id=pk, event="operator_quarantine", actor="bench", reason="bench wipe")
    transition(node_id=pk, event="operator_return", actor="bench")
"""

FIGURES = """
import django, json; django.setup()
from fleet.models import AuditEvent
outcomes = AuditEvent.objects.filter(event__in=["wipe_succeeded", "inspection_passed"], at__gte=%r)
rows = list(outcomes.values_list("event", "detail"))
print(json.dumps(rows))
"""

REMOVE_BASELINES = """
import django; django.setup()
from fleet.models import FirmwareBaseline
FirmwareBaseline.objects.all().delete()
"""

NOW = "import datetime; print(datetime.datetime.now(datetime.UTC).isoformat())"

# What the workers and beat count, in the bench's Redis: per task name, its messages, statements
# and seconds; per outcome of run_workflow ("waiting at <step>", "paused at <step>", ...), how
# often, its seconds and its statements.
COUNTS = "bench:lifecycle:"
WORKER = [*CELERY_WORKER, "--include", "bench.lifecycle"]


class _TaskCounts:
    """In a worker process, the task under way: a database execute wrapper that counts its statements."""

    statements = 0
    started = 0.0

    def __call__(self, execute, sql, params, many, context):
        self.statements += 1
        return execute(sql, params, many, context)


_task = _TaskCounts()


@signals.task_prerun.connect
def _task_starts(**_) -> None:
    from django.db import connection

    _task.statements, _task.started = 0, time.monotonic()
    connection.execute_wrappers.append(_task)


@signals.task_postrun.connect
def _task_ends(task, retval=None, **_) -> None:
    from django.conf import settings
    from django.db import connection

    connection.execute_wrappers.remove(_task)
    pipeline = _redis(settings.CELERY_BROKER_URL).pipeline(transaction=False)
    name = task.name.rsplit(".", 1)[-1]
    pipeline.hincrby(f"{COUNTS}messages", name, 1)
    pipeline.hincrby(f"{COUNTS}statements", name, _task.statements)
    pipeline.hincrbyfloat(f"{COUNTS}seconds", name, time.monotonic() - _task.started)
    if name == "run_workflow":
        pipeline.hincrby(f"{COUNTS}outcomes", str(retval), 1)
        pipeline.hincrbyfloat(f"{COUNTS}outcome seconds", str(retval), time.monotonic() - _task.started)
        pipeline.hincrby(f"{COUNTS}outcome statements", str(retval), _task.statements)
    pipeline.execute()


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def read_counts(url: str) -> dict[str, Counter]:
    """What the tasks counted since the last read, and the counts reset."""
    pipeline = _redis(url).pipeline(transaction=True)
    kinds = ("messages", "statements", "seconds", "outcomes", "outcome seconds", "outcome statements")
    for kind in kinds:
        pipeline.hgetall(f"{COUNTS}{kind}")
    pipeline.delete(*(f"{COUNTS}{kind}" for kind in kinds))
    *read, _ = pipeline.execute()
    return {
        kind: Counter({key.decode(): float(value) for key, value in values.items()})
        for kind, values in zip(kinds, read, strict=True)
    }


def start_worker(env: dict, log_dir: Path, concurrency: int) -> Process:
    """As tests.support.processes.start_worker, the counting module imported."""
    options = ["-n", "worker@e2e", "--queues", "celery,webhooks", "--without-gossip", "--without-mingle"]
    return Process(
        "worker", [*WORKER, "--concurrency", str(concurrency), *options, "--loglevel", "WARNING"], env, log_dir
    )


def start_beat(env: dict, log_dir: Path) -> Process:
    """As tests.support.processes.start_beat, the counting module imported."""
    options = ["--beat", "--queues", "reconcile", "--pool", "solo", "-n", "beat@e2e", "--loglevel", "WARNING"]
    return Process("beat", [*WORKER, *options, "--schedule", str(log_dir / "beat-schedule")], env, log_dir)


def count_inspected(env) -> int:
    return int(run(sys.executable, "-c", COUNT_INSPECTED, env=env).stdout.strip())


def wait_until_inspected(env, nodes: int, timeout: float) -> float:
    started = time.monotonic()
    while count_inspected(env) < nodes:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"only {count_inspected(env)} of {nodes} nodes inspected after {timeout}s")
        time.sleep(1)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bench-lifecycle-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        "DATABASE_URL": database_url(BENCH_DB),
        "SIM_TIME_SCALE": "0",
        "GPUFLEET_RECONCILE_SECONDS": "2",
        "GPUFLEET_WORKFLOW_POLL_SECONDS": "0.05",
        "GPUFLEET_LOG_LEVEL": "WARNING",
    }
    processes: list[RedisServer | Bmcsim | Process] = []
    try:
        redis_server = RedisServer(scratch)
        processes.append(redis_server)
        env["REDIS_URL"] = redis_server.url
        fresh_database(BENCH_DB)
        bmcsim = start_bmcsim(scratch / "bmcsim", nodes=args.nodes, timeout=120)
        processes.append(bmcsim)
        env["BMCSIM_URL"] = bmcsim.url
        run(sys.executable, "manage.py", "seed_fleet", "--bmcsim-url", env["BMCSIM_URL"], "--wait", "30", env=env)
        releases = f"{env['BMCSIM_URL']}/bmcsim/v1/firmware-releases"
        run(sys.executable, "manage.py", "set_firmware_baseline", FIRMWARE_BASELINE, "--releases", releases, env=env)
        # Every boot's BMC fetches the node's config drive from the web server: this bench's own.
        web, env["GPUFLEET_CONFIG_DRIVE_BASE_URL"] = start_gunicorn("web", "gpufleet.wsgi", env, scratch)
        processes.append(web)
        processes.append(start_worker(env, scratch, concurrency=args.workers))
        processes.append(start_beat(env, scratch))
        print(f"first inspection of {args.nodes} nodes (setup) ...", file=sys.stderr)
        first = wait_until_inspected(env, args.nodes, args.timeout)
        run(sys.executable, "-c", REMOVE_BASELINES, env=env)
        without = wipe_and_inspect(env, args, "without a firmware baseline")
        run(sys.executable, "manage.py", "set_firmware_baseline", FIRMWARE_BASELINE, "--releases", releases, env=env)
        checked = wipe_and_inspect(env, args, "with the firmware check")
    finally:
        for process in reversed(processes):
            process.stop()
        drop_database(BENCH_DB)

    print(
        f"nodes / worker processes: {args.nodes} / {args.workers}; first inspection (setup): "
        f"{args.nodes / first * 60:.0f} nodes/minute"
    )
    print_table(
        [(name, f"{a:>10}  {b:>10}  {ratio}") for name, a, b, ratio in compare(without, checked)],
        heading=("wipe + inspection", f"{'no check':>10}  {'checked':>10}  checked / no check"),
    )


def wipe_and_inspect(env, args, what: str) -> dict:
    """Every node sent to wiping at once; the figures of the wipe and re-inspection that follow."""
    print(f"wipe and re-inspection, {what} ...", file=sys.stderr)
    since = run(sys.executable, "-c", NOW).stdout.strip()
    read_counts(env["REDIS_URL"])
    started = time.monotonic()
    run(sys.executable, "-c", SEND_TO_WIPING, env=env)
    handed = time.monotonic() - started
    cycle = wait_until_inspected(env, args.nodes, args.timeout) + handed
    counts = read_counts(env["REDIS_URL"])
    rows = json.loads(run(sys.executable, "-c", FIGURES % since, env=env).stdout)
    per_node = {
        key: sum(d.get(key, 0) for _, d in rows) / args.nodes
        for key in ("seconds", "bmc_seconds", "agent_seconds", "database_seconds", "redfish_calls", "agent_calls")
    }
    print_table(
        [
            (
                outcome,
                f"{n / args.nodes:8.2f}  {counts['outcome seconds'][outcome] / n:8.3f}"
                f"  {counts['outcome statements'][outcome] / n:10.1f}",
            )
            for outcome, n in sorted(counts["outcomes"].items())
        ],
        heading=(f"run_workflow's outcome, {what}", "per node  s a run  statements"),
    )
    workflow_statements = counts["statements"]["run_workflow"]
    return {
        "wall seconds": cycle,
        "nodes/minute (target >= 900)": args.nodes / cycle * 60,
        "Redfish calls per node": per_node["redfish_calls"],
        "agent calls per node": per_node["agent_calls"],
        "worker time per node, s": per_node["seconds"],
        "  waiting on the BMC (Redfish), s": per_node["bmc_seconds"],
        "  waiting on the agent, s": per_node["agent_seconds"],
        "  in the database, s": per_node["database_seconds"],
        "  the rest of the worker (Python), s": per_node["seconds"]
        - per_node["bmc_seconds"]
        - per_node["agent_seconds"]
        - per_node["database_seconds"],
        "Celery: queue and dispatch per node, s": cycle * args.workers / args.nodes - per_node["seconds"],
        "run_workflow messages per node": counts["messages"]["run_workflow"] / args.nodes,
        "  their worker time per node (all visits), s": counts["seconds"]["run_workflow"] / args.nodes,
        "  worker time per node not in them (idle, syncs), s": cycle * args.workers / args.nodes
        - counts["seconds"]["run_workflow"] / args.nodes,
        "  run_workflow's SQL statements per node": workflow_statements / args.nodes,
        "other tasks' messages per node": (counts["messages"].total() - counts["messages"]["run_workflow"])
        / args.nodes,
        "  other tasks' SQL statements per node": (counts["statements"].total() - workflow_statements) / args.nodes,
    }


def compare(without: dict, checked: dict) -> list[tuple[str, str, str, str]]:
    def shown(value: float) -> str:
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"

    return [
        (
            name,
            shown(without[name]),
            shown(checked[name]),
            f"{checked[name] / without[name]:.2f}" if without[name] else "-",
        )
        for name in without
    ]


if __name__ == "__main__":
    main()
