"""fleet.redfish against two real Redfish services: OpenStack's sushy-tools emulator and bmcsim."""

import subprocess
import sys
import threading
import time
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from fleet.redfish import BMCAccess, BMCPermanentError, BMCTransientError, RedfishClient
from fleet.topology import bmc_password
from tests.support.bmcsim import start_bmcsim
from tests.support.ports import free_port
from tests.support.processes import wait_for


@pytest.fixture(scope="module")
def sushy_emulator(tmp_path_factory):
    """sushy-tools with its fake driver, as Ironic's own tests run it."""
    folder = tmp_path_factory.mktemp("sushy")
    port = free_port()
    config = folder / "emulator.conf"
    config.write_text(
        f'SUSHY_EMULATOR_LISTEN_IP = "127.0.0.1"\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n'
        f'SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_STATE_DIR = "{folder / "state"}"\n'
    )
    emulator = Path(sys.executable).with_name("sushy-emulator")
    process = subprocess.Popen(
        [str(emulator), "--config", str(config)], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/redfish/v1/Systems", timeout=1).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for("sushy-emulator", answers, timeout=30)
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def sushy_client(sushy_emulator):
    system = requests.get(f"{sushy_emulator}/redfish/v1/Systems", timeout=5).json()["Members"][0]["@odata.id"]
    access = BMCAccess("fake-1", sushy_emulator, system.rsplit("/", 1)[-1], "admin", "password")
    client = RedfishClient(access, timeout=5)
    yield client
    client.close()


def test_power_off_and_on_with_sushy_tools(sushy_client):
    sushy_client.reset("ForceOff")
    wait_for("power off", lambda: sushy_client.power_state() == "Off", timeout=30, interval=0.5)
    sushy_client.reset("On")
    wait_for("power on", lambda: sushy_client.power_state() == "On", timeout=30, interval=0.5)


def test_one_time_boot_override_with_sushy_tools(sushy_client):
    sushy_client.set_boot_override("Pxe", "Once")
    boot = sushy_client.boot_override()
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    # sushy-tools accepts Once but always reports Continuous (its libvirt heritage: see its main.py)
    assert boot["BootSourceOverrideEnabled"] in ("Once", "Continuous")


@pytest.fixture
def image_url(tmp_path):
    """An image server on loopback: sushy-tools fetches what it is told to insert."""
    (tmp_path / "tenant.iso").write_bytes(b"\0" * 4096)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/tenant.iso"
    server.shutdown()
    server.server_close()


def test_virtual_media_with_sushy_tools(sushy_client, image_url):
    device = sushy_client.insert_media(image_url)
    media = sushy_client.get(device)
    assert media["Inserted"] is True and media["Image"].endswith("tenant.iso")
    sushy_client.eject_media()
    assert sushy_client.get(device)["Inserted"] is False


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=2)
    yield sim
    sim.stop()


def client_for(sim, node="node-001", password=None, **kwargs) -> RedfishClient:
    access = BMCAccess(node, sim.url, node, "admin", password or bmc_password(node))
    return RedfishClient(access, **kwargs)


def test_the_workflow_calls_against_bmcsim(sim):
    client = client_for(sim)
    client.set_boot_override("Cd", "Once")
    assert client.boot_override()["BootSourceOverrideEnabled"] == "Once"
    client.insert_media("http://images/service.iso")
    client.reset("On")
    drives = client.drives()
    assert drives
    monitor = client.secure_erase(drives[0])
    assert monitor is not None  # bmcsim answers 202 with a task monitor, as the issue asks
    wait_for("erase", lambda: client.task_status(monitor)[0], timeout=10)
    assert client.task_status(monitor) == (True, "Completed")
    client.eject_media()
    client.clear_boot_override()
    assert client.boot_override()["BootSourceOverrideEnabled"] == "Disabled"


def test_a_5xx_is_retried_then_reported_as_transient_naming_node_and_call(sim):
    sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_error"})
    client = client_for(sim, "node-002", attempts=3, backoff=0.01)
    try:
        with pytest.raises(BMCTransientError, match=r"node-002: ComputerSystem.Reset On: 500"):
            client.reset("On")
        assert client.calls == 3
    finally:
        sim.delete("/bmcsim/v1/faults?node=node-002")
    client.reset("On")  # works once cleared


def test_a_timeout_is_transient(sim):
    sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_timeout"})
    client = client_for(sim, "node-002", attempts=2, backoff=0.01, timeout=0.5)
    try:
        with pytest.raises(BMCTransientError, match="Timeout"):
            client.power_state()
    finally:
        sim.delete("/bmcsim/v1/faults?node=node-002")


def test_a_4xx_fails_at_once_as_permanent(sim):
    client = client_for(sim, attempts=5, backoff=0.01)
    with pytest.raises(BMCPermanentError, match=r"node-001: ComputerSystem.Reset Explode: 400"):
        client.reset("Explode")
    assert client.calls == 1
    wrong = client_for(sim, password="wrong", attempts=5)
    with pytest.raises(BMCPermanentError, match="401"):
        wrong.power_state()


def test_503_retry_after_is_honoured():
    answers = iter([(503, {"Retry-After": "1"}), (200, {})])
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(time.monotonic())
            status, headers = next(answers)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"PowerState": "On"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = RedfishClient(BMCAccess("n", f"http://127.0.0.1:{server.server_port}", "s", "u", "p"), backoff=0.01)
        assert client.power_state() == "On"
        assert seen[1] - seen[0] >= 0.9
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "error"),
    [
        (200, "application/json", b'{"PowerState": "On"', BMCTransientError),  # truncated
        (200, "text/html", b"<html>login</html>", BMCTransientError),  # a captive page
        (200, "application/json", b'["On"]', BMCTransientError),  # JSON, not an object
        (200, "application/octet-stream", bytes(range(256)), BMCTransientError),  # garbage
        (404, "text/plain", b"nope", BMCPermanentError),  # a 4xx without a Redfish error body
    ],
)
def test_a_bmc_answering_garbage_gives_a_clear_error_naming_node_and_call(status, content_type, body, error):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = RedfishClient(BMCAccess("node-042", f"http://127.0.0.1:{server.server_port}", "s", "u", "p"))
        with pytest.raises(error, match=r"^node-042: GET /redfish/v1/Systems/s: "):
            client.power_state()
    finally:
        server.shutdown()
        server.server_close()
