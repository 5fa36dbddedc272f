"""bmcsim started as a real subprocess, with its data dir, SIM_TIME_SCALE=0 unless asked otherwise."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support.ports import free_port
from tests.support.processes import Process, answers, once_ready

OPERATOR = ("root", "calvin")
FLEET_NODES = 4


@dataclass
class Bmcsim:
    url: str
    data_dir: Path
    process: Process

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
        self.process.stop(timeout=15)


def start_bmcsim(
    data_dir: Path,
    nodes: int = FLEET_NODES,
    scale: str = "0",
    args: tuple[str, ...] = (),
    port: int | None = None,
    timeout: float = 20,
) -> Bmcsim:
    """bmcsim on `port` (a free one if None), its state in data_dir and its log beside it, once it
    answers. Started again on the same port and data_dir, it is the same bmcsim restarted."""
    port = port or free_port()
    env = {**os.environ, "SIM_TIME_SCALE": scale, "BMCSIM_DATA_DIR": str(data_dir), "BMCSIM_NODES": str(nodes)}
    env.pop("BMCSIM_PORT", None)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    process = Process(
        f"bmcsim-{port}", [sys.executable, "-m", "bmcsim", "--port", str(port), *args], env, data_dir.parent
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.popen.poll() is not None:
            raise RuntimeError(f"bmcsim exited with {process.popen.returncode}, see {process.log}")
        return answers(url + "/redfish/v1/")

    return Bmcsim(url, data_dir, once_ready(process, "bmcsim", ready, timeout))
