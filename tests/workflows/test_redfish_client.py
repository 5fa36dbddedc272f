"""workflows.redfish against two real Redfish services: OpenStack's sushy-tools emulator and bmcsim."""

import email.utils
import ipaddress
import json
import subprocess
import sys
import time
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from core.topology import bmc_password
from fleet import firmware
from tests.support.bmcsim import start_bmcsim
from tests.support.loopback import serving
from tests.support.ports import free_port
from tests.support.processes import wait_for
from workflows.redfish import BMCAccess, BMCPermanentError, BMCTransientError, RedfishClient


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


@pytest.mark.timing  # sushy-tools' fake driver applies a power change 1 to 11 s after it is asked
def test_power_off_and_on_with_sushy_tools(sushy_client):
    sushy_client.reset("ForceOff")
    wait_for("power off", lambda: sushy_client.power_state() == "Off", timeout=30, interval=0.5)
    sushy_client.reset("On")
    wait_for("power on", lambda: sushy_client.power_state() == "On", timeout=30, interval=0.5)


def test_one_time_boot_override_with_sushy_tools(sushy_client):
    sushy_client.set_boot_override("Pxe", "Once")
    boot = sushy_client.system()["Boot"]
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    # sushy-tools accepts Once but always reports Continuous (its libvirt heritage: see its main.py)
    assert boot["BootSourceOverrideEnabled"] in ("Once", "Continuous")


def test_secure_boot_with_sushy_tools(sushy_client):
    sushy_client.enable_secure_boot()
    assert firmware.secure_boot(sushy_client.secure_boot()) == firmware.SecureBoot(True, "Enabled")


@pytest.fixture
def image_url(tmp_path):
    """An image server on loopback: sushy-tools fetches what it is told to insert."""
    (tmp_path / "tenant.iso").write_bytes(b"\0" * 4096)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    with serving(server) as url:
        yield f"{url}/tenant.iso"


def test_virtual_media_with_sushy_tools(sushy_client, image_url):
    device = sushy_client.insert_media(image_url)
    media = sushy_client.get(device)
    assert media["Inserted"] is True and media["Image"].endswith("tenant.iso")


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
    assert client.system()["Boot"]["BootSourceOverrideEnabled"] == "Once"
    client.insert_media("http://images/service.iso")
    client.reset("On")
    drives = client.drives()
    assert drives
    monitor = client.secure_erase(drives[0])
    assert monitor is not None  # bmcsim answers 202 with a task monitor, as the issue asks
    wait_for("erase", lambda: client.task_status(monitor)[0], timeout=10)
    assert client.task_status(monitor) == (True, "Completed")


def test_the_firmware_calls_against_bmcsim(sim):
    client = client_for(sim)
    components = firmware.installed_components(
        client.firmware_inventory(), system=client.system_path, managers=client.managers()
    )
    assert sorted(components) == sorted(["BIOS", "BMC", "NIC0", *(f"GPU{i} VBIOS" for i in range(8))])
    assert {c.kind for c in components.values()} == {"BIOS", "BMC", "VBIOS", "NIC"}
    assert all(firmware.SHA256.fullmatch(c.sha256) for c in components.values())

    bmc = components["BMC"]
    monitor = client.simple_update(f"http://images.test/firmware/GF-BMC-{bmc.version.split()[-1]}.bin", bmc.target)
    assert monitor is not None
    wait_for("the BMC's flash", lambda: client.task_status(monitor)[0], timeout=10)
    assert client.task_status(monitor) == (True, "Completed")

    attribute, value = next(iter(client.bios_attributes().items()))
    client.set_bios_settings({attribute: value})
    client.enable_secure_boot()
    assert client.secure_boot()["SecureBootEnable"] is True


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


def test_a_refused_connection_is_retried_with_widening_jittered_backoff_then_raised():
    delays: list[float] = []
    client = RedfishClient(
        BMCAccess("node-042", f"http://127.0.0.1:{free_port()}", "s", "u", "p"),
        attempts=4,
        backoff=1,
        max_backoff=3,
        sleep=delays.append,
    )
    with pytest.raises(BMCTransientError, match=r"^node-042: GET /redfish/v1/Systems/s: ConnectionError"):
        client.power_state()
    assert client.calls == 4 and len(delays) == 3
    assert all(0 <= delay <= high for delay, high in zip(delays, [1, 2, 3], strict=True))


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
    with serving(server) as url:
        client = RedfishClient(BMCAccess("n", url, "s", "u", "p"), backoff=0.01)
        assert client.power_state() == "On"
        assert seen[1] - seen[0] >= 0.9


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
    with serving(server) as url:
        client = RedfishClient(BMCAccess("node-042", url, "s", "u", "p"))
        with pytest.raises(error, match=r"^node-042: GET /redfish/v1/Systems/s: "):
            client.power_state()


# -- the BMC's credentials go to the BMC alone ------------------------------------------------


class FakeServer:
    """A loopback HTTP server that answers each path as told and records every request it gets."""

    def __init__(self, answers: dict | None = None):
        self.answers = answers or {}  # path -> (status, headers, JSON body)
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        server = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                server.requests.append((self.command, self.path, self.headers.get("Authorization")))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, body = server.answers.get(self.path, (404, {}, {"error": {"message": "no"}}))
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

            do_GET = do_POST = do_PATCH = answer

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"


@pytest.fixture
def servers():
    """A BMC, and a server elsewhere that must never hear from the client."""
    bmc, elsewhere = FakeServer(), FakeServer({"/stolen": (200, {}, {"TaskState": "Completed"})})
    with serving(bmc.http), serving(elsewhere.http):
        yield bmc, elsewhere


def bmc_client(url: str, **kwargs) -> RedfishClient:
    return RedfishClient(BMCAccess("node-042", url, "s", "admin", "the-bmc-password"), backoff=0.01, **kwargs)


def test_an_odata_id_pointing_elsewhere_is_refused_and_gets_no_request(servers):
    bmc, elsewhere = servers
    bmc.answers["/redfish/v1/Systems/s"] = (200, {}, {"Links": {"ManagedBy": [{"@odata.id": f"{elsewhere.url}/x"}]}})
    with pytest.raises(BMCPermanentError, match=rf"^node-042: GET {elsewhere.url}/x: refusing .*not on this BMC"):
        bmc_client(bmc.url).virtual_media()
    assert elsewhere.requests == []
    assert [auth for *_, auth in bmc.requests] == [bmc.requests[0][2]] and bmc.requests[0][2].startswith("Basic ")


@pytest.mark.parametrize(
    "monitor",
    [
        "{elsewhere}/stolen",  # another port
        "https://127.0.0.1:{bmc_port}/stolen",  # another scheme
        "http://localhost:{bmc_port}/stolen",  # another name for the same host is another host
        "http://admin:pw@127.0.0.1:{bmc_port}/stolen",  # credentials of its own
    ],
)
def test_a_task_monitor_elsewhere_is_refused_and_gets_no_request(servers, monitor):
    bmc, elsewhere = servers
    location = monitor.format(elsewhere=elsewhere.url, bmc_port=bmc.http.server_port)
    bmc.answers["/d/Actions/Drive.SecureErase"] = (202, {"Location": location}, {})
    client = bmc_client(bmc.url)
    assert client.secure_erase("/d") == location
    with pytest.raises(BMCPermanentError, match=r"^node-042: task .*: refusing"):
        client.task_status(location)
    assert elsewhere.requests == []


def test_a_task_monitor_on_the_bmc_itself_is_followed(servers):
    bmc, _ = servers
    bmc.answers["/task/1"] = (200, {}, {"TaskState": "Completed"})
    assert bmc_client(bmc.url).task_status(f"{bmc.url}/task/1") == (True, "Completed")


def test_a_redirect_is_not_followed_anywhere(servers):
    bmc, elsewhere = servers
    bmc.answers["/redfish/v1/Systems/s"] = (307, {"Location": f"{elsewhere.url}/stolen"}, {})
    client = bmc_client(bmc.url)
    with pytest.raises(
        BMCPermanentError, match=r"^node-042: GET /redfish/v1/Systems/s: 307 redirect to .*not followed"
    ):
        client.power_state()
    assert elsewhere.requests == [] and client.calls == 1


def test_a_bmc_outside_the_bmc_networks_gets_no_request(servers, settings):
    bmc, _ = servers
    settings.BMC_NETWORKS = (ipaddress.ip_network("10.0.0.0/8"),)
    client = bmc_client(bmc.url)
    with pytest.raises(BMCPermanentError, match=r"^node-042: GET /redfish/v1/Systems/s: .*outside the BMC networks"):
        client.power_state()
    assert bmc.requests == []


# -- Retry-After, read strictly ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "low", "high"),
    [
        ("3", 3, 3),
        ("\u00b2", 0, 0.01),  # "²".isdigit() is true, but it is no number: the client's own backoff
        ("3.5", 0, 0.01),
        ("+3", 0, 0.01),
        ("9" * 5000, 0, 0.01),
        ("99999999999999999999", 10, 10),  # capped at max_backoff
        ("in 5 seconds", 0, 0.01),
        (None, 0, 0.01),
    ],
)
def test_retry_after_is_a_number_in_ascii_digits(servers, retry_after, low, high):
    bmc, _ = servers
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    bmc.answers["/redfish/v1/Systems/s"] = (503, headers, {"error": {"message": "busy"}})
    delays: list[float] = []
    with pytest.raises(BMCTransientError, match="503"):
        bmc_client(bmc.url, attempts=2, max_backoff=10, sleep=delays.append).power_state()
    assert len(delays) == 1 and low <= delays[0] <= high


def test_retry_after_may_be_an_http_date(servers):
    bmc, _ = servers
    in_five_seconds = email.utils.formatdate(time.time() + 5, usegmt=True)
    bmc.answers["/redfish/v1/Systems/s"] = (503, {"Retry-After": in_five_seconds}, {"error": {"message": "busy"}})
    delays: list[float] = []
    with pytest.raises(BMCTransientError):
        bmc_client(bmc.url, attempts=2, max_backoff=10, sleep=delays.append).power_state()
    assert 3 <= delays[0] <= 5
    bmc.answers["/redfish/v1/Systems/s"] = (503, {"Retry-After": "Tue, 01 Dec 1970 00:00:00 GMT"}, {})
    delays.clear()
    with pytest.raises(BMCTransientError):
        bmc_client(bmc.url, attempts=2, sleep=delays.append).power_state()
    assert delays == [0.0]  # a date past: at once


def test_a_refused_bmc_url_is_named_without_the_credentials_written_into_it():
    client = RedfishClient(BMCAccess("node-001", "http://root:calvin-in-url@192.0.2.1/", "1", "root", "calvin"))
    with pytest.raises(BMCPermanentError) as refusal:
        client.get("/redfish/v1/")
    assert "calvin-in-url" not in str(refusal.value) and "http://192.0.2.1/" in str(refusal.value)
