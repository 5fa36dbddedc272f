"""`python -m agent --backend sim` (time scale 1, so a level-3 run lasts 15 minutes): DELETE
/diagnostics cancels the run at once, and a new one may start."""

from __future__ import annotations

import sys
import time

import pytest
import requests

from tests.support.ports import free_port
from tests.support.processes import Process, answers, once_ready

TOKEN = "node-token-for-the-cancel-test-0123456789"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    directory = tmp_path_factory.mktemp("agent-cancel")
    (directory / "token").write_text(TOKEN + "\n")
    port = free_port()
    process = Process(
        "gpu-agent",
        [
            sys.executable, "-m", "agent", "--backend", "sim", "--name", "gpu-host-9", "--gpus", "2",
            "--listen", f"127.0.0.1:{port}", "--token-file", str(directory / "token"),
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


def test_delete_cancels_a_running_diagnostics_run_at_once(agent):
    _, url = agent
    assert call(url, "DELETE", "diagnostics", token=None).status_code == 401
    assert call(url, "DELETE", "diagnostics").json()["state"] == "idle"  # nothing ran yet

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
