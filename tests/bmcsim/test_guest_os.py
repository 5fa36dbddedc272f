"""bmcsim boots what it is given: an OS image in the virtual CD, a NoCloud config drive beside it.

The config drive is built as the control plane builds it (workflows/config_drive.py) and served
from a small HTTP server of the test's own; the node then runs the tenant OS, with a real sshd on
its loopback address that only the tenant's keys open.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import ipaddress
import json
import re
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from fleet import nocloud
from tests.support.bmcsim import Bmcsim, start_bmcsim
from tests.support.loopback import serving
from workflows.config_drive import NoCloudConfig

MEDIA = "/redfish/v1/Managers/{node}/VirtualMedia/{slot}"
CONSOLE = "/redfish/v1/Systems/{node}/LogServices/Console"
FINGERPRINTS = "-----BEGIN SSH HOST KEY FINGERPRINTS-----"


class MediaServer:
    """The test's own web server for config drives: a path answers until it is removed, then 404."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        files = self.files

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/oversized.iso":  # says it is larger than any BMC takes
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                    return
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
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def serve(self, path: str, body: bytes) -> str:
        self.files[path] = body
        return self.url + path


class Tenant:
    """A tenant's key pair, and the config drive of their node at `address`."""

    def __init__(self, hostname: str, address: str, user_data: str = ""):
        self.key = asyncssh.generate_private_key("ssh-ed25519", comment=f"tenant@{hostname}")
        self.public_key = self.key.export_public_key().decode().strip()
        self.hostname = hostname
        self.address = address
        self.credentials = {"agent_token": secrets.token_urlsafe(32), "report_token": secrets.token_urlsafe(32)}
        self.drive = self.drive_of(
            NoCloudConfig(
                instance_id=f"{hostname}-r1",
                hostname=hostname,
                ssh_public_keys=(self.public_key,),
                user_data=user_data,
                interface=ipaddress.ip_interface(f"{address}/8" if address.startswith("127.") else f"{address}/24"),
                gateway=None,
                mac=None,
            )
        )

    def drive_of(self, config: NoCloudConfig) -> bytes:
        """The drive as the control plane makes it: cloud-init's files and the tenancy's agent credentials."""
        return nocloud.iso({**config.documents(), "gpu-agent.json": json.dumps(self.credentials)})


@pytest.fixture(scope="module")
def media_server() -> Iterator[MediaServer]:
    server = MediaServer()
    with serving(server.server):
        yield server


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[Bmcsim]:
    """A fleet of its own: every test boots its own node, so the order of tests does not matter."""
    sim = start_bmcsim(tmp_path_factory.mktemp("guest-os") / "data", nodes=8)
    yield sim
    sim.stop()


def images(sim: Bmcsim) -> dict[str, dict]:
    return {image["name"]: image for image in sim.get("/bmcsim/v1/images").json()["images"]}


def insert(sim: Bmcsim, node: str, slot: str, url: str) -> None:
    r = sim.post(MEDIA.format(node=node, slot=slot) + "/Actions/VirtualMedia.InsertMedia", json={"Image": url})
    assert r.status_code == 204, r.text


def boot_from_cd(sim: Bmcsim, node: str) -> None:
    boot = {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}
    assert sim.patch(f"/redfish/v1/Systems/{node}", json={"Boot": boot}).status_code == 200
    sim.reset(node, "ForceRestart")


def boot_tenant(sim: Bmcsim, node: str, tenant: Tenant, media_server: MediaServer, image: str = "ubuntu-24-04") -> str:
    """The control plane's provisioning: the image in the CD, the config drive as a USB stick, boot the CD."""
    drive_url = media_server.serve(f"/config-drives/{node}", tenant.drive)
    insert(sim, node, "Floppy", drive_url)
    insert(sim, node, "Cd", images(sim)[image]["url"])
    boot_from_cd(sim, node)
    return drive_url


def inventory(sim: Bmcsim, node: str) -> dict:
    r = sim.get(f"/agent/{node}/inventory")
    assert r.status_code == 200, r.text
    return r.json()


def console(sim: Bmcsim, node: str) -> list[str]:
    return [entry["Message"] for entry in sim.get(CONSOLE.format(node=node) + "/Entries").json()["Members"]]


def ssh(
    sim: Bmcsim, address: str, key: asyncssh.SSHKey | None, *commands: str, username: str = "tenant", password=None
) -> tuple[str, list[asyncssh.SSHCompletedProcess]]:
    """Log in to a node's sshd and run commands: the server's host key fingerprint and the results."""

    async def session():
        async with asyncssh.connect(
            address,
            sim.ssh_port,
            username=username,
            client_keys=[key] if key else None,
            password=password,
            known_hosts=None,
            agent_path=None,
            config=None,
            connect_timeout=10,
        ) as connection:
            server_key = connection.get_server_host_key()
            assert server_key is not None
            fingerprint = server_key.get_fingerprint("sha256")
            return fingerprint, [await connection.run(command) for command in commands]

    return asyncio.run(session())


def refuses_connections(sim: Bmcsim, address: str) -> bool:
    try:
        socket.create_connection((address, sim.ssh_port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sample_images_are_listed_with_their_digests_and_served(bmcsim):
    listed = bmcsim.get("/bmcsim/v1/images").json()["images"]
    assert 2 <= len(listed) <= 3
    assert [image["default"] for image in listed].count(True) == 1
    for image in listed:
        assert set(image) == {"name", "os", "url", "sha256", "default"}
        assert re.fullmatch(r"[-a-z0-9]+", image["name"]), "the control plane's catalogue names images with slugs"
        assert image["url"].startswith(f"{bmcsim.url}/bmcsim/v1/images/")
        served = bmcsim.get(image["url"].removeprefix(bmcsim.url))
        assert served.status_code == 200 and 1024 <= len(served.content) <= 64 * 1024
        assert hashlib.sha256(served.content).hexdigest() == image["sha256"]
    assert len({image["sha256"] for image in listed}) == len(listed)
    assert bmcsim.get("/bmcsim/v1/images").json()["images"] == listed  # deterministic
    missing = bmcsim.get("/bmcsim/v1/images/windows-11.iso")
    assert missing.status_code == 404 and "windows-11.iso" in missing.json()["detail"]


def test_a_tenant_node_runs_its_image_configured_by_its_config_drive(sim, media_server):
    node, tenant = "node-001", Tenant("tenant-a", "127.61.0.1")
    other_key = asyncssh.generate_private_key("ssh-ed25519")
    other_public_key = other_key.export_public_key().decode().strip()
    tenant.drive = tenant.drive_of(
        NoCloudConfig(  # a second key, from the tenant's own cloud-config
            instance_id="tenant-a-r1",
            hostname="tenant-a",
            ssh_public_keys=(tenant.public_key,),
            user_data=f"#cloud-config\nssh_authorized_keys:\n  - {other_public_key}\n",
            interface=ipaddress.ip_interface("127.61.0.1/8"),
            gateway=None,
            mac=None,
        )
    )
    image = images(sim)["rocky-9"]
    boot_tenant(sim, node, tenant, media_server, image="rocky-9")

    media = sim.get(f"/bmcsim/v1/nodes/{node}/media").json()["media"]
    assert media["Cd"]["sha256"] == image["sha256"] and "documents" not in media["Cd"]
    assert media["Floppy"]["sha256"] == hashlib.sha256(tenant.drive).hexdigest()
    assert "local-hostname: tenant-a" in media["Floppy"]["documents"]["meta-data"]
    assert "127.61.0.1/8" in media["Floppy"]["documents"]["network-config"]
    assert sim.get(MEDIA.format(node=node, slot="Floppy")).json()["Status"]["Health"] == "OK"

    booted = inventory(sim, node)
    assert booted["boot_source"] == "Cd" and booted["boot_image_sha256"] == image["sha256"]
    (host_key,) = booted["ssh_host_keys"]
    assert host_key["type"] == "ssh-ed25519" and host_key["fingerprint"].startswith("SHA256:")

    fingerprint, (hostname, digest, keys, other) = ssh(
        sim,
        tenant.address,
        tenant.key,
        "hostname",
        "cat /etc/gpufleet/image.sha256",
        "cat /root/.ssh/authorized_keys",
        "sudo reboot",
    )
    assert fingerprint == host_key["fingerprint"]
    assert (hostname.stdout, hostname.exit_status) == ("tenant-a\n", 0)
    assert digest.stdout == f"{image['sha256']}\n"
    assert isinstance(keys.stdout, str)
    assert keys.stdout.splitlines() == [tenant.public_key, other_public_key]
    assert other.exit_status == 127 and other.stderr == "bmcsim: sudo reboot: command not simulated\n"
    # Any user name, either authorized key; no other key, and no password.
    assert ssh(sim, tenant.address, other_key, "hostname", username="root")[1][0].stdout == "tenant-a\n"
    with pytest.raises(asyncssh.PermissionDenied):
        ssh(sim, tenant.address, asyncssh.generate_private_key("ssh-ed25519"), "hostname")
    with pytest.raises(asyncssh.PermissionDenied):
        ssh(sim, tenant.address, None, "hostname", username="root", password="calvin")


def test_the_config_drive_is_fetched_at_insert_so_a_reboot_outlives_its_url(sim, media_server):
    node, tenant = "node-002", Tenant("tenant-b", "127.61.0.2")
    drive_url = boot_tenant(sim, node, tenant, media_server)
    first_fingerprint = inventory(sim, node)["ssh_host_keys"][0]["fingerprint"]

    del media_server.files[drive_url.removeprefix(media_server.url)]  # the control plane released the drive
    boot_from_cd(sim, node)

    assert sim.get(f"/bmcsim/v1/nodes/{node}/media").json()["media"]["Floppy"]["documents"]
    fingerprint, (hostname,) = ssh(sim, tenant.address, tenant.key, "hostname")
    assert hostname.stdout == "tenant-b\n"
    assert fingerprint == first_fingerprint  # the node's host key outlives a reboot
    assert sum(line.endswith(FINGERPRINTS) for line in console(sim, node)) == 2


def test_booting_anything_else_ends_the_tenant_os(sim, media_server):
    node, tenant = "node-003", Tenant("tenant-c", "127.61.0.3")
    boot_tenant(sim, node, tenant, media_server)
    assert ssh(sim, tenant.address, tenant.key, "hostname")[1][0].stdout == "tenant-c\n"

    # The control plane's service image: a URL the BMC cannot fetch, so the node runs the agent only.
    insert(sim, node, "Cd", "http://images.gpufleet.invalid/service.iso")
    boot_from_cd(sim, node)
    assert refuses_connections(sim, tenant.address)
    service = inventory(sim, node)
    assert (service["boot_source"], service["boot_image_sha256"], service["ssh_host_keys"]) == ("Cd", None, [])
    assert "bmcsim: the node boots its service environment (the node agent) instead" in console(sim, node)

    boot_tenant(sim, node, tenant, media_server)
    assert not refuses_connections(sim, tenant.address)
    sim.reset(node, "ForceOff")
    assert refuses_connections(sim, tenant.address)
    sim.reset(node, "On")  # the one-time override is spent: the disk
    assert refuses_connections(sim, tenant.address)
    disk = inventory(sim, node)
    assert (disk["boot_source"], disk["boot_image_sha256"], disk["ssh_host_keys"]) == ("Hdd", None, [])


def test_the_console_over_redfish_shows_the_boot_cloud_init_and_resets(sim, media_server):
    node, tenant = "node-004", Tenant("tenant-d", "127.61.0.4")
    boot_tenant(sim, node, tenant, media_server)
    fingerprint = inventory(sim, node)["ssh_host_keys"][0]["fingerprint"]
    sim.reset(node, "ForceOff")

    system = sim.get(f"/redfish/v1/Systems/{node}").json()
    assert system["LogServices"] == {"@odata.id": f"/redfish/v1/Systems/{node}/LogServices"}
    services = sim.get(system["LogServices"]["@odata.id"]).json()
    assert services["Members"] == [
        {"@odata.id": CONSOLE.format(node=node)},
        {"@odata.id": f"/redfish/v1/Systems/{node}/LogServices/SEL"},
    ]
    service = sim.get(CONSOLE.format(node=node)).json()
    assert (service["Id"], service["LogEntryType"], service["MaxNumberOfRecords"]) == ("Console", "OEM", 500)
    entries = sim.get(service["Entries"]["@odata.id"]).json()
    assert entries["Members@odata.count"] == len(entries["Members"])
    for entry in entries["Members"]:
        assert (entry["EntryType"], entry["OemRecordFormat"], entry["Severity"]) == ("Oem", "bmcsim console", "OK")
    ids = [int(entry["Id"]) for entry in entries["Members"]]
    assert ids == sorted(ids)
    assert sim.get(entries["Members"][-1]["@odata.id"]).json() == entries["Members"][-1]

    lines = [entry["Message"] for entry in entries["Members"]]
    booted = lines[lines.index("bmcsim: reset (ForceRestart)") :]
    assert any(line.startswith("BdsDxe: loading") and images(sim)["ubuntu-24-04"]["url"] in line for line in booted)
    assert any("Linux version 6.8.0-45-generic" in line for line in booted)
    block = next(i for i, line in enumerate(booted) if line.endswith(FINGERPRINTS))
    host_key_line = rf"<14>.* cloud-init: 256 {re.escape(fingerprint)} root@tenant-d \(ED25519\)"
    assert re.fullmatch(host_key_line, booted[block + 1])
    assert booted[block + 2].endswith("-----END SSH HOST KEY FINGERPRINTS-----")
    assert booted[-3:] == ["Ubuntu 24.04.1 LTS tenant-d ttyS0", "tenant-d login:", "bmcsim: power off (ForceOff)"]

    own, other = (sim.node(name)["credentials"] for name in (node, "node-005"))
    auth = (own["username"], own["password"])
    assert sim.get(CONSOLE.format(node=node) + "/Entries", auth=auth).status_code == 200
    assert sim.get(CONSOLE.format(node="node-005") + "/Entries", auth=auth).status_code == 403
    assert sim.get(CONSOLE.format(node=node), auth=(other["username"], other["password"])).status_code == 403
    assert sim.get(f"/redfish/v1/Systems/{node}/LogServices/Journal").status_code == 404
    assert sim.get(CONSOLE.format(node=node) + "/Entries/0").status_code == 404


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://127.0.0.1/os.iso", "not an http or https URL"),
        ("os.iso", "not an http or https URL"),
        ("http://127.0.0.1:9/os.iso", "Cannot connect to host 127.0.0.1:9"),
        ("{media}/gone.iso", "HTTP 404"),
        ("{media}/oversized.iso", "larger than 67108864 bytes"),
    ],
)
def test_a_medium_that_cannot_be_fetched_is_recorded_and_boots_nothing(sim, media_server, url, error):
    node = "node-006"
    sim.boot_with_config_drive(node)  # the service environment's agent answers with that drive's credentials
    url = url.format(media=media_server.url)
    insert(sim, node, "Cd", url)
    medium = sim.get(MEDIA.format(node=node, slot="Cd")).json()
    assert (medium["Image"], medium["Inserted"], medium["Status"]["Health"]) == (url, True, "Warning")
    recorded = sim.get(f"/bmcsim/v1/nodes/{node}/media").json()["media"]["Cd"]
    assert error in recorded["error"] and "sha256" not in recorded

    boot_from_cd(sim, node)
    assert inventory(sim, node)["boot_image_sha256"] is None
    assert any(line.startswith("BdsDxe: failed to load") and error in line for line in console(sim, node))


def test_a_patch_inserts_and_fetches_like_insert_media(sim):
    node, image = "node-006", images(sim)["debian-12"]
    r = sim.patch(MEDIA.format(node=node, slot="Cd"), json={"Image": image["url"], "Inserted": True})
    assert r.status_code == 200 and r.json()["Status"]["Health"] == "OK"
    assert sim.get(f"/bmcsim/v1/nodes/{node}/media").json()["media"]["Cd"]["sha256"] == image["sha256"]
    r = sim.patch(MEDIA.format(node=node, slot="Cd"), json={"Image": "http://127.0.0.1:9/gone.iso"})
    assert r.status_code == 200 and r.json()["Status"]["Health"] == "Warning"


def test_an_address_not_on_this_host_is_logged_and_not_listened_on(sim, media_server):
    node, tenant = "node-007", Tenant("tenant-e", "10.61.0.7")
    boot_tenant(sim, node, tenant, media_server)
    assert inventory(sim, node)["ssh_host_keys"]  # the tenant OS runs, unreachable from here
    assert "bmcsim: 10.61.0.7 is not an address of this host: the node's sshd does not listen" in console(sim, node)


def test_tenant_nodes_get_their_sshd_back_when_bmcsim_restarts(tmp_path, media_server):
    data, tenant = tmp_path / "data", Tenant("tenant-f", "127.61.0.8")
    sim = start_bmcsim(data, nodes=1)
    try:
        boot_tenant(sim, "node-001", tenant, media_server)
        fingerprint, _ = ssh(sim, tenant.address, tenant.key)
        lines = console(sim, "node-001")
    finally:
        sim.stop()
    assert refuses_connections(sim, tenant.address)

    port = int(sim.url.rsplit(":", 1)[1])
    sim = start_bmcsim(data, nodes=1, port=port, ssh_port=sim.ssh_port)
    try:
        again, (hostname,) = ssh(sim, tenant.address, tenant.key, "hostname")
        assert (again, hostname.stdout) == (fingerprint, "tenant-f\n")
        assert console(sim, "node-001") == lines
    finally:
        sim.stop()


@pytest.mark.timing
def test_at_a_time_scale_the_console_and_sshd_follow_the_boot(tmp_path, media_server):
    sim = start_bmcsim(tmp_path / "data", nodes=1, scale="0.2")  # power on 0.4 s, then the OS boots in 1.6 s
    tenant = Tenant("tenant-g", "127.61.0.9")
    try:
        boot_tenant(sim, "node-001", tenant, media_server)
        assert refuses_connections(sim, tenant.address)
        assert "tenant-g login:" not in console(sim, "node-001")
        deadline = time.monotonic() + 10
        while refuses_connections(sim, tenant.address):
            assert time.monotonic() < deadline, "the tenant OS's sshd never listened"
            time.sleep(0.05)
        assert console(sim, "node-001")[-1] == "tenant-g login:"
        assert ssh(sim, tenant.address, tenant.key, "hostname")[1][0].stdout == "tenant-g\n"
    finally:
        sim.stop()


def rss_kib(sim: Bmcsim) -> int:
    status = Path(f"/proc/{sim.process.popen.pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))


def test_fifty_tenant_nodes_cost_little_memory(tmp_path, media_server):
    sim = start_bmcsim(tmp_path / "data", nodes=50)
    try:
        tenants = {f"node-{i:03d}": Tenant(f"tenant-{i}", f"127.62.0.{i}") for i in range(1, 51)}
        boot_tenant(sim, "node-050", tenants.pop("node-050"), media_server)  # the first boot loads what all share
        before = rss_kib(sim)
        for node, tenant in tenants.items():
            boot_tenant(sim, node, tenant, media_server)
        per_node_kib = (rss_kib(sim) - before) / len(tenants)
        for tenant in tenants.values():
            with socket.create_connection((tenant.address, sim.ssh_port), timeout=5) as connection:
                assert connection.recv(8) == b"SSH-2.0-"
    finally:
        sim.stop()
    assert per_node_kib < 1024, f"{per_node_kib:.0f} KiB per tenant node"
