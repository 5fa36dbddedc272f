"""A tenant with root on its node reads no other node's metrics: Prometheus scrapes the agents
with a client certificate of the fleet's metrics CA, whose key never leaves the operator's side,
where it used to send a fleet-wide token that every node held.

bmcsim serves every agent's /metrics over TLS on a listener of its own (BMCSIM_AGENT_TLS_PORT),
as a real agent does with gpu-agent --client-ca."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests

from core.metrics_ca import ensure as ensure_metrics_ca
from tests.support import REPO_ROOT
from tests.support.bmcsim import Bmcsim, start_bmcsim

NODES = ("node-001", "node-002")
OLD_METRICS_TOKEN = "gpufleet-demo-agent-metrics"  # the fleet-wide token every node used to hold
NODE_FILES = [REPO_ROOT / "deploy" / "agent" / name for name in ("gpu-agent.env", "gpu-agent.service", "Dockerfile")]


@pytest.fixture(scope="module")
def bmcsim(tmp_path_factory) -> Iterator[Bmcsim]:
    sim = start_bmcsim(tmp_path_factory.mktemp("metrics-tls") / "bmcsim", nodes=len(NODES))
    yield sim
    sim.stop()


def scrape(sim: Bmcsim, node: str, cert: tuple[str, str] | None) -> requests.Response:
    url = f"{sim.metrics_url}/agent/{node}/metrics"
    return requests.get(url, verify=str(sim.metrics_ca.ca_cert), cert=cert, timeout=10)


def prometheus(sim: Bmcsim) -> tuple[str, str]:
    return str(sim.metrics_ca.prometheus_cert), str(sim.metrics_ca.prometheus_key)


def test_without_a_client_certificate_the_agents_metrics_are_refused(bmcsim):
    for node in NODES:
        assert scrape(bmcsim, node, prometheus(bmcsim)).status_code == 200  # served, to the right caller
        # TLS 1.3 refuses a missing client certificate after the handshake: an SSL error or a reset.
        with pytest.raises(requests.exceptions.ConnectionError):
            scrape(bmcsim, node, cert=None)


def test_a_certificate_of_another_ca_is_refused(bmcsim, tmp_path):
    elsewhere = ensure_metrics_ca(tmp_path / "a-tenants-own-ca")
    for node in NODES:
        assert scrape(bmcsim, node, prometheus(bmcsim)).status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):
            scrape(bmcsim, node, cert=(str(elsewhere.prometheus_cert), str(elsewhere.prometheus_key)))


def test_prometheus_certificate_reads_every_agents_metrics_and_nothing_else(bmcsim):
    ca = bmcsim.metrics_ca
    for node in NODES:
        answer = scrape(bmcsim, node, cert=prometheus(bmcsim))
        assert answer.status_code == 200 and f'Hostname="{node}"' in answer.text
    for path in ("/agent/node-001/inventory", "/redfish/v1/Systems", "/bmcsim/v1/inventory"):
        answer = requests.get(bmcsim.metrics_url + path, verify=str(ca.ca_cert), cert=prometheus(bmcsim), timeout=10)
        assert answer.status_code == 404, path
    # The server's certificate is no client certificate: it opens nothing.
    with pytest.raises(requests.exceptions.ConnectionError):
        scrape(bmcsim, "node-001", cert=(str(ca.server_cert), str(ca.server_key)))


def test_the_old_fleet_wide_metrics_token_opens_nothing(bmcsim):
    for node in NODES:
        for path in ("metrics", "inventory"):
            answer = bmcsim.get(
                f"/agent/{node}/{path}", auth=None, headers={"Authorization": f"Bearer {OLD_METRICS_TOKEN}"}
            )
            assert answer.status_code == 401, (node, path)


def test_nothing_a_node_is_given_carries_a_metrics_credential(tmp_path):
    """The agent takes no metrics credential, and a node is set up with the metrics CA's
    certificate only: no token, no key of the CA or of Prometheus."""
    (tmp_path / "token").write_text("node-token-for-the-test-0123456789")
    (tmp_path / "metrics-token").write_text(OLD_METRICS_TOKEN)
    started = subprocess.run(
        [sys.executable, "-m", "agent", "--backend", "host", "--token-file", str(tmp_path / "token"),
         "--metrics-token-file", str(tmp_path / "metrics-token")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, check=False,
    )  # fmt: skip
    assert started.returncode == 2 and "unrecognized arguments: --metrics-token-file" in started.stderr
    for file in NODE_FILES:
        text = file.read_text()
        for word in ("METRICS_TOKEN", "metrics-token", "ca.key", "prometheus.key", OLD_METRICS_TOKEN):
            assert word not in text, (file.name, word)
    assert "GPU_AGENT_CLIENT_CA=/etc/gpu-agent/metrics-ca.pem" in (REPO_ROOT / "deploy/agent/gpu-agent.env").read_text()
