"""`python -m agent` as an operator runs it: a real process, its token, its routes and its errors.

The stand-alone `sim` backend stands in for a GPU server here; every route's behaviour on
bmcsim's hardware is in tests/bmcsim/test_agent.py, and the host backend's parts in this folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from core.metrics_ca import ensure as ensure_metrics_ca
from tests.support.ports import free_port
from tests.support.processes import REPO_ROOT, Process, answers, once_ready

TOKEN = "node-token-for-the-test-0123456789"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    directory = tmp_path_factory.mktemp("agent")
    (directory / "token").write_text(TOKEN + "\n")
    port = free_port()
    process = Process(
        "gpu-agent",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--name", "gpu-host-7", "--gpus", "2",
            "--listen", f"127.0.0.1:{port}",
            "--token-file", str(directory / "token"),
        ],
        {"PATH": "/usr/bin:/bin"},
        directory,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    yield once_ready(process, "the agent", lambda: answers(url + "/metrics"), timeout=20), url
    process.stop()


def call(url: str, method: str, path: str, token: str | None = TOKEN, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.request(method, f"{url}/{path}", headers=headers, timeout=10, **kwargs)


def test_every_route_needs_the_node_token(agent):
    _, url = agent
    routes = [("GET", "metrics"), ("GET", "inventory"), ("POST", "evidence"), ("GET", "gpu-wipe")]
    routes += [("POST", "gpu-wipe"), ("GET", "gpu-reset"), ("POST", "gpu-reset"), ("POST", "diagnostics")]
    for method, path in routes:
        for token in (None, "wrong-token", TOKEN[:-1]):
            r = call(url, method, path, token)
            assert r.status_code == 401 and r.json() == {"detail": "this agent needs the node's bearer token"}
    assert requests.get(f"{url}/metrics", headers={"Authorization": f"Basic {TOKEN}"}, timeout=10).status_code == 401


def test_the_routes_answer_as_the_contract_says(agent):
    _, url = agent
    metrics = call(url, "GET", "metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'gpu_agent_gpu_healthy{gpu="1"} 1.0' in metrics.text and 'Hostname="gpu-host-7"' in metrics.text
    inventory = call(url, "GET", "inventory").json()
    assert inventory["name"] == "gpu-host-7" and [g["index"] for g in inventory["gpus"]] == [0, 1]
    assert call(url, "POST", "gpu-wipe").status_code == 202
    reset = call(url, "POST", "gpu-reset", json={"gpu": 1})
    assert reset.status_code == 202 and reset.json()["gpu"] == 1 and reset.json()["state"] == "running"
    assert call(url, "POST", "gpu-reset", json={"gpu": 0}).status_code == 409  # one reset at a time
    diagnostics = call(url, "POST", "diagnostics", json={"level": 1})
    assert diagnostics.status_code == 202 and diagnostics.json()["level"] == 1
    evidence = call(url, "POST", "evidence", json={"nonce": "ab" * 32})
    assert evidence.status_code == 501 and "no TPM" in evidence.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "says"),
    [
        ("POST", "evidence", {"nonce": "xyz"}, 400, "'nonce'"),
        ("POST", "evidence", {"nonce": "ab" * 65}, 400, "'nonce'"),
        ("POST", "evidence", ["nonce"], 400, "JSON object"),
        ("POST", "gpu-reset", {"gpu": 7}, 400, "'gpu' must be one of 0, 1"),
        ("POST", "gpu-reset", {}, 400, "'gpu' must be an integer"),
        ("POST", "diagnostics", {"level": True}, 400, "'level' must be an integer"),
        ("POST", "diagnostics", {"level": 9}, 400, "'level' must be 1, 2, 3 or 4"),
        ("GET", "no-such-route", None, 404, "Not Found"),
        ("DELETE", "metrics", None, 405, "Method Not Allowed"),
    ],
)
def test_bad_requests_get_a_json_detail_never_a_traceback(agent, method, path, body, status, says):
    _, url = agent
    r = call(url, method, path, json=body)
    assert r.status_code == status and says in r.json()["detail"], r.text


def test_a_body_that_is_not_json_or_too_big_is_refused(agent):
    _, url = agent
    assert call(url, "POST", "evidence", data=b"{").status_code == 400
    assert call(url, "POST", "evidence", data=b"{" * 5000).status_code == 413


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "needs its credentials: --credentials-file"),
        (["--credentials-file", "/nonexistent/gpu-agent.json"], "cannot read the credentials from /nonexistent"),
        (["--credentials-file", "pyproject.toml"], "are not JSON"),
        (["--credentials-file", "pyproject.toml", "--token-file", "pyproject.toml"], "give one of them"),
        (["--token-file", "/nonexistent/token"], "cannot read the node token from /nonexistent/token"),
        (["--token-file", "/dev/null"], "shorter than 16 characters"),
        (["--listen", "9411"], "is not ADDRESS:PORT"),
        (["--backend", "gpu"], "invalid choice: 'gpu'"),
        (["--tls-cert", "/nonexistent.pem"], "--tls-cert and --tls-key go together"),
        # This machine has no NVIDIA driver: the host backend says so rather than serving no GPUs.
        (["--backend", "host", "--token-file", "pyproject.toml"], "no NVML: libnvidia-ml.so.1 is not installed"),
    ],
)
def test_a_bad_start_is_a_usage_error(args, says):
    result = subprocess.run(
        [sys.executable, "-m", "agent", "--backend", "sim", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr


def test_with_a_client_ca_its_certificates_read_metrics_and_the_node_token_the_rest(tmp_path):
    """TLS with --client-ca, the fleet's metrics CA: Prometheus' certificate reads /metrics and nothing
    else, the control plane calls with the node's token and no certificate, and a certificate of
    another CA ends the handshake."""
    fleet, elsewhere = ensure_metrics_ca(tmp_path / "metrics-ca"), ensure_metrics_ca(tmp_path / "elsewhere")
    (tmp_path / "token").write_text(TOKEN)
    port = free_port()
    process = Process(
        "gpu-agent-tls",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(tmp_path / "token"),
            "--tls-cert", str(fleet.server_cert), "--tls-key", str(fleet.server_key), "--client-ca", str(fleet.ca_cert),
        ],
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
    )  # fmt: skip
    prometheus = (str(fleet.prometheus_cert), str(fleet.prometheus_key))

    def get(path: str, **kwargs) -> requests.Response:
        return requests.get(f"https://127.0.0.1:{port}/{path}", verify=str(fleet.ca_cert), timeout=10, **kwargs)

    try:
        once_ready(process, "the TLS agent", lambda: answers_tls(lambda: get("metrics", cert=prometheus)), timeout=20)
        assert get("metrics", cert=prometheus).status_code == 200
        assert get("inventory", cert=prometheus).status_code == 401
        assert get("inventory", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert get("metrics").status_code == 401
        with pytest.raises(requests.exceptions.ConnectionError):  # the handshake refuses it, or resets
            get("metrics", cert=(str(elsewhere.prometheus_cert), str(elsewhere.prometheus_key)))
    finally:
        process.stop()


def answers_tls(scrape) -> bool:
    try:
        return scrape().status_code == 200
    except requests.RequestException:
        return False


def test_delete_cancels_a_running_diagnostics_run_at_once(agent):
    """At time scale 1 a level-3 run lasts 15 minutes: DELETE /diagnostics stops it at once, and a new one may start."""
    _, url = agent
    assert call(url, "DELETE", "diagnostics", token=None).status_code == 401
    call(url, "DELETE", "diagnostics")  # whatever another test left running

    started = call(url, "POST", "diagnostics", json={"level": 3})
    assert started.status_code == 202 and started.json()["state"] == "running"
    asked = time.monotonic()
    cancelled = call(url, "DELETE", "diagnostics")
    assert time.monotonic() - asked < 1.0
    assert cancelled.status_code == 202
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["level"] == 3 and body["results"] == []
    assert body["finished_at"] - body["started_at"] < 60
    assert call(url, "GET", "diagnostics").json() == body

    assert call(url, "POST", "diagnostics", json={"level": 1}).json()["state"] == "running"
    assert call(url, "DELETE", "diagnostics").json()["state"] == "cancelled"


def test_the_config_drives_credentials_open_the_agent_with_its_agent_token_alone(tmp_path):
    """gpu-agent.json from the node's config drive: callers present its agent_token; its
    report_token, which the node's XID reports carry, opens nothing here."""
    given = {
        "node": "gpu-host-7",
        "agent_token": "agent-token-of-this-boot-0123",
        "report_token": "report-0123456789abcd",
    }
    (tmp_path / "gpu-agent.json").write_text(json.dumps(given))
    port = free_port()
    process = Process(
        "gpu-agent",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--listen", f"127.0.0.1:{port}",
            "--credentials-file", str(tmp_path / "gpu-agent.json"),
        ],
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    once_ready(process, "the agent", lambda: answers(url + "/metrics"), timeout=20)
    try:
        assert call(url, "GET", "inventory", given["agent_token"]).status_code == 200
        assert call(url, "GET", "inventory", given["report_token"]).status_code == 401
    finally:
        process.stop()
