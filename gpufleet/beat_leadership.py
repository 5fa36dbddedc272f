"""Beat stands by: any number of beat processes may run, and the one that holds a PostgreSQL
session advisory lock schedules; the others try for it every second and schedule nothing.

The lock lives as long as its holder's connection, a dedicated one in autocommit. When the holder
dies, however it dies, its connection closes and the server frees the lock at once: a standby has
it within about a second. The leader runs a cheap query on that connection every tick (at least
once a second); if it fails, the leader stops scheduling at once and competes again.

PostgreSQL and not Redis (celery-redbeat's lock): the database is where the truth is kept, and a
Redis that fails over to a replica may lose a lock it had granted, leaving two leaders.

A network partition between the leader and the database: the leader's next check waits on an
unanswered socket, and schedules nothing while it waits; after TCP_USER_TIMEOUT_MS its kernel
gives the connection up, the check fails and it stands by. The server's side of the connection
sits idle, so the server notices the leader gone by TCP keepalives (set for this session below):
after about KEEPALIVES_IDLE + KEEPALIVES_INTERVAL * KEEPALIVES_COUNT seconds it ends the session,
the lock is freed, and a standby that still reaches the database takes over. Two leaders at once
would only enqueue each reconcile twice: every reconciler is safe to run twice at once (leases,
SKIP LOCKED claims, constraints, compare-and-set marks).

The lock is per database: control planes that share a PostgreSQL server on different databases
do not compete. The connection must reach PostgreSQL itself (or a pooler in session mode): a
transaction-mode pooler would hand the session, and its lock, to whoever comes next.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from gpufleet import heartbeat

log = logging.getLogger(__name__)

# Every gpu-fleet beat on one database competes for this key: the ASCII of "gpufleet".
LOCK_KEY = int.from_bytes(b"gpufleet", "big")
# How often a standby tries for the lock, and the longest a leader goes without checking it.
TICK_SECONDS = 1.0
# A dead peer on the lock's connection: the client gives up on unacknowledged data after
# TCP_USER_TIMEOUT_MS; an idle side probes after KEEPALIVES_IDLE seconds, every
# KEEPALIVES_INTERVAL, and gives up after KEEPALIVES_COUNT unanswered probes.
KEEPALIVES_IDLE = 5
KEEPALIVES_INTERVAL = 2
KEEPALIVES_COUNT = 3
TCP_USER_TIMEOUT_MS = 5000
# What a beat is doing, as its log says when that changes.
LEADING, STANDING_BY, NO_CONNECTION, STOPPED = "leading", "standing by", "standing by, no connection", "stopped"


def lock_connection() -> psycopg.Connection[Any]:
    """A connection of its own to the default database, in autocommit, that notices a dead peer
    on both sides: libpq's keepalives on this end, the session's on the server's."""
    entry = settings.DATABASES[DEFAULT_DB_ALIAS]
    options = dict(entry["OPTIONS"])
    server_keepalives = (
        f"-c tcp_keepalives_idle={KEEPALIVES_IDLE} -c tcp_keepalives_interval={KEEPALIVES_INTERVAL}"
        f" -c tcp_keepalives_count={KEEPALIVES_COUNT} -c tcp_user_timeout={TCP_USER_TIMEOUT_MS}"
    )
    options["options"] = f"{options.get('options', '')} {server_keepalives}".strip()
    return psycopg.connect(
        dbname=entry["NAME"],
        user=entry["USER"] or None,
        password=entry["PASSWORD"] or None,
        host=entry["HOST"] or None,
        port=entry["PORT"] or None,
        **options,
        autocommit=True,
        application_name="gpufleet beat leadership",
        keepalives=1,
        keepalives_idle=KEEPALIVES_IDLE,
        keepalives_interval=KEEPALIVES_INTERVAL,
        keepalives_count=KEEPALIVES_COUNT,
        tcp_user_timeout=TCP_USER_TIMEOUT_MS,
    )


class LeaderScheduler(PersistentScheduler):
    """PersistentScheduler while it holds the lock; otherwise a standby that schedules nothing.
    It also writes beat's heartbeat (GPUFLEET_HEARTBEAT_FILE, gpufleet.heartbeat) as it ticks,
    leader or standby."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._connection: psycopg.Connection[Any] | None = None
        self._state = ""  # until the first tick has looked: then LEADING, STANDING_BY, NO_CONNECTION
        path = settings.HEARTBEAT_FILE
        self._heartbeat = heartbeat.Heartbeat(heartbeat.file_of(Path(path), heartbeat.BEAT)) if path else None
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._heartbeat is not None:
            self._heartbeat.beat()
        if not self._lead():
            return TICK_SECONDS
        return min(super().tick(*args, **kwargs), TICK_SECONDS)

    def _lead(self) -> bool:
        """Whether this process holds the lock now: checked on its connection if it led, tried
        for if not."""
        try:
            if self._connection is None:
                self._connection = lock_connection()
            if self._state == LEADING:
                self._connection.execute("SELECT 1")
                return True
            row = self._connection.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
        except psycopg.Error as exc:
            self._close_connection()  # whatever it held is gone with it
            self._become(NO_CONNECTION, f"the lock's connection failed ({type(exc).__name__}: {str(exc).strip()})")
            return False
        if row is not None and row[0]:
            self._heap = None  # what is due is worked out afresh: another beat scheduled meanwhile
            self._become(LEADING, f"this process holds the advisory lock {LOCK_KEY} and schedules")
            return True
        self._become(STANDING_BY, f"another beat holds the advisory lock {LOCK_KEY}")
        return False

    def _become(self, state: str, why: str) -> None:
        """Log each change of leadership, once."""
        if state != self._state:
            lost = state == NO_CONNECTION or (self._state == LEADING and state != STOPPED)
            level = logging.WARNING if lost else logging.INFO
            log.log(level, "beat: %s: %s", state, why)
            self._state = state

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()  # if it was still up, the server frees the lock now
            self._connection = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._close_connection()
            self._become(STOPPED, "the lock's connection is closed")
