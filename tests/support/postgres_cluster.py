"""A PostgreSQL primary and a synchronous standby of its own, for the tests (and the soak) that kill
the primary and fail over: Debian's PostgreSQL (15 on bookworm) on two free loopback ports, each
server's data in a temporary folder, not the system's cluster on 5432.

The primary waits, at every commit, for the standby to have the commit's WAL on disk
(synchronous_standby_names = '*'): what a client saw committed survives the primary's death. The
standby serves reads only, as CloudNativePG's replicas do, so a control plane given both hosts
with target_session_attrs=read-write connects to whichever is the primary. PostgreSQL refuses to
run as root: a test run as root (CI's containers) runs every server and tool as the postgres user,
as Debian's own cluster runs.

    cluster = PostgresCluster()       # started, the standby streaming synchronously
    cluster.kill_primary()            # SIGKILL to the postmaster and every backend at once
    cluster.promote_standby()         # the standby is the primary; writes wait for a standby
    cluster.rebuild_standby()         # the old primary is the new standby (pg_basebackup)
    cluster.stop()
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import psycopg

from tests.support.ports import free_port

SUPERUSER = "postgres"
# Appended to the primary's postgresql.conf, which pg_basebackup copies to each standby.
SETTINGS = """
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
# Every commit waits for a standby's flush of its WAL, whichever standby is connected.
synchronous_standby_names = '*'
# The tests kill processes, never the machine: what a killed server wrote is in the page cache.
fsync = off
shared_buffers = 32MB
"""


@functools.cache
def _bin() -> Path:
    """The newest PostgreSQL Debian installs, as bin/install-prerequisites picks it (15 on bookworm)."""
    installed = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/postgres")]
    if not installed:
        raise AssertionError("PostgreSQL's server is not installed: make setup (bin/install-prerequisites) installs it")
    return max(installed, key=lambda path: int(path.parent.name))


def _run_as() -> dict:
    """subprocess's arguments that run a server or tool as the postgres user when this process is
    root (PostgreSQL refuses root), as this process's user otherwise."""
    if os.geteuid() != 0:
        return {}
    return {"user": SUPERUSER, "group": pwd.getpwnam(SUPERUSER).pw_gid, "extra_groups": []}


def _tool(*args: str | Path, cwd: Path) -> None:
    """One of PostgreSQL's tools, run to completion; its output in the failure if it fails."""
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=60, **_run_as())
    if done.returncode != 0:
        raise AssertionError(f"{Path(args[0]).name} failed ({done.returncode}): {done.stdout}{done.stderr}")


def multi_host_url(ports: Iterable[int], database: str) -> str:
    """A control plane's DATABASE_URL over the servers on these loopback ports, first started first:
    whichever is the primary."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    return f"postgresql://{SUPERUSER}@{hosts}/{database}?target_session_attrs=read-write"


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, as /proc lists them now."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # pid (comm) state ppid ...: the command may hold spaces and parentheses.
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


class Server:
    """One postmaster on 127.0.0.1:`port` with its data in `data`, in a session of its own, its log
    beside the data."""

    def __init__(self, name: str, data: Path, port: int):
        self.name = name
        self.data = data
        self.port = port
        self.log = data.with_suffix(".log")
        self.postmaster: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> None:
        with self.log.open("ab") as log:
            self.postmaster = subprocess.Popen(
                [str(_bin() / "postgres"), "-D", str(self.data), "-p", str(self.port)],
                cwd=self.data.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_run_as(),
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.postmaster.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"PostgreSQL {self.name} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def answers(self) -> bool:
        try:
            with self.connect(connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def connect(self, dbname: str = "postgres", **options) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=dbname, autocommit=True, **options
        )

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple]:
        """`sql` run in its own connection; the rows it returned, if any."""
        with self.connect(dbname, connect_timeout=5) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if cursor.description is not None else []

    def kill(self) -> None:
        """SIGKILL to the postmaster and every process it started, as when its container or
        machine dies: no shutdown checkpoint, no goodbye to its clients. (Each backend is in a
        session of its own, so the postmaster's process group is the postmaster alone.) The
        postmaster is stopped first, so that it starts no process meanwhile, and killed last, so
        that no backend outlives it long enough to tell its client."""
        assert self.postmaster is not None, f"PostgreSQL {self.name} was not started"
        os.kill(self.postmaster.pid, signal.SIGSTOP)
        for pid in (*_children(self.postmaster.pid), self.postmaster.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.postmaster.wait(timeout=10)

    def stop(self) -> None:
        """A fast shutdown (SIGINT); SIGKILL if it takes more than ten seconds."""
        if self.postmaster is None or self.postmaster.poll() is not None:
            return
        self.postmaster.send_signal(signal.SIGINT)
        try:
            self.postmaster.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


class PostgresCluster:
    """A primary and its synchronous standby, started, on `ports` (the soak names its URL before it
    starts them: multi_host_url) or free ones; `primary` and `standby` follow failovers."""

    def __init__(self, ports: tuple[int, int] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gpufleet-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, SUPERUSER, pwd.getpwnam(SUPERUSER).pw_gid)
        first, second = (
            Server(name, self.root / name, port)
            for name, port in zip("ab", ports or (free_port(), free_port()), strict=True)
        )
        self.servers = (first, second)
        self.primary: Server = first
        self.standby: Server | None = second
        try:
            _tool(_bin() / "initdb", "-D", first.data, "-U", SUPERUSER, "--auth=trust", "--no-sync", cwd=self.root)
            with (first.data / "postgresql.conf").open("a") as conf:
                conf.write(SETTINGS)
            first.start()
            self._start_standby(second)
        except BaseException:
            self.stop()
            raise

    def url(self, database: str) -> str:
        """The control plane's DATABASE_URL: both hosts, whichever is the primary."""
        return multi_host_url((server.port for server in self.servers), database)

    def create_database(self, name: str, *, copy_of: str | None = None) -> None:
        """A database on the primary: empty, or a copy of `copy_of`, a libpq URL of a database on
        any server (pg_dump, then psql): a schema migrated elsewhere, without migrating again."""
        self.primary.execute(f'CREATE DATABASE "{name}"')
        if copy_of is not None:
            dump = self.root / f"{name}.sql"
            _tool(_bin() / "pg_dump", "--no-owner", "--no-privileges", "-f", dump, copy_of, cwd=self.root)
            target = f"postgresql://{SUPERUSER}@127.0.0.1:{self.primary.port}/{name}"
            _tool(_bin() / "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, target, cwd=self.root)
            dump.unlink()

    def kill_primary(self) -> Server:
        """The primary killed (SIGKILL): no server takes writes until promote_standby()."""
        killed = self.primary
        killed.kill()
        return killed

    def promote_standby(self, timeout: float = 30) -> Server:
        """The standby promoted to primary, once it takes writes. Its commits wait for a standby
        (synchronous_standby_names) until rebuild_standby() gives it one."""
        assert self.standby is not None, "no standby to promote"
        promoted = self.standby
        _tool(_bin() / "pg_ctl", "promote", "-D", promoted.data, "-w", "-t", str(int(timeout)), cwd=self.root)
        self.primary, self.standby = promoted, None
        return promoted

    def rebuild_standby(self) -> Server:
        """The server that is not the primary (the one killed) made a standby of the primary: its
        data thrown away and copied again from the primary (pg_basebackup -R), started on its
        port, once the primary's commits wait for it again."""
        (rebuilt,) = (server for server in self.servers if server is not self.primary)
        rebuilt.stop()
        shutil.rmtree(rebuilt.data, ignore_errors=True)
        self._start_standby(rebuilt)
        return rebuilt

    def _start_standby(self, server: Server, timeout: float = 30) -> None:
        _tool(
            _bin() / "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.primary.port), "-U", SUPERUSER),
            *("-D", server.data, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
            cwd=self.root,
        )
        server.start()
        self.standby = server
        deadline = time.monotonic() + timeout
        while self.primary.execute("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
            if time.monotonic() > deadline:
                raise AssertionError(f"standby {server.name} is not streaming synchronously: {server.log}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Every server stopped and their data removed."""
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)
