"""The control plane as real processes (web, workers, beat, Prometheus and Alertmanager) on the
test database, and what a tenant does with its results."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import requests
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.support import REPO_ROOT
from tests.support.bmcsim import agents_tls
from tests.support.ports import free_port
from tests.support.processes import (
    Process,
    RedisServer,
    process_env,
    start_alertmanager,
    start_beat,
    start_gunicorn,
    start_prometheus,
    start_worker,
)
from tests.support.redis_sentinel import SentinelCluster

WEBHOOK_TOKEN = "e2e-webhook-token"
PROMETHEUS_TOKEN = "e2e-prometheus-token"


class ControlPlane:
    """Workers and beat of the control plane, started with the settings a test needs."""

    def __init__(
        self,
        tmp_path: Path,
        bmcsim_url: str,
        redis_server: RedisServer | SentinelCluster,
        *,
        web_port: int | None = None,
        scrape_interval: str = "1s",
        **overrides: str,
    ):
        self.tmp_path = tmp_path
        self.bmcsim_url = bmcsim_url
        # Where the web server listens: bmcsim's agents report XIDs there (if start_bmcsim was told),
        # and the BMCs fetch the config drives of every boot from it.
        self.web_port = web_port or free_port()
        self.scrape_interval = scrape_interval
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
            "GPUFLEET_CONFIG_DRIVE_BASE_URL": f"http://127.0.0.1:{self.web_port}",
            "GPUFLEET_PROMETHEUS_TOKEN": PROMETHEUS_TOKEN,
            "GPUFLEET_OCSP_RESPONDER": f"{bmcsim_url}/bmcsim/v1/ocsp",
            **overrides,
        }
        self.workers: dict[str, Process] = {}
        self.beat: Process | None = None
        self.monitoring: Monitoring | None = None

    def start_worker(self, name: str, **options) -> Process:
        if "web" not in self.workers:  # a worker boots nodes whose BMCs fetch their config drives from it
            self.start_web()
        self.workers[name] = start_worker(name, self.env, self.tmp_path, **options)
        return self.workers[name]

    def start_beat(self) -> Process:
        self.beat = start_beat(self.env, self.tmp_path)
        return self.beat

    @property
    def signing_keys(self) -> Path:
        return Path(self.env["GPUFLEET_SIGNING_KEY"])

    def start_web(self, name: str = "web", processes: int = 2, port: int | None = None) -> str:
        """gunicorn serving the private listener (on web_port unless told); returns its base URL
        once it answers. The web server a worker started already is the one asked for."""
        port = port or self.web_port
        if name in self.workers and self.workers[name].popen.poll() is None:
            return f"http://127.0.0.1:{port}"
        self.workers[name], url = start_gunicorn(name, "gpufleet.wsgi", self.env, self.tmp_path, processes, port)
        return url

    def configure_attestation(self) -> None:
        """What an operator does once: trust the vendors' roots and import their golden digests."""
        call_command("import_trust_anchors", f"{self.bmcsim_url}/bmcsim/v1/roots", stdout=StringIO())
        call_command("import_reference_values", f"{self.bmcsim_url}/bmcsim/v1/reference-values", stdout=StringIO())
        call_command("import_gpu_rims", f"{self.bmcsim_url}/bmcsim/v1/gpu-rims", stdout=StringIO())

    def start_stack(self) -> Monitoring:
        """The whole demo stack but bmcsim: the fleet enrolled from it and attestation configured,
        gunicorn, two workers, beat, and Prometheus with Alertmanager pointed at this web server."""
        call_command("seed_fleet", "--bmcsim-url", self.bmcsim_url, stdout=StringIO())
        self.configure_attestation()
        web = self._start_processes()
        self.monitoring = Monitoring(self.tmp_path, web, self.scrape_interval)
        return self.monitoring

    def _start_processes(self) -> str:
        web = self.start_web(port=self.web_port)
        self.web_port = int(web.rsplit(":", 1)[1])
        self.start_worker("w1")
        self.start_worker("w2")
        self.start_beat()
        return web

    def restart_stack(self) -> None:
        """Every process of start_stack stopped and started again on the same ports and data, as
        after a host reboot: Prometheus keeps its series, Alertmanager its notification log."""
        self.stop()
        self._start_processes()
        assert self.monitoring is not None, "restart_stack restarts what start_stack started"
        self.monitoring.start()

    def stop(self) -> None:
        if self.monitoring is not None:
            self.monitoring.stop()
        for process in [*self.workers.values(), self.beat]:
            if process is not None:
                process.stop()

    def logs(self) -> str:
        return "\n".join(f"==== {p.name}\n{p.output()[-4000:]}" for p in [*self.workers.values(), self.beat] if p)


class Monitoring:
    """Prometheus and Alertmanager from Debian's packages, with the shipped configs pointed at
    this test's web server, each with its own data folder; Prometheus scrapes the agents of the
    bmcsim whose data is in `bmcsim_data` (tmp_path/bmcsim unless said) over its TLS listener,
    with the client certificate of its metrics CA."""

    def __init__(self, tmp_path: Path, web_url: str, scrape_interval: str = "1s", bmcsim_data: Path | None = None):
        self.tmp_path = tmp_path
        self.dir = tmp_path / "monitoring"
        shutil.copytree(REPO_ROOT / "deploy", self.dir / "deploy")
        self.alertmanager_port = free_port()
        self.prometheus_port = free_port()
        token_file = self.dir / "webhook-token"
        token_file.write_text(WEBHOOK_TOKEN)
        prometheus_token_file = self.dir / "prometheus-token"
        prometheus_token_file.write_text(PROMETHEUS_TOKEN)
        web = web_url.removeprefix("http://")
        metrics_port, metrics_ca = agents_tls(bmcsim_data or tmp_path / "bmcsim")
        self.prometheus_yml = self.dir / "deploy" / "prometheus" / "prometheus.yml"
        self.prometheus_yml.write_text(
            self.prometheus_yml.read_text()
            .replace("../../var/metrics-ca", str(metrics_ca.directory))
            .replace('regex: "(.+):8100"', 'regex: "(.+):[0-9]+"')  # every target is that bmcsim's
            .replace(":8143", f":{metrics_port}")
            .replace("../../var/prometheus-token", str(prometheus_token_file))
            .replace("127.0.0.1:8000", web)
            .replace("127.0.0.1:9093", f"127.0.0.1:{self.alertmanager_port}")
            .replace("scrape_interval: 1s", f"scrape_interval: {scrape_interval}")
            .replace("evaluation_interval: 1s", f"evaluation_interval: {scrape_interval}")
        )
        self.alertmanager_yml = self.dir / "deploy" / "alertmanager" / "alertmanager.yml"
        self.alertmanager_yml.write_text(
            re.sub(
                r"credentials_file: .*", f"credentials_file: {token_file}", self.alertmanager_yml.read_text()
            ).replace("127.0.0.1:8000", web)
        )
        self.start()

    def start(self) -> None:
        self.alertmanager = start_alertmanager(
            self.alertmanager_yml, self.dir / "am", self.alertmanager_port, self.tmp_path
        )
        self.prometheus = start_prometheus(self.prometheus_yml, self.dir / "tsdb", self.prometheus_port, self.tmp_path)

    def active_targets(self) -> int:
        answer = requests.get(f"http://127.0.0.1:{self.prometheus_port}/api/v1/targets", timeout=5).json()
        return sum(
            t["health"] == "up" for t in answer["data"]["activeTargets"] if t["labels"].get("job") == "node-agents"
        )

    def stop(self) -> None:
        self.prometheus.stop()
        self.alertmanager.stop()


def verify_offline(token: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """What a tenant does with curl: fetch the JWKS and the result, verify without the control plane."""
    (tmp_path / "keys.json").write_text(json.dumps(APIClient().get("/v1/attestation/keys").json()))
    (tmp_path / "result.jwt").write_text(token)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "attestation.verify",
            str(tmp_path / "result.jwt"),
            "--jwks",
            str(tmp_path / "keys.json"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
