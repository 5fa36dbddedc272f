"""`python -m agent` as an operator runs it: a real process, its token, its routes and its errors.

The stand-alone `sim` backend stands in for a GPU server here; every route's behaviour on
bmcsim's hardware is in tests/bmcsim/test_agent.py, and the host backend's parts in this folder.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from tests.support.ports import free_port
from tests.support.processes import REPO_ROOT, Process, answers, once_ready

TOKEN = "node-token-for-the-test-0123456789"
METRICS_TOKEN = "prometheus-token-for-the-test-0123"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    directory = tmp_path_factory.mktemp("agent")
    (directory / "token").write_text(TOKEN + "\n")
    (directory / "metrics-token").write_text(METRICS_TOKEN)
    port = free_port()
    process = Process(
        "gpu-agent",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--name", "gpu-host-7", "--gpus", "2",
            "--listen", f"127.0.0.1:{port}",
            "--token-file", str(directory / "token"), "--metrics-token-file", str(directory / "metrics-token"),
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


def test_every_route_needs_the_node_token_and_prometheus_reads_only_metrics(agent):
    _, url = agent
    routes = [("GET", "metrics"), ("GET", "inventory"), ("POST", "evidence"), ("GET", "gpu-wipe")]
    routes += [("POST", "gpu-wipe"), ("GET", "gpu-reset"), ("POST", "gpu-reset"), ("POST", "diagnostics")]
    for method, path in routes:
        for token in (None, "wrong-token", TOKEN[:-1]):
            r = call(url, method, path, token)
            assert r.status_code == 401 and r.json() == {"detail": "this agent needs the node's bearer token"}
    assert call(url, "GET", "metrics", METRICS_TOKEN).status_code == 200
    assert call(url, "GET", "inventory", METRICS_TOKEN).status_code == 401
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
        ([], "needs the node's bearer token"),
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
