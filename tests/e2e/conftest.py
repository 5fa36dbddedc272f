"""Whole-system fixtures: bmcsim, Redis, Celery workers and beat as real processes, against the
test database (transactional tests, so every process sees what the others commit)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
import redis
import requests
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from attestation import services as attestation
from attestation.ear import generate_signing_key
from tests.bmcsim.conftest import free_port, start_bmcsim

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_NODES = 24
WEBHOOK_TOKEN = "e2e-webhook-token"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Process:
    """A child process in its own session, with its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict, log_dir: Path):
        self.name = name
        self.log = log_dir / f"{name}.log"
        self.popen = subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def signal(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class RedisServer:
    """A private Redis, so a test may restart it without touching anyone else's."""

    def __init__(self, log_dir: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_dir = log_dir
        self.process = None
        self.start()

    def start(self) -> None:
        self.process = Process(
            f"redis-{self.port}",
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            os.environ.copy(),
            self.log_dir,
        )
        client = redis.Redis.from_url(self.url)
        wait_for("redis", lambda: _pings(client), timeout=10)

    def stop(self) -> None:
        self.process.stop()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code < 500
    except requests.RequestException:
        return False


def _pings(client) -> bool:
    try:
        return client.ping()
    except redis.RedisError:
        return False


def process_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a control-plane process in a test: the project's settings on this
    test's database, with a result-signing key of its own (under tmp_path/signing-keys)."""
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
    process = Process(name, args, env, log_dir)
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{name} ({wsgi})", lambda: _answers(f"{url}/healthz"), timeout=30)
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


class ControlPlane:
    """Workers and beat of the control plane, started with the settings a test needs."""

    def __init__(self, tmp_path: Path, bmcsim_url: str, redis_server: RedisServer, **overrides: str):
        self.tmp_path = tmp_path
        self.bmcsim_url = bmcsim_url
        self.redis = redis_server
        self.env = {
            **process_env(tmp_path),
            "REDIS_URL": redis_server.url,
            "BMCSIM_URL": bmcsim_url,
            "GPUFLEET_LEASE_SECONDS": "3",
            "GPUFLEET_RECONCILE_SECONDS": "0.5",
            "GPUFLEET_WORKFLOW_POLL_SECONDS": "0.05",
            "GPUFLEET_BMC_TIMEOUT": "2",
            "GPUFLEET_AGENT_BOOT_TIMEOUT": "20",
            "GPUFLEET_WIPE_TIMEOUT": "30",
            "GPUFLEET_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            **overrides,
        }
        self.workers: dict[str, Process] = {}
        self.beat: Process | None = None
        self.monitoring: Monitoring | None = None

    def start_worker(self, name: str) -> Process:
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpufleet",
            "worker",
            "--pool",
            "solo",
            "-n",
            f"{name}@e2e",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ]
        self.workers[name] = Process(name, args, self.env, self.tmp_path)
        return self.workers[name]

    def start_beat(self) -> Process:
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpufleet",
            "worker",
            "--beat",  # as the Procfile's beat: the scheduler, and the worker of the reconcile queue
            "--queues",
            "reconcile",
            "--pool",
            "solo",
            "-n",
            "beat@e2e",
            "--loglevel",
            "INFO",
            "--schedule",
            str(self.tmp_path / "beat-schedule"),
        ]
        self.beat = Process("beat", args, self.env, self.tmp_path)
        return self.beat

    @property
    def signing_keys(self) -> Path:
        return Path(self.env["GPUFLEET_SIGNING_KEY"])

    def start_web(self, name: str = "web", processes: int = 2, port: int | None = None) -> str:
        """gunicorn serving the private listener; returns its base URL once it answers."""
        self.workers[name], url = start_gunicorn(name, "gpufleet.wsgi", self.env, self.tmp_path, processes, port)
        return url

    def configure_attestation(self) -> None:
        """What an operator does once: trust the vendors' roots and import their golden digests."""
        call_command("import_trust_anchors", f"{self.bmcsim_url}/bmcsim/v1/roots", stdout=StringIO())
        call_command("import_reference_values", f"{self.bmcsim_url}/bmcsim/v1/reference-values", stdout=StringIO())

    def start_stack(self) -> Monitoring:
        """The whole demo stack but bmcsim: the fleet enrolled from it and attestation configured,
        gunicorn, two workers, beat, and Prometheus with Alertmanager pointed at this web server."""
        call_command("seed_fleet", "--bmcsim-url", self.bmcsim_url, stdout=StringIO())
        self.configure_attestation()
        web = self.start_web()
        self.start_worker("w1")
        self.start_worker("w2")
        self.start_beat()
        self.monitoring = Monitoring(self.tmp_path, web)
        return self.monitoring

    def stop(self) -> None:
        if self.monitoring is not None:
            self.monitoring.stop()
        for process in [*self.workers.values(), self.beat]:
            if process is not None:
                process.stop()

    def logs(self) -> str:
        return "\n".join(f"==== {p.name}\n{p.output()[-4000:]}" for p in [*self.workers.values(), self.beat] if p)


@pytest.fixture
def bmcsim(tmp_path):
    sim = start_bmcsim(tmp_path / "bmcsim", nodes=E2E_NODES)
    yield sim
    sim.stop()


@pytest.fixture
def private_redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def control_plane(transactional_db, tmp_path, bmcsim, private_redis, request):
    """Two workers and beat, not started until the test calls `start()`; stopped before the database is flushed."""
    overrides = getattr(request, "param", {})
    plane = ControlPlane(tmp_path, bmcsim.url, private_redis, **overrides)
    # This process reads results and serves the JWKS with the workers' signing keys.
    with override_settings(GPUFLEET_SIGNING_KEY=str(plane.signing_keys)):
        attestation.signing_keys.cache_clear()
        yield plane
    attestation.signing_keys.cache_clear()
    plane.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print(plane.logs())
    # What this process enqueued on commit went to the tests' own broker, which no worker reads.
    redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.report_call = report
    return report


class Monitoring:
    """Prometheus and Alertmanager from Debian's packages, with the shipped configs pointed at
    this test's web server, each with its own data folder."""

    def __init__(self, tmp_path: Path, web_url: str):
        self.dir = tmp_path / "monitoring"
        shutil.copytree(REPO_ROOT / "deploy", self.dir / "deploy")
        self.alertmanager_port = free_port()
        self.prometheus_port = free_port()
        token_file = self.dir / "webhook-token"
        token_file.write_text(WEBHOOK_TOKEN)
        web = web_url.removeprefix("http://")
        prometheus_yml = self.dir / "deploy" / "prometheus" / "prometheus.yml"
        prometheus_yml.write_text(
            prometheus_yml.read_text()
            .replace("127.0.0.1:8000", web)
            .replace("127.0.0.1:9093", f"127.0.0.1:{self.alertmanager_port}")
        )
        alertmanager_yml = self.dir / "deploy" / "alertmanager" / "alertmanager.yml"
        alertmanager_yml.write_text(
            re.sub(r"credentials_file: .*", f"credentials_file: {token_file}", alertmanager_yml.read_text()).replace(
                "127.0.0.1:8000", web
            )
        )
        self.alertmanager = Process(
            "alertmanager",
            [
                "prometheus-alertmanager",
                f"--config.file={alertmanager_yml}",
                f"--storage.path={self.dir / 'am'}",
                f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
                "--cluster.listen-address=",
            ],
            os.environ.copy(),
            tmp_path,
        )
        self.prometheus = Process(
            "prometheus",
            [
                "prometheus",
                f"--config.file={prometheus_yml}",
                f"--storage.tsdb.path={self.dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            ],
            os.environ.copy(),
            tmp_path,
        )
        wait_for("alertmanager", lambda: _answers(f"http://127.0.0.1:{self.alertmanager_port}/-/ready"), timeout=30)
        wait_for("prometheus", lambda: _answers(f"http://127.0.0.1:{self.prometheus_port}/-/ready"), timeout=30)

    def active_targets(self) -> int:
        answer = requests.get(f"http://127.0.0.1:{self.prometheus_port}/api/v1/targets", timeout=5).json()
        return sum(
            t["health"] == "up" for t in answer["data"]["activeTargets"] if t["labels"].get("job") == "node-agents"
        )

    def stop(self) -> None:
        self.prometheus.stop()
        self.alertmanager.stop()
