"""bmcsim started as a real subprocess, with its data dir, SIM_TIME_SCALE=0 unless asked otherwise,
and its TLS listener that serves Prometheus every agent's /metrics (agents_tls)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import requests

from core.metrics_ca import MetricsCA
from core.metrics_ca import ensure as ensure_metrics_ca
from fleet import nocloud
from tests.support.loopback import serving
from tests.support.ports import free_port
from tests.support.processes import Process, answers, once_ready

OPERATOR = ("root", "calvin")
FLEET_NODES = 4


class Bearer(requests.auth.AuthBase):
    def __init__(self, token: str):
        self.token = token

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


class DriveServer:
    """The tests' web server for config drives of their own making: each at a path of its own."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        files = self.files

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._serving = serving(self.server)  # kept: served for the rest of the test process
        self.url = self._serving.__enter__()

    def serve(self, body: bytes) -> str:
        path = f"/{secrets.token_hex(8)}.iso"
        self.files[path] = body
        return self.url + path


@functools.cache
def drive_server() -> DriveServer:
    return DriveServer()


@dataclass
class Bmcsim:
    """Calls as the operator; a call to a node's agent (/agent/{node}/...) carries the agent token
    of the config drive in the node's BMC (the control plane's, or one boot_with_config_drive gave)."""

    url: str
    data_dir: Path
    process: Process
    ssh_port: int  # where tenant nodes' sshd listen, each on its own loopback address
    metrics_port: int  # every agent's /metrics over TLS, to client certificates of metrics_ca
    metrics_ca: MetricsCA

    @property
    def metrics_url(self) -> str:
        return f"https://127.0.0.1:{self.metrics_port}"

    def request(self, method: str, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        if auth is OPERATOR and path.startswith("/agent/"):
            auth = Bearer(self.agent_token(path.split("/")[2]))
        return requests.request(method, self.url + path, auth=auth, timeout=kwargs.pop("timeout", 10), **kwargs)

    def get(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return self.request("GET", path, auth, **kwargs)

    def post(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return self.request("POST", path, auth, **kwargs)

    def patch(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return self.request("PATCH", path, auth, **kwargs)

    def delete(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return self.request("DELETE", path, auth, **kwargs)

    def reset(self, node: str, reset_type: str) -> None:
        r = self.post(f"/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})
        assert r.status_code == 204, r.text

    def boot_with_config_drive(self, node: str) -> dict[str, str]:
        """Reboot `node` with a config drive beside it, as the control plane boots its service
        image: credentials of the test's making, which the node's agent takes for this boot."""
        given = {"agent_token": secrets.token_urlsafe(32), "report_token": secrets.token_urlsafe(32)}
        files = {"meta-data": f"instance-id: {node}-test\n", "user-data": "", "gpu-agent.json": json.dumps(given)}
        self.boot_with_drive_at(node, drive_server().serve(nocloud.iso(files)))
        return given

    def boot_with_drive_at(self, node: str, url: str) -> None:
        """Reboot `node` with the config drive at `url` beside it (one the control plane minted, say)."""
        inserted = self.post(
            f"/redfish/v1/Managers/{node}/VirtualMedia/Floppy/Actions/VirtualMedia.InsertMedia",
            json={"Image": url, "Inserted": True, "WriteProtected": True},
        )
        assert inserted.status_code in (200, 204), inserted.text
        self.reset(node, "ForceRestart")

    def agent_token(self, node: str) -> str:
        """The agent token on the config drive in the node's BMC, as root on the node reads it
        (bmcsim's view of the drive); "" without one."""
        media = requests.get(f"{self.url}/bmcsim/v1/nodes/{node}/media", timeout=10).json().get("media", {})
        drives = [m["documents"] for m in media.values() if m and "gpu-agent.json" in m.get("documents", {})]
        drive: dict[str, str] = drives[0] if drives else {}
        return json.loads(drive.get("gpu-agent.json", "{}")).get("agent_token", "")

    def node_media(self, name: str) -> dict:
        """What the node's BMC holds in each virtual media slot (bmcsim's view)."""
        return self.get(f"/bmcsim/v1/nodes/{name}/media").json()["media"]

    def node(self, name: str) -> dict:
        return next(n for n in self.get("/bmcsim/v1/inventory").json()["nodes"] if n["name"] == name)

    def stop(self) -> None:
        """SIGTERM, as honcho or a terminal would: bmcsim writes its state and exits."""
        self.process.stop(timeout=15)


def start_bmcsim(
    data_dir: Path,
    nodes: int = FLEET_NODES,
    scale: str = "0",
    args: tuple[str, ...] = (),
    port: int | None = None,
    timeout: float = 20,
    ssh_port: int | None = None,
    control_plane_url: str | None = None,
) -> Bmcsim:
    """bmcsim on `port` (a free one if None), its tenant nodes' sshd on `ssh_port` (likewise), its
    state in data_dir and its log beside it, once it answers. Started again on the same ports and
    data_dir, it is the same bmcsim restarted. With `control_plane_url`, every node's agent reports
    new XIDs to it (BMCSIM_CONTROL_PLANE_URL). Its agents' /metrics are served over TLS as
    agents_tls(data_dir) says, to certificates of the metrics CA beside data_dir."""
    port = port or free_port()
    ssh_port = ssh_port or free_port()
    metrics_port, metrics_ca = agents_tls(data_dir)
    env = {
        **os.environ,
        "SIM_TIME_SCALE": scale,
        "BMCSIM_DATA_DIR": str(data_dir),
        "BMCSIM_NODES": str(nodes),
        "BMCSIM_SSH_PORT": str(ssh_port),
        "BMCSIM_AGENT_TLS_PORT": str(metrics_port),
        "BMCSIM_METRICS_CA_DIR": str(metrics_ca.directory),
    }
    env.pop("BMCSIM_PORT", None)
    if control_plane_url is not None:
        env["BMCSIM_CONTROL_PLANE_URL"] = control_plane_url
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    process = Process(
        f"bmcsim-{port}", [sys.executable, "-m", "bmcsim", "--port", str(port), *args], env, data_dir.parent
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.popen.poll() is not None:
            raise RuntimeError(f"bmcsim exited with {process.popen.returncode}, see {process.log}")
        return answers(url + "/redfish/v1/")

    return Bmcsim(url, data_dir, once_ready(process, "bmcsim", ready, timeout), ssh_port, metrics_port, metrics_ca)


def agents_tls(data_dir: Path) -> tuple[int, MetricsCA]:
    """Where the bmcsim of data_dir serves its agents' /metrics over TLS, and the metrics CA (in
    data_dir's folder, shared by its bmcsims): made on first use, then the same for every restart
    and for whoever points Prometheus at it (tests.support.stack.Monitoring)."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    recorded = data_dir.with_name(f"{data_dir.name}.agent-tls-port")
    if not recorded.exists():
        recorded.write_text(str(free_port()))
    return int(recorded.read_text()), ensure_metrics_ca(data_dir.parent / "metrics-ca")
