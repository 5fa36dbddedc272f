"""Heartbeat files for liveness probes: a Celery worker touches one from its consumer's event loop
(gpufleet.worker_heartbeat), beat from its scheduler's tick (gpufleet.beat_leadership), so a
loop that hangs lets its file go stale; a process that only crashed is restarted without one.

    python -m gpufleet.heartbeat PATH --max-age SECONDS

exits 0 while every heartbeat written under PATH is fresh, else 1 with one line why: this is what
a Kubernetes exec liveness probe runs. A worker writes PATH itself; beat, which the Procfile and
the manifests run inside the reconcile queue's worker, writes PATH.beat beside it, so that either
loop hanging fails the probe. No Django here: the probe starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# How often a loop touches its file: well inside any probe's --max-age.
INTERVAL_SECONDS = 10.0
WORKER, BEAT = "worker", "beat"


def file_of(path: Path, role: str) -> Path:
    """Where `role` (WORKER or BEAT) writes its heartbeat, for GPUFLEET_HEARTBEAT_FILE=`path`."""
    return path if role == WORKER else path.with_name(f"{path.name}.{role}")


def touch(path: Path) -> None:
    path.touch()


class Heartbeat:
    """The heartbeat of a loop that turns far more often than INTERVAL_SECONDS: it touches its file
    on the first beat and then at most once an interval."""

    def __init__(self, path: Path):
        self.path = path
        self._last: float | None = None

    def beat(self) -> None:
        now = time.monotonic()
        if self._last is None or now - self._last >= INTERVAL_SECONDS:
            touch(self.path)
            self._last = now


def stale(path: Path, *, max_age: float, now: float | None = None) -> str | None:
    """Why the heartbeats under `path` are not fresh (None: they are). Each role's file that
    exists must be younger than `max_age` seconds; at least one must exist."""
    now = time.time() if now is None else now
    written = [file for file in (file_of(path, role) for role in (WORKER, BEAT)) if file.exists()]
    if not written:
        return f"no heartbeat at {path}"
    for file in written:
        try:
            age = now - file.stat().st_mtime
        except FileNotFoundError:  # removed between the two looks: nothing is writing it
            return f"no heartbeat at {file}"
        if age > max_age:
            return f"{file} is {age:.0f}s old (at most {max_age:g}s)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpufleet.heartbeat", description="Exit 0 if the heartbeats under PATH are fresh, else 1."
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="GPUFLEET_HEARTBEAT_FILE of the process")
    parser.add_argument("--max-age", type=float, required=True, metavar="SECONDS")
    args = parser.parse_args(argv)
    if (why := stale(args.path, max_age=args.max_age)) is not None:
        print(why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
