"""The liveness probe's check (`python -m gpufleet.heartbeat PATH --max-age SECONDS`) and the
heartbeat its loops write. That workers and beat write theirs as they run: tests/e2e/test_beat_standby.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from gpufleet import heartbeat
from tests.support import REPO_ROOT


def written(path, seconds_ago: float, now: float | None = None) -> None:
    path.touch()
    when = (time.time() if now is None else now) - seconds_ago
    os.utime(path, (when, when))


def check(path, max_age: float = 60) -> tuple[int, str]:
    """The probe's exact command, as Kubernetes runs it."""
    command = [sys.executable, "-m", "gpufleet.heartbeat", str(path), "--max-age", str(max_age)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout


def test_a_fresh_heartbeat_passes_and_a_stale_or_missing_one_fails(tmp_path):
    path = tmp_path / "heartbeat"
    assert check(path) == (1, f"no heartbeat at {path}\n")
    written(path, seconds_ago=5)
    assert check(path) == (0, "")
    written(path, seconds_ago=75)
    status, why = check(path)
    assert status == 1 and re.fullmatch(rf"{re.escape(str(path))} is 7\ds old \(at most 60s\)\n", why), why


@pytest.mark.parametrize(
    ("worker_age", "beat_age", "why"),
    [
        (None, 5, None),  # beat on its own
        (5, 5, None),  # beat inside the reconcile queue's worker
        (5, 90, "heartbeat.beat is 90s old"),  # the worker's loop turns, beat's hung
        (90, 5, "heartbeat is 90s old"),  # and the other way round
    ],
)
def test_every_heartbeat_written_under_the_path_must_be_fresh(tmp_path, worker_age, beat_age, why):
    path = tmp_path / "heartbeat"
    now = time.time()
    for role, age in [(heartbeat.WORKER, worker_age), (heartbeat.BEAT, beat_age)]:
        if age is not None:
            written(heartbeat.file_of(path, role), seconds_ago=age, now=now)
    assert heartbeat.stale(path, max_age=60, now=now) == (why and f"{tmp_path}/{why} (at most 60s)")


def test_a_loop_that_turns_often_touches_its_file_once_an_interval(tmp_path):
    path = tmp_path / "heartbeat.beat"
    beating = heartbeat.Heartbeat(path)
    beating.beat()
    first = path.stat().st_mtime_ns
    written(path, seconds_ago=30)  # as if a while ago: the next beats within the interval leave it
    beating.beat()
    assert path.stat().st_mtime_ns < first
