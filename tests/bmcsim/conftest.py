"""bmcsim started as a real subprocess on a free port, with a temp data dir and SIM_TIME_SCALE=0."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ("root", "calvin")
FLEET_NODES = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Bmcsim:
    url: str
    data_dir: Path
    process: subprocess.Popen

    def get(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return requests.get(self.url + path, auth=auth, timeout=kwargs.pop("timeout", 10), **kwargs)

    def post(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return requests.post(self.url + path, auth=auth, timeout=kwargs.pop("timeout", 10), **kwargs)

    def patch(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return requests.patch(self.url + path, auth=auth, timeout=kwargs.pop("timeout", 10), **kwargs)

    def delete(self, path: str, auth=OPERATOR, **kwargs) -> requests.Response:
        return requests.delete(self.url + path, auth=auth, timeout=kwargs.pop("timeout", 10), **kwargs)

    def reset(self, node: str, reset_type: str) -> None:
        r = self.post(f"/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset", json={"ResetType": reset_type})
        assert r.status_code == 204, r.text

    def node(self, name: str) -> dict:
        return next(n for n in self.get("/bmcsim/v1/inventory").json()["nodes"] if n["name"] == name)

    def stop(self) -> None:
        """SIGTERM, as honcho or a terminal would: bmcsim writes its state and exits."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=15)


def start_bmcsim(data_dir: Path, nodes: int = FLEET_NODES, scale: str = "0", args: tuple[str, ...] = ()) -> Bmcsim:
    port = free_port()
    env = {**os.environ, "SIM_TIME_SCALE": scale, "BMCSIM_DATA_DIR": str(data_dir), "BMCSIM_NODES": str(nodes)}
    env.pop("BMCSIM_PORT", None)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(data_dir.parent / f"bmcsim-{port}.log", "w") as log:  # the child keeps its own copy of the file
        process = subprocess.Popen(
            [sys.executable, "-m", "bmcsim", "--port", str(port), *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    sim = Bmcsim(f"http://127.0.0.1:{port}", data_dir, process)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"bmcsim exited with {process.returncode}, see {log.name}")
        try:
            if requests.get(sim.url + "/redfish/v1/", timeout=1).status_code == 200:
                return sim
        except requests.ConnectionError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("bmcsim did not start in 20 s")


@pytest.fixture(scope="session")
def bmcsim(tmp_path_factory) -> Bmcsim:
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data")
    yield sim
    sim.stop()


@pytest.fixture(autouse=True)
def clean_fleet(request):
    """Every test starts from a fleet with no fault and every node on with no boot override."""
    if "bmcsim" not in request.fixturenames:
        yield
        return
    sim = request.getfixturevalue("bmcsim")
    yield
    assert sim.delete("/bmcsim/v1/faults", timeout=30).status_code == 200
    for number in range(1, FLEET_NODES + 1):
        node = f"node-{number:03d}"
        sim.patch(f"/redfish/v1/Systems/{node}", json={"Boot": {"BootSourceOverrideEnabled": "Disabled"}})
        sim.reset(node, "On")
