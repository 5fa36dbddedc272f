"""Beat stands by: two beat processes (each, as the Procfile's, the reconcile queue's worker with
beat inside it) on the test database and a Redis of the test's own. Exactly one schedules; the
other waits on the PostgreSQL advisory lock (gpufleet/beat_leadership.py). SIGKILL the leader:
the standby takes over and schedules well within TAKEOVER_LIMIT_SECONDS. Each also writes its
heartbeats, which `python -m gpufleet.heartbeat` finds fresh. A leader whose lock's session ends
stands by, and competes again."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from tests.support import REPO_ROOT
from tests.support.processes import CELERY_WORKER, Process, process_env, wait_for

TAKEOVER_LIMIT_SECONDS = 10  # issue #36's bound
SCHEDULED = re.compile(r"Scheduler: Sending due task reconcile-nodes")
STANDING_BY = "beat: standing by: another beat holds the advisory lock"
LEADING = "beat: leading: this process holds the advisory lock"


def start_beat(name: str, env: dict, tmp_path: Path) -> Process:
    """A beat as the Procfile runs it, with a node name, a schedule and a heartbeat of its own."""
    home = tmp_path / name
    home.mkdir()
    options = ["--beat", "--queues", "reconcile", "--pool", "solo", "-n", f"{name}@e2e", "--loglevel", "INFO"]
    env = {**env, "GPUFLEET_HEARTBEAT_FILE": str(home / "heartbeat")}
    return Process(name, [*CELERY_WORKER, *options, "--schedule", str(home / "schedule")], env, tmp_path)


def scheduled(beat: Process) -> int:
    return len(SCHEDULED.findall(beat.output()))


def heartbeat_check(beat: Process) -> subprocess.CompletedProcess:
    heartbeat = beat.log.parent / beat.name / "heartbeat"
    command = [sys.executable, "-m", "gpufleet.heartbeat", str(heartbeat), "--max-age", "60"]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)


def test_one_beat_schedules_and_the_standby_takes_over_when_it_is_killed(transactional_db, tmp_path, private_redis):
    env = {**process_env(tmp_path), "REDIS_URL": private_redis.url, "GPUFLEET_RECONCILE_SECONDS": "0.5"}
    beats = [start_beat("beat-a", env, tmp_path), start_beat("beat-b", env, tmp_path)]
    try:
        wait_for("a beat to schedule", lambda: any(scheduled(beat) for beat in beats), timeout=30)
        leader, standby = sorted(beats, key=scheduled, reverse=True)
        wait_for("the other beat to stand by", lambda: STANDING_BY in standby.output(), timeout=20)
        sent_by_leader = scheduled(leader)
        time.sleep(2)  # four reconcile intervals
        assert scheduled(leader) > sent_by_leader, "the leader schedules on"
        assert scheduled(standby) == 0, standby.output()[-4000:]
        for beat in beats:  # each writes the worker's heartbeat and beat's, and they are fresh
            assert {p.name for p in (tmp_path / beat.name).iterdir()} >= {"heartbeat", "heartbeat.beat"}
            check = heartbeat_check(beat)
            assert (check.returncode, check.stdout) == (0, ""), check.stdout

        leader.kill()
        killed_at = time.monotonic()
        wait_for("the standby to schedule", lambda: scheduled(standby) > 0, timeout=TAKEOVER_LIMIT_SECONDS)
        takeover = time.monotonic() - killed_at
        print(f"the standby scheduled {takeover:.2f}s after the leader was killed")
        assert LEADING in standby.output()
        assert takeover < TAKEOVER_LIMIT_SECONDS

        # Its lock's session ended from the server's side: it stands by at once, and (alone) leads again.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'gpufleet beat leadership'"
            )
        wait_for("the leader to lead again", lambda: standby.output().count(LEADING) == 2, timeout=10)
        assert "beat: standing by, no connection: the lock's connection failed" in standby.output()
    except BaseException:
        for beat in beats:
            print(f"==== {beat.name}\n{beat.output()[-4000:]}")
        raise
    finally:
        for beat in beats:
            beat.stop()
