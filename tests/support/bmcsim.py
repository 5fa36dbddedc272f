"""bmcsim started as a real subprocess, with its data dir, SIM_TIME_SCALE=0 unless asked otherwise."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import requests

from core.topology import agent_token
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


@dataclass
class Bmcsim:
    """Calls as the operator; a call to a node's agent (/agent/{node}/...) carries that node's token."""

    url: str
    data_dir: Path
    process: Process
    ssh_port: int  # where tenant nodes' sshd listen, each on its own loopback address

    def request(self, method: str, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        if auth is OPERATOR and path.startswith("/agent/"):
            auth = Bearer(agent_token(path.split("/")[2]))
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
    new XIDs to it (BMCSIM_CONTROL_PLANE_URL)."""
    port = port or free_port()
    ssh_port = ssh_port or free_port()
    env = {
        **os.environ,
        "SIM_TIME_SCALE": scale,
        "BMCSIM_DATA_DIR": str(data_dir),
        "BMCSIM_NODES": str(nodes),
        "BMCSIM_SSH_PORT": str(ssh_port),
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

    return Bmcsim(url, data_dir, once_ready(process, "bmcsim", ready, timeout), ssh_port)
