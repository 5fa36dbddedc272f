"""Child processes as the tests, the soak and the benchmarks run them, and the one starter of
each: Redis, gunicorn, Celery workers and beat, Prometheus and Alertmanager (bmcsim's is in
tests.support.bmcsim)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis
import requests
from django.db import connection

from attestation.ear import generate_signing_key
from tests.support import REPO_ROOT
from tests.support.ports import free_port


def tool(name: str) -> str:
    """The path of a command the tests run; a failure, never a skip, if it is missing."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is not installed: make setup (bin/install-prerequisites) installs it")
    return path


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def answers(url: str) -> bool:
    """Whether `url` answers with anything but a server error."""
    try:
        return requests.get(url, timeout=2).status_code < 500
    except requests.RequestException:
        return False


class Process:
    """A child process in its own session, with its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict, log_dir: Path):
        self.name = name
        self.log = log_dir / f"{name}.log"
        with self.log.open("ab") as log:  # the child keeps its own copy of the file
            self.popen = subprocess.Popen(
                args, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def signal(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL: no chance to clean up."""
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def once_ready(process: Process, what: str, check: Callable[[], bool], timeout: float) -> Process:
    """`process` once `check` holds; stopped, and the wait's error raised, if it never does."""
    try:
        wait_for(what, check, timeout=timeout)
    except BaseException:
        process.stop()
        raise
    return process


class RedisServer:
    """A private Redis, so a test may restart it without touching anyone else's."""

    def __init__(self, log_dir: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_dir = log_dir
        self.process: Process  # set by start()
        self.start()

    def start(self) -> None:
        self.process = Process(
            f"redis-{self.port}",
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            os.environ.copy(),
            self.log_dir,
        )
        client = redis.Redis.from_url(self.url)
        once_ready(self.process, "redis", lambda: _pings(client), timeout=10)

    def stop(self) -> None:
        self.process.stop()


def _pings(client) -> bool:
    try:
        return client.ping()
    except redis.RedisError:
        return False


def process_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a control-plane process in a test: the project's settings on this
    test's database, with a result-signing key of its own (under tmp_path/signing-keys), and
    per-tenant rates no test reaches unless it sets its own."""
    db = connection.settings_dict
    keys = tmp_path / "signing-keys"
    if not keys.exists():
        keys.mkdir()
        generate_signing_key(keys / "key.pem")
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        "GPUFLEET_SIGNING_KEY": str(keys),
        "GPUFLEET_API_READ_RATE": "100000/min",
        "GPUFLEET_API_WRITE_RATE": "100000/min",
    }


def start_gunicorn(
    name: str, wsgi: str, env: dict, log_dir: Path, processes: int = 2, port: int | None = None
) -> tuple[Process, str]:
    """gunicorn serving a listener on `port` (a free one if None); the process and its base URL, once it answers."""
    port = port or free_port()
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        wsgi,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(processes),
        "--log-level",
        "warning",
    ]
    url = f"http://127.0.0.1:{port}"
    process = once_ready(Process(name, args, env, log_dir), f"{name} ({wsgi})", lambda: answers(f"{url}/healthz"), 30)
    return process, url


def run_schemathesis(wsgi: str, tmp_path: Path, *options: str, **env: str) -> subprocess.CompletedProcess:
    """schemathesis against a listener's own OpenAPI document, checking that nothing answers 5xx."""
    server, url = start_gunicorn("listener", wsgi, {**process_env(tmp_path), **env}, tmp_path)
    try:
        return subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                f"{url}/v1/schema",
                *options,
                "--checks",
                "not_a_server_error",
                "--generation-deterministic",
                "--request-timeout",
                "20",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()


CELERY_WORKER = [sys.executable, "-m", "celery", "-A", "gpufleet", "worker"]


def start_worker(
    name: str,
    env: dict,
    log_dir: Path,
    concurrency: int | None = None,
    loglevel="INFO",
    queues: str = "celery,webhooks",
) -> Process:
    """A Celery worker: one task at a time (--pool solo), unless `concurrency` asks for that
    many child processes. Solo says --concurrency 1 too: its prefetch is concurrency times the
    multiplier, and a message prefetched by a worker that is then killed waits unacked while its
    node's waiting mark keeps the reconciler from sending it again. It works the node workers'
    queue and the webhooks' (the Procfile gives the webhooks workers of their own), unless
    `queues` says which."""
    pool = ["--pool", "solo", "--concurrency", "1"] if concurrency is None else ["--concurrency", str(concurrency)]
    options = ["-n", f"{name}@e2e", "--queues", queues, "--without-gossip", "--without-mingle", "--loglevel", loglevel]
    return Process(name, [*CELERY_WORKER, *pool, *options], env, log_dir)


def start_beat(env: dict, log_dir: Path, loglevel="INFO") -> Process:
    """As the Procfile's beat: the scheduler, and the worker of the reconcile queue."""
    options = ["--beat", "--queues", "reconcile", "--pool", "solo", "-n", "beat@e2e", "--loglevel", loglevel]
    return Process("beat", [*CELERY_WORKER, *options, "--schedule", str(log_dir / "beat-schedule")], env, log_dir)


def start_alertmanager(config: Path, storage: Path, port: int, log_dir: Path) -> Process:
    """Debian's prometheus-alertmanager, no cluster port; once it is ready."""
    options = [f"--config.file={config}", f"--storage.path={storage}", "--cluster.listen-address="]
    return _ready_on_port("alertmanager", ["prometheus-alertmanager", *options], port, log_dir)


def start_prometheus(config: Path, storage: Path, port: int, log_dir: Path) -> Process:
    """Debian's prometheus; once it is ready."""
    options = [f"--config.file={config}", f"--storage.tsdb.path={storage}"]
    return _ready_on_port("prometheus", ["prometheus", *options], port, log_dir)


def _ready_on_port(name: str, args: list[str], port: int, log_dir: Path) -> Process:
    """Prometheus or Alertmanager listening on `port`, once its /-/ready answers."""
    process = Process(name, [*args, f"--web.listen-address=127.0.0.1:{port}"], os.environ.copy(), log_dir)
    return once_ready(process, name, lambda: answers(f"http://127.0.0.1:{port}/-/ready"), 30)
