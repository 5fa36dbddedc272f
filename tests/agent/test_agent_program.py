"""`python -m agent` as an operator runs it: a real process, its token, its routes and its errors.

The stand-alone `sim` backend stands in for a GPU server here; every route's behaviour on
bmcsim's hardware is in tests/bmcsim/test_agent.py, and the host backend's parts in this folder.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.ports import free_port
from tests.support.processes import REPO_ROOT, Process, answers, once_ready

TOKEN = "node-token-for-the-test-0123456789"
METRICS_TOKEN = "prometheus-token-for-the-test-0123"
NO_PASSWORD = serialization.NoEncryption()


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


def certificate(subject: str, key, issuer=None, issuer_key=None, *, ca: bool = False) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca and issuer is not None and subject == "127.0.0.1":
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip_address(subject))]), False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def test_with_a_client_ca_only_callers_holding_its_certificate_get_through(tmp_path):
    """Mutual TLS, the agent's option beside the token: the control plane's certificate and the token."""

    def write(name: str, data: bytes) -> str:
        (tmp_path / name).write_bytes(data)
        return str(tmp_path / name)

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, NO_PASSWORD)

    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = certificate("fleet CA", ca_key, ca=True)
    server = certificate("127.0.0.1", server_key, ca, ca_key)
    client = certificate("control plane", client_key, ca, ca_key)
    ca_file = write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    write("token", TOKEN.encode())
    port = free_port()
    process = Process(
        "gpu-agent-mtls",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(tmp_path / "token"),
            "--tls-cert", write("server.pem", server.public_bytes(serialization.Encoding.PEM)),
            "--tls-key", write("server.key", pem_key(server_key)),
            "--client-ca", ca_file,
        ],
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}/inventory"
    mine = (
        write("client.pem", client.public_bytes(serialization.Encoding.PEM)),
        write("client.key", pem_key(client_key)),
    )
    try:
        once_ready(process, "the TLS agent", lambda: answers_tls(url, ca_file, mine), timeout=20)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert requests.get(url, headers=bearer, verify=ca_file, cert=mine, timeout=10).status_code == 200
        assert requests.get(url, verify=ca_file, cert=mine, timeout=10).status_code == 401
        # TLS 1.3 refuses a missing client certificate after the handshake: an SSL error or a reset.
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url, headers=bearer, verify=ca_file, timeout=10)
    finally:
        process.stop()


def answers_tls(url: str, ca_file: str, cert: tuple[str, str]) -> bool:
    try:
        return requests.get(url, verify=ca_file, cert=cert, timeout=2).status_code == 401
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
